"""``mode=single``: full-graph training in one process, the reference that
every exact mode must reproduce (docs/design.md#exactness)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from gnntrain.models import SparseAdjacency, edge_weights
from gnntrain.models.registry import model_family
from gnntrain.modes.base import ModePlanner, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import FullGraphStrategy, InputAggregate
from gnntrain.modes.saved_tier import DiskTierConfig, SavedTierPlanner
from gnntrain.modes.spec import Capabilities, ModeSpec, register_mode
from gnntrain.plan_types import RunSettings


@dataclass
class SingleConfig(DiskTierConfig):
    name: str = "single"


def graph_tensors(data, settings: RunSettings):
    """Edges with the model's self-loops and their global-degree weight factors (with
    ``model.edge_weight``: one value per edge from the weighted degrees), computed in float64 and
    kept in the run's dtype (float32 halves them)."""
    model = settings.model
    src, dst = data.edges(bool(model.self_loop))
    values = user_edge_values(data, settings)
    weights = edge_weights(
        model_family(model.name, model.target).normalization, src, dst, data.num_nodes, values
    )
    return src, dst, weights.float() if settings.dtype == "float32" else weights


def user_edge_values(data, settings: RunSettings):
    """float64 weights of ``data.edges(self_loop)`` where the run aggregates with them
    (``model.edge_weight``), else None; a graph without weights is refused (the plan refuses it
    first)."""
    if not getattr(settings.model, "edge_weight", False):
        return None
    values = data.edge_values(bool(settings.model.self_loop))
    if values is None:
        from gnntrain.errors import DatasetError

        raise DatasetError(
            f"model.edge_weight=true, but the graph {data.name} has no edge weights; ingest it "
            "with --weight-column (or set model.edge_weight=false)."
        )
    return values


class SingleStrategy(FullGraphStrategy):
    """The whole graph in one process: one SpMM per layer (the first layer's of the fixed inputs
    once per run)."""

    def __init__(self, shard: RankShard, ctx, settings: RunSettings, model, optimizer):
        dst, src, w = shard.edges
        self.adjacency = SparseAdjacency(
            dst,
            src,
            w,
            shard.num_global_nodes,
            shard.num_global_nodes,
            kernel=ctx.plan.kernel,
            device=ctx.device,
        )
        del dst, src, w
        family = model_family(settings.model.name, settings.model.target)
        # layers that only call agg(h)
        builtin = settings.model.name != "custom" and family.elementwise
        if builtin and self.adjacency.release_edge_lists():
            # the native kernel holds its CSR pair: the COO is never read again (~24 B/edge)
            shard.edges = None
        super().__init__(shard, ctx, settings, model, optimizer)
        # the adjacency itself where attention reads its edge list (GAT) or a user's layer might
        keep = builtin and settings.train.cache_input_aggregation
        self.aggregation = InputAggregate(self.adjacency, self.x) if keep else self.adjacency

    def forward(self, model, x, dropout):
        return model(x, self.aggregation, dropout)


class SinglePlanner(SavedTierPlanner):
    def world_size(self, hardware_world_size: int) -> int:
        return 1  # the reference always runs in one process

    def work(self, ctx) -> Work:
        return local_work(ctx, ctx.num_nodes, ctx.num_edges + ctx.num_nodes)

    def details(self, ctx) -> Dict[str, Any]:
        return {"note": "one process; hardware.ranks_per_node does not apply"}


def prepare(mode: ModePlanner, data, plan, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """The whole graph in rank 0."""
    builder = ShardBuilder(data, 1)
    src, dst, w = graph_tensors(data, mode.settings)
    return builder.prepared([builder.shard(0, None, (dst, src, w))])


def strategy(mode: ModePlanner, shard: RankShard, ctx, model, optimizer) -> SingleStrategy:
    return SingleStrategy(shard, ctx, mode.settings, model, optimizer)


SINGLE = register_mode(
    ModeSpec(
        name="single",
        options=SingleConfig,
        planner=SinglePlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            needs_elementwise=False,
            needs_restructurable=False,  # hosts every model
            part_store=False,
            whole_graph_reason="one rank holds the whole graph by definition",
            partitions_graph=False,
            min_world_size=1,
        ),
    )
)
