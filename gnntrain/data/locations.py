"""Where a dataset's files and the caches are: data_dir, cache_dir, an ingested graph's folder and
the sizes its meta.json holds, and the reader dataset.reader=auto resolves to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from gnntrain.errors import DatasetError


def resolve_data_dir(cfg) -> Optional[str]:
    return cfg.get("data_dir") or os.environ.get("GNNTRAIN_DATA_DIR") or None


def resolve_cache_dir(cfg) -> Path:
    return cache_folder(cfg.get("cache_dir"))


def cache_folder(configured: Optional[str]) -> Path:
    """The cache folder: ``cache_dir`` as configured, else GNNTRAIN_CACHE_DIR, else
    ~/.cache/gnntrain; created, and refused in one line where it cannot be written."""
    path = (
        configured
        or os.environ.get("GNNTRAIN_CACHE_DIR")
        or str(Path.home() / ".cache" / "gnntrain")
    )
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        if not os.access(p, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(p))
    except OSError as exc:
        from gnntrain.errors import PlanError

        what = (
            "is a file, not a folder"
            if p.is_file()
            else f"cannot be written ({exc.strerror or exc})"
        )
        raise PlanError(
            "cache_dir",
            f"{p} {what}.",
            "set cache_dir=DIR (or GNNTRAIN_CACHE_DIR) to a writable folder.",
        ) from None
    return p


def graph_on_disk(dataset) -> bool:
    """Whether the dataset section names a graph kept on disk in the ingested format (an ingested
    folder, or a generated graph with ``dataset.on_disk``): its CSR is memory-mapped, and a
    multi-rank mode that prepares parts from it builds each part alone (a part-wise store)."""
    read = dataset.get if isinstance(dataset, Mapping) else lambda key: getattr(dataset, key, None)
    return read("source") == "files" or (read("source") == "generated" and bool(read("on_disk")))


def resolve_graph_path(cfg) -> Path:
    """``dataset.path`` of an ingested graph: absolute, or relative to ``data_dir`` where that holds
    it, else to the working directory."""
    raw = cfg.dataset.get("path")
    if not raw:
        raise DatasetError(
            "dataset=files needs dataset.path=DIR, a folder written by gnntrain ingest "
            "(gnntrain datasets lists those under data_dir)."
        )
    path = Path(str(raw)).expanduser()
    data_dir = resolve_data_dir(cfg)
    if not path.is_absolute() and data_dir and (Path(data_dir).expanduser() / path).exists():
        path = Path(data_dir).expanduser() / path
    return path.resolve()


def fill_file_sizes(cfg) -> None:
    """dataset=files: the sizes the plan needs (nodes, edges, features, classes) from the folder's
    meta.json, written into ``cfg.dataset``; a missing or damaged folder is one DatasetError."""
    from gnntrain.data.ondisk import open_graph_dir

    ds = cfg.dataset
    graph = open_graph_dir(resolve_graph_path(cfg))
    ds.path = str(graph.path)
    ds.num_nodes, ds.num_edges = graph.num_nodes, max(1, graph.num_edges)
    ds.feat_dim, ds.num_classes = graph.feat_dim, graph.num_classes
    ds.regression_targets = len(graph.target_names)
    ds.symmetrize = False  # the edges are stored as they train (ingest symmetrised them when asked)
    ds.description = f"ingested graph {graph.meta.get('name', graph.path.name)} ({graph.path})"
    if graph.num_classes < 2:
        _refuse_classification(cfg, graph)


def _refuse_classification(cfg, graph) -> None:
    """A graph ingested without labels trains node regression (where it has targets) and link
    prediction (which needs no labels); node classification is refused in one line."""
    from omegaconf import OmegaConf

    from gnntrain.errors import PlanError

    task = OmegaConf.select(cfg, "task.name", default="node_classification")
    if str(task) == "node_classification":
        held = (
            f"regression targets ({', '.join(graph.target_names)}) and no class labels"
            if graph.target_names
            else "no class labels"
        )
        other = "task=node_regression or " if graph.target_names else ""
        raise PlanError(
            "task",
            f"dataset.path={graph.path} holds {held}, so node classification has nothing to learn.",
            f"train {other}task=link_prediction on it, or ingest the graph again with its labels "
            "(--labels FILE, or a label column in the node table)",
        )


def ingested_targets(ds) -> int:
    """The regression targets per node an ingested folder holds (``meta.json`` ``targets``)."""
    from gnntrain.data.ondisk import open_graph_dir

    return len(open_graph_dir(Path(str(ds.path))).target_names)


def resolve_reader(ds) -> str:
    """``dataset.reader`` with auto resolved: DGL where it imports, else PyG."""
    from gnntrain.config.schema import option_value

    reader = option_value(ds.get("reader", "auto"))
    if reader != "auto":
        return str(reader)
    from gnntrain.backends import dgl_problem

    return "dgl" if dgl_problem() is None else "pyg"
