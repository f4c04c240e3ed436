"""The plan's check of ``model.edge_weight=true`` (docs/design.md#edge-weights): one PlanError where
the dataset has no edge weights, where the model cannot use them, or where the mode cannot host
them."""

from __future__ import annotations

from gnntrain.errors import PlanError


def check_edge_weight(cfg, spec, family) -> None:
    """Refuse ``model.edge_weight=true`` in one line when the dataset ``cfg.dataset`` (sizes filled)
    carries no weights, when ``family`` weighs edges itself (attention) or is a custom layer, or
    when the mode ``spec`` refuses per-edge values."""
    if not bool(cfg.model.get("edge_weight", False)):
        return
    from gnntrain.data.sources import dataset_source

    ds = cfg.dataset
    if not dataset_source(ds).weighted(ds):
        raise PlanError(
            "model.edge_weight",
            f"dataset '{ds.name}' has no edge weights.",
            "ingest the graph with --weight-column (or --weights FILE.npy), use "
            "dataset=csbm dataset.edge_weights=true, or set model.edge_weight=false",
        )
    if cfg.model.name == "custom" or not family.elementwise:
        why = (
            "a custom layer aggregates as it likes"
            if cfg.model.name == "custom"
            else f"'{family.name}' weighs its edges itself (attention)"
        )
        raise PlanError(
            "model.edge_weight",
            f"model '{cfg.model.name}' cannot use edge weights: {why}.",
            "use model=gcn, sage or gin, or set model.edge_weight=false",
        )
    refusal = spec.capabilities.edge_weight_refusal
    if refusal:
        raise PlanError(
            "model.edge_weight",
            f"mode '{spec.name}' cannot aggregate with edge weights: {refusal}.",
            "use mode=single, partition, supergcn, mop or hongtu, or set model.edge_weight=false",
        )
