"""Total-volume refinement of a k-way partition, read from the destination-sorted CSR alone.

A partition-parallel layer sends node u's row once to every other part that holds one of u's
out-neighbours, so the rows a layer moves are the *connectivity − 1* metric of the hypergraph whose
net for u is {u} ∪ out(u) (Çatalyürek and Aykanat, *Hypergraph-Partitioning-Based Decomposition for
Parallel Sparse-Matrix Vector Multiplication*, IEEE TPDS 1999, section 3): total volume
= Σ_u (λ(u) − 1), with λ(u) the number of parts that net u touches. An edge-cut partitioner such as
KaMinPar minimises a proxy of it. :func:`refine_total_volume` lowers the metric itself by label
propagation with exact gains (as KaMinPar's and KaHyPar's label-propagation refiners do for their
own objectives): nodes are visited in order and each moves to the part that lowers the volume most,
if that part stays under the balance bound.

Only the CSR and a (n, k) table of pin counts (Φ(u, p): how many of net u's nodes lie in part p)
are read; the edge lists are never built. In-neighbours u of v (row v of the CSR) are exactly the
nets that hold v besides its own, so a move of v from a to b changes λ of net n ∋ v by
−[Φ(n, a) = 1] + [Φ(n, b) = 0] and both the gain and the update walk row v once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np

log = logging.getLogger(__name__)

ROWS_PER_BLOCK = 1 << 16


@dataclass(frozen=True)
class RefinementResult:
    """What a refinement did: volume before and after (rows per layer), moves, passes."""

    volume_before: int
    volume_after: int
    moves: int
    passes: int


def pin_count_bytes(num_nodes: int, k: int) -> int:
    """Bytes of the pin-count table that :func:`refine_total_volume` holds (int32 per node and
    part), for the plan's estimate."""
    return 4 * int(num_nodes) * int(k)


def refine_total_volume(
    indptr: np.ndarray,
    indices: np.ndarray,
    parts: np.ndarray,
    k: int,
    node_weights: Optional[np.ndarray] = None,
    imbalance_eps: float = 0.03,
    max_passes: int = 8,
    min_pass_gain: float = 0.001,
) -> RefinementResult:
    """Lower the total volume of ``parts`` (int64 per node, changed in place) over the graph of
    the destination-sorted CSR (row v lists v's in-neighbours). A part's weight (``node_weights``,
    1 per node where None) stays at most max((1 + eps) × the even share, the heaviest part's
    weight before): refinement never makes the balance worse than it found it. Passes stop after
    ``max_passes`` or once a pass saves under ``min_pass_gain`` of the volume."""
    from gnntrain.partition.connectivity_kernels import pin_counts, refine_pass, volume

    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    if k < 2 or n == 0:
        return RefinementResult(0, 0, 0, 0)
    weights = (
        np.ones(n, dtype=np.int64)
        if node_weights is None
        else np.asarray(node_weights, dtype=np.int64)
    )
    phi = np.zeros((n, k), dtype=np.int32)
    for lo in range(0, n, ROWS_PER_BLOCK):
        pin_counts(indptr, indices, parts, lo, min(n, lo + ROWS_PER_BLOCK), phi)
    part_w = np.bincount(parts, weights=weights, minlength=k).astype(np.int64)
    max_w = max(int(part_w.max()), int((1.0 + imbalance_eps) * weights.sum() / k))
    before = int(volume(phi))
    current, moves, passes = before, 0, 0
    while passes < max_passes and current > 0:
        moved = refine_pass(indptr, indices, parts, phi, weights, part_w, max_w)
        passes += 1
        moves += int(moved)
        last, current = current, int(volume(phi))
        if last - current <= min_pass_gain * current:
            break
    log.info(
        "volume refinement: %d -> %d rows (%.2f%%), %d moves in %d passes",
        before,
        current,
        100.0 * (current - before) / max(1, before),
        moves,
        passes,
    )
    return RefinementResult(before, current, moves, passes)
