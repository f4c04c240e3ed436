"""What a HongTu rank holds beyond its rows and edges (a typed payload per path)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np

from gnntrain.partition.chunks import ChunkLayout
from gnntrain.partition.store import store_record


@store_record
@dataclass
class HongTuPayload:
    """The gather engine's rank (HongTu §4-§5): its chunks, their transfer order and the plan's
    figures."""

    layout: ChunkLayout  # every part's chunks and their neighbour lists (deduplicated per §5)
    batches: np.ndarray  # the chunk order the reorganisation chose (§5.2)
    # tiers, device cap, estimated device bytes, volumes: what the rank reports
    figures: Dict[str, Any]


@dataclass
class DirectPayload:
    """The direct path's one rank: the graph in its own order, its chunks and the figures (held in
    memory, never stored: one rank, no partition store)."""

    # a gnntrain.modes.hongtu.direct_graph.DirectGraph
    graph: Any
    chunks: List[Tuple[int, int]]
    figures: Dict[str, Any]
