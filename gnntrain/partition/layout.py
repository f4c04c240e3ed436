"""A partitioning as a relabelling with contiguous parts, its volume metrics,
and HongTu's second level (chunks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from gnntrain.idsets import unique_ids


@dataclass(frozen=True)
class PartitionMetrics:
    """Communication metrics of a k-way partition of a directed edge list src→dst.

    The owner of dst needs the row of src: part i receives Σ_{j≠i}|NnzCols(A_ij)| rows, the number
    of distinct remote in-neighbours of its nodes; part j sends each of its rows once to every other
    part that holds an out-neighbour of it.
    """

    num_parts: int
    edge_cut: int  # directed edges u→v with part(u) ≠ part(v) (off-diagonal nnz)
    total_volume: int  # Σ_i recv_i = Σ_j send_j rows
    max_send_volume: int
    max_recv_volume: int
    send_imbalance: float  # (max − avg)/avg of send volume
    nnz_balance: float  # max/avg of per-part nnz (in-edges + own row)
    vertex_balance: float  # max/avg of per-part node count
    send_volume: tuple
    recv_volume: tuple


def compute_metrics(
    src: np.ndarray, dst: np.ndarray, parts: np.ndarray, k: int
) -> PartitionMetrics:
    ps, pd = parts[src], parts[dst]
    cut = ps != pd
    pairs = unique_ids(src[cut].astype(np.int64) * k + pd[cut])  # distinct (row u, receiving part)
    send = np.bincount(parts[pairs // k], minlength=k)
    recv = np.bincount(pairs % k, minlength=k)
    nnz = np.bincount(pd, minlength=k) + np.bincount(parts, minlength=k)
    sizes = np.bincount(parts, minlength=k)
    avg_send = send.mean() if k else 0.0
    return PartitionMetrics(
        num_parts=k,
        edge_cut=int(cut.sum()),
        total_volume=int(pairs.size),
        max_send_volume=int(send.max()),
        max_recv_volume=int(recv.max()),
        send_imbalance=float((send.max() - avg_send) / avg_send) if avg_send > 0 else 0.0,
        nnz_balance=float(nnz.max() / nnz.mean()),
        vertex_balance=float(sizes.max() / sizes.mean()),
        send_volume=tuple(int(x) for x in send),
        recv_volume=tuple(int(x) for x in recv),
    )


@dataclass(frozen=True)
class Partitioning:
    """Parts as contiguous id ranges after relabelling.

    ``perm[new] = old`` and ``inverse[old] = new``; part i owns new ids
    ``offsets[i]:offsets[i+1]``.
    """

    parts: np.ndarray  # part per original node id
    perm: np.ndarray
    inverse: np.ndarray
    offsets: np.ndarray
    metrics: PartitionMetrics
    bandwidth: Optional[int] = None  # after RCM reordering, when asked

    @property
    def num_parts(self) -> int:
        return int(self.offsets.size - 1)


def relabel(parts: np.ndarray, k: int, order_within=None) -> tuple:
    """Permutation making each part contiguous; within a part, ascending old id
    unless ``order_within(nodes)`` gives another order (e.g. RCM)."""
    perm_blocks = []
    for p in range(k):
        nodes = np.flatnonzero(parts == p)
        perm_blocks.append(order_within(nodes) if order_within is not None else nodes)
    perm = np.concatenate(perm_blocks).astype(np.int64)
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([b.size for b in perm_blocks])]).astype(np.int64)
    return perm, inverse, offsets


def split_chunks(offsets: np.ndarray, dst_new: np.ndarray, n_chunks: int) -> np.ndarray:
    """HongTu's second level: split each part into ``n_chunks`` contiguous
    chunks with balanced in-edges (+1 per row). Returns chunk offsets
    (k·n_chunks + 1) in the relabelled id space."""
    n = int(offsets[-1])
    return split_chunks_by_work(offsets, np.bincount(dst_new, minlength=n) + 1, n_chunks)


def split_chunks_by_work(offsets: np.ndarray, work: np.ndarray, n_chunks: int) -> np.ndarray:
    """:func:`split_chunks` from each relabelled row's work (its in-edges + 1), however counted."""
    n = int(offsets[-1])
    cum = np.concatenate([[0], np.cumsum(work)])
    bounds = []
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        if hi - lo < n_chunks:
            raise ValueError(f"a part of {hi - lo} nodes cannot be split into {n_chunks} chunks")
        targets = cum[lo] + (cum[hi] - cum[lo]) * np.arange(n_chunks) / n_chunks
        cuts = np.searchsorted(cum, targets, side="left").clip(lo, hi)
        cuts[0] = lo
        for i in range(1, n_chunks):  # keep every chunk non-empty
            cuts[i] = min(max(cuts[i], cuts[i - 1] + 1), hi - (n_chunks - i))
        bounds.extend(int(c) for c in cuts)
    bounds.append(n)
    return np.asarray(bounds, dtype=np.int64)
