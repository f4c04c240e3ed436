"""Edges to CSR in bounded memory: a counting sort through files, never a Python object per edge.

Pass 1 (:meth:`CsrBuilder.add`) appends each batch of mapped edges to two scratch files and counts
in-degrees. :meth:`CsrBuilder.finish` scatters the sources into a memory-mapped ``indices.npy`` at
their row's fill pointer (pass 2), then sorts and de-duplicates each row block in place (pass 3) and
shrinks the file to the final length by rewriting its ``.npy`` header. Peak memory: the indices
array (file-backed pages) plus a few arrays of N and one batch.

With edge weights (``weighted=True``) a third scratch file carries each edge's weight through the
same passes into ``weights.npy`` (float32, aligned with ``indices``); a reverse edge added by
symmetrising weighs what its edge does, and repeats of an edge merge into one that keeps the
largest weight (so both directions of an undirected edge keep one weight whichever way, and in
whichever order, the input lists it).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from gnntrain.data.ondisk import index_dtype, read_npy_header
from gnntrain.errors import DatasetError

SCATTER_EDGES = 1 << 21  # edges scattered per step
SORT_ENTRIES = 1 << 21  # CSR entries sorted per row block


@dataclass
class CsrStats:
    num_entries_read: int  # edges read from the input (after mapping, before symmetrising)
    self_loops: int  # dropped
    duplicates: int  # dropped (after symmetrising: a reverse edge already present counts here)
    num_edges: int  # directed entries of the CSR


def _rewrite_npy_length(path: Path, dtype: np.dtype, length: int) -> None:
    """Shrink a 1-D ``.npy`` file in place: same header size (padded with spaces), new shape,
    truncated."""
    with open(path, "r+b") as f:
        version = np.lib.format.read_magic(f)
        f.seek(0)
        read_npy_header(f)  # moves f to the data offset
        offset = f.tell()
        fields = repr(
            {
                "descr": np.lib.format.dtype_to_descr(dtype),
                "fortran_order": False,
                "shape": (length,),
            }
        )
        prefix = 8 + (2 if version == (1, 0) else 4)
        room = offset - prefix
        text = fields.encode("latin1")
        if len(text) + 1 > room:  # pragma: no cover - a shorter shape never needs more room
            raise RuntimeError("npy header grew")
        f.seek(prefix)
        f.write(text + b" " * (room - len(text) - 1) + b"\n")
        f.truncate(offset + length * dtype.itemsize)


def _no_file():
    """The context of the weights file an unweighted build does not have (yields None)."""
    return nullcontext(None)


class CsrBuilder:
    def __init__(
        self,
        work: Path,
        num_nodes: int,
        symmetrize: bool,
        self_loops: str,
        duplicates: str,
        name_of: Callable[[int], str],
        weighted: bool = False,
    ):
        self.work, self.n, self.symmetrize = Path(work), int(num_nodes), bool(symmetrize)
        self.weighted = bool(weighted)
        self.self_loops, self.duplicates, self.name_of = self_loops, duplicates, name_of
        self.dtype = index_dtype(self.n)
        self.degree = np.zeros(self.n, dtype=np.int64)
        self.read = 0
        self.loops = 0
        self._src = open(self.work / ".edges-src.raw", "wb")
        self._dst = open(self.work / ".edges-dst.raw", "wb")
        self._w = open(self.work / ".edges-w.raw", "wb") if self.weighted else None
        self.kept = 0

    def add(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        locate: Callable[[int], str],
        weights: Optional[np.ndarray] = None,
    ) -> None:
        """One batch of edges src→dst as node indices (already checked to lie in 0..N-1), with
        their weights where the builder is ``weighted`` (already checked: finite, >= 0)."""
        if self.weighted != (weights is not None):
            raise ValueError(
                "CsrBuilder.add: weights are given exactly when the builder is weighted"
            )
        self.read += int(src.shape[0])
        loop = src == dst
        if loop.any():
            if self.self_loops == "error":
                i = int(np.flatnonzero(loop)[0])
                raise DatasetError(
                    f"ingest: {locate(i)} is a self-loop (node {self.name_of(int(src[i]))}); "
                    f"--self-loops error refuses them. Use --self-loops drop (the models add their "
                    f"own self-loops where they want them)."
                )
            self.loops += int(loop.sum())
            src, dst = src[~loop], dst[~loop]
            weights = None if weights is None else weights[~loop]
        if weights is not None:
            self._w.write(memoryview(np.ascontiguousarray(weights, dtype=np.float32)).cast("B"))
        src = src.astype(self.dtype, copy=False)
        dst = dst.astype(self.dtype, copy=False)
        self._src.write(memoryview(np.ascontiguousarray(src)).cast("B"))
        self._dst.write(memoryview(np.ascontiguousarray(dst)).cast("B"))
        self.kept += int(src.shape[0])
        self.degree += np.bincount(dst, minlength=self.n)
        if self.symmetrize:
            self.degree += np.bincount(src, minlength=self.n)

    def _pairs(self):
        """The stored edges again with their weights (None unweighted), a block at a time (and
        reversed when symmetrising)."""
        item = self.dtype.itemsize
        with (
            open(self.work / ".edges-src.raw", "rb") as fs,
            open(self.work / ".edges-dst.raw", "rb") as fd,
            open(self.work / ".edges-w.raw", "rb") if self.weighted else _no_file() as fw,
        ):
            for start in range(0, self.kept, SCATTER_EDGES):
                count = min(SCATTER_EDGES, self.kept - start)
                s = np.fromfile(fs, dtype=self.dtype, count=count)
                d = np.fromfile(fd, dtype=self.dtype, count=count)
                w = None if fw is None else np.fromfile(fw, dtype=np.float32, count=count)
                assert (
                    s.shape[0] == count
                    and d.shape[0] == count
                    and fs.tell() == (start + count) * item
                    and (w is None or w.shape[0] == count)
                )
                yield s, d, w
                if self.symmetrize:
                    yield d, s, w

    def finish(self, progress: Callable[[str, int, int], None]) -> CsrStats:
        self._src.close()
        self._dst.close()
        if self._w is not None:
            self._w.close()
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(self.degree, out=indptr[1:])
        total = int(indptr[-1])
        path = self.work / "indices.npy"
        indices = np.lib.format.open_memmap(
            path, mode="w+", dtype=self.dtype, shape=(max(total, 1),)
        )
        weights = None
        if self.weighted:
            weights = np.lib.format.open_memmap(
                self.work / "weights.npy", mode="w+", dtype=np.float32, shape=(max(total, 1),)
            )
        fill = indptr[:-1].copy()
        done = 0
        for s, d, w in self._pairs():  # pass 2: scatter every source into its destination's row
            order = np.argsort(d, kind="stable")
            ds = d[order]
            starts = (
                np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
                if ds.shape[0]
                else np.zeros(0, np.int64)
            )
            lengths = np.diff(np.r_[starts, ds.shape[0]])
            rows = ds[starts].astype(np.int64)
            within = np.arange(ds.shape[0], dtype=np.int64) - np.repeat(starts, lengths)
            indices[fill[ds] + within] = s[order]
            if weights is not None:
                weights[fill[ds] + within] = w[order]
            fill[rows] += lengths
            done += int(s.shape[0])
            progress("sorting edges", done, total)
        del fill
        for name in (".edges-src.raw", ".edges-dst.raw", ".edges-w.raw"):
            (self.work / name).unlink(missing_ok=True)
        final, duplicates = self._dedupe_rows(indices, indptr, progress, weights)
        indices.flush()
        del indices
        _rewrite_npy_length(path, self.dtype, int(final[-1]))
        if weights is not None:
            weights.flush()
            del weights
            _rewrite_npy_length(self.work / "weights.npy", np.dtype(np.float32), int(final[-1]))
        np.save(self.work / "indptr.npy", final)
        return CsrStats(
            num_entries_read=self.read,
            self_loops=self.loops,
            duplicates=duplicates,
            num_edges=int(final[-1]),
        )

    def _dedupe_rows(
        self, indices: np.ndarray, indptr: np.ndarray, progress, weights=None
    ) -> "tuple[np.ndarray, int]":
        """Pass 3: sort each row's sources, drop repeats (a repeat's weight: the largest), and
        compact the arrays in place."""
        n = self.n
        final = np.zeros(n + 1, dtype=np.int64)
        write = 0
        duplicates = 0
        row = 0
        while row < n:
            # as many rows as fit SORT_ENTRIES (at least one)
            stop = int(np.searchsorted(indptr, indptr[row] + SORT_ENTRIES, side="right")) - 1
            stop = min(n, max(stop, row + 1))
            lo, hi = int(indptr[row]), int(indptr[stop])
            deg = np.diff(indptr[row : stop + 1])
            key = np.repeat(np.arange(stop - row, dtype=np.int64), deg) * n + indices[lo:hi].astype(
                np.int64
            )
            w = None
            if weights is None:
                key.sort()
            else:
                order = np.argsort(key, kind="stable")
                key, w = key[order], np.asarray(weights[lo:hi])[order]
            keep = np.ones(key.shape[0], dtype=bool)
            keep[1:] = key[1:] != key[:-1]
            repeats = int(key.shape[0] - keep.sum())
            if repeats and self.duplicates == "error":
                first = int(np.flatnonzero(~keep)[0])
                r, c = divmod(int(key[first]), n)
                reverse = (
                    " (counting the reverse edges that symmetrising adds)"
                    if self.symmetrize
                    else ""
                )
                raise DatasetError(
                    f"ingest: the edge {self.name_of(c)} -> {self.name_of(row + r)} appears more "
                    "than "
                    f"once{reverse}; --duplicates error refuses repeats. Use --duplicates drop."
                )
            duplicates += repeats
            if w is not None:
                first = np.flatnonzero(keep)
                merged = np.maximum.reduceat(w, first) if first.size else w[:0]
                weights[write : write + first.size] = merged
            key = key[keep]
            counts = np.bincount(key // n, minlength=stop - row)
            indices[write : write + key.shape[0]] = (key % n).astype(self.dtype)
            final[row + 1 : stop + 1] = write + np.cumsum(counts)
            write += int(key.shape[0])
            row = stop
            progress("removing duplicates", hi, int(indptr[-1]))
        return final, duplicates


def degree_summary(indptr: np.ndarray) -> Dict[str, float]:
    deg = np.diff(indptr)
    if deg.shape[0] == 0:
        return {}
    p = np.percentile(deg, [50, 90, 99])
    return {
        "isolated": int((deg == 0).sum()),
        "p50": float(p[0]),
        "p90": float(p[1]),
        "p99": float(p[2]),
        "max": int(deg.max()),
        "mean": float(deg.mean()),
    }
