"""Models: the layer stack every mode trains, its kernels and edge weights, and the model registry.

Each model is one module here that registers its :class:`~gnntrain.models.registry.ModelFamily`
(gcn, sage, gin, gat, ...) plus one ``configs/model/<name>.yaml``; every module of the package is
imported here, so a new one registers itself.
"""

import importlib
import pkgutil

from gnntrain.models.gnn import (
    GNN,
    GlobalDropout,
    ModelSpec,
    build_model,
    hidden_activation,
    run_layers,
)
from gnntrain.models.kernels import SparseAdjacency
from gnntrain.models.norm import edge_weight_values, edge_weights, source_scale, transposed
from gnntrain.models.registry import MODEL_REGISTRY, ModelFamily, model_family, register_model

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "GNN",
    "GlobalDropout",
    "MODEL_REGISTRY",
    "ModelFamily",
    "ModelSpec",
    "SparseAdjacency",
    "build_model",
    "edge_weight_values",
    "edge_weights",
    "hidden_activation",
    "model_family",
    "register_model",
    "run_layers",
    "source_scale",
    "transposed",
]
