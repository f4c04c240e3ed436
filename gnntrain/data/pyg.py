"""Planetoid and Reddit read by PyTorch Geometric's own dataset classes (pure Python, any torch).

The raw files are DGL's (``<data_dir>/cora_v2_d697a464/ind.cora_v2.*``, ...) or PyG's
(``<data_dir>/Cora/raw/ind.cora.*``), linked into PyG's layout in a farm
(:mod:`gnntrain.data.farm`). The result is made identical to what DGL's reader yields, so
``dataset.reader`` never changes a run (tests/test_readers.py compares both on Cora, CiteSeer
and a generated Reddit):

- Planetoid features are row-normalised as DGL's ``_normalize`` does: ``x * rowsum**-1`` in
  the dtype DGL's stacked matrix has. That is float64 when the test rows have gaps (CiteSeer:
  DGL pads them with a float64 ``lil_matrix``) or the raw matrix is float64, else float32.
- Reddit's nodes are put in the reverse Cuthill-McKee order DGL's ``RedditDataset`` applies
  (``dgl.reorder_graph(node_permute_algo="rcmk")``: scipy's RCM over the CSR of src → dst).
"""

from __future__ import annotations

import contextlib
import io
import pickle
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch

from gnntrain.backends import pyg_problem
from gnntrain.data.decoded_cache import Decoded, cached_decode, decoded_path, reader_version
from gnntrain.data.farm import Layout, Located, farm_lock, locate, quiet, read_failure
from gnntrain.data.graph import GraphData
from gnntrain.data.loaders import DGL_DATASETS, DGLSource, graph_data, named_dataset
from gnntrain.errors import DatasetError

PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
REDDIT_CLASSES = 41  # DGL's RedditDataset.num_classes; PyG counts the labels present


def _layouts(source: DGLSource) -> List[Layout]:
    """DGL's layout first (what ../shared and DGL's downloads hold), then PyG's own."""
    dgl_folder = source.folder()
    if not source.planetoid:  # Reddit: the same two files, under raw/ in PyG's folder
        files = list(source.files)
        renames = {f"raw/{f}": f for f in files}
        return [
            Layout(dgl_folder, files, renames),
            Layout(f"{source.pyg_name}/raw", files, renames),
        ]
    prefix = source.files[0].split(".")[1]  # ind.<prefix>.x
    pyg = source.pyg_name.lower()
    return [
        Layout(
            dgl_folder,
            [f"ind.{prefix}.{p}" for p in PLANETOID_PARTS],
            {f"raw/ind.{pyg}.{p}": f"ind.{prefix}.{p}" for p in PLANETOID_PARTS},
        ),
        Layout(
            f"{source.pyg_name}/raw",
            [f"ind.{pyg}.{p}" for p in PLANETOID_PARTS],
            {f"raw/ind.{pyg}.{p}": f"ind.{pyg}.{p}" for p in PLANETOID_PARTS},
        ),
    ]


def raw_folders(name: str) -> List[str]:
    """The top-level folders under ``data_dir`` that may hold ``name``'s raw files, DGL's and PyG's
    (e.g. ``citeseer_...`` and ``CiteSeer``)."""
    layouts = _layouts(named_dataset(DGL_DATASETS, name))
    return list(dict.fromkeys(layout.folder.split("/")[0] for layout in layouts))


def _planetoid_facts(raw_dir: Path, prefix: str) -> Tuple[np.dtype, int]:
    """(the dtype DGL row-normalises the features in, see the module docstring; the number of
    classes, the width of the one-hot label rows, as DGL counts it)."""

    def raw(part: str):
        with open(raw_dir / f"ind.{prefix}.{part}", "rb") as f:
            # Planetoid's raw files are pickles by definition
            return pickle.load(f, encoding="latin1")

    allx, ally = raw("allx"), raw("ally")
    test_index = np.loadtxt(raw_dir / f"ind.{prefix}.test.index", dtype=np.int64, ndmin=1)
    has_gaps = test_index.size and int(test_index.max() - test_index.min() + 1) != int(
        test_index.size
    )
    dtype = np.dtype(np.float64) if has_gaps or allx.dtype == np.float64 else np.dtype(np.float32)
    return dtype, int(np.asarray(ally).shape[1])


def _row_normalise(x: torch.Tensor, dtype: np.dtype) -> torch.Tensor:
    """DGL's ``_normalize``: multiply each row by ``rowsum**-1`` (0 for empty rows) in ``dtype``."""
    arr = x.numpy().astype(dtype)
    rowsum = arr.sum(1)
    empty = rowsum == 0
    rowsum[empty] = np.nan
    inverse = np.power(rowsum, -1)
    inverse[empty] = 0.0
    return torch.from_numpy((arr * inverse[:, None]).astype(np.float32))


def _rcm_order(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """DGL's ``rcmk_perm``: reverse Cuthill-McKee over the src → dst CSR, duplicates kept."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    order = np.lexsort((dst, src))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    csr = sp.csr_matrix((np.ones(len(src), dtype=np.float32), dst[order], indptr), shape=(n, n))
    return np.asarray(reverse_cuthill_mckee(csr)).copy()


def _read(source: DGLSource, root: Path):
    from torch_geometric.datasets import Planetoid, Reddit

    if not source.planetoid:
        return Reddit(str(root / source.pyg_name))[0]
    return Planetoid(str(root), source.pyg_name)[0]


def _decode(source: DGLSource, where: Located, farm_folder: str) -> Decoded:
    """The arrays PyG reads from the farm, made what DGL's reader gives (module docstring)."""
    problem = pyg_problem()
    if problem is not None:
        raise DatasetError(
            f"dataset '{source.name}': dataset.reader=pyg, but torch_geometric does not import "
            f"here ({problem}). Install it: pip install torch_geometric (pure Python, any torch), "
            f"or use dataset.reader=dgl with the extra gnntrain[dgl]."
        )
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # PyG reports "Processing..." on stderr
            data = quiet(lambda: _read(source, where.root))
    except Exception as exc:  # corrupt files, failed download, ...
        raise read_failure(source.name, "PyG", where, farm_folder, exc) from exc
    features, num_classes = data.x, REDDIT_CLASSES
    if source.planetoid:
        dtype, num_classes = _planetoid_facts(
            where.root / farm_folder / "raw", source.pyg_name.lower()
        )
        features = _row_normalise(features, dtype)
    n = int(data.num_nodes)
    src, dst = data.edge_index[0], data.edge_index[1]
    labels, masks = data.y, [data.train_mask, data.val_mask, data.test_mask]
    if not source.planetoid:  # DGL's RedditDataset renumbers the nodes in RCM order
        order = torch.from_numpy(_rcm_order(src.numpy(), dst.numpy(), n))  # new id i: old order[i]
        new_id = torch.empty(n, dtype=torch.int64)
        new_id[order] = torch.arange(n)
        src, dst = new_id[src], new_id[dst]
        features, labels, masks = features[order], labels[order], [m[order] for m in masks]
    return {
        "num_nodes": n,
        "src": src.contiguous(),
        "dst": dst.contiguous(),
        "features": features,
        "labels": labels,
        "masks": [m.contiguous() for m in masks],
        "num_classes": int(num_classes),
    }


def load_pyg_dataset(
    cfg, data_dir: Optional[str], cache_dir: Path, allow_download: bool
) -> GraphData:
    """Planetoid and Reddit through PyG: decoded once per set of raw files and PyG version, then
    read back from the farm without importing PyG (:mod:`gnntrain.data.decoded_cache`)."""
    name = cfg.name
    source = named_dataset(DGL_DATASETS, name)
    farm_folder = source.pyg_name
    farm_root = cache_dir / "pyg"
    with farm_lock(farm_root, farm_folder):  # ranks and jobs sharing the cache build the farm once
        where = locate(
            name, data_dir, _layouts(source), farm_root, farm_folder, allow_download, "PyG"
        )
        version = reader_version("torch_geometric")
        saved = None  # a download has no content-keyed root: PyG's own processed files serve
        if where.found is not None and version is not None:
            saved = decoded_path(where.root / farm_folder, "pyg", version)
        decoded = cached_decode(saved, lambda: _decode(source, where, farm_folder))
    return graph_data(
        name,
        decoded["src"],
        decoded["dst"],
        decoded["num_nodes"],
        decoded["features"],
        decoded["labels"],
        decoded["masks"],
        decoded["num_classes"],
        bool(cfg.symmetrize),
        where.origin,
    )
