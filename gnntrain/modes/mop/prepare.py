"""``mode=mop``'s prepare: each rank's row block, in the bandwidth-reducing order, and its column
slice of every row (MixGCN §3.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch

from gnntrain.modes.base import Prepared, ShardBuilder
from gnntrain.modes.mop.config import MoPPayload
from gnntrain.modes.mop.layout import col_splits, row_splits, stage_count
from gnntrain.modes.row_edges import graph_tensors, row_edges

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.modes.mop.cost import MoPPlanner


def prepare(mode: "MoPPlanner", data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Rank r: its row block (in the bandwidth-reducing order) and its column slice of every row."""
    builder = ShardBuilder(data, mode.world)
    m = mode.world
    perm, bandwidth = (
        (torch.arange(data.num_nodes), None)
        if part is None
        else (torch.from_numpy(part.perm), part.bandwidth)
    )
    stages = int(mode.options.pipeline_chunks)
    if stages == 0:  # Prop. 3.5, at most the rows the smallest rank owns
        stages = min(stage_count(data.num_nodes, int(bandwidth)), data.num_nodes // m)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    streamed = row_edges(data, mode.settings)
    if streamed is None:
        src, dst, w = graph_tensors(data, mode.settings)
        src_n, dst_n = inverse[src], inverse[dst]
    else:  # every rank holds the whole adjacency: read from the CSR in the new order, held once
        dst_n, src, w = streamed.rows(perm.numpy())
        src_n = inverse[src]
    features = data.features[perm]
    a = mode.aggregation_ranks
    rows, cols = row_splits(data.num_nodes, m, a), col_splits(data.feat_dim, m, a)
    shards = []
    for rank in range(m) if ranks is None else ranks:
        lo, hi = rows[rank], rows[rank + 1]
        payload = MoPPayload(features[:, cols[rank] : cols[rank + 1]].contiguous(), stages)
        shards.append(builder.shard(rank, perm[lo:hi], (dst_n, src_n, w), payload))
    return builder.prepared(
        shards,
        num_parts=m,
        layout="feature-split aggregation / node-split update",
        bandwidth=bandwidth,
        pipeline_chunks=stages,
    )
