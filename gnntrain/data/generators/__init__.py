"""Generated graphs. Each module here registers one :class:`Generator` (csbm, rmat, ...); a new
generated dataset is one module plus one ``configs/dataset/<name>.yaml`` with ``source: generated``.

A generator says how many directed edges its config implies (the plan sizes every estimate from it
before anything is generated), checks its own keys (one PlanError naming the option), and generates
a :class:`~gnntrain.data.graph.GraphData` deterministically for ``dataset.seed``, in memory
proportional to the graph (edges as index arrays, never a dense N×N matrix).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple

from gnntrain.errors import DatasetError


@dataclass(frozen=True)
class Generator:
    name: str
    generate: Callable[[Any], Any]  # the dataset section -> GraphData
    directed_edges: Callable[[Any], int]  # the dataset section -> directed edges (both directions counted)
    check: Callable[[Any], None] = lambda ds: None  # raises PlanError for keys it cannot use
    description: str = ""


GENERATORS: Dict[str, Generator] = {}


def register_generator(generator: Generator) -> Generator:
    GENERATORS[generator.name] = generator
    return generator


def get_generator(name: str) -> Generator:
    if name not in GENERATORS:
        raise DatasetError(f"dataset '{name}': no generator of that name; use one of {sorted(GENERATORS)}")
    return GENERATORS[name]


def params_hash(kind: str, cfg) -> str:
    """The content hash of a generated graph: its generator and every parameter that shapes it."""
    keys = ["num_nodes", "num_edges", "feat_dim", "num_classes", "seed", "avg_degree", "intra_ratio",
            "feature_snr", "rmat_abcd", "symmetrize", "train_fraction", "val_fraction", "test_fraction"]
    payload = {k: (list(cfg[k]) if k == "rmat_abcd" else cfg[k]) for k in keys}
    return hashlib.sha1(json.dumps([kind, 1, payload], sort_keys=True).encode()).hexdigest()[:16]


def fractions(cfg) -> Tuple[float, float, float]:
    return (cfg.train_fraction, cfg.val_fraction, cfg.test_fraction)


for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
