"""``mode=mop``: MixGCN's mixture of parallelism (MixGCN: Scalable GCN Training by Mixture of Parallelism and
Mixture of Accelerators, §3.1.2 and Algorithm 2;
docs/design.md#mop).

Per layer, every one of the m ranks holds the whole normalised Â:

1. aggregation split by feature columns, Z[:, cols_i] = Â·H[:, cols_i], with
   no communication;
2. all-to-all #1 moves Z from column-split to row-split;
3. the update runs on the rank's node rows with replicated weights;
4. all-to-all #2 moves H' back to column-split for the next layer.

The last layer's logits stay row-split and the loss is computed locally with
the global normalisation. Each all-to-all is an autograd Function whose
backward is the inverse all-to-all; parameter gradients (W and GIN's ε, both
on the update side) are partial on every rank and summed by the one flat
all-reduce. The row-split copy of each layer's input is kept for the update's
self terms (SAGE's W_self·h, GIN's (1+ε)·h) and costs no exchange, so layer 0's
column-side output has no gradient and the volume is the paper's for GIN too.

Splits are floors, cols_i = [⌊d·i/m⌋, ⌊d·(i+1)/m⌋) and likewise for rows, so
a rank may own no columns when m > d. Per layer and direction an all-to-all
moves N·d − Σ_i n_i·d_i elements, which is N·d·(m−1)/m when m divides both N
and d. ``mode.pipeline_chunks = s`` splits the rows into s chunks: chunk c's
all-to-all is in flight (async) while chunk c+1 aggregates, and in backward while
chunk c-1's update runs, still exact.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.config.schema import ModeConfig
from gnntrain.data import resolve_cache_dir
from gnntrain.errors import PlanError
from gnntrain.metrics.clock import StageClock
from gnntrain.models import GINLayer, SparseAdjacency, run_layers
from gnntrain.modes.base import CommEstimate, Mode, Prepared, RankShard, register_mode
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import SPLITS, train_full_graph
from gnntrain.modes.single import graph_tensors
from gnntrain.sizing import EDGE_BYTES, HALO_FACTOR, MemoryEstimate, estimate_memory, format_bytes


@dataclass
class MoPConfig(ModeConfig):
    name: str = "mop"
    pipeline_chunks: int = 1  # 0 = auto: Proposition 3.5's stage count from the RCM bandwidth
    # > 0: mixture of accelerators (MixGCN §3.2): the first aggregation_ranks ranks only aggregate (a feature
    # column split each), the others only update (a node row split each); 0: every rank does both (MoP)
    aggregation_ranks: int = 0


def stage_count(num_nodes: int, bandwidth: int) -> int:
    """MixGCN Proposition 3.5: with RCM bandwidth b, pipeline idleness vanishes once (n - b)/(2n) >= 1/s,
    so s = ceil(2n / (n - b)) stages; without a usable bandwidth (b >= n) there is nothing to overlap."""
    if bandwidth >= num_nodes:
        return 1
    return -(-2 * num_nodes // (num_nodes - bandwidth))


def floor_splits(total: int, parts: int) -> List[int]:
    """Boundaries ⌊total·i/parts⌋ for i = 0..parts."""
    return [total * i // parts for i in range(parts + 1)]


def row_splits(n: int, m: int, aggregation_ranks: int = 0) -> List[int]:
    """Row boundaries of the m ranks: floor splits over all of them (MoP), or over the update ranks only
    (MoA: the first ``aggregation_ranks`` ranks own no rows)."""
    a = aggregation_ranks
    return floor_splits(n, m) if a == 0 else [0] * a + floor_splits(n, m - a)


def col_splits(d: int, m: int, aggregation_ranks: int = 0) -> List[int]:
    """Column boundaries of the m ranks: floor splits over all of them (MoP), or over the aggregation
    ranks only (MoA: the update ranks own no columns)."""
    a = aggregation_ranks
    return floor_splits(d, m) if a == 0 else floor_splits(d, a) + [d] * (m - a)


def exchanged_elements(n: int, d: int, m: int, aggregation_ranks: int = 0) -> int:
    """Elements one all-to-all moves between col- and row-split (N·d − Σ n_i·d_i): with MoA's disjoint
    groups no rank keeps anything, so all N·d move."""
    rows, cols = row_splits(n, m, aggregation_ranks), col_splits(d, m, aggregation_ranks)
    return n * d - sum((rows[i + 1] - rows[i]) * (cols[i + 1] - cols[i]) for i in range(m))


class _Relayout(torch.autograd.Function):
    """Column-split ↔ row-split all-to-all; its backward is the inverse move."""

    @staticmethod
    def forward(ctx, x, layout, to_rows: bool, width: int):  # type: ignore[override]
        ctx.layout, ctx.to_rows, ctx.width = layout, to_rows, width
        if to_rows:
            return layout.cols_to_rows(x, width, "all_to_all_fwd")
        return layout.rows_to_cols(x, "all_to_all_fwd")

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.to_rows:
            return ctx.layout.rows_to_cols(grad, "all_to_all_bwd"), None, None, None
        return ctx.layout.cols_to_rows(grad, ctx.width, "all_to_all_bwd"), None, None, None


class _StartToRows(torch.autograd.Function):
    """Starts a chunk's column→row all-to-all (async) and passes its input through. In backward it
    waits for the chunk's gradient, which the finish node set travelling."""

    @staticmethod
    def forward(ctx, z_cols, layout, width: int, sizes, box: dict):  # type: ignore[override]
        ctx.layout, ctx.box = layout, box
        box["pending"] = layout.start_cols_to_rows(z_cols, width, sizes)
        return z_cols.view_as(z_cols)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        pending, shape = ctx.box.pop("grad_pending")  # the finish node handed zeros in its place
        return pending.wait().reshape(shape), None, None, None, None


class _FinishToRows(torch.autograd.Function):
    """Waits for the chunk's exchange. Backward starts the inverse (row→column) move and returns
    zeros: autograd then runs the earlier chunk's update backward (created after this chunk's start
    node) while the gradient travels, and the start node waits for it. The pipeline thus overlaps
    the exchange in backward as well; the sum is the same, so it stays exact."""

    @staticmethod
    def forward(ctx, token, layout, width: int, sizes, box: dict):  # type: ignore[override]
        ctx.layout, ctx.sizes, ctx.box, ctx.token_shape = layout, sizes, box, token.shape
        return layout.finish_cols_to_rows(box.pop("pending"), width, sizes)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        ctx.box["grad_pending"] = ctx.layout.start_rows_to_cols(grad, "all_to_all_bwd", ctx.sizes)
        return grad.new_zeros(ctx.token_shape), None, None, None, None


class MoPLayout:
    """Row and column ownership of the m ranks, and the two all-to-all moves.

    A move covers, for every rank j, ``sizes[j]`` of its rows (all of them by
    default; one pipeline chunk of them with ``mode.pipeline_chunks``).
    """

    def __init__(self, comm, num_nodes: int, aggregation_ranks: int = 0):
        self.comm, self.m, self.rank = comm, comm.world_size, comm.rank
        self.num_nodes, self.aggregation_ranks = num_nodes, aggregation_ranks
        self.rows = row_splits(num_nodes, self.m, aggregation_ranks)
        self.sizes = [self.rows[j + 1] - self.rows[j] for j in range(self.m)]
        self.n_own = self.sizes[self.rank]

    def _counts(self, d: int, sizes: Sequence[int]) -> Tuple[List[int], List[int]]:
        """Elements this rank holds per peer in row layout and in column layout."""
        cols = self.cols(d)
        me = self.rank
        row_layout = [sizes[me] * (cols[j + 1] - cols[j]) for j in range(self.m)]
        col_layout = [sizes[j] * (cols[me + 1] - cols[me]) for j in range(self.m)]
        return row_layout, col_layout

    def _assemble(self, recv: torch.Tensor, row_counts: List[int], n_rows: int, d: int) -> torch.Tensor:
        cols = self.cols(d)
        return torch.cat([part.reshape(n_rows, cols[j + 1] - cols[j])
                          for j, part in enumerate(torch.split(recv, row_counts))], dim=1)

    def cols_to_rows(self, z_cols: torch.Tensor, d: int, kind: str) -> torch.Tensor:
        """(N × d_i) column slice → (n_i × d) row block."""
        row_counts, col_counts = self._counts(d, self.sizes)
        # the rows of rank j form a contiguous block of z_cols, so the flat tensor is already in peer order
        recv = self.comm.all_to_all(z_cols.contiguous().reshape(-1), col_counts, row_counts, kind)
        return self._assemble(recv, row_counts, self.n_own, d)

    def start_cols_to_rows(self, z_cols: torch.Tensor, d: int, sizes: Sequence[int]):
        row_counts, col_counts = self._counts(d, sizes)
        return self.comm.all_to_all_start(z_cols.contiguous().reshape(-1), col_counts, row_counts,
                                          "all_to_all_fwd")

    def finish_cols_to_rows(self, pending, d: int, sizes: Sequence[int]) -> torch.Tensor:
        row_counts, _ = self._counts(d, sizes)
        return self._assemble(pending.wait(), row_counts, sizes[self.rank], d)

    def rows_to_cols(self, h_rows: torch.Tensor, kind: str, sizes: Optional[Sequence[int]] = None) -> torch.Tensor:
        """(n_i × d) row block → (Σ sizes × d_i) column slice."""
        sizes = self.sizes if sizes is None else sizes
        send, row_counts, col_counts, shape = self._row_layout(h_rows, sizes)
        return self.comm.all_to_all(send, row_counts, col_counts, kind).reshape(shape)

    def start_rows_to_cols(self, h_rows: torch.Tensor, kind: str, sizes: Sequence[int]):
        """:meth:`rows_to_cols`, asynchronous: (pending, shape); ``pending.wait().reshape(shape)``."""
        send, row_counts, col_counts, shape = self._row_layout(h_rows, sizes)
        return self.comm.all_to_all_start(send, row_counts, col_counts, kind), shape

    def _row_layout(self, h_rows: torch.Tensor, sizes: Sequence[int]):
        d = h_rows.shape[1]
        cols = self.cols(d)
        row_counts, col_counts = self._counts(d, sizes)
        send = torch.cat([h_rows[:, cols[j]:cols[j + 1]].reshape(-1) for j in range(self.m)])
        return send, row_counts, col_counts, (int(sum(sizes)), cols[self.rank + 1] - cols[self.rank])

    def cols(self, d: int) -> List[int]:
        return col_splits(d, self.m, self.aggregation_ranks)

    def to_rows(self, z_cols: torch.Tensor, d: int) -> torch.Tensor:
        return _Relayout.apply(z_cols, self, True, d)

    def to_cols(self, h_rows: torch.Tensor) -> torch.Tensor:
        return _Relayout.apply(h_rows, self, False, h_rows.shape[1])


@dataclass
class PipelineChunk:
    """Chunk c of the fine-grained pipeline: the c-th floor slice of every rank's rows."""

    rows: torch.Tensor  # global (relabelled) rows, grouped by owning rank
    sizes: List[int]  # rows of each rank in this chunk
    own: slice  # this rank's rows of the chunk, relative to its row block
    adjacency: SparseAdjacency  # Â restricted to the chunk's destination rows


def pipeline_chunks(layout: MoPLayout, s: int, dst, src, w, kernel: str, device) -> List[PipelineChunk]:
    chunks = []
    n = layout.num_nodes
    position = torch.empty(n, dtype=torch.int64)
    chunk_of = torch.empty(n, dtype=torch.int64)
    bounds = [[layout.rows[j] + b for b in floor_splits(layout.sizes[j], s)] for j in range(layout.m)]
    for c in range(s):
        rows = torch.cat([torch.arange(bounds[j][c], bounds[j][c + 1]) for j in range(layout.m)])
        position[rows] = torch.arange(rows.numel())
        chunk_of[rows] = c
    for c in range(s):
        rows = torch.cat([torch.arange(bounds[j][c], bounds[j][c + 1]) for j in range(layout.m)])
        keep = chunk_of[dst] == c
        adjacency = SparseAdjacency(position[dst[keep]], src[keep], w[keep], rows.numel(), n, kernel=kernel,
                                    device=device)
        me = layout.rank
        own = slice(bounds[me][c] - layout.rows[me], bounds[me][c + 1] - layout.rows[me])
        chunks.append(PipelineChunk(rows=rows.to(device), sizes=[bounds[j][c + 1] - bounds[j][c]
                                                                 for j in range(layout.m)],
                                    own=own, adjacency=adjacency))
    return chunks


def _order(cfg, data) -> Tuple[torch.Tensor, Optional[int]]:
    """Node order: identity, or Reverse Cuthill–McKee with ``partitioner.reorder=rcm`` (cached)."""
    if cfg.partitioner.reorder != "rcm":
        return torch.arange(data.num_nodes), None
    from omegaconf import OmegaConf

    from gnntrain.partition import partition_graph

    pcfg = OmegaConf.merge(cfg.partitioner, {"name": "range"})
    part, _ = partition_graph(data.src.numpy(), data.dst.numpy(), data.num_nodes, 1, pcfg, data.content_hash,
                              resolve_cache_dir(cfg))
    return torch.from_numpy(part.perm), part.bandwidth


@register_mode
class MoPMode(Mode):
    name = "mop"
    config_class = MoPConfig
    models_rule = ("MoP splits aggregation by feature columns, which only works for element-wise aggregation; "
                   "attention (GAT) needs whole rows.")

    @property
    def aggregate_first(self) -> Optional[bool]:
        return True  # feature columns of each layer's input are split across ranks

    @property
    def aggregation_ranks(self) -> int:
        return int(self.options.aggregation_ranks)

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
        exchanged = sum(HALO_FACTOR * ctx.num_nodes * -(-d // m) * ctx.dtype_bytes for d in ctx.dims[:-1])
        return dataclasses.replace(base, feature_bytes=base.feature_bytes + int(columns),
                                   activation_bytes=base.activation_bytes + int(exchanged))

    def validate(self, ctx) -> List[str]:
        if int(self.options.pipeline_chunks) < 0:
            raise PlanError("mode.pipeline_chunks", "must be at least 1, or 0 for Proposition 3.5's count.",
                            "use pipeline_chunks=1 (no pipelining)")
        if int(self.options.pipeline_chunks) == 0 and self.cfg.partitioner.get("reorder") != "rcm":
            raise PlanError("mode.pipeline_chunks", "0 (auto) takes the stage count from the RCM bandwidth "
                            "(MixGCN Prop. 3.5), but the nodes are not reordered.",
                            "add partitioner.reorder=rcm, or give a count")
        a = self.aggregation_ranks
        if a and not 0 < a < ctx.world_size:
            raise PlanError("mode.aggregation_ranks", f"{a} aggregation ranks of {ctx.world_size} leave no "
                            "update rank.", f"use 1 to {ctx.world_size - 1}, or 0 for MoP")
        if a and int(self.options.pipeline_chunks) != 1:
            raise PlanError("mode.pipeline_chunks", "the pipeline splits every rank's rows, and MoA's "
                            "aggregation ranks own none.", "use pipeline_chunks=1 with aggregation_ranks")
        if ctx.world_size - a > ctx.num_nodes:
            raise PlanError("world size", f"{ctx.world_size - a} ranks for {ctx.num_nodes} nodes: MoP's node split "
                            "needs every rank to own rows.", "use fewer ranks")
        if int(self.options.pipeline_chunks) > ctx.num_nodes // ctx.world_size:
            raise PlanError("mode.pipeline_chunks", f"{self.options.pipeline_chunks} chunks exceed the "
                            f"{ctx.num_nodes // ctx.world_size} rows the smallest rank owns.",
                            "use fewer pipeline chunks")
        return []

    def work(self, ctx) -> Work:
        """MixGCN §3.1: a rank aggregates every edge over 1/m of each layer's columns and updates 1/m of
        the rows; the all-to-alls move N(m-1)/m (d0 + 4 sum d) elements in all, 2L-1 calls forward and
        2(L-1) backward. MoA (aggregation_ranks) is priced as plain MoP."""
        m = ctx.world_size
        if m == 1:
            return super().work(ctx)
        work = local_work(ctx, ctx.num_nodes / m, ctx.num_edges + ctx.num_nodes, width_share=1.0 / m)
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
        by_kind = {"all_to_all_fwd": fwd, "all_to_all_bwd": bwd, "allreduce": ctx.world_size * ctx.param_bytes}
        return CommEstimate(sum(by_kind.values()), by_kind,
                            "all_to_all = N(m-1)/m (d_0 + 4 sum_{l=1}^{L-1} d_l) elements fwd+bwd with even splits; "
                            "exactly N*d - sum_i n_i*d_i per move with floor splits")

    def details(self, ctx) -> Dict[str, Any]:
        edges = ctx.num_edges + ctx.num_nodes
        replicated = f"{edges} edges, ~{format_bytes(edges * EDGE_BYTES)} (not divided by m)"
        return {"adjacency replicated per rank": replicated,
                "aggregation": "element-wise only (GAT is refused)",
                "column split of widths": {d: col_splits(d, ctx.world_size, self.aggregation_ranks)
                                           for d in ctx.dims[:-1]},
                **({"mixture of accelerators": f"ranks 0-{self.aggregation_ranks - 1} aggregate, "
                                               f"ranks {self.aggregation_ranks}-{ctx.world_size - 1} update"}
                   if self.aggregation_ranks else {})}

    # ------------------------------------------------------------- prepare
    def prepare(self, data, plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        m = plan.world_size
        perm, bandwidth = _order(self.cfg, data)
        stages = int(self.options.pipeline_chunks)
        if stages == 0:  # Prop. 3.5, at most the rows the smallest rank owns
            stages = min(stage_count(data.num_nodes, int(bandwidth)), data.num_nodes // m)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        src, dst, w = graph_tensors(data, self.cfg)
        src_n, dst_n = inverse[src], inverse[dst]
        features = data.features[perm]
        a = self.aggregation_ranks
        rows, cols = row_splits(data.num_nodes, m, a), col_splits(data.feat_dim, m, a)
        masks = {s: data.masks[s][perm] for s in SPLITS}
        counts = {s: int(masks[s].sum()) for s in SPLITS}
        shards = []
        for rank in (range(m) if ranks is None else ranks):
            lo, hi = rows[rank], rows[rank + 1]
            shards.append(RankShard(
                rank=rank, world_size=m, num_global_nodes=data.num_nodes, num_classes=data.num_classes,
                features=features[lo:hi], labels=data.labels[perm[lo:hi]],
                count_masks={s: masks[s][lo:hi] for s in SPLITS}, global_counts=counts, global_ids=perm[lo:hi],
                edges=(dst_n, src_n, w),
                info={"features_cols": features[:, cols[rank]:cols[rank + 1]].contiguous(),
                      "pipeline_chunks": stages},
            ))
        partition = {"num_parts": m, "edge_cut": 0, "total_volume": 0, "max_send_volume": 0,
                     "layout": "feature-split aggregation / node-split update", "bandwidth": bandwidth,
                     "pipeline_chunks": stages}
        return Prepared(shards=shards, partition=partition, preprocess_s=time.perf_counter() - start)

    # ---------------------------------------------------------------- train
    def train_rank(self, shard: RankShard, ctx) -> Dict[str, Any]:
        start = time.perf_counter()
        n = shard.num_global_nodes
        dst, src, w = shard.edges
        adj = SparseAdjacency(dst, src, w, n, n, kernel=ctx.plan.kernel, device=ctx.device)
        layout = MoPLayout(ctx.comm, n, self.aggregation_ranks)
        x_cols = shard.info["features_cols"].to(device=ctx.device, dtype=ctx.dtype)
        s = int(shard.info["pipeline_chunks"])
        chunks = pipeline_chunks(layout, s, dst, src, w, ctx.plan.kernel, ctx.device) if s > 1 else []
        clock = StageClock(ctx.device)  # MixGCN Fig. 8's split: aggregation, all-to-all (comm), update

        def aggregate_cols(layer, h_cols, spmm, rows=None):
            """The column side; GIN's row-local (1+ε)·h is added on the row side (update_rows)."""
            if isinstance(layer, GINLayer):
                return clock.through("aggregation", spmm, h_cols)
            return clock.through("aggregation", lambda h: layer.aggregate(h, spmm, rows=rows), h_cols)

        def update_rows(layer, h_rows, z_rows):
            def update(z):
                return layer.update(h_rows, layer.self_term(h_rows) + z if isinstance(layer, GINLayer) else z)
            return clock.through("update", update, z_rows)

        def layer_pipelined(layer, h_rows, h_cols):
            """Aggregate chunk c+1 while chunk c is exchanged; update chunk c while c+1 is exchanged."""
            width, outs, in_flight = h_rows.shape[1], [], None
            for chunk in chunks:
                box: dict = {}
                z_cols = aggregate_cols(layer, h_cols, chunk.adjacency.spmm, rows=chunk.rows)
                token = _StartToRows.apply(z_cols, layout, width, chunk.sizes, box)
                if in_flight is not None:
                    outs.append(finish(layer, h_rows, width, *in_flight))
                in_flight = (token, chunk, box)
            outs.append(finish(layer, h_rows, width, *in_flight))
            return torch.cat(outs)

        def finish(layer, h_rows, width, token, chunk, box):
            z_rows = _FinishToRows.apply(token, layout, width, chunk.sizes, box)
            return update_rows(layer, h_rows[chunk.own], z_rows)

        def layer_step(i, layer, h_rows):
            h_cols = x_cols if i == 0 else layout.to_cols(h_rows)
            if chunks:
                return layer_pipelined(layer, h_rows, h_cols)
            z_rows = layout.to_rows(aggregate_cols(layer, h_cols, adj.spmm), h_rows.shape[1])
            return update_rows(layer, h_rows, z_rows)

        def forward(model, x_rows, dropout):
            return run_layers(model, x_rows, layer_step, dropout)

        result = train_full_graph(shard, ctx, adj.spmm, aggregate_first=self.aggregate_first, forward=forward,
                                  setup_s=time.perf_counter() - start, clock=clock)
        result["mode_report"] = self._flop_balance(ctx, adj, layout, result["model"])
        return result

    @staticmethod
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

        return {"aggregation_flops_per_rank": aggs, "update_flops_per_rank": upds,
                "aggregation_balance_max_over_mean": balance(aggs), "update_balance_max_over_mean": balance(upds)}
