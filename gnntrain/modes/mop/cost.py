"""``mode=mop``'s cost model: MixGCN §3.1's work and all-to-all volumes, the memory of a rank that
holds the whole adjacency and a column slice of every row, the checks and the plan's details; and
the node order it trains in (identity, or Reverse Cuthill–McKee)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gnntrain.errors import PlanError
from gnntrain.modes.cost import CommEstimate, Details, Work, detail, local_work
from gnntrain.modes.mop.layout import col_splits, exchanged_elements
from gnntrain.modes.saved_tier import SavedTierPlanner
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import EDGE_BYTES, HALO_FACTOR, estimate_memory


@dataclass(frozen=True)
class MoPDetails(Details):
    adjacency: Dict[str, int] = detail("adjacency replicated per rank (not divided by m)")
    aggregation: str
    column_split_of_widths: Dict[int, List[int]]
    # MoA only (aggregation_ranks > 0): which ranks aggregate, where, and which update
    mixture_of_accelerators: Optional[Dict[str, Any]] = detail(optional=True)


class MoPPlanner(SavedTierPlanner):
    @property
    def aggregate_first(self) -> Optional[bool]:
        return True  # feature columns of each layer's input are split across ranks

    @property
    def aggregation_ranks(self) -> int:
        return int(self.options.aggregation_ranks)

    @property
    def host_ranks(self) -> Optional[int]:
        """MoA with ``aggregation_device=cpu``: the aggregation ranks on the host, the update ranks
        on the node's GPUs in turn (one node: ranks 0..a-1 then cuda:0, cuda:1, ...)."""
        a = self.aggregation_ranks
        return a if a and str(self.options.aggregation_device) == "cpu" else None

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

    def details(self, ctx) -> MoPDetails:
        edges = ctx.num_edges + ctx.num_nodes
        a = self.aggregation_ranks
        return MoPDetails(
            adjacency={"edges": edges, "bytes": edges * EDGE_BYTES},
            aggregation="element-wise only (GAT is refused)",
            column_split_of_widths={d: col_splits(d, ctx.world_size, a) for d in ctx.dims[:-1]},
            mixture_of_accelerators=(
                {
                    "aggregation ranks": list(range(a)),
                    "aggregation device": str(self.options.aggregation_device),
                    "update ranks": list(range(a, ctx.world_size)),
                }
                if a
                else None
            ),
        )

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
