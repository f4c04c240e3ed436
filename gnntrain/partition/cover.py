"""Pre/post-aggregation split of the cut edges (SuperGCN paper, §2 "Subgraph construction based on a
hybrid of Pre- and Post-aggregation"; docs/design.md#supergcn).

For every (sender j, receiver i) pair the cut edges u→v (u owned by j, v by
i) form a bipartite graph B_ji. A set of rows that covers every edge of it
is enough for i to aggregate them:

* a source u in the cover is sent raw once and *post*-aggregated by i over
  all of its destinations (BNS-GCN style);
* every other edge is *pre*-aggregated by j into one partial sum per
  destination v (DistGNN style); v must then be in the cover.

``post`` takes the cover U (all sources), ``pre`` takes V (all
destinations), and ``hybrid`` takes a minimum vertex cover, which by König's
theorem has the size of a maximum matching: scipy's Hopcroft–Karp gives the
matching, and an alternating-path BFS from the unmatched sources gives the
cover ((U \\ Z) ∪ (V ∩ Z), Z = the vertices that BFS reaches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, maximum_bipartite_matching

from gnntrain.idsets import unique_ids

AGGREGATIONS = ("pre", "post", "hybrid")


def min_vertex_cover(
    u: np.ndarray, v: np.ndarray, num_u: int, num_v: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Minimum vertex cover of the bipartite graph with edges (u[k], v[k]).

    Returns boolean masks (sources in the cover [num_u], destinations in the
    cover [num_v]); their total equals the maximum matching size.
    """
    u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
    if u.size == 0:
        return np.zeros(num_u, dtype=bool), np.zeros(num_v, dtype=bool)
    biadj = sp.csr_matrix((np.ones(u.size, dtype=np.int8), (u, v)), shape=(num_u, num_v))
    biadj.sum_duplicates()
    # column matched to each row, or -1
    match_of_u = maximum_bipartite_matching(biadj, perm_type="column")
    matched_u = np.flatnonzero(match_of_u >= 0)
    # directed alternating graph on [U | V | super source]: U→V every edge, V→U the matching edges
    coo = biadj.tocoo()
    source = num_u + num_v
    free_u = np.flatnonzero(match_of_u < 0)
    rows = np.concatenate([coo.row, num_u + match_of_u[matched_u], np.full(free_u.size, source)])
    cols = np.concatenate([num_u + coo.col, matched_u, free_u])
    n = num_u + num_v + 1
    graph = sp.csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n, n))
    reached = np.zeros(n, dtype=bool)
    reached[breadth_first_order(graph, source, directed=True, return_predecessors=False)] = True
    has_edge_u = np.diff(biadj.indptr) > 0
    cover_u = has_edge_u & ~reached[:num_u]
    cover_v = reached[num_u : num_u + num_v]
    return cover_u, cover_v


@dataclass
class PairSplit:
    """How the cut edges from sender j to receiver i travel.

    Row ids are local to their owner's block. ``post_rows`` are sender rows
    sent raw; ``pre_rows`` are receiver rows that get one partial sum each;
    ``is_post_edge`` follows the pair's edges in the order given.
    """

    sender: int
    receiver: int
    post_rows: np.ndarray
    pre_rows: np.ndarray
    is_post_edge: np.ndarray  # per edge of the pair: True = post-aggregated at the receiver

    @property
    def rows(self) -> int:
        return int(self.post_rows.size + self.pre_rows.size)


def split_cut_edges(
    src: np.ndarray, dst: np.ndarray, offsets: np.ndarray, aggregation: str
) -> Tuple[Dict[Tuple[int, int], PairSplit], Dict[Tuple[int, int], np.ndarray]]:
    """Split every pair's cut edges; ``src``/``dst`` are relabelled (block-contiguous) ids.

    Returns ``(splits, edge_ids)``: per (sender, receiver), the split and the
    indices of that pair's edges into ``src``/``dst``.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    offsets = np.asarray(offsets, dtype=np.int64)
    k = offsets.size - 1
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    bs = np.searchsorted(offsets, src, side="right") - 1
    bd = np.searchsorted(offsets, dst, side="right") - 1
    cut = np.flatnonzero(bs != bd)
    pair = bs[cut] * k + bd[cut]
    order = np.argsort(pair, kind="stable")
    cut, pair = cut[order], pair[order]
    bounds = np.flatnonzero(np.diff(pair)) + 1
    splits: Dict[Tuple[int, int], PairSplit] = {}
    edge_ids: Dict[Tuple[int, int], np.ndarray] = {}
    for edges in np.split(cut, bounds) if cut.size else []:
        j, i = int(bs[edges[0]]), int(bd[edges[0]])
        u_rows, u = np.unique(src[edges] - offsets[j], return_inverse=True)  # noqa: TID251 (sorts)
        v_rows, v = np.unique(dst[edges] - offsets[i], return_inverse=True)  # noqa: TID251 (sorts)
        if aggregation == "post":
            cover_u, cover_v = np.ones(u_rows.size, bool), np.zeros(v_rows.size, bool)
        elif aggregation == "pre":
            cover_u, cover_v = np.zeros(u_rows.size, bool), np.ones(v_rows.size, bool)
        else:
            cover_u, cover_v = min_vertex_cover(u, v, u_rows.size, v_rows.size)
        is_post = cover_u[u]
        splits[(j, i)] = PairSplit(
            sender=j,
            receiver=i,
            post_rows=u_rows[cover_u],
            pre_rows=unique_ids(v_rows[v[~is_post]]),
            is_post_edge=is_post,
        )
        edge_ids[(j, i)] = edges
    return splits, edge_ids


def pair_grid(splits: Dict[Tuple[int, int], PairSplit], k: int) -> List[List[int]]:
    """Rows each sender ships each receiver (k×k, row = sender)."""
    grid = [[0] * k for _ in range(k)]
    for (j, i), s in splits.items():
        grid[j][i] = s.rows
    return grid


def rows_per_pair(
    src: np.ndarray, dst: np.ndarray, offsets: np.ndarray
) -> Dict[str, List[List[int]]]:
    """:func:`pair_grid` under pre, post and hybrid."""
    return {
        aggregation: pair_grid(split_cut_edges(src, dst, offsets, aggregation)[0], len(offsets) - 1)
        for aggregation in AGGREGATIONS
    }
