"""``mode=hongtu``'s prepare, rank strategy and capabilities (its planner is :mod:`.cost`, its
registered spec :mod:`.spec`)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from gnntrain.modes.base import Prepared, RankShard, ShardBuilder
from gnntrain.modes.hongtu.chunking import choose_layout, layout_figures, rank_edges
from gnntrain.modes.hongtu.cost import HongTuPlanner
from gnntrain.modes.hongtu.payload import HongTuPayload
from gnntrain.modes.hongtu.strategy import HongTuStrategy
from gnntrain.modes.row_edges import row_edges
from gnntrain.modes.spec import Capabilities, Layout
from gnntrain.partition.chunks import ChunkLayout


def prepare(mode: HongTuPlanner, data, part, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Rank r: its partition's rows and in-edges, and the chunk layout every rank shares (§4-§5)."""
    builder = ShardBuilder(data, mode.world)
    chosen = choose_layout(mode, data, part)
    layout: ChunkLayout = chosen["layout"]
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets
    figures = layout_figures(mode, chosen)
    shards = []
    for rank in range(mode.world) if ranks is None else ranks:
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
        num_parts=mode.world,
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
