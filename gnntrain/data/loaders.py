"""File-backed datasets through DGL's own dataset classes and OGB's loader.

``data_dir`` is where raw files are looked for, in each library's own layout
(so files placed there are used without a download). Both libraries write
their processed caches beside the raw files; to keep a read-only
``data_dir`` untouched we build a *link farm* under ``cache_dir``: a folder of
symbolic links to the raw files, which the library then reads and writes its
processed files into.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from gnntrain.atomic import file_lock
from gnntrain.data.graph import GraphData, clean_edges, hash_tensors
from gnntrain.errors import DatasetError


@dataclass(frozen=True)
class DGLSource:
    dgl_class: str  # attribute of dgl.data
    folder_name: str  # DGLDataset.name
    url_path: str  # relative download path (DGL hashes the full URL into the folder suffix)
    files: List[str]
    kwargs: Optional[Dict[str, object]] = None

    def folder(self) -> str:
        import hashlib

        from dgl.data.utils import _get_dgl_url

        return self.folder_name + "_" + hashlib.sha1(_get_dgl_url(self.url_path).encode()).hexdigest()[:8]


def _planetoid(prefix: str) -> List[str]:
    return [f"ind.{prefix}.{part}" for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")]


DGL_SOURCES: Dict[str, DGLSource] = {
    "cora": DGLSource("CoraGraphDataset", "cora_v2", "dataset/cora_v2.zip", _planetoid("cora_v2")),
    "citeseer": DGLSource("CiteseerGraphDataset", "citeseer", "dataset/citeseer.zip", _planetoid("citeseer")),
    "pubmed": DGLSource("PubmedGraphDataset", "pubmed", "dataset/pubmed.zip", _planetoid("pubmed")),
    "reddit": DGLSource("RedditDataset", "reddit", "dataset/reddit.zip",
                        ["reddit_data.npz", "reddit_graph.npz"], {"self_loop": False}),
}

OGB_REQUIRED = ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
                "raw/node-feat.csv.gz", "raw/node-label.csv.gz"]
OGB_SPLITS = {"ogbn-arxiv": "time", "ogbn-products": "sales_ranking"}
OGB_RELEASE = {"ogbn-arxiv": "RELEASE_v1.txt", "ogbn-products": "RELEASE_v1.txt"}  # ogb master.csv versions
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
    """DGL and OGB datasets are read with DGL's classes: without DGL, one clear error."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl  # noqa: F401
    except Exception as exc:
        import torch as _torch

        raise DatasetError(
            f"dataset '{name}' is read with DGL, which does not import here ({type(exc).__name__}: {exc}). "
            f"Install the extra: pip install 'gnntrain[dgl]' (DGL 2.1 needs torch 2.0-2.2; this is torch "
            f"{_torch.__version__}), or train on a generated graph (dataset=csbm or dataset=rmat)."
        ) from None


def offline() -> bool:
    return os.environ.get("GNNTRAIN_OFFLINE", "") not in ("", "0", "false")


HASHED_FILE_BYTES = 256 * 2**20  # raw files up to this size are keyed by content, larger ones by size and mtime


def _source_stamp(source_dir: Path) -> str:
    """What the raw files under ``source_dir`` are: per file its relative path, size and a
    content digest (size and mtime for files over HASHED_FILE_BYTES). Independent of where
    the folder lives, so two copies of the same files share one processed cache."""
    lines = []
    for path in sorted(source_dir.rglob("*")):
        rel = path.relative_to(source_dir)
        if rel.parts[0] != "processed" and path.is_file():
            st = path.stat()
            if st.st_size <= HASHED_FILE_BYTES:
                digest = hashlib.sha1(path.read_bytes()).hexdigest()
            else:
                digest = f"mtime {st.st_mtime_ns}"
            lines.append(f"{rel}\t{st.st_size}\t{digest}")
    return "\n".join(lines) + "\n"


def _link_farm(source_dir: Path, farm_dir: Path, content: str) -> None:
    """Mirror ``source_dir``'s entries as symlinks in ``farm_dir`` (idempotent).

    The library's processed files live in ``farm_dir`` too, so when the source
    (another data_dir, or changed raw files) differs from the one the farm was
    built from, the farm is rebuilt rather than serving stale data.
    """
    stamp_file = farm_dir / ".gnntrain-source"
    stamp = f"{source_dir.resolve()}\n{content}"  # the links point into source_dir: a moved copy relinks
    if farm_dir.exists() and (not stamp_file.exists() or stamp_file.read_text() != stamp):
        shutil.rmtree(farm_dir)  # symlinks are unlinked, never followed
    farm_dir.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    for entry in source_dir.iterdir():
        link = farm_dir / entry.name
        if entry.name == "processed" or link.exists() or link.is_symlink():
            continue
        link.symlink_to(entry.resolve())


def _farm_lock(farm_root: Path, folder: str):
    """The lock under which one process links, downloads and processes ``folder``'s files
    (DGL and OGB write their processed files beside them; two ranks at once raced there)."""
    return file_lock(farm_root / f".{folder}.lock")


def _quiet(fn: Callable[[], object]) -> object:
    with contextlib.redirect_stdout(io.StringIO()):
        return fn()


def _from_dgl_graph(name: str, g, masks, num_classes: int, symmetrize: bool, origin: str) -> GraphData:
    src, dst = g.edges()
    n = g.num_nodes()
    src, dst = clean_edges(src, dst, n, symmetrize=symmetrize)
    features = g.ndata["feat"].to(torch.float32)
    labels = g.ndata["label"].reshape(n, -1)[:, 0].to(torch.int64) if "label" in g.ndata else None
    return GraphData(
        name=name, num_nodes=n, src=src, dst=dst, features=features, labels=labels,
        train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_classes=int(num_classes),
        content_hash=f"{name}-" + hash_tensors(src, dst, features, labels, *masks), origin=origin,
    )


def _locate(name: str, data_dir: Optional[str], folder: str, files: List[str], farm_root: Path,
            allow_download: bool, library: str):
    """Find ``<data_dir>/<folder>/<files>`` and link it into a farm keyed by the files' content,
    or explain what is missing. Call it holding the farm lock (:func:`_farm_lock`).

    Returns (folder found or None when the library will download, origin text, the library's
    root folder). A downloaded copy has a root of its own, so it never stands in for a
    ``data_dir``'s files, nor they for it.
    """
    if data_dir and not Path(data_dir).is_dir():
        raise DatasetError(f"dataset '{name}': data_dir={data_dir} does not exist. Set data_dir=DIR (or "
                           f"GNNTRAIN_DATA_DIR) to the folder holding {folder}/, or leave it unset to let "
                           f"{library} download the files.")
    found = Path(data_dir) / folder if data_dir else None
    if found is not None and all((found / f).exists() for f in files):
        content = _source_stamp(found)
        root = farm_root / hashlib.sha1(content.encode()).hexdigest()[:16]
        _link_farm(found, root / folder, content)
        return found, str(found), root
    if allow_download and not offline():
        root = farm_root / "downloaded"
        return None, f"downloaded by {library} into {root / folder}", root
    searched = str(found) if found is not None else "(no data_dir set)"
    raise DatasetError(
        f"dataset '{name}': raw files not found at {searched}, and downloading is "
        f"{'disabled (GNNTRAIN_OFFLINE)' if offline() else 'off'}. Expected {library}'s layout: "
        f"<data_dir>/{folder}/{{{', '.join(files)}}}. Set data_dir=DIR (or GNNTRAIN_DATA_DIR) "
        f"to the folder holding it, or run online to let {library} download it."
    )


def load_dgl_dataset(cfg, data_dir: Optional[str], cache_dir: Path, allow_download: bool) -> GraphData:
    name = cfg.name
    source = DGL_SOURCES[name]
    import dgl.data

    folder = source.folder()
    cls = getattr(dgl.data, source.dgl_class)
    with _farm_lock(cache_dir / "dgl", folder):  # ranks and jobs sharing the cache build the farm once
        found, origin, root = _locate(name, data_dir, folder, source.files, cache_dir / "dgl", allow_download,
                                      "DGL")
        try:
            ds = _quiet(lambda: cls(raw_dir=str(root), verbose=False, **(source.kwargs or {})))
        except Exception as exc:  # corrupt files, failed download, ...
            raise DatasetError(
                f"dataset '{name}': DGL could not read {origin}: {type(exc).__name__}: {exc}. "
                f"Check the files in {found or root / folder} (DGL layout <data_dir>/{folder}/...), "
                f"or delete {root / folder} to rebuild DGL's processed cache."
            ) from exc
    g = ds[0]
    masks = tuple(g.ndata[f"{s}_mask"].to(torch.bool) for s in ("train", "val", "test"))
    return _from_dgl_graph(name, g, masks, ds.num_classes, bool(cfg.symmetrize), origin)


def load_ogb_dataset(cfg, data_dir: Optional[str], cache_dir: Path, allow_download: bool) -> GraphData:
    name = cfg.name
    folder = name.replace("-", "_")
    farm_root = cache_dir / "ogb"
    required = [OGB_RELEASE[name]] + OGB_REQUIRED + OGB_EXTRA.get(name, []) + [
        f"split/{OGB_SPLITS[name]}/{part}.csv.gz" for part in ("train", "valid", "test")]
    silence_ogb_version_check()
    with _farm_lock(farm_root, folder):  # ranks and jobs sharing the cache build the farm once
        found, origin, root = _locate(name, data_dir, folder, required, farm_root, allow_download, "OGB")
        try:
            from ogb.nodeproppred import DglNodePropPredDataset

            # OGB asks on stdin before replacing a folder of another release: never wait for an answer
            with open(os.devnull) as devnull, contextlib.redirect_stdout(io.StringIO()):
                stdin, sys.stdin = sys.stdin, devnull
                try:
                    ds = DglNodePropPredDataset(name=name, root=str(root))
                finally:
                    sys.stdin = stdin
            g, labels = ds[0]
            split = ds.get_idx_split()
        except Exception as exc:
            raise DatasetError(
                f"dataset '{name}': OGB could not read {origin}: {type(exc).__name__}: {exc}. "
                f"Check the files (OGB layout <data_dir>/{folder}/raw, split/), or delete {root / folder}."
            ) from exc
    n = g.num_nodes()
    g.ndata["label"] = labels.reshape(n, -1)[:, 0].to(torch.int64)
    masks = []
    for key in ("train", "valid", "test"):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(split[key], dtype=torch.int64)] = True
        masks.append(m)
    return _from_dgl_graph(name, g, tuple(masks), ds.num_classes, bool(cfg.symmetrize), origin)
