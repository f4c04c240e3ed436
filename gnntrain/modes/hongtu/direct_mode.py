"""HongTu's direct path as a spec of its own (``mode=hongtu mode.direct=true``): one CPU rank whose
SpMM reads neighbour rows where they lie (HongTu §4 without the gather; docs/design.md#hongtu, "The
direct path"). Its planner, prepare and strategy replace the gathering engine's; the options, the
vertex tables and their disk tier are HongTu's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnntrain.errors import PlanError
from gnntrain.models.registry import graph_dims
from gnntrain.modes.base import Prepared, RankShard, ShardBuilder
from gnntrain.modes.hongtu import direct_graph
from gnntrain.modes.hongtu.config import HongTuConfig
from gnntrain.modes.hongtu.mode import CAPABILITIES, HongTuPlanner
from gnntrain.modes.hongtu.payload import DirectPayload
from gnntrain.modes.hongtu.tiers import DISK
from gnntrain.modes.spec import ModeSpec
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import DTYPE_BYTES


class DirectPlanner(HongTuPlanner):
    """The direct path at plan time: one CPU rank, the graph in its own order, chunks of rows."""

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

    def figures(self, data, plan) -> Tuple[Dict[str, Any], list]:
        """(the plan's and the summary's figures: chunks, tiers, predicted disk bytes; the
        chunks)."""
        chunks = direct_graph.chunk_ranges(data.num_nodes, int(self.options.chunks))
        dims, b = graph_dims(self.settings, data), DTYPE_BYTES[plan.dtype]
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

    def details(self, ctx) -> Dict[str, Any]:
        chunks = int(self.options.chunks)
        return {
            "path": "direct: one CPU rank, neighbour rows read in place, topology sliced from "
            "the CSR",
            "chunks": chunks or "auto",
            "rows per chunk": None if chunks else direct_graph.ROWS_PER_CHUNK,
            "vertex tables": self._tiers(ctx),
            "recompute": "update only; aggregation cached",
        }

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        figures = self.figures(data, plan)[0]
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


def prepare(
    mode: DirectPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """The direct path's one rank: the graph in its own order, read in place (no edge lists)."""
    builder = ShardBuilder(data, 1)
    figures, chunks = mode.figures(data, plan)
    model = mode.settings.model
    if model.edge_weight and not data.weighted:
        from gnntrain.modes.single import user_edge_values

        user_edge_values(data, mode.settings)  # refuses the graph without weights
    graph = direct_graph.direct_graph(
        data, bool(model.self_loop), mode.family.normalization, bool(model.edge_weight)
    )
    shard = builder.shard(0, None, None, DirectPayload(graph, chunks, figures))
    return builder.prepared(
        [shard],
        partitioner="none (mode.direct: one rank, the graph's own order)",
        chunks_per_part=len(chunks),
        reorganize_cache_hit=None,
        num_edges=graph.num_edges,
    )


def strategy(mode: DirectPlanner, shard: RankShard, ctx, model, optimizer):
    from gnntrain.modes.hongtu.direct import DirectStrategy

    return DirectStrategy(shard, ctx, mode.settings, model, optimizer)


HONGTU_DIRECT = ModeSpec(
    name="hongtu",
    options=HongTuConfig,
    planner=DirectPlanner,
    prepare=prepare,
    strategy=strategy,
    capabilities=dataclasses.replace(
        CAPABILITIES,
        part_store=False,
        whole_graph_reason="the direct path's one rank reads the whole graph in place",
    ),
)
