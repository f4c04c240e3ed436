"""A streaming partitioner for graphs larger than memory: LDG over the graph's CSR, in bounded
memory.

Linear Deterministic Greedy (Stanton and Kliot, *Streaming Graph Partitioning for Large Distributed
Graphs*, KDD 2012, §3-§4): nodes arrive one by one, in id order, and each goes to the part that
already holds most of its in-neighbours, discounted by how full that part is: argmax_i |N(v) ∩ P_i|
· (1 − w(P_i) / C), with C = (1 + imbalance_eps) · W / k for the total vertex weight W (one per
node, or in-degree + 1 with ``vertex_weights=nnz``, the SpMM work METIS balances). Ties go to the
lightest part. One pass over the CSR (memory-mapped: an ingested folder's ``indices`` are read in
order, never copied) and one part id per node: the memory is O(N), the edges are never held. The
paper reports LDG's cut between hashing's and METIS's; it is the partitioner for graphs METIS cannot
load (``partitioner=ldg``).

The partition's metrics come from the same CSR, one part at a time (:func:`csr_metrics`): a node
mask per receiving part, so the distinct (row, part) pairs are never materialised either.
"""

from __future__ import annotations

import functools

import numpy as np

from gnntrain.partition.layout import PartitionMetrics

METRIC_ROWS = 1 << 16  # destination rows per block of the metrics' pass


@functools.lru_cache(maxsize=None)
def _ldg_loop():
    from numba import njit

    @njit(cache=True, nogil=True)
    def ldg(indptr, indices, weights, k, capacity):  # pragma: no cover - compiled
        n = indptr.shape[0] - 1
        parts = np.full(n, -1, dtype=np.int32)
        load = np.zeros(k, dtype=np.float64)
        counts = np.zeros(k, dtype=np.int64)
        for v in range(n):
            for e in range(indptr[v], indptr[v + 1]):
                p = parts[indices[e]]
                if p >= 0:
                    counts[p] += 1
            best, best_score = 0, -1.0
            for i in range(k):
                room = 1.0 - load[i] / capacity
                # a full part only when all are
                score = counts[i] * room if room > 0 else -1.0 + room
                if score > best_score or (score == best_score and load[i] < load[best]):
                    best, best_score = i, score
            parts[v] = best
            load[best] += weights[v]
            for e in range(indptr[v], indptr[v + 1]):
                p = parts[indices[e]]
                if p >= 0:
                    counts[p] = 0
            counts[best] = 0
        return parts

    return ldg


def ldg_parts(
    indptr: np.ndarray, indices: np.ndarray, k: int, vertex_weights: str, imbalance_eps: float
) -> np.ndarray:
    """Part id (int64) per node of the destination-sorted CSR (``indptr``, ``indices``) into ``k``
    parts."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    weights = (np.diff(indptr) + 1).astype(np.float64) if vertex_weights == "nnz" else np.ones(n)
    capacity = (1.0 + max(0.0, float(imbalance_eps))) * float(weights.sum()) / k
    return _ldg_loop()(indptr, indices, weights, int(k), capacity).astype(np.int64)


def csr_from_edges(src: np.ndarray, dst: np.ndarray, n: int):
    """(indptr, indices) of the edges src→dst sorted by destination (for a graph given as edge
    lists)."""
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, np.asarray(src)[order]


def csr_metrics(
    indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, k: int
) -> PartitionMetrics:
    """:func:`~gnntrain.partition.layout.compute_metrics` of the CSR's edges without the edge lists:
    one pass over blocks of destination rows; the distinct remote rows each part reads are a (k, N)
    boolean mask."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    seen = np.zeros((k, n), dtype=bool)
    cut = 0
    for lo in range(0, n, METRIC_ROWS):
        hi = min(n, lo + METRIC_ROWS)
        src = np.asarray(indices[indptr[lo] : indptr[hi]], dtype=np.int64)
        dst_part = np.repeat(parts[lo:hi], np.diff(indptr[lo : hi + 1]))
        remote = parts[src] != dst_part
        cut += int(remote.sum())
        seen[dst_part[remote], src[remote]] = True
    recv = seen.sum(axis=1)
    send = np.zeros(k, dtype=np.int64)
    for p in range(k):
        send += np.bincount(parts[seen[p]], minlength=k)
    sizes = np.bincount(parts, minlength=k)
    nnz = np.bincount(parts, weights=np.diff(indptr), minlength=k) + sizes
    avg_send = send.mean() if k else 0.0
    return PartitionMetrics(
        num_parts=k,
        edge_cut=cut,
        total_volume=int(recv.sum()),
        max_send_volume=int(send.max()),
        max_recv_volume=int(recv.max()),
        send_imbalance=float((send.max() - avg_send) / avg_send) if avg_send > 0 else 0.0,
        nnz_balance=float(nnz.max() / nnz.mean()),
        vertex_balance=float(sizes.max() / sizes.mean()),
        send_volume=tuple(int(x) for x in send),
        recv_volume=tuple(int(x) for x in recv),
    )
