"""``mode=single``: full-graph training in one process, the reference that
every exact mode must reproduce (docs/design.md#exactness)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import torch

from gnntrain.config.schema import ModeConfig
from gnntrain.models import SparseAdjacency, edge_weights
from gnntrain.models.registry import model_family
from gnntrain.modes.base import Mode, Prepared, RankShard, register_mode
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import SPLITS, FullGraphStrategy, InputAggregate
from gnntrain.plan_types import RunSettings


@dataclass
class SingleConfig(ModeConfig):
    name: str = "single"


def graph_tensors(data, settings: RunSettings):
    """Edges with the model's self-loops and their global-degree weight factors, computed in
    float64 and kept in the run's dtype (float32 halves them: 8 bytes per edge)."""
    model = settings.model
    src, dst = data.edges(bool(model.self_loop))
    weights = edge_weights(model_family(model.name, model.target).normalization, src, dst, data.num_nodes)
    return src, dst, weights.float() if settings.dtype == "float32" else weights


class SingleStrategy(FullGraphStrategy):
    """The whole graph in one process: one SpMM per layer (the first layer's of the fixed inputs once per run)."""

    def __init__(self, shard: RankShard, ctx, settings: RunSettings):
        dst, src, w = shard.edges
        self.adjacency = SparseAdjacency(dst, src, w, shard.num_global_nodes, shard.num_global_nodes,
                                         kernel=ctx.plan.kernel, device=ctx.device)
        del dst, src, w
        family = model_family(settings.model.name, settings.model.target)
        builtin = settings.model.name != "custom" and family.elementwise  # layers that only call agg(h)
        if builtin and self.adjacency.release_edge_lists():
            shard.edges = None  # the native kernel holds its CSR pair: the COO is never read again (~24 B/edge)
        super().__init__(shard, ctx, settings)
        # the adjacency itself where attention reads its edge list (GAT) or a user's layer might
        keep = builtin and settings.train.cache_input_aggregation
        self.aggregation = InputAggregate(self.adjacency, self.x) if keep else self.adjacency

    def forward(self, model, x, dropout):
        return model(x, self.aggregation, dropout)


@register_mode
class SingleMode(Mode):
    name = "single"
    config_class = SingleConfig
    part_store = False
    whole_graph_reason = "one rank holds the whole graph by definition"
    needs_elementwise = needs_restructurable = False  # hosts every model

    min_world_size = 1
    partitions_graph = False

    def world_size(self, hardware_world_size: int) -> int:
        return 1  # the reference always runs in one process

    def work(self, ctx) -> Work:
        return local_work(ctx, ctx.num_nodes, ctx.num_edges + ctx.num_nodes)

    def details(self, ctx) -> Dict[str, Any]:
        return {"note": "one process; hardware.ranks_per_node does not apply"}

    def prepare(self, data, plan, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        src, dst, w = graph_tensors(data, self.settings)
        masks = data.masks
        shard = RankShard(
            rank=0, world_size=1, num_global_nodes=data.num_nodes, num_classes=data.num_classes,
            features=data.features, labels=data.labels, count_masks=dict(masks),
            global_counts={s: int(masks[s].sum()) for s in SPLITS},
            global_ids=torch.arange(data.num_nodes), edges=(dst, src, w),
        )
        return Prepared(shards=[shard], partition={"num_parts": 1, "edge_cut": 0, "total_volume": 0,
                                                   "max_send_volume": 0},
                        preprocess_s=time.perf_counter() - start)

    def strategy(self, shard: RankShard, ctx) -> SingleStrategy:
        return SingleStrategy(shard, ctx, self.settings)
