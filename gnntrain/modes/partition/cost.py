"""``mode=partition``'s cost model: the grid's work, memory and bytes per comm kind, its checks and
the plan's details (Sparsity-Aware Communication for Distributed GNN Training, §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from gnntrain.errors import PlanError
from gnntrain.models.registry import exchanged_widths
from gnntrain.modes.cost import CommEstimate, Details, Work, local_work
from gnntrain.modes.partition.config import CAGNET, DENSE, DEPRECATED, SPARSE, CommKind, Grid
from gnntrain.modes.row_edges import row_edges
from gnntrain.modes.saved_tier import SavedTierPlanner
from gnntrain.plan_types import KNOWN_HALO, MemoryEstimate
from gnntrain.sizing import DTYPE_BYTES, estimate_memory, halo_rows, with_measured_halo

LAYER_ORDER = {
    None: "per layer: the narrower side is aggregated",
    True: "aggregate, then apply the weights",
    False: "apply the weights, then aggregate",
}


@dataclass(frozen=True)
class PartitionDetails(Details):
    grid: Dict[str, int]  # block rows and replicas
    comm: str
    layer_order: str
    widths_communicated: List[int]


class PartitionPlanner(SavedTierPlanner):
    # building a part from the mapped CSR, per in-edge of the part: its rows' in-edges relabelled,
    # the halo and send lists (97-100 B measured as sizing.PART_LOAD_BYTES_PER_NODE says)
    PART_BUILD_BYTES_PER_EDGE = 100

    @property
    def c(self) -> int:
        return int(self.options.replication)

    def num_parts(self, world_size: int) -> int:
        return world_size // max(1, self.c)

    def streams_parts(self, data) -> bool:
        """From an ingested graph's CSR (:mod:`gnntrain.modes.row_edges`); CAGNET's transposed
        blocks too where the graph is symmetric (a row's out-edges are then its in-edges)."""
        symmetric = bool(getattr(data, "symmetric", False))
        return (self.comm != CAGNET or symmetric) and row_edges(data, self.settings) is not None

    @property
    def aggregate_first(self) -> Optional[bool]:
        return self.options.aggregate_first

    @property
    def comm(self):
        """The comm kind this run uses, a deprecated name resolved (oblivious -> dense-alltoall)."""
        kind = CommKind(self.options.comm)
        return DEPRECATED.get(kind, kind)

    def work(self, ctx) -> Work:
        """Sparse 1D: the base row partition's halo all-to-alls (partition volume x f, §4). Dense
        all-to-all: one all-gather of every row per layer, a reduce-scatter back. CAGNET: p
        broadcasts of one block per layer and direction, each rank the root of one (priced as
        all-gathers of a block). 1.5D: the (p/c) x c grid's block rows, each rank 1/c of their
        edges, plus the row all-reduce over the c replicas."""
        if ctx.world_size == 1 or (self.comm == SPARSE and self.c == 1):
            return super().work(ctx)
        q, b = self.num_parts(ctx.world_size), ctx.dtype_bytes
        rows = ctx.num_nodes / q
        work = local_work(ctx, rows, (ctx.num_edges + ctx.num_nodes) / ctx.world_size)
        if self.comm == CAGNET:
            moved = [
                ("allgather", rows * w * b)
                for w in list(ctx.comm_widths) + list(ctx.grad_widths)
                for _ in range(q)
            ]
            work.collectives += moved + [("allreduce", ctx.param_bytes)]
            return work
        if self.comm == DENSE:
            # the all-gather and reduce-scatter run as all-to-alls sending every owned row to every
            # peer
            moved = [
                ("alltoall", (q - 1) * rows * w * b)
                for w in list(ctx.comm_widths) + list(ctx.grad_widths)
            ]
            work.copy_bytes += 2 * sum(nbytes for _, nbytes in moved)
        else:
            halo = halo_rows(ctx, int(rows), q) * b / self.c
            moved = [("alltoall", halo * w) for w in list(ctx.comm_widths) + list(ctx.grad_widths)]
            work.gathered_elements += 2 * sum(nbytes for _, nbytes in moved) / b
            moved += [
                ("allreduce", rows * w * b) for w in list(ctx.comm_widths) + list(ctx.grad_widths)
            ]
        work.collectives += moved + [("allreduce", ctx.param_bytes)]
        return work

    def estimate_memory(self, ctx) -> MemoryEstimate:
        """The dense all-to-all receives every row of each layer's input; CAGNET holds two received
        blocks at a time (the one multiplied and the next in flight), below the halo estimate's
        bound for p > 2."""
        return estimate_memory(ctx, self.num_parts(ctx.world_size), gather_all=self.comm == DENSE)

    def validate(self, ctx) -> List[str]:
        p, c = ctx.world_size, self.c
        if c < 1:
            raise PlanError(
                "mode.replication", f"replication c={c} must be at least 1.", "use c >= 1"
            )
        if p % c:
            raise PlanError(
                "mode.replication",
                f"world size p={p} is not divisible by replication c={c}.",
                "choose c dividing p (1.5D grid is (p/c) x c)",
            )
        if (p // c) % c:
            raise PlanError(
                "mode.replication",
                f"c^2={c * c} does not divide world size p={p}: each column "
                f"group must hold p/c^2 whole block columns.",
                "choose c with c^2 dividing p",
            )
        if self.comm == CAGNET and c > 1:
            raise PlanError(
                "mode.comm",
                f"comm=cagnet is CAGNET's 1D algorithm (p broadcast stages); it does not "
                f"run on the 1.5D grid (replication c={c}).",
                "use mode.replication=1 with cagnet, or comm=sparse / dense-alltoall for 1.5D",
            )
        self.require_rows_per_part(ctx)
        said = CommKind(self.options.comm)
        if said in DEPRECATED:
            return [
                f"mode.comm={said.value} is deprecated: it runs as comm={DEPRECATED[said].value} "
                "(the all-to-all of every row)"
            ]
        return []

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        widths = ctx.comm_widths
        b = ctx.dtype_bytes
        n, q, c = ctx.num_nodes, self.num_parts(ctx.world_size), self.c
        by_kind: Dict[str, int] = (
            {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        )
        # backward moves only the layers whose communicated tensor has a gradient (ctx.grad_widths)
        if c > 1:
            by_kind["row_allreduce"] = c * n * (sum(widths) + sum(ctx.grad_widths)) * b
        if self.comm == CAGNET:
            # sum_l over every layer's aggregation (its communicated width f_l) forward; backward
            # over the layers whose aggregated tensor has a gradient (ctx.grad_widths)
            by_kind.update(
                {
                    "bcast_fwd": (q - 1) * n * sum(widths) * b,
                    "bcast_bwd": (q - 1) * n * sum(ctx.grad_widths) * b,
                }
            )
            formula = (
                "bcast_fwd = (p - 1) * N * sum_l f_l * bytes (p stages, stage s: rank s's N/p rows "
                "to the "
                "p - 1 others); bcast_bwd the same over the layers with an input gradient"
            )
            return CommEstimate(
                sum(by_kind.values()), {k: v for k, v in by_kind.items() if v}, formula
            )
        if self.comm == DENSE:
            by_kind.update(
                {
                    "allgather": (q - 1) * n * sum(widths) * b,
                    "reduce_scatter": (q - 1) * n * sum(ctx.grad_widths) * b,
                }
            )
            formula = (
                "allgather = (p/c - 1) * N * sum_l f_l * bytes; reduce_scatter the same over the "
                "layers "
                "with an input gradient (both as all-to-alls of every row)"
            )
            return CommEstimate(sum(by_kind.values()), by_kind, formula)
        return CommEstimate(
            None,
            by_kind,
            "halo = f * sum_i sum_{j!=i} |NnzCols(A_ij)| * bytes per layer "
            "and direction; known after partitioning (gnntrain partition)",
        )

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        """1D sparse: the halo bytes the partition implies (Sparsity-Aware Communication for
        Distributed GNN Training, §4: METIS's total volume x f per layer and direction), exactly
        what a run measures. Backward moves only the layers whose communicated tensor has a
        gradient."""
        if self.comm != SPARSE or self.c > 1 or plan.world_size < 2:
            return None
        widths, backward = exchanged_widths(self.settings, data, self.aggregate_first)
        rows, b = int(part.metrics.total_volume), DTYPE_BYTES[plan.dtype]
        by_kind = {
            "halo_fwd": rows * sum(widths) * b,
            "halo_bwd": rows * sum(backward) * b,
            "allreduce": int(plan.comm_per_epoch["by_kind"].get("allreduce", 0)),
        }
        p = self.num_parts(plan.world_size)
        memory = with_measured_halo(
            plan.memory_per_rank,
            data.num_nodes,
            data.num_edges,
            p,
            int(part.metrics.max_recv_volume),
            plan.mode_details["widths communicated"],
            b,
            assumed_rows=plan.mode_details.get(KNOWN_HALO),
        )
        return {
            "halo rows per layer (total volume)": rows,
            "bytes per epoch": {
                **{k: v for k, v in by_kind.items() if v},
                "total": sum(by_kind.values()),
            },
            "memory per rank with this partition's halo bytes": memory.total_bytes,
        }

    def details(self, ctx) -> PartitionDetails:
        grid = Grid(ctx.world_size, self.c)
        return PartitionDetails(
            grid={"block rows": grid.rows, "replicas": grid.c},
            comm=self.comm.value,
            layer_order=LAYER_ORDER[self.options.aggregate_first],
            widths_communicated=list(ctx.comm_widths),
        )
