"""``mode=mop``: MixGCN's mixture of parallelism (papers/mixgcn-mop.txt,
notes/mop.md).

Per layer, every one of the m ranks holds the whole normalised Â:

1. aggregation split by feature columns, Z[:, cols_i] = Â·H[:, cols_i], with
   no communication;
2. all-to-all #1 moves Z from column-split to row-split;
3. the update runs on the rank's node rows with replicated weights;
4. all-to-all #2 moves H' back to column-split for the next layer.

The last layer's logits stay row-split and the loss is computed locally with
the global normalisation. Each all-to-all is an autograd Function whose
backward is the inverse all-to-all; parameter gradients (W on the update
side, GIN's ε on the aggregation side) are partial on every rank and summed
by the one flat all-reduce. The row-split copy of each layer's input is kept
for the update's self term (SAGE) and costs no exchange.

Splits are floors, cols_i = [⌊d·i/m⌋, ⌊d·(i+1)/m⌋) and likewise for rows, so
a rank may own no columns when m > d. Per layer and direction an all-to-all
moves N·d − Σ_i n_i·d_i elements, which is N·d·(m−1)/m when m divides both N
and d. ``mode.pipeline_chunks = s`` splits the rows into s chunks: chunk c's
all-to-all is in flight (async) while chunk c+1 aggregates, still exact.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.config.schema import ModeConfig
from gnntrain.data import resolve_cache_dir
from gnntrain.errors import PlanError
from gnntrain.models import SparseAdjacency
from gnntrain.modes.base import CommEstimate, Mode, Prepared, RankShard, register_mode
from gnntrain.modes.fullgraph import SPLITS, train_full_graph
from gnntrain.modes.single import graph_tensors


@dataclass
class MoPConfig(ModeConfig):
    name: str = "mop"
    pipeline_chunks: int = 1


def floor_splits(total: int, parts: int) -> List[int]:
    """Boundaries ⌊total·i/parts⌋ for i = 0..parts."""
    return [total * i // parts for i in range(parts + 1)]


def exchanged_elements(n: int, d: int, m: int) -> int:
    """Elements one all-to-all moves between col- and row-split (N·d − Σ n_i·d_i)."""
    rows, cols = floor_splits(n, m), floor_splits(d, m)
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


class MoPLayout:
    """Row and column ownership of the m ranks, and the two all-to-all moves."""

    def __init__(self, comm, num_nodes: int):
        self.comm, self.m, self.rank = comm, comm.world_size, comm.rank
        self.num_nodes = num_nodes
        self.rows = floor_splits(num_nodes, self.m)
        self.n_own = self.rows[self.rank + 1] - self.rows[self.rank]

    def _counts(self, d: int) -> Tuple[List[int], List[int]]:
        """Elements this rank holds per peer in row layout and in column layout."""
        cols = floor_splits(d, self.m)
        me = self.rank
        row_layout = [self.n_own * (cols[j + 1] - cols[j]) for j in range(self.m)]
        col_layout = [(self.rows[j + 1] - self.rows[j]) * (cols[me + 1] - cols[me]) for j in range(self.m)]
        return row_layout, col_layout

    def cols_to_rows(self, z_cols: torch.Tensor, d: int, kind: str) -> torch.Tensor:
        """(N × d_i) column slice → (n_i × d) row block."""
        row_counts, col_counts = self._counts(d)
        # the rows of rank j form a contiguous block of z_cols, so the flat tensor is already in peer order
        recv = self.comm.all_to_all(z_cols.contiguous().reshape(-1), col_counts, row_counts, kind)
        parts = torch.split(recv, row_counts)
        return torch.cat([part.reshape(self.n_own, -1) for part in parts], dim=1)

    def rows_to_cols(self, h_rows: torch.Tensor, kind: str) -> torch.Tensor:
        """(n_i × d) row block → (N × d_i) column slice."""
        d = h_rows.shape[1]
        cols = floor_splits(d, self.m)
        row_counts, col_counts = self._counts(d)
        send = torch.cat([h_rows[:, cols[j]:cols[j + 1]].reshape(-1) for j in range(self.m)])
        recv = self.comm.all_to_all(send, row_counts, col_counts, kind)
        return recv.reshape(self.num_nodes, cols[self.rank + 1] - cols[self.rank])

    def to_rows(self, z_cols: torch.Tensor, d: int) -> torch.Tensor:
        return _Relayout.apply(z_cols, self, True, d)

    def to_cols(self, h_rows: torch.Tensor) -> torch.Tensor:
        return _Relayout.apply(h_rows, self, False, h_rows.shape[1])


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

    def validate(self, ctx) -> List[str]:
        if int(self.options.pipeline_chunks) < 1:
            raise PlanError("mode.pipeline_chunks", "must be at least 1.", "use pipeline_chunks=1 (no pipelining)")
        if int(self.options.pipeline_chunks) > 1:
            raise PlanError("mode.pipeline_chunks", "the fine-grained pipeline (s > 1) is not implemented yet.",
                            "use pipeline_chunks=1")
        if ctx.world_size > ctx.num_nodes:
            raise PlanError("world size", f"{ctx.world_size} ranks for {ctx.num_nodes} nodes: MoP's node split "
                            "needs every rank to own rows.", "use fewer ranks")
        return []

    def _volumes(self, ctx) -> Tuple[int, int]:
        n, m, dims = ctx.num_nodes, ctx.world_size, ctx.dims
        hidden = sum(exchanged_elements(n, d, m) for d in dims[1:-1])
        fwd = exchanged_elements(n, dims[0], m) + 2 * hidden
        bwd = 2 * hidden + (exchanged_elements(n, dims[0], m) if ctx.model == "gin" else 0)
        return fwd * ctx.dtype_bytes, bwd * ctx.dtype_bytes

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        if ctx.world_size == 1:
            return CommEstimate(0, {}, "one rank: no exchange")
        fwd, bwd = self._volumes(ctx)
        by_kind = {"all_to_all_fwd": fwd, "all_to_all_bwd": bwd, "allreduce": ctx.world_size * ctx.param_bytes}
        return CommEstimate(sum(by_kind.values()), by_kind,
                            "all_to_all = N(m-1)/m (d_0 + 4 sum_{l=1}^{L-1} d_l) elements fwd+bwd with even splits; "
                            "exactly N*d - sum_i n_i*d_i per move with floor splits (+ d_0 backward for GIN's eps)")

    def details(self, ctx) -> Dict[str, Any]:
        edges = ctx.num_edges + ctx.num_nodes
        return {"adjacency replicated per rank": f"{edges} edges, ~{edges * 24 / 2**20:.1f} MiB (not divided by m)",
                "aggregation": "element-wise only (GAT is refused)",
                "column split of widths": {d: floor_splits(d, ctx.world_size) for d in ctx.dims[:-1]}}

    # ------------------------------------------------------------- prepare
    def prepare(self, data, plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        m = plan.world_size
        perm, bandwidth = _order(self.cfg, data)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        src, dst, w = graph_tensors(data, self.cfg)
        src_n, dst_n = inverse[src], inverse[dst]
        features = data.features[perm]
        rows, cols = floor_splits(data.num_nodes, m), floor_splits(data.feat_dim, m)
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
                info={"features_cols": features[:, cols[rank]:cols[rank + 1]].contiguous()},
            ))
        partition = {"num_parts": m, "edge_cut": 0, "total_volume": 0, "max_send_volume": 0,
                     "layout": "feature-split aggregation / node-split update", "bandwidth": bandwidth}
        return Prepared(shards=shards, partition=partition, preprocess_s=time.perf_counter() - start)

    # ---------------------------------------------------------------- train
    def train_rank(self, shard: RankShard, ctx) -> Dict[str, Any]:
        start = time.perf_counter()
        n = shard.num_global_nodes
        dst, src, w = shard.edges
        adj = SparseAdjacency(dst, src, w, n, n, kernel=ctx.plan.kernel, device=ctx.device)
        layout = MoPLayout(ctx.comm, n)
        x_cols = shard.info["features_cols"].to(device=ctx.device, dtype=ctx.dtype)

        def forward(model, x_rows, dropout):
            h_rows, h_cols = x_rows, x_cols
            for i, layer in enumerate(model.layers):
                if i > 0:
                    h_rows = torch.relu(h_rows)
                    if dropout is not None and model.training:
                        h_rows = dropout(h_rows, i)
                    h_cols = layout.to_cols(h_rows)
                z_rows = layout.to_rows(layer.aggregate(h_cols, adj.spmm), h_rows.shape[1])
                h_rows = layer.update(h_rows, z_rows)
            return h_rows

        result = train_full_graph(shard, ctx, adj.spmm, aggregate_first=True, forward=forward,
                                  setup_s=time.perf_counter() - start)
        result["mode_report"] = self._flop_balance(ctx, adj, layout, result["model"])
        return result

    @staticmethod
    def _flop_balance(ctx, adj, layout, model) -> Dict[str, Any]:
        """Per-rank aggregation and update FLOPs (max/mean over ranks)."""
        dims = model.spec.dims
        agg, upd = 0.0, 0.0
        for layer, (d_in, d_out) in zip(model.layers, zip(dims[:-1], dims[1:])):
            cols = floor_splits(d_in, layout.m)
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
