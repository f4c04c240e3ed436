"""HongTu's direct path as a spec of its own (``mode=hongtu mode.direct=true``): one CPU rank whose
SpMM reads neighbour rows where they lie (HongTu §4 without the gather; docs/design.md#hongtu, "The
direct path"). Its planner (:class:`~gnntrain.modes.hongtu.cost.DirectPlanner`), prepare and
strategy replace the gathering engine's; the options, the vertex tables and their disk tier are
HongTu's.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from gnntrain.modes.base import Prepared, RankShard, ShardBuilder
from gnntrain.modes.hongtu import direct_graph
from gnntrain.modes.hongtu.config import HongTuConfig
from gnntrain.modes.hongtu.cost import DirectPlanner
from gnntrain.modes.hongtu.mode import CAPABILITIES
from gnntrain.modes.hongtu.payload import DirectPayload
from gnntrain.modes.spec import ModeSpec


def prepare(mode: DirectPlanner, data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """The direct path's one rank: the graph in its own order, read in place (no edge lists)."""
    builder = ShardBuilder(data, 1)
    figures, chunks = mode.figures(data)
    model = mode.settings.model
    if model.edge_weight and not data.weighted:
        from gnntrain.modes.row_edges import user_edge_values

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
