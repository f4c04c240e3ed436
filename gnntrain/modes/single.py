"""``mode=single``: full-graph training in one process, the reference that
every exact mode must reproduce (docs/design.md#exactness)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

import torch

from gnntrain.config.schema import ModeConfig, option_value
from gnntrain.models import SparseAdjacency, edge_weights
from gnntrain.models.custom import weights_model
from gnntrain.modes.base import Mode, Prepared, RankShard, register_mode
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.fullgraph import SPLITS, train_full_graph


@dataclass
class SingleConfig(ModeConfig):
    name: str = "single"


def graph_tensors(data, cfg):
    """Edges with the model's self-loops and their global-degree weight factors, computed in
    float64 and kept in the run's dtype (float32 halves them: 8 bytes per edge)."""
    src, dst = data.edges(bool(cfg.model.self_loop))
    weights = edge_weights(weights_model(cfg.model.name, cfg.model.get("target")), src, dst, data.num_nodes)
    dtype = option_value(cfg.train.dtype)  # a DType member, or its string
    return src, dst, weights.float() if dtype == "float32" else weights


@register_mode
class SingleMode(Mode):
    name = "single"
    config_class = SingleConfig
    part_store = False
    whole_graph_reason = "one rank holds the whole graph by definition"
    models = ("gcn", "sage", "gin", "gat", "custom")

    min_world_size = 1

    def world_size(self, hardware_world_size: int) -> int:
        return 1  # the reference always runs in one process

    def work(self, ctx) -> Work:
        return local_work(ctx, ctx.num_nodes, ctx.num_edges + ctx.num_nodes)

    def details(self, ctx) -> Dict[str, Any]:
        return {"note": "one process; hardware.ranks_per_node does not apply"}

    def prepare(self, data, plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        src, dst, w = graph_tensors(data, self.cfg)
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

    def train_rank(self, shard: RankShard, ctx) -> Dict[str, Any]:
        dst, src, w = shard.edges
        adj = SparseAdjacency(dst, src, w, shard.num_global_nodes, shard.num_global_nodes,
                              kernel=ctx.plan.kernel, device=ctx.device)
        return train_full_graph(shard, ctx, adj)
