"""File-backed datasets read by DGL's own dataset classes, and OGB's library-agnostic loader.

Raw files are found in ``data_dir`` in DGL's (or OGB's) layout and read through a link farm
under ``cache_dir`` (:mod:`gnntrain.data.farm`). The same Planetoid and Reddit files can be
read by PyG instead (:mod:`gnntrain.data.pyg`, ``dataset.reader``); OGB's loader needs neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from gnntrain.backends import dgl_problem
from gnntrain.data.farm import Layout, farm_lock, locate, quiet, read_failure
from gnntrain.data.graph import GraphData, clean_edges, hash_tensors
from gnntrain.errors import DatasetError

# DGL's default download repository (overridden by $DGL_REPO, as DGL does)
DGL_REPO = "https://data.dgl.ai/"


@dataclass(frozen=True)
class DGLSource:
    dgl_class: str  # attribute of dgl.data
    folder_name: str  # DGLDataset.name
    url_path: str  # relative download path (DGL hashes the full URL into the folder suffix)
    files: List[str]
    kwargs: Optional[Dict[str, object]] = None

    def folder(self) -> str:
        """DGL's raw folder name: ``<name>_<first 8 hex digits of sha1(download URL)>``
        (dgl.data.DGLBuiltinDataset), computed without importing DGL so that other readers find
        the same files."""
        repo = os.environ.get("DGL_REPO", DGL_REPO)
        url = repo + ("" if repo.endswith("/") else "/") + self.url_path
        return self.folder_name + "_" + hashlib.sha1(url.encode()).hexdigest()[:8]


def _planetoid(prefix: str) -> List[str]:
    return [
        f"ind.{prefix}.{part}"
        for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
    ]


DGL_SOURCES: Dict[str, DGLSource] = {
    "cora": DGLSource("CoraGraphDataset", "cora_v2", "dataset/cora_v2.zip", _planetoid("cora_v2")),
    "citeseer": DGLSource(
        "CiteseerGraphDataset", "citeseer", "dataset/citeseer.zip", _planetoid("citeseer")
    ),
    "pubmed": DGLSource("PubmedGraphDataset", "pubmed", "dataset/pubmed.zip", _planetoid("pubmed")),
    "reddit": DGLSource(
        "RedditDataset",
        "reddit",
        "dataset/reddit.zip",
        ["reddit_data.npz", "reddit_graph.npz"],
        {"self_loop": False},
    ),
}

OGB_REQUIRED = [
    "raw/edge.csv.gz",
    "raw/num-node-list.csv.gz",
    "raw/num-edge-list.csv.gz",
    "raw/node-feat.csv.gz",
    "raw/node-label.csv.gz",
]
OGB_SPLITS = {"ogbn-arxiv": "time", "ogbn-products": "sales_ranking"}
# ogb master.csv versions
OGB_RELEASE = {"ogbn-arxiv": "RELEASE_v1.txt", "ogbn-products": "RELEASE_v1.txt"}
OGB_EXTRA = {"ogbn-arxiv": ["raw/node_year.csv.gz"]}  # additional node files OGB reads


def silence_ogb_version_check() -> None:
    """Keep OGB from asking PyPI for newer versions.

    Importing OGB imports the ``outdated`` package, whose own import starts a
    background request to PyPI (and OGB then starts another). When the real
    package is not loaded yet, a stand-in whose check reports "up to date"
    takes its place; no request is made.
    """
    if "outdated" in sys.modules:
        sys.modules["outdated"].check_outdated = lambda *args, **kwargs: (False, None)
        return
    import types

    stand_in = types.ModuleType("outdated")
    stand_in.check_outdated = lambda *args, **kwargs: (False, None)
    stand_in.warn_if_outdated = lambda *args, **kwargs: None
    sys.modules["outdated"] = stand_in


def require_dgl(name: str) -> None:
    """``dataset.reader=dgl`` without a DGL that imports: one clear error."""
    problem = dgl_problem()
    if problem is not None:
        raise DatasetError(
            f"dataset '{name}': dataset.reader=dgl, but DGL does not import here ({problem}). "
            "Install the extra: pip install 'gnntrain[dgl]' (DGL 2.1 needs torch 2.0-2.2; this is "
            "torch "
            f"{torch.__version__}), or read the same files with PyG: dataset.reader=pyg (or auto)."
        )


def _dgl_layout(source: DGLSource) -> Layout:
    return Layout(source.folder(), source.files)


def graph_data(
    name: str,
    src: torch.Tensor,
    dst: torch.Tensor,
    num_nodes: int,
    features: torch.Tensor,
    labels: torch.Tensor,
    masks,
    num_classes: int,
    symmetrize: bool,
    origin: str,
) -> GraphData:
    """The GraphData every file reader yields: edges cleaned (:func:`clean_edges`), float32
    features, int64 labels, bool masks, and a content hash of the result (so two readers that
    agree give the same hash)."""
    src, dst = clean_edges(
        torch.as_tensor(src), torch.as_tensor(dst), num_nodes, symmetrize=symmetrize
    )
    features = torch.as_tensor(features).to(torch.float32)
    labels = torch.as_tensor(labels).reshape(num_nodes, -1)[:, 0].to(torch.int64)
    masks = tuple(torch.as_tensor(m).to(torch.bool) for m in masks)
    return GraphData(
        name=name,
        num_nodes=num_nodes,
        src=src,
        dst=dst,
        features=features,
        labels=labels,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=int(num_classes),
        content_hash=f"{name}-" + hash_tensors(src, dst, features, labels, *masks),
        origin=origin,
    )


def load_dgl_dataset(
    cfg, data_dir: Optional[str], cache_dir: Path, allow_download: bool
) -> GraphData:
    """Planetoid and Reddit through DGL's own dataset classes."""
    name = cfg.name
    require_dgl(name)
    source = DGL_SOURCES[name]
    import dgl.data

    folder = source.folder()
    cls = getattr(dgl.data, source.dgl_class)
    farm_root = cache_dir / "dgl"
    with farm_lock(farm_root, folder):  # ranks and jobs sharing the cache build the farm once
        where = locate(
            name, data_dir, [_dgl_layout(source)], farm_root, folder, allow_download, "DGL"
        )
        try:
            ds = quiet(lambda: cls(raw_dir=str(where.root), verbose=False, **(source.kwargs or {})))
        except Exception as exc:  # corrupt files, failed download, ...
            raise read_failure(name, "DGL", where, folder, exc) from exc
    g = ds[0]
    src, dst = g.edges()
    masks = [g.ndata[f"{s}_mask"] for s in ("train", "val", "test")]
    return graph_data(
        name,
        src,
        dst,
        g.num_nodes(),
        g.ndata["feat"],
        g.ndata["label"],
        masks,
        ds.num_classes,
        bool(cfg.symmetrize),
        where.origin,
    )


def load_ogb_dataset(
    cfg, data_dir: Optional[str], cache_dir: Path, allow_download: bool
) -> GraphData:
    """OGB node-property datasets through OGB's library-agnostic loader (numpy arrays: no DGL, no
    PyG)."""
    name = cfg.name
    folder = name.replace("-", "_")
    farm_root = cache_dir / "ogb"
    required = (
        [OGB_RELEASE[name]]
        + OGB_REQUIRED
        + OGB_EXTRA.get(name, [])
        + [f"split/{OGB_SPLITS[name]}/{part}.csv.gz" for part in ("train", "valid", "test")]
    )
    silence_ogb_version_check()
    with farm_lock(farm_root, folder):  # ranks and jobs sharing the cache build the farm once
        where = locate(
            name, data_dir, [Layout(folder, required)], farm_root, folder, allow_download, "OGB"
        )
        if where.found is not None:
            # OGB's numpy loader saves without mkdir
            (where.root / folder / "processed").mkdir(exist_ok=True)
        try:
            from ogb.nodeproppred import NodePropPredDataset

            # OGB asks on stdin before replacing a folder of another release: never wait for an
            # answer
            with (
                open(os.devnull) as devnull,
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                stdin, sys.stdin = sys.stdin, devnull
                try:
                    ds = NodePropPredDataset(name=name, root=str(where.root))
                finally:
                    sys.stdin = stdin
            graph, labels = ds[0]
            split = ds.get_idx_split()
        except Exception as exc:
            raise read_failure(name, "OGB", where, folder, exc) from exc
    n = int(graph["num_nodes"])
    masks = []
    for key in ("train", "valid", "test"):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(np.asarray(split[key]), dtype=torch.int64)] = True
        masks.append(m)
    edges = torch.from_numpy(np.asarray(graph["edge_index"], dtype=np.int64))
    return graph_data(
        name,
        edges[0],
        edges[1],
        n,
        torch.from_numpy(graph["node_feat"]),
        torch.from_numpy(np.asarray(labels)),
        masks,
        ds.num_classes,
        bool(cfg.symmetrize),
        where.origin,
    )
