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
from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from gnntrain.backends import dgl_problem
from gnntrain.data.farm import Layout, farm_lock, locate, quiet, read_failure
from gnntrain.data.graph import GraphData, clean_edges, hash_tensors
from gnntrain.errors import DatasetError
from gnntrain.registry import Registry

# DGL's default download repository (overridden by $DGL_REPO, as DGL does)
DGL_REPO = "https://data.dgl.ai/"


@dataclass(frozen=True)
class DGLSource:
    """A named dataset in DGL's raw layout (``dataset.source=dgl``): Planetoid's ``ind.*`` files or
    Reddit's ``.npz`` pair, read by DGL's dataset class or by PyG's (``dataset.reader``).

    A new one is one :func:`register_dgl_dataset` call plus ``configs/dataset/<name>.yaml``."""

    name: str  # the dataset's name, configs/dataset/<name>.yaml's dataset.name
    dgl_class: str  # attribute of dgl.data
    folder_name: str  # DGLDataset.name
    url_path: str  # relative download path (DGL hashes the full URL into the folder suffix)
    files: Tuple[str, ...]
    pyg_name: str  # PyG's Planetoid(name=...), or the folder of PyG's own dataset class
    dgl_options: Tuple[Tuple[str, Any], ...] = ()  # keyword arguments of the DGL class

    def folder(self) -> str:
        """DGL's raw folder name: ``<name>_<first 8 hex digits of sha1(download URL)>``
        (dgl.data.DGLBuiltinDataset), computed without importing DGL so that other readers find
        the same files."""
        repo = os.environ.get("DGL_REPO", DGL_REPO)
        url = repo + ("" if repo.endswith("/") else "/") + self.url_path
        return self.folder_name + "_" + hashlib.sha1(url.encode()).hexdigest()[:8]

    @property
    def planetoid(self) -> bool:
        """Planetoid's raw files (``ind.<prefix>.<part>``); otherwise Reddit's."""
        return self.files[0].startswith("ind.")


@dataclass(frozen=True)
class OGBSource:
    """A named OGB node-property dataset (``dataset.source=ogb``), read by OGB's library-agnostic
    loader. A new one is one :func:`register_ogb_dataset` call plus its YAML."""

    name: str  # OGB's name, e.g. ogbn-arxiv
    split: str  # the folder of its split under split/
    release: str = "RELEASE_v1.txt"  # the release file of OGB's master.csv version
    extra_files: Tuple[str, ...] = ()  # node files OGB reads besides the common ones

    COMMON = (
        "raw/edge.csv.gz",
        "raw/num-node-list.csv.gz",
        "raw/num-edge-list.csv.gz",
        "raw/node-feat.csv.gz",
        "raw/node-label.csv.gz",
    )

    def required_files(self) -> List[str]:
        """Every file OGB's loader reads, relative to the dataset's folder."""
        splits = [f"split/{self.split}/{part}.csv.gz" for part in ("train", "valid", "test")]
        return [self.release, *self.COMMON, *self.extra_files, *splits]


DGL_DATASETS: Registry[DGLSource] = Registry("DGL dataset")
OGB_DATASETS: Registry[OGBSource] = Registry("OGB dataset")


def register_dgl_dataset(source: DGLSource) -> DGLSource:
    return DGL_DATASETS.add(source.name, source)


def register_ogb_dataset(source: OGBSource) -> OGBSource:
    return OGB_DATASETS.add(source.name, source)


def named_dataset(registry: Registry, name: str):
    """The registered dataset ``name``; one DatasetError naming the registered ones otherwise."""
    if name not in registry:
        raise DatasetError(
            f"dataset '{name}': no {registry.kind} of that name is known to gnntrain; use one of "
            f"{', '.join(sorted(registry))}, or register it (gnntrain/data/loaders.py)"
        )
    return registry[name]


def _planetoid(prefix: str) -> Tuple[str, ...]:
    return tuple(
        f"ind.{prefix}.{part}"
        for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
    )


for _source in (
    DGLSource(
        "cora", "CoraGraphDataset", "cora_v2", "dataset/cora_v2.zip", _planetoid("cora_v2"), "Cora"
    ),
    DGLSource(
        "citeseer",
        "CiteseerGraphDataset",
        "citeseer",
        "dataset/citeseer.zip",
        _planetoid("citeseer"),
        "CiteSeer",
    ),
    DGLSource(
        "pubmed",
        "PubmedGraphDataset",
        "pubmed",
        "dataset/pubmed.zip",
        _planetoid("pubmed"),
        "PubMed",
    ),
    DGLSource(
        "reddit",
        "RedditDataset",
        "reddit",
        "dataset/reddit.zip",
        ("reddit_data.npz", "reddit_graph.npz"),
        "Reddit",
        (("self_loop", False),),
    ),
):
    register_dgl_dataset(_source)
register_ogb_dataset(OGBSource("ogbn-arxiv", "time", extra_files=("raw/node_year.csv.gz",)))
register_ogb_dataset(OGBSource("ogbn-products", "sales_ranking"))


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
    source = named_dataset(DGL_DATASETS, name)
    import dgl.data

    folder = source.folder()
    cls = getattr(dgl.data, source.dgl_class)
    farm_root = cache_dir / "dgl"
    with farm_lock(farm_root, folder):  # ranks and jobs sharing the cache build the farm once
        where = locate(
            name, data_dir, [_dgl_layout(source)], farm_root, folder, allow_download, "DGL"
        )
        try:
            ds = quiet(
                lambda: cls(raw_dir=str(where.root), verbose=False, **dict(source.dgl_options))
            )
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
    required = named_dataset(OGB_DATASETS, name).required_files()
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
