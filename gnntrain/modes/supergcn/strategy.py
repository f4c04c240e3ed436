"""A SuperGCN rank (SuperGCN §3): post rows and pre-aggregated partial sums leave through one
(quantized) all-to-all while the local product runs; the remote product adds what arrived."""

from __future__ import annotations

import torch

from gnntrain.comm.quantize import quantizer_for
from gnntrain.metrics.clock import StageClock
from gnntrain.models import SparseAdjacency
from gnntrain.models.post_aggregation import PostAggregation
from gnntrain.modes.base import RankShard
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.halo import ExchangeSpec, start_exchange
from gnntrain.modes.supergcn.config import SuperGCNConfig
from gnntrain.plan_types import RunSettings


class SuperGCNStrategy(FullGraphStrategy):
    """A SuperGCN rank: post rows and pre-aggregated partial sums leave through one (quantized)
    all-to-all while the local product runs; the remote product adds what arrived."""

    def __init__(
        self,
        shard: RankShard,
        ctx,
        settings: RunSettings,
        options: "SuperGCNConfig",
        bits: int,
        model,
        optimizer,
    ):
        comm, info = ctx.comm, shard.payload  # a SuperGCNPayload
        n_own = shard.features.shape[0]
        send_counts, recv_counts = info.send_counts, info.recv_counts
        kernel, device = ctx.plan.kernel, ctx.device
        self.local = SparseAdjacency(*shard.edges, n_own, n_own, kernel=kernel, device=device)
        # the received rows' post-aggregation: on the CPU a sorted, clustered index_add into the
        # local product (C build; torch's index_add_ in the same order without it); on a GPU, or
        # with one value per edge (model.edge_weight: no row factor), the remote SpMM, added after
        self.post = (
            PostAggregation(*info.remote_edges, n_own, sum(recv_counts))
            if device.type == "cpu" and info.remote_edges[2].dim() == 2
            else None
        )
        self.remote = (
            None
            if self.post is not None
            else SparseAdjacency(
                *info.remote_edges, n_own, sum(recv_counts), kernel=kernel, device=device
            )
        )
        self.send = SparseAdjacency(
            info.send_slots,
            info.send_cols,
            info.send_weights,
            sum(send_counts),
            n_own,
            kernel=kernel,
            device=device,
        )
        self.clock = clock = StageClock(device)
        self.quantizer = quantizer_for(
            bits, int(settings.train.seed), comm.rank, options.param_dtype.value, clock
        )
        self.overlap = bool(options.overlap)
        self.exchange = ExchangeSpec(
            comm,
            send_counts,
            recv_counts,
            quantizer=self.quantizer,
            quantize_backward=bool(options.quantize_backward),
            overlap_backward=self.overlap,
            clock=clock,
        )
        super().__init__(shard, ctx, settings, model, optimizer)

    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        clock = self.clock
        # post rows + pre-aggregated partial sums
        outgoing = clock.through("aggregation", self.send.spmm, h)
        pending = start_exchange(outgoing, self.exchange)
        received = None if self.overlap else pending.wait()
        z = clock.through("aggregation", self.local.spmm, h)  # in flight meanwhile when overlapping
        if received is None:
            received = pending.wait()
        if self.post is not None:
            return clock.through("aggregation", lambda rows: self.post(z, rows), received)
        return z + clock.through("aggregation", self.remote.spmm, received)

    def on_epoch(self, epoch: int, training: bool) -> None:
        if self.quantizer is not None:
            self.quantizer.begin(epoch, training)
