"""``mode=mop``'s rank side: aggregation over a feature-column split, update over a node-row split,
an all-to-all between them per layer, optionally chunked into MixGCN §3.1.3's pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

import torch

from gnntrain.metrics.clock import StageClock
from gnntrain.models import SparseAdjacency, hidden_activation, run_layers
from gnntrain.modes.base import RankShard
from gnntrain.modes.fullgraph import FullGraphStrategy, InputAggregate
from gnntrain.modes.mop.config import MoPPayload
from gnntrain.modes.mop.layout import MoPLayout
from gnntrain.modes.mop.pipeline import (
    _FinishToCols,
    _FinishToRows,
    _StartToCols,
    _StartToRows,
    pipeline_chunks,
)
from gnntrain.plan_types import RunSettings

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.modes.mop.cost import MoPPlanner


def strategy(mode: "MoPPlanner", shard: RankShard, ctx, model, optimizer) -> "MoPStrategy":
    return MoPStrategy(shard, ctx, mode.settings, mode.aggregation_ranks, model, optimizer)


def _flop_balance(ctx, adj, layout, model) -> Dict[str, Any]:
    """Per-rank aggregation and update FLOPs (max/mean over ranks)."""
    dims = model.spec.dims
    agg, upd = 0.0, 0.0
    for layer, d_in in zip(model.layers, dims[:-1]):
        cols = layout.cols(d_in)
        agg += adj.flops(cols[layout.rank + 1] - cols[layout.rank])
        upd += 2.0 * layout.n_own * sum(p.numel() for p in layer.parameters() if p.dim() == 2)
    m = layout.m
    slots = [0.0] * (2 * m)
    slots[layout.rank], slots[m + layout.rank] = agg, upd
    totals = ctx.comm.reduce_stats(slots)
    aggs, upds = totals[:m], totals[m:]

    def balance(xs):
        mean = sum(xs) / len(xs)
        return max(xs) / mean if mean else 1.0

    return {
        "aggregation_flops_per_rank": aggs,
        "update_flops_per_rank": upds,
        "aggregation_balance_max_over_mean": balance(aggs),
        "update_balance_max_over_mean": balance(upds),
    }


class MoPStrategy(FullGraphStrategy):
    """A MoP rank (MixGCN §3.1): aggregation over a feature-column split of every row, update over a
    node-row split, an all-to-all between the two layouts per layer; optionally chunked into a
    fine-grained pipeline (§3.1.3)."""

    def __init__(
        self, shard: RankShard, ctx, settings: RunSettings, aggregation_ranks: int, model, optimizer
    ):
        n = shard.num_global_nodes
        dst, src, w = shard.edges
        self.adjacency = SparseAdjacency(
            dst, src, w, n, n, kernel=ctx.plan.kernel, device=ctx.device
        )
        self.layout = MoPLayout(ctx.comm, n, aggregation_ranks)
        payload: MoPPayload = shard.payload
        self.x_cols = payload.feature_columns.to(device=ctx.device, dtype=ctx.dtype)
        s = int(payload.pipeline_chunks)
        self.chunks = (
            pipeline_chunks(self.layout, s, dst, src, w, ctx.plan.kernel, ctx.device)
            if s > 1
            else []
        )
        # MixGCN Fig. 8's split: aggregation, all-to-all (comm), update
        self.clock = StageClock(ctx.device)
        super().__init__(shard, ctx, settings, model, optimizer)
        # the first layer's aggregation of the fixed input columns, kept once computed
        # (train.cache_input_aggregation; a layer that transforms before it aggregates never hands
        # x_cols itself, so it is never kept)
        keep = settings.train.cache_input_aggregation and settings.model.name != "custom"
        self.input_spmm = {
            id(a): (InputAggregate(a, self.x_cols) if keep else a.spmm)
            for a in [self.adjacency] + [c.adjacency for c in self.chunks]
        }

    def aggregate_cols(self, layer, h_cols, spmm, rows=None):
        """The column side; a row-local term (GIN's (1+ε)·h, a layer's ``self_term``) is added on
        the row side (update_rows)."""
        if hasattr(layer, "self_term"):
            return self.clock.through("aggregation", spmm, h_cols)
        return self.clock.through(
            "aggregation", lambda h: layer.aggregate(h, spmm, rows=rows), h_cols
        )

    def update_rows(self, layer, h_rows, z_rows):
        def update(z):
            return layer.update(
                h_rows, layer.self_term(h_rows) + z if hasattr(layer, "self_term") else z
            )

        return self.clock.through("update", update, z_rows)

    def layer_step(self, i, layer, h_rows):
        h_cols = self.x_cols if i == 0 else self.layout.to_cols(h_rows)
        spmm = self.input_spmm[id(self.adjacency)] if i == 0 else self.adjacency.spmm
        z_rows = self.layout.to_rows(self.aggregate_cols(layer, h_cols, spmm), h_rows.shape[1])
        return self.update_rows(layer, h_rows, z_rows)

    def forward_pipelined(self, model, h_rows, dropout):
        """Every exchange in chunks (MixGCN §3.1.3's fine-grained pipeline): chunk c+1 aggregates
        while chunk c moves to rows; chunk c updates, is activated and starts back to columns while
        chunk c+1's update runs; the next layer starts once the last chunk has landed."""
        layout = self.layout
        h_cols, last = self.x_cols, len(model.layers) - 1
        for i, layer in enumerate(model.layers):
            width, outs, returns, in_flight = h_rows.shape[1], [], [], None
            for chunk in [*self.chunks, None]:
                if chunk is not None:
                    box: dict = {}
                    spmm = self.input_spmm[id(chunk.adjacency)] if i == 0 else chunk.adjacency.spmm
                    z_cols = self.aggregate_cols(layer, h_cols, spmm, rows=chunk.rows)
                    token = _StartToRows.apply(z_cols, layout, width, chunk.sizes, box)
                if in_flight is not None:
                    done_token, done, done_box = in_flight
                    z_rows = _FinishToRows.apply(done_token, layout, width, done.sizes, done_box)
                    out = self.update_rows(layer, h_rows[done.own], z_rows)
                    # the next layer's input, row-local: activate the chunk and send it
                    if i < last:
                        out = hidden_activation(
                            out,
                            i + 1,
                            dropout.for_rows(done.own) if dropout else None,
                            model.hidden_norm(i + 1),
                        )
                        back: dict = {}
                        out = _StartToCols.apply(out, layout, done.sizes, back)
                        returns.append((done, back))
                    outs.append(out)
                in_flight = (token, chunk, box) if chunk is not None else None
            h_rows = torch.cat(outs)
            if i < last:
                h_cols = _FinishToCols.apply(layout, h_rows.shape[1], returns, *outs)
        return h_rows

    def forward(self, model, x_rows, dropout):
        if self.chunks:
            return self.forward_pipelined(model, x_rows, dropout if model.training else None)
        return run_layers(model, x_rows, self.layer_step, dropout)

    def finish(self, result: Dict[str, Any]) -> None:
        result["mode_report"] = _flop_balance(self.ctx, self.adjacency, self.layout, self.model)
