"""The ``mode=mop`` Mode: options, plan checks, cost model, prepare and the per-rank layer loop."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.errors import PlanError
from gnntrain.metrics.clock import StageClock
from gnntrain.models import SparseAdjacency, hidden_activation, run_layers
from gnntrain.modes.base import CommEstimate, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import FullGraphStrategy, InputAggregate
from gnntrain.modes.mop.layout import (
    MoPLayout,
    col_splits,
    exchanged_elements,
    row_splits,
    stage_count,
)
from gnntrain.modes.mop.pipeline import (
    _FinishToCols,
    _FinishToRows,
    _StartToCols,
    _StartToRows,
    pipeline_chunks,
)
from gnntrain.modes.row_edges import row_edges
from gnntrain.modes.saved_tier import DiskTierConfig, SavedTierPlanner
from gnntrain.modes.single import graph_tensors
from gnntrain.modes.spec import Capabilities, Layout, ModeSpec, register_mode
from gnntrain.partition.store import store_record
from gnntrain.plan_types import MemoryEstimate, RunSettings
from gnntrain.sizing import EDGE_BYTES, HALO_FACTOR, estimate_memory


@dataclass
class MoPConfig(DiskTierConfig):
    name: str = "mop"
    pipeline_chunks: int = 1  # 0 = auto: Proposition 3.5's stage count from the RCM bandwidth
    # > 0: mixture of accelerators (MixGCN §3.2): the first aggregation_ranks ranks only aggregate
    # (a feature column split each), the others only update (a node row split each); 0: every rank
    # does both (MoP)
    aggregation_ranks: int = 0
    # where MoA's aggregation ranks run: "same" (the profile's device) or "cpu" (CPU aggregation
    # beside GPU update ranks, MixGCN §3.2's mixture with the host standing in for its dedicated
    # aggregation accelerator)
    aggregation_device: str = "same"


@store_record
@dataclass
class MoPPayload:
    """What a MoP rank holds beyond its row block and the whole adjacency."""

    # its column slice of every row's input features (the aggregation side)
    feature_columns: torch.Tensor
    pipeline_chunks: int  # fine-grained pipeline stages (§3.1.3); 1 = none


class MoPPlanner(SavedTierPlanner):
    @property
    def aggregate_first(self) -> Optional[bool]:
        return True  # feature columns of each layer's input are split across ranks

    @property
    def aggregation_ranks(self) -> int:
        return int(self.options.aggregation_ranks)

    def rank_devices(self, device: str, world_size: int, ranks_per_node: int) -> Tuple[str, ...]:
        """MoA with ``aggregation_device=cpu`` on a CUDA profile: the aggregation ranks on the host,
        the update ranks on the node's GPUs in turn (one node: ranks 0..a-1 then cuda:0, cuda:1,
        ...)."""
        a = self.aggregation_ranks
        if not a or str(self.options.aggregation_device) != "cpu" or device != "cuda":
            return super().rank_devices(device, world_size, ranks_per_node)
        gpus = max(1, int(self.settings.hardware.gpus_per_node or 1))
        return tuple("cpu" if r < a else f"cuda:{(r - a) % gpus}" for r in range(world_size))

    def estimate_memory(self, ctx) -> MemoryEstimate:
        """Every rank holds the whole adjacency and, besides its rows' features, the column slice of
        every row's (MixGCN §3); each layer's all-to-all brings N x d/m elements of the mixed layout
        (counted like received halo rows, which MoP has no others of). Measured by the `scale` and
        `memory` bench suites: 1.08-1.14x the per-rank peak at 1M-2M nodes."""
        base = estimate_memory(ctx, ctx.world_size, replicated_graph=True, receives_halo=False)
        m = ctx.world_size
        if m == 1:
            return base
        columns = ctx.num_nodes * -(-ctx.feat_dim // m) * ctx.dtype_bytes
        exchanged = sum(
            HALO_FACTOR * ctx.num_nodes * -(-d // m) * ctx.dtype_bytes for d in ctx.dims[:-1]
        )
        return dataclasses.replace(
            base,
            feature_bytes=base.feature_bytes + int(columns),
            activation_bytes=base.activation_bytes + int(exchanged),
        )

    def validate(self, ctx) -> List[str]:
        if int(self.options.pipeline_chunks) < 0:
            raise PlanError(
                "mode.pipeline_chunks",
                "must be at least 1, or 0 for Proposition 3.5's count.",
                "use pipeline_chunks=1 (no pipelining)",
            )
        if int(self.options.pipeline_chunks) == 0 and self.settings.partitioner.reorder != "rcm":
            raise PlanError(
                "mode.pipeline_chunks",
                "0 (auto) takes the stage count from the RCM bandwidth "
                "(MixGCN Prop. 3.5), but the nodes are not reordered.",
                "add partitioner.reorder=rcm, or give a count",
            )
        a = self.aggregation_ranks
        if a and not 0 < a < ctx.world_size:
            raise PlanError(
                "mode.aggregation_ranks",
                f"{a} aggregation ranks of {ctx.world_size} leave no update rank.",
                f"use 1 to {ctx.world_size - 1}, or 0 for MoP",
            )
        where = str(self.options.aggregation_device)
        if where not in ("same", "cpu"):
            raise PlanError(
                "mode.aggregation_device",
                f"unknown device {where!r} for the aggregation ranks.",
                "use same (the profile's device) or cpu",
            )
        if where == "cpu" and not a:
            raise PlanError(
                "mode.aggregation_device",
                "cpu places MoA's aggregation ranks, but there are none (aggregation_ranks=0).",
                "set mode.aggregation_ranks, or leave aggregation_device=same",
            )
        if a and int(self.options.pipeline_chunks) != 1:
            raise PlanError(
                "mode.pipeline_chunks",
                "the pipeline splits every rank's rows, and MoA's aggregation ranks own none.",
                "use pipeline_chunks=1 with aggregation_ranks",
            )
        if ctx.world_size - a > ctx.num_nodes:
            raise PlanError(
                "world size",
                f"{ctx.world_size - a} ranks for {ctx.num_nodes} nodes: MoP's node split "
                "needs every rank to own rows.",
                "use fewer ranks",
            )
        if int(self.options.pipeline_chunks) > ctx.num_nodes // ctx.world_size:
            raise PlanError(
                "mode.pipeline_chunks",
                f"{self.options.pipeline_chunks} chunks exceed the "
                f"{ctx.num_nodes // ctx.world_size} rows the smallest rank owns.",
                "use fewer pipeline chunks",
            )
        if where == "cpu" and self.settings.device == "cpu":
            return [
                "CPU-only profile: aggregation_device=cpu changes nothing, every rank already runs "
                "on the host"
            ]
        return []

    def work(self, ctx) -> Work:
        """MixGCN §3.1: a rank aggregates every edge over 1/m of each layer's columns and updates
        1/m of the rows; the all-to-alls move N(m-1)/m (d0 + 4 sum d) elements in all, 2L-1 calls
        forward and 2(L-1) backward. MoA (aggregation_ranks) is priced as plain MoP."""
        m = ctx.world_size
        if m == 1:
            return super().work(ctx)
        work = local_work(
            ctx, ctx.num_nodes / m, ctx.num_edges + ctx.num_nodes, width_share=1.0 / m
        )
        fwd, bwd = self._volumes(ctx)
        layers = len(ctx.dims) - 1
        calls_fwd, calls_bwd = 2 * layers - 1, 2 * (layers - 1)
        work.collectives += [("alltoall", fwd / m / calls_fwd)] * calls_fwd
        work.collectives += [("alltoall", bwd / m / calls_bwd)] * calls_bwd if calls_bwd else []
        work.collectives.append(("allreduce", ctx.param_bytes))
        work.copy_bytes += 2 * (fwd + bwd) / m
        work.layers += calls_fwd + calls_bwd  # each relayout is an autograd step of its own
        return work

    def _volumes(self, ctx) -> Tuple[int, int]:
        n, m, dims, a = ctx.num_nodes, ctx.world_size, ctx.dims, self.aggregation_ranks
        hidden = sum(exchanged_elements(n, d, m, a) for d in dims[1:-1])
        fwd = exchanged_elements(n, dims[0], m, a) + 2 * hidden
        bwd = 2 * hidden
        return fwd * ctx.dtype_bytes, bwd * ctx.dtype_bytes

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        if ctx.world_size == 1:
            return CommEstimate(0, {}, "one rank: no exchange")
        fwd, bwd = self._volumes(ctx)
        by_kind = {
            "all_to_all_fwd": fwd,
            "all_to_all_bwd": bwd,
            "allreduce": ctx.world_size * ctx.param_bytes,
        }
        return CommEstimate(
            sum(by_kind.values()),
            by_kind,
            "all_to_all = N(m-1)/m (d_0 + 4 sum_{l=1}^{L-1} d_l) elements fwd+bwd with even "
            "splits; "
            "exactly N*d - sum_i n_i*d_i per move with floor splits",
        )

    def details(self, ctx) -> Dict[str, Any]:
        edges = ctx.num_edges + ctx.num_nodes
        return {
            "adjacency replicated per rank (not divided by m)": {
                "edges": edges,
                "bytes": edges * EDGE_BYTES,
            },
            "aggregation": "element-wise only (GAT is refused)",
            "column split of widths": {
                d: col_splits(d, ctx.world_size, self.aggregation_ranks) for d in ctx.dims[:-1]
            },
            **(
                {
                    "mixture of accelerators": {
                        "aggregation ranks": list(range(self.aggregation_ranks)),
                        "aggregation device": str(self.options.aggregation_device),
                        "update ranks": list(range(self.aggregation_ranks, ctx.world_size)),
                    }
                }
                if self.aggregation_ranks
                else {}
            ),
        }

    # ------------------------------------------------------------- prepare
    def partition(self, data, plan):
        """MoP partitions nothing: its node order is the identity, or Reverse Cuthill–McKee (a
        one-part range partitioning of the reordered graph, cached) with
        ``partitioner.reorder=rcm``."""
        if self.settings.partitioner.reorder != "rcm":
            return None, False
        from gnntrain.data import cache_folder
        from gnntrain.partition import partition_graph

        ordering = dataclasses.replace(self.settings.partitioner, name="range")
        return partition_graph(
            data.src.numpy(),
            data.dst.numpy(),
            data.num_nodes,
            1,
            ordering,
            data.content_hash,
            cache_folder(self.settings.cache_dir),
        )


def prepare(mode: MoPPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Rank r: its row block (in the bandwidth-reducing order) and its column slice of every row."""
    builder = ShardBuilder(data, plan.world_size)
    m = plan.world_size
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


def strategy(mode: MoPPlanner, shard: RankShard, ctx, model, optimizer) -> "MoPStrategy":
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


MOP = register_mode(
    ModeSpec(
        name="mop",
        options=MoPConfig,
        planner=MoPPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            models_rule="MoP splits aggregation by feature columns, which only works for "
            "element-wise aggregation; "
            "attention (GAT) needs whole rows.",
            exact_layouts=(Layout(2), Layout(4, (("pipeline_chunks", 3),))),
        ),
    )
)
