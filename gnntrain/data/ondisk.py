"""The on-disk graph format that ``gnntrain ingest`` writes and ``dataset=files`` reads.

One folder per graph::

    meta.json         format, sizes, dtypes, each file's size, mtime and BLAKE2b, the content
                      digest, and its own checksum (gnntrain.artifact.sealed_json)
    indptr.npy        int64 (N+1): CSR by destination,
                      row v's in-neighbours are indices[indptr[v]:indptr[v+1]]
    indices.npy       int32 where N < 2^31, else int64:
                      sources, sorted within a row, no self-loops, no duplicates
    features.npy      float32 (N, F)
    labels.npy        int64 (N,): -1 for a node without a label (never in a mask)
    train_mask.npy, val_mask.npy, test_mask.npy   bool (N,)
    node_ids.parquet  the user's own ID of every node, in node order (integers or strings)
    weights.npy       float32 (E,), only where the graph has edge weights (meta ``weights``):
                      the weight of each CSR entry, aligned with indices.npy
    targets.npy       float32 (N, T), only where the graph has regression targets (meta
                      ``targets``: their T names): NaN where a node has no value for a target
    edges_val.npy, edges_test.npy   int64 (2, m), only where link prediction's held-out edges
                      were given (meta ``held_out_edges``: {split: m}): (source, destination) node
                      indices, none of them in the CSR (task=link_prediction scores them)

Every array is a plain ``.npy`` file, so NumPy memory-maps it (``np.load(mmap_mode=...)``).
A folder is written under a temporary name and renamed into place once ``meta.json`` is
complete, so a killed ingest leaves nothing that loads. The content digest equals
:func:`gnntrain.data.graph.hash_tensors` over (src, dst, features, labels, masks) of the
loaded :class:`GraphData`, so an ingested Cora has the digest of ``dataset=cora``; a weighted
graph's digest covers its weights too (hashed after the masks), and a graph with regression targets
its targets (hashed last), so a folder without either keeps the digest it had.

Edge weights are float32: 4 bytes per edge, as the int32 indices and the float32 features; every
run (float64 ones too) widens the same stored values, so every mode computes with one set of
weights, and a user's value is kept to float32's 7 significant digits.

Regression targets are float32 for the same reasons: the features they are learnt from are float32,
4 bytes per value keeps them a fraction of the features' size, every mode (and every dtype) widens
the same stored values so that all of them fit one set of targets exactly, and task=node_regression
standardises them to float32 anyway; 7 significant digits are far below any target's noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from gnntrain.errors import DatasetError

FORMAT = "gnntrain-graph"
VERSION = 2  # 2: meta.json holds every file's BLAKE2b and its own checksum (1: sizes only)
META = "meta.json"
MASKS = ("train_mask", "val_mask", "test_mask")
NODE_IDS = "node_ids.parquet"
DIGEST_BLOCK = 1 << 22  # elements hashed per step: bounded memory for any graph size


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 node indices where every index fits, int64 otherwise."""
    return np.dtype(np.int32) if num_nodes < 2**31 - 1 else np.dtype(np.int64)


def is_graph_dir(path: Path) -> bool:
    """Whether ``path`` holds an ingested graph (its meta.json says so; it may still be damaged:
    :func:`open_graph_dir` checks)."""
    meta = Path(path) / META
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def _sealed_from(meta: Dict[str, Any]) -> bool:
    return int(meta.get("version", 0) or 0) >= 2


# ------------------------------------------------------------------ blocks
def read_npy_header(f):
    """(shape, fortran order, dtype) of an open ``.npy`` file, leaving it at the data."""
    version = np.lib.format.read_magic(f)
    reader = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    return reader(f)


class NpyFile:
    """A C-ordered ``.npy`` file read a block of rows at a time with ``pread``: unlike a memory map,
    the pages read never count toward the process's resident memory once a block is dropped."""

    def __init__(self, path, fortran_ok: bool = False):
        """``fortran_ok``: accept a Fortran-ordered file (one only checked here, then read whole);
        every file's header, dtype and length are checked (a ValueError says what is wrong)."""
        self.path = Path(path)
        with open(self.path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            self.offset = f.tell()
        if fortran and len(shape) > 1 and not fortran_ok:
            raise ValueError(
                f"{self.path} is stored in Fortran order; save it C-ordered (np.ascontiguousarray)"
            )
        if dtype.hasobject:  # refused from the header: the pickle after it is never read
            raise ValueError(f"{self.path} holds Python objects (pickled), not numbers")
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)
        self.row_items = int(np.prod(self.shape[1:])) if self.ndim > 1 else 1
        need = self.offset + int(np.prod(self.shape)) * self.dtype.itemsize
        size = self.path.stat().st_size
        if size < need:
            raise ValueError(
                f"{self.path} is truncated: its header says {self.shape} of {self.dtype} "
                f"({need:,} bytes), the file has {size:,}"
            )

    def __len__(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    def items(self, start: int, count: int) -> np.ndarray:
        """``count`` elements of the flattened array from element ``start``."""
        out = np.empty(count, dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset + start * self.dtype.itemsize)
            got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise ValueError(f"{self.path} is shorter than its header says (truncated?)")
        return out

    def rows(self, lo: int, hi: int) -> np.ndarray:
        hi = min(hi, len(self))
        block = self.items(lo * self.row_items, max(0, hi - lo) * self.row_items)
        return block.reshape((max(0, hi - lo),) + self.shape[1:])


def _flat(array) -> Tuple[np.dtype, Tuple[int, ...], Any]:
    """(dtype, shape, read(start, count) of the flattened elements) of an array or a ``.npy`` path
    (read with ``pread``, never mapped)."""
    if isinstance(array, (str, Path)):
        npy = NpyFile(array)
        return npy.dtype, npy.shape, npy.items
    flat = np.asarray(array).reshape(-1)
    return (
        flat.dtype,
        tuple(np.shape(array)),
        lambda start, count: np.ascontiguousarray(flat[start : start + count]),
    )


def _blocks(read, total: int, as_dtype: Optional[np.dtype] = None) -> Iterator[bytes]:
    for start in range(0, total, DIGEST_BLOCK):
        block = read(start, min(DIGEST_BLOCK, total - start))
        if as_dtype is not None:
            block = block.astype(as_dtype, copy=False)
        yield memoryview(block).cast("B")


def _destinations(indptr: np.ndarray) -> Iterator[bytes]:
    """The COO destination of every CSR entry (row id repeated by degree), in blocks of rows."""
    n = indptr.shape[0] - 1
    step = max(1, DIGEST_BLOCK // 16)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        deg = np.diff(indptr[lo : hi + 1])
        yield memoryview(np.repeat(np.arange(lo, hi, dtype=np.int64), deg)).cast("B")


def content_digest(
    indptr: np.ndarray,
    indices,
    features,
    labels: np.ndarray,
    masks: Tuple[np.ndarray, ...],
    weights=None,
    targets=None,
    held_out: Tuple[np.ndarray, ...] = (),
) -> str:
    """``hash_tensors(src, dst, features, labels, *masks)`` (then the edge weights and the
    regression targets, each where given) computed block by block from the CSR, never
    materialising the COO arrays (src = indices as int64, dst = row of each entry). ``indices``,
    ``features``, ``weights`` and ``targets`` may be arrays or ``.npy`` paths (then read with
    ``pread``, never mapped)."""
    h = hashlib.sha1(b"")

    def header(dtype: str, shape: Tuple[int, ...]) -> None:
        h.update(dtype.encode() + str(tuple(shape)).encode())

    def add(array, as_dtype: Optional[np.dtype] = None) -> int:
        dtype, shape, read = _flat(array)
        total = int(np.prod(shape))
        header(str(as_dtype or dtype), shape)
        for block in _blocks(read, total, as_dtype):
            h.update(block)
        return total

    nnz = add(indices, np.dtype(np.int64))  # src: the CSR's sources as int64
    header("int64", (nnz,))  # dst: each entry's row
    for block in _destinations(indptr):
        h.update(block)
    for array in (features, labels, *masks):
        add(array)
    if weights is not None:
        add(weights)
    if targets is not None:
        add(targets)
    for edges in held_out:  # link prediction's given validation and test edges
        add(edges)
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ write
def partial_dir(out: Path) -> Path:
    """Where an ingest writes before the rename: beside ``out``, never loadable (no meta.json there
    until the very end, and a name ``dataset.path`` would not be given). It starts empty: this
    process's earlier one is removed, and so is any other's whose process is gone (killed, out of
    memory)."""
    out = Path(out)
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            shutil.rmtree(stale, ignore_errors=True)
    return out.parent / f".{out.name}.partial-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def finish(work: Path, out: Path, meta: Dict[str, Any], overwrite: bool) -> Path:
    """Move the finished folder into place and write meta.json last (gnntrain.artifact.publish)."""
    from gnntrain.artifact import describe_files, publish

    meta = {"format": FORMAT, "version": VERSION, **meta}
    names = [p.name for p in sorted(work.iterdir()) if p.is_file()]
    meta["files"] = describe_files(work, names)  # size, mtime and BLAKE2b of each
    meta["bytes"] = {name: meta["files"][name]["bytes"] for name in names}
    out = Path(out)
    if out.exists() and not overwrite:
        raise DatasetError(
            f"ingest: {out} already exists. Pass --overwrite to replace it, or choose "
            f"another --out."
        )
    return publish(work, out, meta)


# ------------------------------------------------------------------- read
@dataclass
class GraphDir:
    """An ingested graph, its arrays memory-mapped (copy-on-write: writable views that never touch
    the files)."""

    path: Path
    meta: Dict[str, Any]

    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def feat_dim(self) -> int:
        return int(self.meta["feat_dim"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def digest(self) -> str:
        return str(self.meta["digest"])

    @property
    def weighted(self) -> bool:
        """Whether the folder holds edge weights (``weights.npy``)."""
        return bool(self.meta.get("weights"))

    @property
    def target_names(self) -> List[str]:
        """The regression targets' names, one per column of ``targets.npy`` (none: [])"""
        return [str(t) for t in self.meta.get("targets") or []]

    @property
    def held_out_splits(self) -> List[str]:
        """The splits whose link-prediction edges were given at ingest (``edges_<split>.npy``)."""
        return [str(k) for k in (self.meta.get("held_out_edges") or {})]

    @property
    def content_hash(self) -> str:
        """The loaded graph's ``GraphData.content_hash`` (what keys its caches)."""
        return f"files-{self.digest}"

    def array(self, name: str) -> np.ndarray:
        path = self.path / f"{name}.npy"
        try:
            return np.load(path, mmap_mode="c")
        except (OSError, ValueError) as exc:
            raise DatasetError(
                f"dataset.path={self.path}: cannot read {path.name} ({exc}). The folder is "
                "damaged: "
                f"ingest the graph again (gnntrain ingest ... --out {self.path} --overwrite)."
            ) from exc

    def node_ids(self):
        """The user's IDs in node order, as a pyarrow Array."""
        import pyarrow.parquet as pq

        return pq.read_table(self.path / NODE_IDS).column("id").combine_chunks()


def open_graph_dir(path) -> GraphDir:
    """Open an ingested graph folder; every problem is one DatasetError naming the folder and the
    fix."""
    path = Path(str(path)).expanduser()
    fix = "run gnntrain ingest ... --out DIR first, then dataset=files dataset.path=DIR"
    if not path.exists():
        raise DatasetError(f"dataset.path={path}: no such folder. Fix: {fix}.")
    if not path.is_dir():
        raise DatasetError(
            f"dataset.path={path}: is a file, not an ingested graph folder. Fix: {fix}."
        )
    meta_path = path / META
    if not meta_path.is_file():
        partial = (
            "" if not path.name.startswith(".") else " (a half-written ingest: it was interrupted)"
        )
        raise DatasetError(
            f"dataset.path={path}: no {META} here{partial}, so this is not a finished ingested "
            f"graph. Fix: {fix}."
        )
    from gnntrain.artifact import ArtifactError

    try:
        meta = check_graph_dir(path)
    except OSError as exc:
        raise DatasetError(
            f"dataset.path={path}: {META} is unreadable ({exc}). Ingest the graph again."
        ) from exc
    except ArtifactError as exc:
        raise DatasetError(
            f"dataset.path={path}: {exc}. The folder is damaged: ingest the graph again "
            f"(gnntrain ingest ... --out {path} --overwrite)."
        ) from None
    if meta.get("format") != FORMAT:
        raise DatasetError(
            f"dataset.path={path}: {META} is not a gnntrain graph (format "
            f"{meta.get('format')!r}). Fix: {fix}."
        )
    if int(meta.get("version", 0)) > VERSION:
        raise DatasetError(
            f"dataset.path={path}: written by a newer gnntrain (format version {meta['version']} > "
            f"{VERSION}). Upgrade gnntrain or ingest again with this one."
        )
    return GraphDir(path, meta)


def check_graph_dir(path: Path) -> Dict[str, Any]:
    """The meta of the graph folder ``path``, checked: meta.json against its own checksum, each
    file by size, and by its BLAKE2b where it was written since the ingest (its mtime moved;
    ``GNNTRAIN_VERIFY_PARTS=1``: every file). An ArtifactError names the first damaged file (a
    folder of format version 1 has sizes only)."""
    from gnntrain.artifact import read_sealed_json, verify_files

    meta = read_sealed_json(Path(path) / META, required=_sealed_from)
    if meta.get("format") != FORMAT or int(meta.get("version", 0)) > VERSION:
        return meta  # not ours to check: the caller says what it is
    files = meta.get("files") or {n: {"bytes": b} for n, b in meta.get("bytes", {}).items()}
    seen = (str(Path(path).resolve()), tuple(_stat(Path(path) / name) for name in sorted(files)))
    if seen not in _CHECKED:  # a plan opens the folder several times: its files are read once
        verify_files(path, files)
        _CHECKED.add(seen)
    return meta


_CHECKED: set = set()  # (folder, each file's size and mtime) verified in this process


def _stat(path: Path) -> Tuple[str, int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (path.name, -1, -1)
    return (path.name, stat.st_size, stat.st_mtime_ns)


def load_graph_dir(path, name: str = ""):
    """The GraphData of an ingested graph: features and the CSR memory-mapped; the COO edge lists
    are built from the CSR only when something asks for them
    (:class:`~gnntrain.data.graph.CsrGraphData`)."""
    import torch

    from gnntrain.data.graph import CsrGraphData

    g = open_graph_dir(path)
    masks = [torch.from_numpy(np.asarray(g.array(m), dtype=bool)) for m in MASKS]
    label = name or str(g.meta.get("name") or g.path.name)
    return CsrGraphData(
        indptr=g.array("indptr").view(np.ndarray),
        indices=g.array("indices").view(np.ndarray),
        symmetric=bool(g.meta.get("symmetrized")),
        weights=g.array("weights").view(np.ndarray) if g.weighted else None,
        name=label,
        num_nodes=g.num_nodes,
        features=torch.from_numpy(g.array("features")),
        labels=torch.from_numpy(np.asarray(g.array("labels"))),
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=g.num_classes,
        content_hash=g.content_hash,
        origin=f"ingested graph {g.path}",
        targets=torch.from_numpy(g.array("targets")) if g.target_names else None,
        held_out_edges={
            split: tuple(torch.from_numpy(np.asarray(g.array(f"edges_{split}"))))
            for split in g.held_out_splits
        }
        or None,
    )
