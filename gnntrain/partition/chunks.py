"""HongTu's two-level layout (HongTu §4.1 "Edge-Cut 2-Level Graph Partitioning"; volumes from §5.3;
docs/design.md#hongtu).

m partitions (one per device) are each range-split into n chunks. Chunk
G_ij holds the destination rows V_ij, all their in-edges, and its
neighbour set N_ij: the in-neighbours plus V_ij itself (SAGE/GIN read the
destination's own row, GAT needs it for the attention). A *batch* is one
chunk per partition, run concurrently on the m devices.

Everything here is plain numpy on the relabelled id space, so the mode, the
plan's cost model and the tests share one definition of the transfer
volumes (rows; multiply by width × bytes per layer and direction):

* V_ori = Σ_t Σ_i |N_i,t|                 (no deduplication)
* V_p2p = Σ_t |U_t|, U_t = ∪_i N_i,t        (each row loaded once per batch)
* V_ru  = |U_0| + Σ_{t≥1} |U_t \\ U_{t−1}|   (and kept on the device between batches)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np

from gnntrain.idsets import union_ids
from gnntrain.partition.layout import split_chunks


@dataclass(frozen=True)
class ChunkLayout:
    """Chunk ``c = i·n + j`` owns relabelled rows ``offsets[c]:offsets[c+1]``."""

    num_parts: int  # m
    chunks_per_part: int  # n
    part_offsets: np.ndarray  # (m + 1,)
    offsets: np.ndarray  # (m·n + 1,)
    neighbours: List[np.ndarray]  # N_c, sorted unique relabelled ids, V_c included
    edge_bounds: np.ndarray  # (m·n + 1,) slices of the dst-sorted edge list per chunk

    def chunk(self, part: int, j: int) -> int:
        return part * self.chunks_per_part + j

    def rows(self, c: int) -> tuple:
        return int(self.offsets[c]), int(self.offsets[c + 1])


def chunk_layout(
    src_new: np.ndarray, dst_new: np.ndarray, part_offsets: np.ndarray, n: int
) -> ChunkLayout:
    """Split each part into ``n`` chunks of balanced in-edges; ``src_new``/``dst_new``
    must be sorted by destination (the mode's edge order)."""
    offsets = split_chunks(part_offsets, dst_new, n)
    bounds = np.searchsorted(dst_new, offsets, side="left")
    neighbours = [
        union_ids(src_new[bounds[c] : bounds[c + 1]], np.arange(offsets[c], offsets[c + 1]))
        for c in range(offsets.size - 1)
    ]
    return ChunkLayout(
        num_parts=part_offsets.size - 1,
        chunks_per_part=n,
        part_offsets=part_offsets,
        offsets=offsets,
        neighbours=neighbours,
        edge_bounds=bounds,
    )


def identity_batches(m: int, n: int) -> np.ndarray:
    """``batches[t, i]`` = the chunk index j of partition i run at position t: batch j = {G_0j …
    G_(m−1)j}."""
    return np.tile(np.arange(n, dtype=np.int64)[:, None], (1, m))


def batch_unions(layout: ChunkLayout, batches: np.ndarray) -> List[np.ndarray]:
    """U_t for each position t."""
    return [
        union_ids(*(layout.neighbours[layout.chunk(i, int(j))] for i, j in enumerate(row)))
        for row in batches
    ]


def reorganize(layout: ChunkLayout) -> np.ndarray:
    """Greedy chunk-to-batch assignment and batch order (HongTu Algorithm 4).

    Phase 1 seeds batch j with G_0j; then for each partition i ≥ 1 and each
    batch j it picks the unassigned chunk of partition i with the largest
    overlap |N_ik ∩ U_j|. Phase 2 orders the batches as a nearest-neighbour
    tour by the largest overlap |U_k ∩ U_prev| (the paper's rule) or by the
    fewest new rows |U_k \\ U_prev| (which differs when batch sizes do), from
    every start; the order loading the fewest rows (V_ru) is kept, phase 1's
    own order among the candidates, so reorganizing never loads more than the
    assignment it starts from. Ties go to the lowest index.
    """
    m, n = layout.num_parts, layout.chunks_per_part
    num_nodes = int(layout.offsets[-1])
    assign = np.zeros((n, m), dtype=np.int64)
    assign[:, 0] = np.arange(n)
    union = np.zeros((n, num_nodes), dtype=bool)
    for j in range(n):
        union[j, layout.neighbours[layout.chunk(0, j)]] = True
    for i in range(1, m):
        free = list(range(n))
        for j in range(n):
            overlaps = [int(union[j, layout.neighbours[layout.chunk(i, k)]].sum()) for k in free]
            k = free.pop(int(np.argmax(overlaps)))
            assign[j, i] = k
            union[j, layout.neighbours[layout.chunk(i, k)]] = True
    sizes = union.sum(axis=1)
    overlap = np.array([[int((union[a] & union[b]).sum()) for b in range(n)] for a in range(n)])

    def loaded(order: List[int]) -> int:  # V_ru of this batch order
        return int(
            sizes[order[0]] + sum(sizes[k] - overlap[a, k] for a, k in zip(order[:-1], order[1:]))
        )

    candidates = [list(range(n))]  # phase 1's batches in their own order
    for first in range(n):
        for score in (
            lambda prev, k: overlap[prev, k],
            lambda prev, k: overlap[prev, k] - sizes[k],
        ):
            order, left = [first], [k for k in range(n) if k != first]
            while left:
                order.append(left.pop(int(np.argmax([score(order[-1], k) for k in left]))))
            candidates.append(order)
    order = min(candidates, key=loaded)
    return assign[order]


def transfer_volumes(layout: ChunkLayout, batches: np.ndarray) -> Dict[str, int]:
    """Rows per layer and direction for each deduplication setting, in the order ``batches``.

    ``ori``, ``p2p``, ``ru`` are the paper's V_ori, V_p2p, V_ru; ``reuse`` is
    intra-device reuse alone (Σ_i |N_i,0| + Σ_t |N_i,t \\ N_i,t−1|); ``peer_p2p`` and
    ``peer_p2p_reuse`` are the rows actually moved device to device (Σ_i |N_i,t \\ own_i|,
    less what stays on the device), which the paper approximates by V_ori − V_p2p.
    """
    m = layout.num_parts
    unions = batch_unions(layout, batches)
    need = [[layout.neighbours[layout.chunk(i, int(row[i]))] for i in range(m)] for row in batches]

    def foreign(rows: np.ndarray, i: int) -> np.ndarray:
        lo, hi = layout.part_offsets[i], layout.part_offsets[i + 1]
        return rows[(rows < lo) | (rows >= hi)]

    out = {"ori": 0, "p2p": 0, "ru": 0, "reuse": 0, "peer_p2p": 0, "peer_p2p_reuse": 0}
    for t, row_sets in enumerate(need):
        out["ori"] += sum(s.size for s in row_sets)
        out["p2p"] += unions[t].size
        out["ru"] += (
            np.setdiff1d(unions[t], unions[t - 1], assume_unique=True).size if t else unions[t].size
        )
        for i, rows in enumerate(row_sets):
            prev = need[t - 1][i] if t else np.empty(0, dtype=np.int64)
            out["reuse"] += np.setdiff1d(rows, prev, assume_unique=True).size
            out["peer_p2p"] += foreign(rows, i).size
            out["peer_p2p_reuse"] += np.setdiff1d(foreign(rows, i), prev, assume_unique=True).size
    return out
