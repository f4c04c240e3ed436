"""``mode=partition``: 1D / 1.5D partition parallelism with sparsity-aware
halo exchange (``comm=sparse``), the dense all-to-all of every row (``comm=dense-alltoall``;
``oblivious`` is its deprecated name) and CAGNET's 1D broadcast stages (``comm=cagnet``,
:mod:`gnntrain.modes.cagnet`) (Sparsity-Aware Communication for Distributed Graph Neural Network
Training, §4.1 (1D) and §4.2 (1.5D); docs/design.md#partition).

Layout. The graph is partitioned into q = p/c parts, relabelled so part i
is the contiguous block row i. Ranks form a q×c grid, rank = i·c + k; block
row i is replicated on the c ranks of grid row i, and rank (i, k) aggregates
only from the block columns of column group k, [k·q/c, (k+1)·q/c). Partial
sums are then all-reduced within grid row i. c = 1 is plain 1D: the same
code with one column group and no row all-reduce.

Gradients. Every replica computes the update on its own copy of block i,
whose consumers differ (its column group), so summing weight gradients over
all p ranks is exact as long as the loss is counted by one replica only
(k = 0). Edge weights come from global degrees, computed before splitting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.errors import PlanError
from gnntrain.models import SparseAdjacency
from gnntrain.models.registry import exchanged_widths
from gnntrain.modes.base import CommEstimate, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cagnet import CagnetStrategy
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.halo import build_halo_plan, group_all_reduce, halo_exchange, local_source_index
from gnntrain.modes.row_edges import row_edges, transposed_rows
from gnntrain.modes.saved_tier import DiskTierConfig, SavedTierPlanner
from gnntrain.modes.single import graph_tensors
from gnntrain.modes.spec import Capabilities, Layout, ModeSpec, register_mode
from gnntrain.partition.store import store_record
from gnntrain.plan_types import KNOWN_HALO, MemoryEstimate, RunSettings
from gnntrain.sizing import DTYPE_BYTES, estimate_memory, halo_rows, with_measured_halo

LAYER_ORDER = {
    None: "per layer: the narrower side is aggregated",
    True: "aggregate, then apply the weights",
    False: "apply the weights, then aggregate",
}


# member names are what a config may say (OmegaConf matches enums by name), hence the functional
# form
CommKind = Enum(
    "CommKind",
    {
        "sparse": "sparse",
        "dense-alltoall": "dense-alltoall",
        "cagnet": "cagnet",
        "oblivious": "oblivious",
    },
    type=str,
)
CommKind.__doc__ = """How a layer's rows move: ``sparse`` (the NnzCols halo all-to-all),
``dense-alltoall`` (the same all-to-all asking for every row of each block: an all-gather forward,
a reduce-scatter backward), ``cagnet`` (CAGNET's 1D algorithm: p broadcast stages forward and
backward, overlapped with the local SpMMs) and ``oblivious``, the deprecated name of
dense-alltoall."""
SPARSE, DENSE, CAGNET, OBLIVIOUS = (
    CommKind[k] for k in ("sparse", "dense-alltoall", "cagnet", "oblivious")
)
DEPRECATED = {OBLIVIOUS: DENSE}


@dataclass
class PartitionConfig(DiskTierConfig):
    name: str = "partition"
    comm: CommKind = CommKind.sparse
    replication: int = 1  # c of the 1.5D grid; 1 = 1D
    # (A·H)·W if true, A·(H·W) if false; null = per layer by width
    aggregate_first: Optional[bool] = None


Edges = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (dst, src, weight)


@store_record
@dataclass
class PartitionPayload:
    """What a rank of the grid holds beyond its rows and edges."""

    offsets: torch.Tensor  # block row i is relabelled rows [offsets[i], offsets[i+1])
    replication: int  # c of the (p/c) x c grid
    # comm=cagnet: the edges leaving this block (dst global, src local, w)
    out_edges: Optional[Edges] = None


@dataclass(frozen=True)
class Grid:
    """The (p/c)×c process grid of 1.5D partitioning; c = 1 is 1D."""

    world_size: int
    c: int

    @property
    def rows(self) -> int:
        return self.world_size // self.c

    def position(self, rank: int):
        return divmod(rank, self.c)  # (block row i, column group k)

    def group_blocks(self, k: int) -> List[int]:
        width = self.rows // self.c
        return list(range(k * width, (k + 1) * width))

    def sender(self, block: int, k: int) -> int:
        """The rank that sends block ``block`` within column group k."""
        return block * self.c + k


class PartitionPlanner(SavedTierPlanner):
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

    def details(self, ctx) -> Dict[str, Any]:
        grid = Grid(ctx.world_size, self.c)
        return {
            "grid": {"block rows": grid.rows, "replicas": grid.c},
            "comm": self.comm.value,
            "layer order": LAYER_ORDER[self.options.aggregate_first],
            "widths communicated": list(ctx.comm_widths),
        }


def prepare(
    mode: PartitionPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """Rank (i, k) of the grid: block row i's rows, its edges from the block columns of column group
    k."""
    grid = Grid(plan.world_size, mode.c)
    builder = ShardBuilder(data, plan.world_size)
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
    for rank in range(plan.world_size) if ranks is None else ranks:
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


def strategy(mode: PartitionPlanner, shard: RankShard, ctx, model, optimizer) -> FullGraphStrategy:
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
        options: "PartitionConfig",
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


PARTITION = register_mode(
    ModeSpec(
        name="partition",
        options=PartitionConfig,
        planner=PartitionPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            needs_restructurable=False,  # exchanges whatever a layer hands its aggregation
            parts_from_csr=True,
            auto_variants=(
                {"comm": "sparse"},
                {"comm": "dense-alltoall"},
                {"comm": "cagnet"},
                {"comm": "sparse", "replication": 2},
            ),
            exact_layouts=(Layout(2), Layout(4, (("replication", 2),))),
        ),
    )
)
