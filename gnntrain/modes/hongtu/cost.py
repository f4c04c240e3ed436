"""``mode=hongtu``'s cost model: the planners of the gathering engine (HongTu §4-§5: host-resident
vertex tables, chunked transfers, their disk tier) and of the direct path (``mode.direct=true``),
with their checks, memory, work and bytes, and the plan's details. The transfer model of §5.3 and
the device working set per chunk are :mod:`.transfer_model`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from gnntrain.errors import PlanError
from gnntrain.models.registry import ModelFamily, graph_dims, model_family
from gnntrain.modes.base import CommEstimate, ModePlanner
from gnntrain.modes.cost import Details, Work, local_work
from gnntrain.modes.hongtu import direct_graph
from gnntrain.modes.hongtu.chunking import graph_figures
from gnntrain.modes.hongtu.config import DEDUP, parse_bytes
from gnntrain.modes.hongtu.tiers import DISK, assign_tiers, check_free_space, disk_bytes_needed
from gnntrain.modes.hongtu.transfer_model import batch_bytes
from gnntrain.modes.row_edges import row_edges
from gnntrain.modes.saved_tier import disk_tier_folder
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import DTYPE_BYTES, estimate_memory, format_bytes, host_memory_bytes


@dataclass(frozen=True)
class HongTuDetails(Details):
    chunks_per_partition: Union[int, str]
    dedup: str
    reorganize: bool
    device_memory_bytes: Union[int, str]
    # "host memory (they fit)", or the disk tier's tables, bytes and folder
    vertex_tables: Any
    recompute: str


@dataclass(frozen=True)
class DirectDetails(Details):
    path: str
    chunks: Union[int, str]
    rows_per_chunk: Optional[int]  # None where mode.chunks gives the count
    vertex_tables: Any
    recompute: str


class HongTuPlanner(ModePlanner):
    # building a part from the mapped CSR, per in-edge of the part: its rows' in-edges and the
    # chunks' deduplicated sources (104 B at 400k nodes, measured as sizing.PART_LOAD_BYTES_PER_NODE
    # says)
    PART_BUILD_BYTES_PER_EDGE = 105

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

    def memory_remedy(self, ctx) -> str:
        """The disk tier, unless every vertex table is on it already (the user's
        ``mode.host_budget=0``, or the budget the plan resolved): then the direct path."""
        if self.host_budget(ctx) == 0:
            return "use mode.direct=true on one CPU rank (neighbour rows read in place)"
        return (
            "use mode.host_budget=<bytes> to put vertex tables on the disk tier "
            "(mode.direct=true on one CPU rank)"
        )

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
        disk tier (mode.host_budget) leave host memory: their bytes come off the activations. A rank
        holds other partitions' rows only in the arena, a chunk's in-neighbours at a time (§4.2), so
        the arena counts them and the halo term of the partition-parallel modes does not."""
        base = estimate_memory(
            ctx, self.num_parts(ctx.world_size), activation_factor=2.0, receives_halo=False
        )
        if budget is not None:
            on_disk = self.planned_tiers(ctx, budget)[1]
            base = dataclasses.replace(
                base, activation_bytes=max(0, base.activation_bytes - on_disk)
            )
        on_host = self.settings.device == "cpu"
        arena = self.device_cap() if on_host else 0
        # no cap: the arena holds a batch's working set (chunk_working_bytes, unchunked)
        if on_host and not arena:
            m, n, degree = self._chunking(ctx)
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

    def _chunking(self, ctx) -> Tuple[int, int, float]:
        """(ranks m, chunks per partition n, in-edges per row with the self-loop) that the
        estimates assume before the chunks are known: mode.chunks, or 4 where it is 0 (auto)."""
        degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
        return ctx.world_size, max(1, int(self.options.chunks) or 4), degree

    def _resident_rows(self, ctx) -> int:
        """In-neighbour rows of a chunk before chunking is known: chunk rows x degree, at most N,
        and, once the partition is known (``ctx.received_rows``, its largest receive volume), at
        most a partition's own rows plus the rows it receives: a chunk's in-neighbours are among
        them."""
        m, n, degree = self._chunking(ctx)
        bound = ctx.num_nodes
        if ctx.received_rows is not None:
            bound = min(bound, -(-ctx.num_nodes // m) + int(ctx.received_rows))
        return int(min(bound, ctx.num_nodes / m / n * degree))

    def work(self, ctx) -> Work:
        """HongTu §4-§5 on one rank's partition of n chunks: every chunk loads its in-neighbour rows
        to the device per layer (forward) and sends their gradients back (backward), and the update
        is recomputed in backward. Rows per chunk before chunking: :meth:`_resident_rows`, the
        memory estimate's (chunk rows x degree, at most N and, once the partition is known, at most
        a partition's own rows plus those it receives); p2p divides the host loads among the m
        ranks, reuse removes about what consecutive chunks share (1/n of them)."""
        m, n, degree = self._chunking(ctx)
        rows = ctx.num_nodes / m
        work = local_work(ctx, rows, (ctx.num_edges + ctx.num_nodes) / m)
        loaded = n * self._resident_rows(ctx)
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

    def details(self, ctx) -> HongTuDetails:
        cap = self.device_cap()
        return HongTuDetails(
            chunks_per_partition=int(self.options.chunks) or "auto (smallest n that fits)",
            dedup=self.dedup,
            reorganize=bool(self.options.reorganize),
            device_memory_bytes=cap if cap else "no cap (accounted only)",
            vertex_tables=self._tiers(ctx),
            recompute=(
                "whole layer (attention)"
                if not ctx.elementwise
                else "update only; aggregation cached on host"
            ),
        )

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


class DirectPlanner(HongTuPlanner):
    """The direct path at plan time: one CPU rank, the graph in its own order, chunks of rows."""

    def memory_remedy(self, ctx) -> str:
        """Every table on disk is the direct path's last tier; nothing of its own is left after."""
        if self.host_budget(ctx) == 0:
            return ""
        return "use mode.host_budget=0 to put every vertex table on the disk tier"

    def _memory(self, ctx, budget: Optional[int]) -> MemoryEstimate:
        return direct_graph.direct_memory(
            ctx, self.planned_tiers(ctx, budget)[0], int(self.options.chunks)
        )

    def validate(self, ctx) -> List[str]:
        warnings = super().validate(ctx)
        from gnntrain.models._native import native_problem

        model = self.settings.model.name
        problem = (
            f"the plan has {ctx.world_size} ranks"
            if ctx.world_size != 1
            else f"device={self.settings.device}"
            if self.settings.device != "cpu"
            else f"model={model} is not a built-in elementwise aggregation"
            if model == "custom" or not self.family.elementwise
            else native_problem()
        )
        if problem:
            raise PlanError(
                "mode.direct",
                f"the direct path runs one rank on a CPU device with a built-in GCN, SAGE "
                f"or GIN and the native kernel, but {problem}.",
                "use one rank (hardware.ranks_per_node=1) on a CPU profile, or drop "
                "mode.direct=true (the gathering engine runs every other plan)",
            )
        return warnings

    def partition(self, data, plan):
        """One part in the graph's own order: no partitioner, the edges are never read."""
        return direct_graph.whole_graph_partitioning(data.num_nodes), False

    def figures(self, data) -> Tuple[Dict[str, Any], list]:
        """(the plan's and the summary's figures: chunks, tiers, predicted disk bytes; the
        chunks)."""
        chunks = direct_graph.chunk_ranges(data.num_nodes, int(self.options.chunks))
        dims, b = graph_dims(self.settings, data), DTYPE_BYTES[self.settings.dtype]
        budget = self.host_budget()
        tiers = self.tiers(data.num_nodes, dims, b, budget)
        figures = direct_graph.direct_figures(
            data.num_nodes,
            chunks,
            dims,
            tiers,
            self.family.self_row,
            b,
            budget,
            str(self.disk_folder()),
        )
        return figures, chunks

    def details(self, ctx) -> DirectDetails:
        chunks = int(self.options.chunks)
        return DirectDetails(
            path="direct: one CPU rank, neighbour rows read in place, topology sliced from the CSR",
            chunks=chunks or "auto",
            rows_per_chunk=None if chunks else direct_graph.ROWS_PER_CHUNK,
            vertex_tables=self._tiers(ctx),
            recompute="update only; aggregation cached",
        )

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        figures = self.figures(data)[0]
        report: Dict[str, Any] = {
            "path": "direct: the SpMM reads neighbour rows in place, each chunk's "
            "topology a slice of the CSR",
            "chunks": figures["chunks_per_part"],
            "rows per chunk": figures["rows_per_chunk"],
        }
        tiers = figures["tiers"]
        if tiers["disk_dir"] is not None:
            predicted = tiers["predicted_disk_bytes_per_epoch"]
            report["disk tier"] = {
                "tables": [n for n, t in tiers["tables"].items() if t == DISK],
                "folder": tiers["disk_dir"],
                "file bytes per rank": tiers["disk_bytes_per_rank"],
                "read per epoch": predicted["disk_read"],
                "written per epoch": predicted["disk_write"],
            }
        return report
