"""Data layer: every dataset, generated or file-backed, yields a GraphData."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from gnntrain.data.checks import check_dataset_config
from gnntrain.data.graph import GraphData
from gnntrain.errors import DatasetError

__all__ = ["GraphData", "check_dataset_config", "load_dataset", "resolve_cache_dir", "resolve_data_dir",
           "resolve_reader"]


def resolve_data_dir(cfg) -> Optional[str]:
    return cfg.get("data_dir") or os.environ.get("GNNTRAIN_DATA_DIR") or None


def resolve_cache_dir(cfg) -> Path:
    path = cfg.get("cache_dir") or os.environ.get("GNNTRAIN_CACHE_DIR") or str(
        Path.home() / ".cache" / "gnntrain")
    p = Path(path).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p


def load_dataset(cfg) -> GraphData:
    """Load the dataset named by the composed run config ``cfg``."""
    ds = cfg.dataset
    if ds.source == "generated":
        from gnntrain.data import synthetic

        makers = {"csbm": synthetic.make_csbm, "rmat": synthetic.make_rmat}
        if ds.name not in makers:
            raise DatasetError(f"dataset '{ds.name}': no generator of that name; use one of {sorted(makers)}")
        return makers[ds.name](ds)
    from gnntrain.data import loaders

    cache = resolve_cache_dir(cfg)
    allow = bool(cfg.get("allow_download", True))
    if ds.source == "dgl":
        if ds.name not in loaders.DGL_SOURCES:
            raise DatasetError(f"dataset '{ds.name}': not a DGL dataset known to gnntrain "
                               f"({sorted(loaders.DGL_SOURCES)})")
        if resolve_reader(ds) == "dgl":
            return loaders.load_dgl_dataset(ds, resolve_data_dir(cfg), cache, allow)
        from gnntrain.data.pyg import load_pyg_dataset

        return load_pyg_dataset(ds, resolve_data_dir(cfg), cache, allow)
    if ds.source == "ogb":
        return loaders.load_ogb_dataset(ds, resolve_data_dir(cfg), cache, allow)
    raise DatasetError(f"dataset '{ds.name}': unknown source '{ds.source}'; use generated, dgl or ogb")


def resolve_reader(ds) -> str:
    """``dataset.reader`` with auto resolved: DGL where it imports, else PyG."""
    reader = getattr(ds.get("reader", "auto"), "value", ds.get("reader", "auto"))
    if reader != "auto":
        return str(reader)
    from gnntrain.backends import dgl_problem

    return "dgl" if dgl_problem() is None else "pyg"
