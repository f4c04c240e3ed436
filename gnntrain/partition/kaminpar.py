"""``partitioner=kaminpar``: KaMinPar (Gottesbüren, Heuer, Sanders, Schulz and Seemaier, *Deep
Multilevel Graph Partitioning*, ESA 2021; its memory-lean TeraPart variant in Salwasser, Seemaier,
Gottesbüren and Sanders, *Tera-Scale Multilevel Graph Partitioning*, IPDPS 2025) from the KaHiP
group's ``kaminpar`` wheel, fed without ever holding the graph's edge lists.

KaMinPar's Python binding reads a graph from a file only. :func:`write_parhip` writes the ParHiP
binary format from the destination-sorted CSR, a block of rows at a time: a memory-mapped ingested
folder's ``indices`` are read in order and never copied whole. KaMinPar then loads it with
``compress=True`` (TeraPart's gap- and interval-encoded neighbour lists), which is what keeps its
peak far below METIS's (docs/design.md#partitioners).

The ParHiP binary layout (as KaMinPar's and KaGen's readers define it): a 24-byte header of three
little-endian u64 (version, n, m = directed edges, both directions of each undirected one), n + 1
u64 offsets that are *byte* addresses into the file of each node's first neighbour, m neighbour IDs,
then n vertex weights where the version says so. The version is a bit field, from the least
significant bit: no edge weights, no vertex weights, 32-bit edge IDs, 32-bit vertex IDs, 32-bit
vertex weights, 32-bit edge weights.

KaMinPar partitions undirected graphs. A CSR whose reverse edges are all present (an ingested
folder with ``symmetrized``) is its own adjacency. Any other graph is made symmetric on the way: its
transpose goes to a memory-mapped scratch file (one counting pass, one scatter pass), and each
row's in- and out-lists are merged, deduplicated and stripped of self-loops block by block.
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from gnntrain.errors import PlanError
from gnntrain.partition.connectivity import refine_total_volume

ROWS_PER_BLOCK = 1 << 16  # destination rows read, merged and written per step
HEADER_BYTES = 24
NO_EDGE_WEIGHTS, NO_VERTEX_WEIGHTS, VID_32BIT = 1, 2, 8
PRESETS = ("default", "fast", "eco", "strong", "terapart", "terapart-eco")
REFINEMENTS = ("volume", "none")


def parhip_version(vertex_weights: bool, vid_32bit: bool) -> int:
    """The header's version field: never edge weights, 64-bit edge IDs and vertex weights."""
    version = NO_EDGE_WEIGHTS
    if not vertex_weights:
        version |= NO_VERTEX_WEIGHTS
    if vid_32bit:
        version |= VID_32BIT
    return version


@functools.lru_cache(maxsize=None)
def _merge_loops():
    from numba import njit

    @njit(cache=True, nogil=True)
    def count_out(indices, lo, hi, counts):  # pragma: no cover - compiled
        for e in range(lo, hi):
            counts[indices[e]] += 1

    @njit(cache=True, nogil=True)
    def scatter(indptr, indices, rows_lo, rows_hi, cursor, out):  # pragma: no cover - compiled
        for v in range(rows_lo, rows_hi):
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                out[cursor[u]] = v
                cursor[u] += 1

    @njit(cache=True, nogil=True)
    def merge_rows(a_ptr, a_idx, b_ptr, b_idx, rows_lo, rows_hi, out, write):  # pragma: no cover
        """Per row v: the sorted union of a's and b's lists, without v itself. With ``write``
        false only the counts (returned per row); otherwise the IDs go to ``out`` in order."""
        counts = np.zeros(rows_hi - rows_lo, dtype=np.int64)
        pos = 0
        for v in range(rows_lo, rows_hi):
            i, i_end = a_ptr[v], a_ptr[v + 1]
            j, j_end = b_ptr[v], b_ptr[v + 1]
            last = -1
            c = 0
            while i < i_end or j < j_end:
                if j >= j_end or (i < i_end and a_idx[i] <= b_idx[j]):
                    x = a_idx[i]
                    i += 1
                else:
                    x = b_idx[j]
                    j += 1
                if x == v or x == last:
                    continue
                last = x
                if write:
                    out[pos] = x
                pos += 1
                c += 1
            counts[v - rows_lo] = c
        return counts

    return count_out, scatter, merge_rows


def _sorted_rows(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether every row's IDs are ascending (an ingested folder's are; the merge needs it)."""
    for lo in range(0, indptr.shape[0] - 1, ROWS_PER_BLOCK):
        hi = min(indptr.shape[0] - 1, lo + ROWS_PER_BLOCK)
        block = np.asarray(indices[indptr[lo] : indptr[hi]], dtype=np.int64)
        if block.size < 2:
            continue
        # a step down is allowed only where a new row begins
        falls = np.flatnonzero(np.diff(block) < 0) + 1
        if not np.isin(falls, indptr[lo + 1 : hi] - indptr[lo]).all():
            return False
    return True


def _transpose_to(
    indptr: np.ndarray, indices: np.ndarray, scratch: Path
) -> Tuple[np.ndarray, np.ndarray]:
    """(out_indptr, out_indices) of the CSR's transpose; the indices are memory-mapped in
    ``scratch``. Rows come out sorted because sources are visited in ascending order."""
    count_out, scatter, _ = _merge_loops()
    n = indptr.shape[0] - 1
    counts = np.zeros(n, dtype=np.int64)
    for lo in range(0, n, ROWS_PER_BLOCK):
        hi = min(n, lo + ROWS_PER_BLOCK)
        count_out(indices, int(indptr[lo]), int(indptr[hi]), counts)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    del counts
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    out = np.lib.format.open_memmap(
        scratch, mode="w+", dtype=dtype, shape=(max(1, int(out_ptr[-1])),)
    )
    cursor = out_ptr[:-1].copy()
    for lo in range(0, n, ROWS_PER_BLOCK):
        scatter(indptr, indices, lo, min(n, lo + ROWS_PER_BLOCK), cursor, out)
    out.flush()
    return out_ptr, out


def vertex_weights_of(
    indptr: np.ndarray, vertex_weights: str, row_weight: float
) -> Optional[np.ndarray]:
    """METIS's balance (``partitioners.metis_parts``): a row's in-degree + 1 plus its dense work
    in nnz-equivalents with ``nnz``; None (every node weighs 1) with ``uniform``."""
    if vertex_weights == "uniform":
        return None
    return (np.diff(indptr) + 1 + int(round(row_weight))).astype(np.int64)


def write_parhip(
    path: Path,
    indptr: np.ndarray,
    indices: np.ndarray,
    symmetric: bool,
    weights: Optional[np.ndarray] = None,
) -> Tuple[int, int]:
    """Write the undirected graph of the destination-sorted CSR (``indptr``, ``indices``) to
    ``path`` in ParHiP's binary format, a block of rows at a time; (n, m) as written. With
    ``symmetric`` the CSR is taken as its own adjacency (its rows sorted, without self-loops or
    duplicates, as an ingested folder's are); otherwise it is symmetrised through a scratch file
    beside ``path``."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    vid_32bit = n < 2**31 - 1
    vid_dtype = np.dtype("<u4" if vid_32bit else "<u8")
    path = Path(path)
    scratch = path.with_name(path.name + ".transpose.npy")
    try:
        if symmetric:
            adjacency = None
            degrees_of = lambda lo, hi: np.diff(indptr[lo : hi + 1])
        else:
            if not _sorted_rows(indptr, indices):
                raise PlanError(
                    "partitioner",
                    "the graph's CSR rows are not sorted.",
                    "ingest the graph with `gnntrain ingest` (it sorts every row)",
                )
            out_ptr, out_idx = _transpose_to(indptr, indices, scratch)
            merge = _merge_loops()[2]
            adjacency = (out_ptr, out_idx, merge)
            empty = np.zeros(1, dtype=np.int64)

            def degrees_of(lo: int, hi: int) -> np.ndarray:
                return merge(indptr, indices, out_ptr, out_idx, lo, hi, empty, False)

        offsets = np.zeros(n + 1, dtype=np.int64)
        for lo in range(0, n, ROWS_PER_BLOCK):
            hi = min(n, lo + ROWS_PER_BLOCK)
            offsets[lo + 1 : hi + 1] = degrees_of(lo, hi)
        np.cumsum(offsets, out=offsets)
        m = int(offsets[-1])
        with open(path, "wb") as f:
            f.write(struct.pack("<QQQ", parhip_version(weights is not None, vid_32bit), n, m))
            first = HEADER_BYTES + 8 * (n + 1)
            for lo in range(0, n + 1, ROWS_PER_BLOCK):
                block = offsets[lo : lo + ROWS_PER_BLOCK]
                f.write((first + vid_dtype.itemsize * block).astype("<u8").tobytes())
            for lo in range(0, n, ROWS_PER_BLOCK):
                hi = min(n, lo + ROWS_PER_BLOCK)
                if adjacency is None:
                    ids = np.asarray(indices[indptr[lo] : indptr[hi]])
                else:
                    out_ptr, out_idx, merge = adjacency
                    ids = np.empty(int(offsets[hi] - offsets[lo]), dtype=np.int64)
                    merge(indptr, indices, out_ptr, out_idx, lo, hi, ids, True)
                f.write(ids.astype(vid_dtype, copy=False).tobytes())
            if weights is not None:
                for lo in range(0, n, ROWS_PER_BLOCK):
                    f.write(weights[lo : lo + ROWS_PER_BLOCK].astype("<i8").tobytes())
        return n, m
    finally:
        scratch.unlink(missing_ok=True)


def kaminpar_threads(threads: int) -> int:
    """``threads``, or this process's CPUs where it is 0."""
    return int(threads) if threads > 0 else max(1, len(os.sched_getaffinity(0)))


def kaminpar_parts(
    indptr: np.ndarray,
    indices: np.ndarray,
    symmetric: bool,
    k: int,
    cfg,
    scratch_root: Optional[Path] = None,
) -> np.ndarray:
    """Part id (int64) per node of the destination-sorted CSR into ``k`` parts by KaMinPar, from a
    ParHiP file written under ``scratch_root`` (the system's temporary folder where None) and
    removed after loading."""
    try:
        import kaminpar
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise PlanError(
            "partitioner",
            f"partitioner=kaminpar needs the kaminpar package ({exc}).",
            "pip install kaminpar, or use partitioner=ldg",
        ) from exc
    preset = str(getattr(cfg, "preset", "default"))
    if preset not in PRESETS:
        raise PlanError(
            "partitioner.preset", f"unknown KaMinPar preset '{preset}'.", f"use one of {PRESETS}"
        )
    refine = str(getattr(cfg, "refine", "volume"))
    if refine not in REFINEMENTS:
        raise PlanError(
            "partitioner.refine",
            f"unknown KaMinPar refinement '{refine}'.",
            "use volume (KaMinPar's cut refined for the total volume) or none",
        )
    n = int(np.asarray(indptr).shape[0]) - 1
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    weights = vertex_weights_of(
        np.asarray(indptr, dtype=np.int64), cfg.vertex_weights, float(cfg.row_weight)
    )
    if scratch_root is not None:
        Path(scratch_root).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="kaminpar-", dir=scratch_root))
    try:
        graph_file = folder / "graph.parhip"
        write_parhip(graph_file, indptr, indices, symmetric, weights)
        del weights
        graph = kaminpar.load_graph(
            str(graph_file), kaminpar.GraphFileFormat.PARHIP, compress=bool(cfg.compress)
        )
        graph_file.unlink()
        kaminpar.reseed(int(cfg.seed))
        context = kaminpar.context_by_name(preset)
        solver = kaminpar.KaMinPar(kaminpar_threads(int(cfg.threads)), context)
        parts = np.fromiter(
            solver.compute_partition(graph, int(k), float(cfg.imbalance_eps)),
            dtype=np.int64,
            count=n,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    del graph, solver  # KaMinPar's compressed graph goes before the refinement's table comes
    if refine == "volume":
        weights = vertex_weights_of(
            np.asarray(indptr, dtype=np.int64), cfg.vertex_weights, float(cfg.row_weight)
        )
        refine_total_volume(indptr, indices, parts, int(k), weights, float(cfg.imbalance_eps))
    return parts
