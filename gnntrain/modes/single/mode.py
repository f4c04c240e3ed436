"""``mode=single``'s options, prepare, rank strategy and registered spec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from gnntrain.models import SparseAdjacency
from gnntrain.models.registry import model_family
from gnntrain.modes.base import ModePlanner, Prepared, RankShard, ShardBuilder
from gnntrain.modes.fullgraph import FullGraphStrategy, InputAggregate
from gnntrain.modes.row_edges import graph_tensors
from gnntrain.modes.saved_tier import DiskTierConfig
from gnntrain.modes.single.cost import SinglePlanner
from gnntrain.modes.spec import Capabilities, ModeSpec, register_mode
from gnntrain.plan_types import RunSettings


@dataclass
class SingleConfig(DiskTierConfig):
    name: str = "single"


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


def prepare(mode: ModePlanner, data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
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
