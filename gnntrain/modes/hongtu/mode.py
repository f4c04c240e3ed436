"""``mode=hongtu``: planning, layout choice, prepare and train (the Mode protocol)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.errors import PlanError
from gnntrain.models.registry import ModelFamily, model_family
from gnntrain.modes.base import CommEstimate, ModePlanner, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.hongtu.chunking import choose_layout, graph_figures, layout_figures, rank_edges
from gnntrain.modes.hongtu.config import DEDUP, parse_bytes
from gnntrain.modes.hongtu.cost import batch_bytes
from gnntrain.modes.hongtu.payload import HongTuPayload
from gnntrain.modes.hongtu.strategy import HongTuStrategy
from gnntrain.modes.hongtu.tiers import DISK, assign_tiers, check_free_space, disk_bytes_needed
from gnntrain.modes.row_edges import row_edges
from gnntrain.modes.saved_tier import disk_tier_folder
from gnntrain.modes.spec import Capabilities, Layout
from gnntrain.partition.chunks import ChunkLayout
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import estimate_memory, format_bytes, host_memory_bytes


class HongTuPlanner(ModePlanner):
    @property
    def dedup(self) -> str:
        return str(self.options.dedup)

    def streams_parts(self, data) -> bool:
        """From an ingested graph's CSR: the chunk layout a chunk at a time, each rank's in-edges
        from its rows (:mod:`gnntrain.modes.hongtu.chunking`)."""
        return row_edges(data, self.settings) is not None

    @property
    def family(self) -> ModelFamily:
        """The configured model's family: what HongTu caches and recomputes depends on it."""
        return model_family(self.settings.model.name, self.settings.model.target)

    def host_budget(self, ctx=None) -> Optional[int]:
        """mode.host_budget in bytes. Unset, at plan time (``ctx``): what the profile's host memory
        leaves a rank after everything but its vertex tables, or None where everything fits (no disk
        tier). The plan writes the value it resolved into its config (:meth:`resolved_options`)."""
        if self.options.host_budget not in (None, ""):
            return parse_bytes(self.options.host_budget, "mode.host_budget")
        if ctx is None:
            return None
        host = host_memory_bytes(self.settings.hardware) // max(
            1, int(self.settings.hardware.ranks_per_node)
        )
        everything = self._memory(ctx, None).total_bytes
        if everything <= host:
            return None
        every_table = self.planned_tiers(ctx, 0)[1]  # a budget of 0: every table's bytes on disk
        return max(0, host - (everything - every_table))

    def resolved_options(self, ctx) -> Dict[str, Any]:
        budget = self.host_budget(ctx)
        return (
            {}
            if budget is None or self.options.host_budget not in (None, "")
            else {"host_budget": str(budget)}
        )

    def disk_folder(self) -> Path:
        """Where the disk tier's scratch files go: mode.disk_dir, else <cache_dir>/disk-tier."""
        return disk_tier_folder(self.options, self.settings)

    def tiers(
        self, rows: int, dims: Sequence[int], dtype_bytes: int, budget: Optional[int]
    ) -> Dict[str, str]:
        return assign_tiers(rows, dims, self.family.elementwise, dtype_bytes, budget)

    def planned_tiers(self, ctx, budget: Optional[int]) -> Tuple[Dict[str, str], int]:
        """(table -> tier, file bytes) of a rank of ceil(N/m) rows, before the partition is
        known."""
        rows = -(-ctx.num_nodes // ctx.world_size)
        tiers = self.tiers(rows, ctx.dims, ctx.dtype_bytes, budget)
        return tiers, disk_bytes_needed(rows, ctx.dims, tiers, ctx.dtype_bytes)

    def device_cap(self) -> int:
        """mode.device_memory, else the hardware profile's device memory; 0 = no cap."""
        if self.options.device_memory not in (None, "", 0):
            return parse_bytes(self.options.device_memory)
        return int(float(self.settings.hardware.device_memory_gb or 0) * 2**30)

    @property
    def aggregate_first(self) -> Optional[bool]:
        return True  # a chunk aggregates its input rows, then applies the weights on the device

    def estimate_memory(self, ctx) -> MemoryEstimate:
        return self._memory(ctx, self.host_budget(ctx))

    def _memory(self, ctx, budget: Optional[int]) -> MemoryEstimate:
        """Host memory per rank: HongTu keeps every layer's activations, their gradients and the
        cached aggregates in host memory (§4.1), a full copy of each rather than autograd's working
        set, plus the device arena, which lives in host memory too on a CPU profile. Tables on the
        disk tier (mode.host_budget) leave host memory: their bytes come off the activations."""
        base = estimate_memory(ctx, self.num_parts(ctx.world_size), activation_factor=2.0)
        if budget is not None:
            on_disk = self.planned_tiers(ctx, budget)[1]
            base = dataclasses.replace(
                base, activation_bytes=max(0, base.activation_bytes - on_disk)
            )
        on_host = self.settings.device == "cpu"
        arena = self.device_cap() if on_host else 0
        # no cap: the arena holds a batch's working set (chunk_working_bytes, unchunked)
        if on_host and not arena:
            m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
            degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
            rows = ctx.num_nodes // (m * n)
            arena = batch_bytes(
                rows,
                int(rows * degree),
                self._resident_rows(ctx),
                m,
                self.family,
                ctx.dims,
                ctx.dtype_bytes,
                ctx.param_bytes,
                self.dedup,
            )
        return dataclasses.replace(base, activation_bytes=base.activation_bytes + arena)

    def validate(self, ctx) -> List[str]:
        if self.dedup not in DEDUP:
            raise PlanError(
                "mode.dedup",
                f"unknown deduplication '{self.dedup}'.",
                f"use one of {', '.join(DEDUP)}",
            )
        n = int(self.options.chunks)
        if n < 0:
            raise PlanError(
                "mode.chunks",
                f"{n} chunks per partition.",
                "use n >= 1, or 0 to pick n automatically",
            )
        self.require_rows_per_part(ctx)
        rows_per_part = ctx.num_nodes // ctx.world_size
        if n > rows_per_part:
            raise PlanError(
                "mode.chunks",
                f"{n} chunks per partition, but a partition has about {rows_per_part} "
                "rows and every chunk needs one.",
                f"use mode.chunks <= {rows_per_part}",
            )
        budget = self.host_budget(ctx)
        if budget is not None:  # the disk tier: every rank's files on this node's disk, checked now
            needed = self.planned_tiers(ctx, budget)[1]
            if needed:
                check_free_space(self.disk_folder(), needed * ctx.world_size)
        cap = self.device_cap()
        floor = 5 * ctx.param_bytes + 4 * max(ctx.dims) * ctx.dtype_bytes
        if cap and cap < floor:
            raise PlanError(
                "mode.device_memory",
                f"{format_bytes(cap)} cannot hold even the parameters and one "
                f"row of the widest layer ({format_bytes(floor)} at the least).",
                f"set mode.device_memory to at least {format_bytes(floor)}",
            )
        return []

    def _resident_rows(self, ctx) -> int:
        """In-neighbour rows of a chunk before chunking is known: chunk rows x degree, at most N."""
        m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
        degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
        return int(min(ctx.num_nodes, ctx.num_nodes / m / n * degree))

    def work(self, ctx) -> Work:
        """HongTu §4-§5 on one rank's partition of n chunks: every chunk loads its in-neighbour rows
        to the device per layer (forward) and sends their gradients back (backward), and the update
        is recomputed in backward. Rows per chunk before chunking: min(N, chunk rows x degree); p2p
        divides the host loads among the m ranks, reuse removes about what consecutive chunks share
        (1/n of them)."""
        m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
        rows = ctx.num_nodes / m
        work = local_work(ctx, rows, (ctx.num_edges + ctx.num_nodes) / m)
        degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
        loaded = n * min(ctx.num_nodes, rows / n * degree)
        if "p2p" in self.dedup:
            loaded /= m
        if "reuse" in self.dedup:
            loaded *= 1 - 1 / (n + 1)
        moved = loaded * (sum(ctx.comm_widths) + sum(ctx.grad_widths)) * ctx.dtype_bytes
        on_host = self.settings.device == "cpu"
        # rows picked from (or added into) the host copies
        work.gathered_elements += moved / ctx.dtype_bytes
        if not on_host:
            work.h2d_bytes += moved
        work.gemms += [
            (rows * d_in * d_out, min(d_in, d_out))
            for d_in, d_out in zip(ctx.dims[:-1], ctx.dims[1:])
        ]
        work.layers *= 2 * n  # forward and the recomputing backward, chunk by chunk
        if (
            m > 1
            # per layer and batch: one row exchange forward, and backward the recompute's and the
            # gradients'
        ):
            layers = len(ctx.dims) - 1
            calls = 3 * layers * n - n
            work.collectives += [("alltoall", moved * (m - 1) / m / calls)] * calls
            work.collectives.append(("allreduce", ctx.param_bytes))
        return work

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        by_kind = {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        return CommEstimate(
            None,
            by_kind,
            "h2d/d2h/peer bytes follow from the chunks' sweeps: known once the "
            "graph is chunked (gnntrain plan prints them per kind)",
        )

    def details(self, ctx) -> Dict[str, Any]:
        cap = self.device_cap()
        return {
            "chunks per partition": int(self.options.chunks) or "auto (smallest n that fits)",
            "dedup": self.dedup,
            "reorganize": bool(self.options.reorganize),
            "device memory bytes": cap if cap else "no cap (accounted only)",
            "vertex tables": self._tiers(ctx),
            "recompute": (
                "whole layer (attention)"
                if not ctx.elementwise
                else "update only; aggregation cached on host"
            ),
        }

    def _tiers(self, ctx) -> Any:
        """Where the vertex tables live: host memory, or the disk tier's tables, bytes and
        folder."""
        budget = self.host_budget(ctx)
        if budget is None:
            return "host memory (they fit)"
        tiers, needed = self.planned_tiers(ctx, budget)
        return {
            "host budget bytes": budget,
            "on disk": [name for name, tier in tiers.items() if tier == DISK],
            "disk bytes per rank": needed,
            "folder": str(self.disk_folder()),
        }

    @property
    def input_kept(self) -> bool:
        """Steady epochs read the first layer's A·x kept from the first
        (train.cache_input_aggregation)."""
        return (
            bool(self.settings.train.cache_input_aggregation)
            and self.settings.model.name != "custom"
            and self.family.elementwise
        )

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        """Volumes (V_ori, V_p2p, V_ru), the cost model, bytes per epoch and the disk tier of this
        graph's chunks (:func:`~gnntrain.modes.hongtu.chunking.graph_figures`)."""
        return graph_figures(self, data, part, plan)


def prepare(
    mode: HongTuPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """Rank r: its partition's rows and in-edges, and the chunk layout every rank shares (§4-§5)."""
    builder = ShardBuilder(data, plan.world_size)
    chosen = choose_layout(mode, data, part, plan)
    layout: ChunkLayout = chosen["layout"]
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets
    figures = layout_figures(mode, chosen)
    shards = []
    for rank in range(plan.world_size) if ranks is None else ranks:
        lo, hi = int(offsets[rank]), int(offsets[rank + 1])
        if chosen["edges"] is None:  # from the CSR
            edges = rank_edges(row_edges(data, mode.settings), part, rank)
        else:
            src_n, dst_n, w = chosen["edges"]
            e_lo, e_hi = (int(x) for x in torch.searchsorted(dst_n, torch.tensor([lo, hi])))
            edges = (dst_n[e_lo:e_hi], src_n[e_lo:e_hi], w[e_lo:e_hi])
        shards.append(
            builder.shard(
                rank, perm[lo:hi], edges, HongTuPayload(layout, chosen["batches"], figures)
            )
        )
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=plan.world_size,
        chunks_per_part=layout.chunks_per_part,
        reorganize_cache_hit=chosen["reorganize_cache_hit"],
        num_edges=int(layout.edge_bounds[-1]),
    )


def strategy(mode: HongTuPlanner, shard: RankShard, ctx, model, optimizer):
    return HongTuStrategy(shard, ctx, mode.settings, mode.dedup, model, optimizer)


# attention layers are recomputed whole (the engine's GAT path); one rank offloading to its device
# is HongTu's first use (§4)
CAPABILITIES = Capabilities(
    needs_elementwise=False,
    parts_from_csr=True,
    min_world_size=1,
    auto_variants=({"dedup": "p2p+reuse"}, {"dedup": "none"}),
    exact_layouts=(Layout(2, (("chunks", 3),)),),
)
