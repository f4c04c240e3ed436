"""``mode=hyscale``: prepare, strategy and the registered spec (the planner is :mod:`.cost`)."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from gnntrain.modes.base import Prepared, RankShard, ShardBuilder
from gnntrain.modes.hyscale.config import HyScaleConfig
from gnntrain.modes.hyscale.cost import HyScalePlanner
from gnntrain.modes.row_edges import graph_tensors, row_edges
from gnntrain.modes.spec import Capabilities, ModeSpec, register_mode


def prepare(mode: HyScalePlanner, data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Every trainer holds the whole graph: it samples neighbourhoods from all of it (§IV)."""
    builder = ShardBuilder(data, mode.world)
    streamed = row_edges(data, mode.settings)
    if streamed is None:
        src, dst, w = graph_tensors(data, mode.settings)
    else:  # an ingested graph: its edges read from the CSR, without the COO lists first
        dst, src, w = streamed.rows(np.arange(data.num_nodes))
    shards = [
        builder.shard(r, None, (dst, src, w))
        for r in (range(mode.world) if ranks is None else ranks)
    ]
    return builder.prepared(shards, replicated="whole graph per trainer")


def strategy(mode: HyScalePlanner, shard: RankShard, ctx, model, optimizer):
    from gnntrain.modes.hyscale.trainer import HyScaleTrainer  # imports the samplers: ranks only

    return HyScaleTrainer(mode.options, shard, ctx, mode.settings, model, optimizer)


HYSCALE = register_mode(
    ModeSpec(
        name="hyscale",
        options=HyScaleConfig,
        planner=HyScalePlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            part_store=False,
            partitions_graph=False,
            min_world_size=1,
            whole_graph_reason="every trainer samples neighbourhoods from the whole graph in host "
            "memory (HyScale §IV)",
            models_rule="HyScale trains the aggregate/update models on sampled blocks; GAT is not "
            "wired to blocks here.",
            tasks=("node_classification",),
            tasks_rule="its trainers sample mini-batches of labelled train nodes (HyScale §IV); "
            "no sampler for edges or regression targets is built here",
            edge_weight_refusal="its sampler rescales each sampled neighbourhood by the unweighted "
            "degree (a weighted estimator is not built)",
        ),
    )
)
