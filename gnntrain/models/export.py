"""The trained model a run leaves behind, and the module that runs it outside gnntrain.

At the end of every run rank 0 writes ``model.pt`` (the weights only: a state dict of tensors,
loadable with ``torch.load(weights_only=True)``) and ``model.yaml`` (the architecture and how the
graph is normalised). :func:`load_trained_model` rebuilds a :class:`TrainedModel`, a plain
``torch.nn.Module`` whose ``forward`` takes a PyG ``Data`` or (x, edge_index) arrays and computes
the same full-graph forward as ``mode=single`` (same layers, same degree normalisation).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch
from torch import nn

from gnntrain.errors import GnnTrainError
from gnntrain.models.gnn import GNN, ModelSpec, layer_input
from gnntrain.models.kernels import SparseAdjacency
from gnntrain.models.norm import edge_weights
from gnntrain.models.registry import model_family

MODEL_WEIGHTS = "model.pt"
MODEL_CARD = "model.yaml"


def save_trained_model(
    run_dir: Path, model: GNN, self_loop: bool, dtype: str, extra: Dict[str, Any]
) -> Path:
    """``model.pt`` + ``model.yaml`` in ``run_dir`` (each written atomically)."""
    import io

    import yaml

    from gnntrain.artifact import file_digest, sealed_text
    from gnntrain.atomic import atomic_write_bytes

    run_dir = Path(run_dir)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    atomic_write_bytes(run_dir / MODEL_WEIGHTS, buffer.getvalue())
    card = {
        "spec": dataclasses.asdict(model.spec),
        "self_loop": bool(self_loop),
        "dtype": dtype,
        **extra,
        "weights_digest": file_digest(run_dir / MODEL_WEIGHTS),  # BLAKE2b of model.pt
    }
    text = sealed_text(yaml.safe_dump(card, sort_keys=False))
    atomic_write_bytes(run_dir / MODEL_CARD, text.encode())
    return run_dir / MODEL_WEIGHTS


def read_model_card(run_dir: Path) -> Dict[str, Any]:
    """model.yaml of ``run_dir``, checked against its checksum, after checking model.pt against the
    digest it holds: a GnnTrainError naming the damaged file and the fix."""
    import yaml

    from gnntrain.artifact import ArtifactError, file_digest, read_sealed_text

    run_dir = Path(run_dir)
    weights, card_path = run_dir / MODEL_WEIGHTS, run_dir / MODEL_CARD
    if not weights.is_file() or not card_path.is_file():
        raise GnnTrainError(
            f"{run_dir}: no {MODEL_WEIGHTS}/{MODEL_CARD} here. A run writes them when it "
            "completes; give the run's own directory (the one with summary.json)."
        )
    try:
        card = yaml.safe_load(read_sealed_text(card_path))
        if file_digest(weights) != card.get("weights_digest"):
            raise ArtifactError(f"{weights} does not match its checksum in {MODEL_CARD}")
    except ArtifactError as exc:
        raise GnnTrainError(
            f"{exc}. Fix: train the run again, or resume it (its overrides, "
            f"hydra.run.dir={run_dir} train.resume=true) to write {MODEL_WEIGHTS} and "
            f"{MODEL_CARD} from its newest checkpoint."
        ) from None
    return card


class TrainedModel(nn.Module):
    """A trained gnntrain GNN as a plain module: ``model(data)`` or ``model(x, edge_index)`` ->
    logits.

    ``edge_index`` is 2xE (row 0 sources, row 1 destinations) over nodes 0..N-1, as in PyG.
    Self-loops and repeated edges in it are dropped, and the model's own self-loops added, exactly
    as for training. ``embeddings(..., layer=k)`` returns the input of layer k (after its
    activation), k = 1..layers-1."""

    def __init__(self, gnn: GNN, self_loop: bool, card: Dict[str, Any]):
        super().__init__()
        self.gnn, self.self_loop, self.card = gnn, bool(self_loop), card
        self.eval()

    def adjacency(self, edge_index: torch.Tensor, num_nodes: int, device) -> SparseAdjacency:
        from gnntrain.data.graph import clean_edges

        edge_index = torch.as_tensor(edge_index).to(torch.int64).cpu()
        src, dst = clean_edges(edge_index[0], edge_index[1], num_nodes, symmetrize=False)
        if self.self_loop:
            loops = torch.arange(num_nodes, dtype=torch.int64)
            src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
        weights = edge_weights(
            model_family(self.gnn.spec.name, self.gnn.spec.target).normalization,
            src,
            dst,
            num_nodes,
        )
        dtype = next(self.gnn.parameters()).dtype
        return SparseAdjacency(
            dst, src, weights.to(dtype), num_nodes, num_nodes, kernel="torch", device=device
        )

    def _inputs(self, x, edge_index, data):
        if data is not None:
            x, edge_index = data.x, data.edge_index
        if x is None or edge_index is None:
            raise ValueError("give a PyG Data (with x and edge_index), or x and edge_index")
        param = next(self.gnn.parameters())
        x = torch.as_tensor(x).to(device=param.device, dtype=param.dtype)
        return x, self.adjacency(edge_index, x.shape[0], param.device)

    def forward(self, x=None, edge_index=None, data=None) -> torch.Tensor:
        if x is not None and hasattr(x, "edge_index"):
            data, x = x, None
        x, adj = self._inputs(x, edge_index, data)
        return self.gnn(x, adj, None)

    def score(self, h: torch.Tensor, src, dst) -> torch.Tensor:
        """Link prediction: the decoder's logit for each pair (src[i], dst[i]) of rows of the node
        embeddings ``h`` (this model's output, ``model(data)``); its sigmoid is the edge's
        probability."""
        head = getattr(self.gnn, "head", None)
        if head is None:
            raise ValueError("score: this model was not trained for link prediction (no decoder)")
        src, dst = torch.as_tensor(src, dtype=torch.int64), torch.as_tensor(dst, dtype=torch.int64)
        return head(h[src], h[dst])

    def values(self, x=None, edge_index=None, data=None) -> torch.Tensor:
        """Node regression: the predictions in the targets' own units (the output, with the
        training's standardisation undone)."""
        targets = self.card.get("targets")
        if not targets:
            raise ValueError("values: this model was not trained for node regression")
        out = self.forward(x, edge_index, data)
        mean = torch.tensor(targets["mean"], dtype=out.dtype, device=out.device)
        std = torch.tensor(targets["std"], dtype=out.dtype, device=out.device)
        return out * std + mean

    @torch.no_grad()
    def embeddings(
        self, x=None, edge_index=None, data=None, layer: Optional[int] = None
    ) -> torch.Tensor:
        """The hidden representation fed to layer ``layer`` (default: the last layer's input)."""
        if x is not None and hasattr(x, "edge_index"):
            data, x = x, None
        x, adj = self._inputs(x, edge_index, data)
        return layer_input(
            self.gnn, lambda: self.gnn(x, adj, None), 0 if layer is None else int(layer)
        )


def load_trained_model(run_dir: Path, map_location: str = "cpu") -> TrainedModel:
    """Rebuild the model a run wrote (``model.pt`` + ``model.yaml``, each checked first)."""
    run_dir = Path(run_dir)
    weights = run_dir / MODEL_WEIGHTS
    card = read_model_card(run_dir)
    fields = dict(card["spec"])
    options = dict(fields.pop("layer_options", None) or [])
    if "gin_eps_learnable" in fields:  # a card written before GIN's option moved into its layer
        options["eps_learnable"] = fields.pop("gin_eps_learnable")
    spec = ModelSpec(**fields, layer_options=tuple(sorted(options.items())))
    dtype = getattr(torch, card.get("dtype", "float32"))
    gnn = GNN(spec).to(dtype)
    task = card.get("task") or {}
    if task.get("name") == "link_prediction":  # the trained decoder (its weights load below)
        from gnntrain.models.decoders import build_decoder

        gnn.head = build_decoder(str(task.get("decoder", "dot")), spec.out_dim, 0, dtype)
    gnn.load_state_dict(torch.load(weights, map_location=map_location, weights_only=True))
    return TrainedModel(gnn, bool(card.get("self_loop", True)), card)


def load_weights(model: nn.Module, path: str) -> None:
    """A run's ``model.pt`` (a state dict) or a checkpoint (``{"model": state dict, ...}``) into
    ``model``."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise GnnTrainError(
            f"predict: cannot read the weights {path} ({type(exc).__name__}: {exc})."
        ) from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()
        why = lines[-1].strip() if lines else str(exc)
        raise GnnTrainError(
            f"predict: the weights in {path} do not fit this model ({why}). Predict with the run's "
            f"own model options, on a graph with the same feature width and classes."
        ) from None


def rows_output(
    model: nn.Module, forward: Callable[[], torch.Tensor], what: str, layer: int
) -> torch.Tensor:
    """The rows ``forward()`` computes, as logits, probabilities, labels or the input of layer
    ``layer`` (embeddings; default the last layer's input). Embeddings run the same forward with the
    layer stack cut after layer ``layer`` - 1, so every mode computes them in its own layout."""
    if what != "embeddings":
        logits = forward()
        if what == "probs":
            return torch.softmax(logits, dim=1)
        return logits.argmax(dim=1) if what == "labels" else logits
    try:
        return layer_input(model, forward, layer)
    except ValueError as exc:
        raise GnnTrainError(f"predict: --layer {layer}: {exc}.") from None
