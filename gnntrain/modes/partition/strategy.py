"""``mode=partition``'s rank side: the grid's halo exchange and products, or CAGNET's broadcast
stages (:mod:`gnntrain.modes.cagnet`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gnntrain.models import SparseAdjacency
from gnntrain.modes.base import RankShard
from gnntrain.modes.cagnet import CagnetStrategy
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.halo import build_halo_plan, group_all_reduce, halo_exchange, local_source_index
from gnntrain.modes.partition.config import CAGNET, SPARSE, Grid, PartitionConfig, PartitionPayload
from gnntrain.plan_types import RunSettings

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.modes.partition.cost import PartitionPlanner


def strategy(
    mode: "PartitionPlanner", shard: RankShard, ctx, model, optimizer
) -> FullGraphStrategy:
    if mode.comm == CAGNET:
        return CagnetStrategy(shard, ctx, mode.settings, model, optimizer)
    return PartitionStrategy(shard, ctx, mode.settings, mode.options, model, optimizer)


class PartitionStrategy(FullGraphStrategy):
    """A rank of the 1D/1.5D grid: its own rows' product plus the halo rows' product, the halo
    exchanged per layer (sparse all-to-all, or the dense all-to-all of every row), 1.5D rows summed
    over the grid row."""

    def __init__(
        self,
        shard: RankShard,
        ctx,
        settings: RunSettings,
        options: PartitionConfig,
        model,
        optimizer,
    ):
        comm = self.comm = ctx.comm
        payload: PartitionPayload = shard.payload
        self.grid = grid = Grid(shard.world_size, int(payload.replication))
        offsets = payload.offsets
        i, k = grid.position(shard.rank)
        blocks = grid.group_blocks(k)
        block_rank = [grid.sender(j, k) for j in range(grid.rows)]
        dst, src, w = shard.edges
        sparse = options.comm == SPARSE
        kinds = ("halo_fwd", "halo_bwd") if sparse else ("allgather", "reduce_scatter")
        self.halo = plan = build_halo_plan(comm, src, offsets, i, blocks, block_rank, sparse, kinds)
        own_included = i in blocks
        cols = local_source_index(src, offsets, i, own_included, plan, block_rank)
        n_own = shard.features.shape[0]
        base = n_own if own_included else 0
        # two products, own rows and halo rows, rather than one over [own | halo]: the concatenated
        # copy of every received row (and of its gradient in backward) is never made
        from_own = cols < base
        self.own_adj = (
            SparseAdjacency(
                dst[from_own],
                cols[from_own],
                w[from_own],
                n_own,
                n_own,
                kernel=ctx.plan.kernel,
                device=ctx.device,
            )
            if own_included
            else None
        )
        self.halo_adj = SparseAdjacency(
            dst[~from_own],
            cols[~from_own] - base,
            w[~from_own],
            n_own,
            plan.halo_rows,
            kernel=ctx.plan.kernel,
            device=ctx.device,
        )
        # grid rows all-reduce their partial sums (1.5D); every rank creates every group
        self.row_group = None
        if grid.c > 1:
            for row in range(grid.rows):
                g = comm.new_group([row * grid.c + kk for kk in range(grid.c)])
                if row == i:
                    self.row_group = g
        plan.send_index = plan.send_index.to(ctx.device)
        super().__init__(shard, ctx, settings, model, optimizer)

    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        halo = halo_exchange(h, self.halo, self.comm)
        z = self.halo_adj.spmm(halo)
        if self.own_adj is not None:
            z = z + self.own_adj.spmm(h)
        if self.grid.c > 1:
            z = group_all_reduce(z, self.comm, self.row_group, self.grid.c, "row_allreduce")
        return z
