"""Data layer: every dataset, generated or file-backed, yields a GraphData."""

from __future__ import annotations

from typing import Tuple

from gnntrain.data.checks import check_common
from gnntrain.data.locations import (
    cache_folder,
    fill_file_sizes,
    resolve_cache_dir,
    resolve_data_dir,
    resolve_graph_path,
    resolve_reader,
)

__all__ = [
    "GraphData",
    "cache_folder",
    "check_dataset_config",
    "dataset_sizes",
    "fill_file_sizes",
    "load_dataset",
    "resolve_cache_dir",
    "resolve_data_dir",
    "resolve_graph_path",
    "resolve_reader",
]


def __getattr__(name: str):
    """``GraphData`` on first use: ``gnntrain ingest`` imports this package without torch."""
    if name == "GraphData":
        from gnntrain.data.graph import GraphData

        return GraphData
    raise AttributeError(name)


def check_dataset_config(ds) -> None:
    """Refuse a dataset config no loader or generator can use (one PlanError naming the option): the
    sizes and splits every source needs, then a generated graph's own keys (its generator's
    check)."""
    from gnntrain.data.sources import dataset_source

    check_common(ds)
    dataset_source(ds).check(ds)


def dataset_sizes(ds) -> Tuple[int, int, int, int]:
    """(nodes, directed edges incl. reverse, features, classes) from the config alone: a generator's
    own edge count, the published (or ingested) sizes otherwise."""
    from gnntrain.data.sources import dataset_source

    n, f, c = int(ds.num_nodes), int(ds.feat_dim), int(ds.num_classes)
    return n, int(dataset_source(ds).directed_edges(ds)), f, c


def dataset_targets(ds) -> int:
    """Real-valued targets per node the dataset has (task=node_regression): a generated graph's
    ``regression_targets``, an ingested folder's target columns, else 0."""
    if str(ds.get("source")) == "generated":
        return int(ds.get("regression_targets") or 0)
    if str(ds.get("source")) == "files" and ds.get("path"):
        from gnntrain.data.locations import ingested_targets

        return ingested_targets(ds)
    return 0


def load_dataset(cfg) -> "GraphData":  # noqa: F821
    """Load the dataset named by the composed run config ``cfg``, through its source
    (:mod:`gnntrain.data.sources`)."""
    from gnntrain.data.sources import dataset_source

    return dataset_source(cfg.dataset).load(cfg)
