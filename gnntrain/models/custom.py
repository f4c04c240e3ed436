"""Models from the user's own package: ``model=custom model.target=pkg.module.Class`` (or
``pkg.module:Class``, or the name of an entry point in the group ``gnntrain.models``).

The class is one *layer* in aggregate → update form (docs/design.md#your-own-model); gnntrain
stacks ``model.layers`` of them with ``model.hidden`` between, and puts relu, dropout and the
optional LayerNorm between layers, as for the built-in models:

* ``__init__(self, d_in: int, d_out: int)``: a ``torch.nn.Module``;
* ``normalization``: class attribute, how the neighbours are weighted: ``"gcn"`` (D^-1/2 (A+I)
  D^-1/2 with ``model.self_loop``), ``"mean"`` (1/in-degree) or ``"sum"``;
* ``comm_width(self) -> int``: the width of the tensor it hands to ``agg`` (what a halo carries);
* ``aggregate(self, h, agg, rows=None)``: calls ``agg`` exactly once, on a tensor of that width,
  and returns the aggregated rows (row-local terms may be added; ``rows`` selects the held rows a
  partial ``agg`` returns);
* ``update(self, h, z)``: the dense per-row part.

Modes that exchange whatever ``agg`` is handed (single, partition, SuperGCN) host such a layer
exactly; the modes that restructure the aggregation (MoP, HongTu, HyScale) refuse it at plan time.
"""

from __future__ import annotations

import importlib

from gnntrain.errors import PlanError

NORMALIZATIONS = ("gcn", "mean", "sum")
ENTRY_POINT_GROUP = "gnntrain.models"
FIX = (
    "set model.target=package.module.Class "
    "(an importable layer class; docs/design.md#your-own-model)"
)


def resolve_layer_class(target) -> type:
    """Import the layer class named by ``target``; one PlanError naming the problem otherwise."""
    if not target:
        raise PlanError("model.target", "model=custom needs the layer class to use.", FIX)
    target = str(target)
    if ":" in target:
        module_name, _, attr = target.partition(":")
    elif "." in target:
        module_name, _, attr = target.rpartition(".")
    else:
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == target]
        if not found:
            raise PlanError(
                "model.target",
                f"no entry point {target!r} in the group {ENTRY_POINT_GROUP!r}.",
                FIX,
            )
        cls = found[0].load()
        check_layer_class(cls, target)
        return cls
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PlanError(
            "model.target",
            f"cannot import {module_name!r} ({exc}).",
            "install the package or put its folder on PYTHONPATH",
        ) from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise PlanError("model.target", f"module {module_name!r} has no attribute {attr!r}.", FIX)
    check_layer_class(cls, target)
    return cls


def check_layer_class(cls, target: str) -> None:
    missing = [
        name
        for name in ("aggregate", "update", "comm_width")
        if not callable(getattr(cls, name, None))
    ]
    if not isinstance(cls, type) or missing:
        raise PlanError(
            "model.target",
            f"{target} is not a layer class in aggregate/update form"
            + (f" (it lacks {', '.join(missing)})" if missing else "")
            + ".",
            FIX,
        )
    norm = getattr(cls, "normalization", None)
    if norm not in NORMALIZATIONS:
        raise PlanError(
            "model.target",
            f"{target}.normalization is {norm!r}; it must be one of {', '.join(NORMALIZATIONS)}.",
            "set the class attribute normalization",
        )
