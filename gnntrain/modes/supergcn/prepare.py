"""SuperGCN's ranks on a partitioned graph (SuperGCN §3.2): each rank's rows and local edges, the
rows it sends (post rows, and pre-aggregated sums over its own rows) and the edges of what it
receives."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

from gnntrain.models import source_scale
from gnntrain.modes.base import Prepared, ShardBuilder
from gnntrain.modes.single import graph_tensors
from gnntrain.modes.supergcn.config import SuperGCNPayload, label_propagation_rows
from gnntrain.partition.cover import pair_grid, split_cut_edges


def prepare(mode, data, plan, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Rank r: its block of rows, the local edges, and both sides of its halo exchange (§3.2);
    ``mode`` is the :class:`~gnntrain.modes.supergcn.mode.SuperGCNPlanner`."""
    p = plan.world_size
    src, dst, w = graph_tensors(data, mode.settings)
    inverse = torch.from_numpy(part.inverse)
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets.astype(np.int64)
    src_n, dst_n = inverse[src], inverse[dst]
    splits, pair_edges = split_cut_edges(
        src_n.numpy(), dst_n.numpy(), offsets, mode.options.aggregation.value
    )
    block_src = np.searchsorted(offsets, src_n.numpy(), side="right") - 1
    block_dst = np.searchsorted(offsets, dst_n.numpy(), side="right") - 1

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

    # per-node factors of the edge weights, for rows that travel (senders scale, receivers add the
    # dst factor)
    src_scale = source_scale(w, src_n, data.num_nodes)
    dst_scale = torch.zeros(data.num_nodes, dtype=w.dtype).index_put_((dst_n,), w[:, 1])
    shards = []
    for rank in range(p) if ranks is None else ranks:
        lo, hi = int(offsets[rank]), int(offsets[rank + 1])
        rows = perm[lo:hi]
        receive = _receiver_edges(
            rank, offsets, splits, pair_edges, src_n, dst_n, w, dst_scale, block_src, block_dst
        )
        send = _sender_matrix(rank, offsets, splits, pair_edges, src_n, dst_n, w, src_scale)
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
    grid = pair_grid(splits, p)
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=p,
        aggregation=mode.options.aggregation.value,
        halo_rows=int(np.sum(grid)),
        rows_per_pair=grid,
        label_propagation_nodes=int(label_rows.sum()) if label_rows is not None else 0,
    )


def _receiver_edges(
    rank, offsets, splits, pair_edges, src_n, dst_n, w, dst_scale, block_src, block_dst
) -> Dict[str, Any]:
    """Local edges (own rows → own rows), and edges from the rows received (by sender) → own rows.

    Weights stay factored (models/norm.py): senders apply the source factor, so every
    received column has factor 1 and every own row its destination factor."""
    lo = int(offsets[rank])
    local = torch.from_numpy(np.flatnonzero((block_dst == rank) & (block_src == rank)))
    dsts, cols, weights = [], [], []
    counts = [0] * (len(offsets) - 1)
    base = 0
    for j in range(len(offsets) - 1):
        split = splits.get((j, rank))
        if split is None:
            continue
        edges = torch.from_numpy(pair_edges[(j, rank)])
        post = torch.from_numpy(split.is_post_edge)
        post_rows, pre_rows = torch.from_numpy(split.post_rows), torch.from_numpy(split.pre_rows)
        pe = edges[post]  # source rows (sent src-scaled), aggregated here with their dst factor
        dsts.append(dst_n[pe] - lo)
        cols.append(base + torch.searchsorted(post_rows, src_n[pe] - int(offsets[j])))
        weights.append(torch.stack([torch.ones(pe.numel(), dtype=w.dtype), w[pe, 1]], dim=1))
        # one partial sum Σ src_scale[u]·h[u] per pre row, added with the row's dst factor
        dsts.append(pre_rows)
        cols.append(base + post_rows.numel() + torch.arange(pre_rows.numel()))
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
        else (empty, empty, torch.zeros(0, 2, dtype=w.dtype))
    )
    return {
        "local": (dst_n[local] - lo, src_n[local] - lo, w[local]),
        "remote": remote,
        "counts": counts,
    }


def _sender_matrix(rank, offsets, splits, pair_edges, src_n, dst_n, w, src_scale) -> Dict[str, Any]:
    """S_rank: outgoing rows (grouped by receiver, post rows then pre sums) from own rows, each
    own row scaled by its source factor (the receiver applies the destination factor)."""
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
        weights.append(
            torch.stack(
                [src_scale[post_rows + lo], torch.ones(post_rows.numel(), dtype=w.dtype)], dim=1
            )
        )
        pre = torch.from_numpy(pair_edges[(rank, i)])[~torch.from_numpy(split.is_post_edge)]
        slots.append(
            base + post_rows.numel() + torch.searchsorted(pre_rows, dst_n[pre] - int(offsets[i]))
        )
        cols.append(src_n[pre] - lo)
        weights.append(torch.stack([w[pre, 0], torch.ones(pre.numel(), dtype=w.dtype)], dim=1))
        counts[i] = split.rows
        base += split.rows
    empty = torch.zeros(0, dtype=torch.int64)
    return {
        "send_slots": torch.cat(slots) if slots else empty,
        "send_cols": torch.cat(cols) if cols else empty,
        "send_weights": torch.cat(weights) if weights else torch.zeros(0, 2, dtype=w.dtype),
        "send_counts": counts,
    }
