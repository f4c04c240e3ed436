"""``mode=partition``'s prepare: rank (i, k) of the grid holds block row i's rows and their edges
from the block columns of column group k."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch

from gnntrain.modes.base import Prepared, ShardBuilder
from gnntrain.modes.partition.config import CAGNET, Edges, Grid, PartitionPayload
from gnntrain.modes.row_edges import graph_tensors, row_edges, transposed_rows

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.modes.partition.cost import PartitionPlanner


def prepare(
    mode: "PartitionPlanner", data, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """Rank (i, k) of the grid: block row i's rows, its edges from the block columns of column group
    k."""
    grid = Grid(mode.world, mode.c)
    builder = ShardBuilder(data, mode.world)
    inverse = torch.from_numpy(part.inverse)
    perm = torch.from_numpy(part.perm)
    offsets = torch.from_numpy(part.offsets)
    # from the CSR, a part at a time
    streamed = row_edges(data, mode.settings) if mode.streams_parts(data) else None
    if streamed is None:
        src, dst, w = graph_tensors(data, mode.settings)
        src_n, dst_n = inverse[src], inverse[dst]
        order = torch.argsort(dst_n, stable=True)
        src_n, dst_n, w = src_n[order], dst_n[order], w[order]
        # out-edges, for A^T
        by_src = torch.argsort(src_n, stable=True) if mode.comm == CAGNET else None
    shards = []
    for rank in range(mode.world) if ranks is None else ranks:
        i, k = grid.position(rank)
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        blocks = grid.group_blocks(k)
        col_lo, col_hi = int(offsets[blocks[0]]), int(offsets[blocks[-1] + 1])
        if streamed is not None:
            d, s, ww = streamed.rows(part.perm[lo:hi])
            s = inverse[s]
            out = None
            if mode.comm == CAGNET:  # (dst global, src local, w) of the edges leaving the block
                to, local, w_out = transposed_rows(streamed, part.perm[lo:hi])
                out = (inverse[to], local, w_out)
        else:
            e_lo, e_hi = (int(x) for x in torch.searchsorted(dst_n, torch.tensor([lo, hi])))
            s, d, ww = src_n[e_lo:e_hi], dst_n[e_lo:e_hi] - lo, w[e_lo:e_hi]
            out = _out_edges(src_n, dst_n, w, by_src, lo, hi)
        keep = (s >= col_lo) & (s < col_hi)
        payload = PartitionPayload(offsets, grid.c, out)
        # one replica counts each row's loss and accuracy
        shards.append(
            builder.shard(rank, perm[lo:hi], (d[keep], s[keep], ww[keep]), payload, counted=k == 0)
        )
    m = part.metrics
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=grid.rows,
        send_imbalance=m.send_imbalance,
        nnz_balance=m.nnz_balance,
    )


def _out_edges(src, dst, w, by_src, lo: int, hi: int) -> Optional[Edges]:
    """CAGNET's backward multiplies by the transposed blocks: the edges leaving rows [lo, hi)
    as (dst global, src local, weight)."""
    if by_src is None:
        return None
    s_lo, s_hi = (int(x) for x in torch.searchsorted(src[by_src], torch.tensor([lo, hi])))
    sel = by_src[s_lo:s_hi]
    return dst[sel], src[sel] - lo, w[sel]
