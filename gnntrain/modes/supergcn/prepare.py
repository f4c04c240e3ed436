"""SuperGCN's ranks on a partitioned graph (SuperGCN §3.2): each rank's rows and local edges, the
rows it sends (post rows, and pre-aggregated sums over its own rows) and the edges of what it
receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from gnntrain.models import source_scale
from gnntrain.modes.base import Prepared, ShardBuilder
from gnntrain.modes.row_edges import RowEdges, graph_tensors, row_edges
from gnntrain.modes.supergcn.config import SuperGCNPayload, label_propagation_rows
from gnntrain.partition.cover import pair_grid, split_cut_edges


def prepare(mode, data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Rank r: its block of rows, the local edges, and both sides of its halo exchange (§3.2);
    ``mode`` is the :class:`~gnntrain.modes.supergcn.cost.SuperGCNPlanner`.

    From the whole graph's edge lists, every pair's split is made once. From an ingested graph's
    CSR (:meth:`SuperGCNPlanner.streams_parts`), each rank reads only the edges that touch it: its
    rows' in-edges (the pairs it receives) and, block by block, the other rows' in-edges from its
    own rows (the pairs it sends). A pair's split depends on its set of edges alone
    (:func:`~gnntrain.partition.cover.split_cut_edges`), so sender and receiver agree without the
    rest of the graph."""
    p = mode.world
    inverse = torch.from_numpy(part.inverse)
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets.astype(np.int64)
    aggregation = mode.options.aggregation.value
    streamed = row_edges(data, mode.settings) if mode.streams_parts(data) else None
    if streamed is None:
        src, dst, w = graph_tensors(data, mode.settings)
        whole = _split((inverse[src], inverse[dst], w), data.num_nodes, offsets, aggregation)

    masks = dict(data.masks)
    rate = float(mode.options.label_propagation)
    label_rows = (
        label_propagation_rows(masks["train"], rate, int(mode.settings.train.seed))
        if rate > 0
        else None
    )
    if label_rows is not None:
        masks["train"] = masks["train"] & ~label_rows
    builder = ShardBuilder(data, p, masks)
    shards = []
    for rank in range(p) if ranks is None else ranks:
        edges = whole if streamed is None else _rank_split(streamed, part, rank, aggregation)
        lo, hi = int(offsets[rank]), int(offsets[rank + 1])
        rows = perm[lo:hi]
        receive = _receiver_edges(rank, offsets, edges)
        send = _sender_matrix(rank, offsets, edges)
        payload = SuperGCNPayload(receive["counts"], receive["remote"], **send)
        shards.append(
            builder.shard(
                rank,
                rows,
                receive["local"],
                payload,
                label_input_mask=label_rows[rows] if label_rows is not None else None,
            )
        )
    grid = (
        pair_grid(whole.splits, p)
        if streamed is None
        else _streamed_grid(streamed, part, aggregation)
    )
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=p,
        aggregation=aggregation,
        halo_rows=int(np.sum(grid)),
        rows_per_pair=grid,
        label_propagation_nodes=int(label_rows.sum()) if label_rows is not None else 0,
    )


@dataclass
class _SplitEdges:
    """Edges (relabelled, block-contiguous IDs) with every pair's split among them, and the
    per-node weight factors the rows that travel carry (senders scale, receivers add the dst
    factor). With one value per edge (``model.edge_weight``: the weights do not factor) the scales
    are None: a post row travels as it is and its receiver weighs each of its edges, and a pre
    row's partial sum carries its edges' whole values."""

    src_n: torch.Tensor
    dst_n: torch.Tensor
    w: torch.Tensor
    splits: Dict[Tuple[int, int], Any]
    pair_edges: Dict[Tuple[int, int], np.ndarray]
    block_src: np.ndarray
    block_dst: np.ndarray
    src_scale: Optional[torch.Tensor]
    dst_scale: Optional[torch.Tensor]

    @property
    def per_edge(self) -> bool:
        """Whether each edge carries one value (weights that do not factor)."""
        return self.w.dim() == 1


def _split(edges, num_nodes: int, offsets: np.ndarray, aggregation: str) -> _SplitEdges:
    src_n, dst_n, w = edges
    splits, pair_edges = split_cut_edges(src_n.numpy(), dst_n.numpy(), offsets, aggregation)
    per_edge = w.dim() == 1  # weights that do not factor have no row scales
    return _SplitEdges(
        src_n,
        dst_n,
        w,
        splits,
        pair_edges,
        np.searchsorted(offsets, src_n.numpy(), side="right") - 1,
        np.searchsorted(offsets, dst_n.numpy(), side="right") - 1,
        None if per_edge else source_scale(w, src_n, num_nodes),
        None if per_edge else torch.zeros(num_nodes, dtype=w.dtype).index_put_((dst_n,), w[:, 1]),
    )


def _block_in_edges(streamed: RowEdges, part, block: int):
    """(src, dst, weight factors) of block ``block``'s rows' in-edges, in relabelled IDs."""
    lo, hi = int(part.offsets[block]), int(part.offsets[block + 1])
    d, s, w = streamed.rows(part.perm[lo:hi])
    return torch.from_numpy(part.inverse)[s], d + lo, w


def _rank_split(streamed: RowEdges, part, rank: int, aggregation: str) -> _SplitEdges:
    """The edges that touch ``rank``: its rows' in-edges, and every other block's in-edges whose
    source is one of its rows, split pair by pair as the whole graph's would be."""
    lo, hi = int(part.offsets[rank]), int(part.offsets[rank + 1])
    pieces = [_block_in_edges(streamed, part, rank)]
    for block in range(len(part.offsets) - 1):
        if block != rank:
            s, d, w = _block_in_edges(streamed, part, block)
            mine = (s >= lo) & (s < hi)
            pieces.append((s[mine], d[mine], w[mine]))
    edges = tuple(torch.cat([piece[i] for piece in pieces]) for i in range(3))
    return _split(edges, streamed.num_nodes, part.offsets.astype(np.int64), aggregation)


# the rows per (sender, receiver) of a partitioned ingested graph, made once per process
_GRIDS: Dict[Tuple[int, int, str], List[List[int]]] = {}


def _streamed_grid(streamed: RowEdges, part, aggregation: str) -> List[List[int]]:
    """:func:`~gnntrain.partition.cover.pair_grid` from the CSR, one receiving block at a time."""
    key = (id(streamed), id(part), aggregation)
    if key not in _GRIDS:
        offsets = part.offsets.astype(np.int64)
        grid = [[0] * (len(offsets) - 1) for _ in range(len(offsets) - 1)]
        for block in range(len(offsets) - 1):
            s, d, _ = _block_in_edges(streamed, part, block)
            for (j, i), split in split_cut_edges(s.numpy(), d.numpy(), offsets, aggregation)[
                0
            ].items():
                grid[j][i] = split.rows
        _GRIDS.clear()  # one graph at a time
        _GRIDS[key] = grid
    return _GRIDS[key]


def _receiver_edges(rank, offsets, split_edges: _SplitEdges) -> Dict[str, Any]:
    """Local edges (own rows → own rows), and edges from the rows received (by sender) → own rows.

    Weights stay factored (models/norm.py): senders apply the source factor, so every
    received column has factor 1 and every own row its destination factor."""
    e = split_edges
    splits, pair_edges, src_n, dst_n, w, dst_scale = (
        e.splits,
        e.pair_edges,
        e.src_n,
        e.dst_n,
        e.w,
        e.dst_scale,
    )
    lo = int(offsets[rank])
    local = torch.from_numpy(np.flatnonzero((e.block_dst == rank) & (e.block_src == rank)))
    dsts, cols, weights = [], [], []
    counts = [0] * (len(offsets) - 1)
    base = 0
    for j in range(len(offsets) - 1):
        split = splits.get((j, rank))
        if split is None:
            continue
        pair = torch.from_numpy(pair_edges[(j, rank)])
        post = torch.from_numpy(split.is_post_edge)
        post_rows, pre_rows = torch.from_numpy(split.post_rows), torch.from_numpy(split.pre_rows)
        pe = pair[post]  # source rows (sent src-scaled), aggregated here with their dst factor
        dsts.append(dst_n[pe] - lo)
        cols.append(base + torch.searchsorted(post_rows, src_n[pe] - int(offsets[j])))
        # one partial sum Σ src_scale[u]·h[u] per pre row, added with the row's dst factor
        dsts.append(pre_rows)
        cols.append(base + post_rows.numel() + torch.arange(pre_rows.numel()))
        if e.per_edge:  # post rows arrive as they are: each edge's whole value; pre sums: 1
            weights += [w[pe], torch.ones(pre_rows.numel(), dtype=w.dtype)]
        else:
            weights.append(torch.stack([torch.ones(pe.numel(), dtype=w.dtype), w[pe, 1]], dim=1))
            weights.append(
                torch.stack(
                    [torch.ones(pre_rows.numel(), dtype=w.dtype), dst_scale[pre_rows + lo]], dim=1
                )
            )
        counts[j] = split.rows
        base += split.rows
    empty = torch.zeros(0, dtype=torch.int64)
    remote = (
        (torch.cat(dsts), torch.cat(cols), torch.cat(weights))
        if dsts
        else (empty, empty, torch.zeros((0,) if e.per_edge else (0, 2), dtype=w.dtype))
    )
    return {
        "local": (dst_n[local] - lo, src_n[local] - lo, w[local]),
        "remote": remote,
        "counts": counts,
    }


def _sender_matrix(rank, offsets, split_edges: _SplitEdges) -> Dict[str, Any]:
    """S_rank: outgoing rows (grouped by receiver, post rows then pre sums) from own rows, each
    own row scaled by its source factor (the receiver applies the destination factor)."""
    e = split_edges
    splits, pair_edges, src_n, dst_n, w, src_scale = (
        e.splits,
        e.pair_edges,
        e.src_n,
        e.dst_n,
        e.w,
        e.src_scale,
    )
    slots, cols, weights = [], [], []
    counts = [0] * (len(offsets) - 1)
    base = 0
    lo = int(offsets[rank])
    for i in range(len(offsets) - 1):
        split = splits.get((rank, i))
        if split is None:
            continue
        post_rows, pre_rows = torch.from_numpy(split.post_rows), torch.from_numpy(split.pre_rows)
        slots.append(base + torch.arange(post_rows.numel()))
        cols.append(post_rows)
        pre = torch.from_numpy(pair_edges[(rank, i)])[~torch.from_numpy(split.is_post_edge)]
        slots.append(
            base + post_rows.numel() + torch.searchsorted(pre_rows, dst_n[pre] - int(offsets[i]))
        )
        cols.append(src_n[pre] - lo)
        if e.per_edge:  # post rows sent as they are; a pre sum weighs each edge by its value
            weights += [torch.ones(post_rows.numel(), dtype=w.dtype), w[pre]]
        else:
            weights.append(
                torch.stack(
                    [src_scale[post_rows + lo], torch.ones(post_rows.numel(), dtype=w.dtype)], dim=1
                )
            )
            weights.append(torch.stack([w[pre, 0], torch.ones(pre.numel(), dtype=w.dtype)], dim=1))
        counts[i] = split.rows
        base += split.rows
    empty = torch.zeros(0, dtype=torch.int64)
    return {
        "send_slots": torch.cat(slots) if slots else empty,
        "send_cols": torch.cat(cols) if cols else empty,
        "send_weights": torch.cat(weights)
        if weights
        else torch.zeros((0,) if e.per_edge else (0, 2), dtype=w.dtype),
        "send_counts": counts,
    }
