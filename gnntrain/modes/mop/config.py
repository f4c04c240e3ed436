"""``mode=mop``'s options and what a rank holds beyond its row block (its payload)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnntrain.modes.saved_tier import DiskTierConfig
from gnntrain.partition.store import store_record


@dataclass
class MoPConfig(DiskTierConfig):
    name: str = "mop"
    pipeline_chunks: int = 1  # 0 = auto: Proposition 3.5's stage count from the RCM bandwidth
    # > 0: mixture of accelerators (MixGCN §3.2): the first aggregation_ranks ranks only aggregate
    # (a feature column split each), the others only update (a node row split each); 0: every rank
    # does both (MoP)
    aggregation_ranks: int = 0
    # where MoA's aggregation ranks run: "same" (the profile's device) or "cpu" (CPU aggregation
    # beside GPU update ranks, MixGCN §3.2's mixture with the host standing in for its dedicated
    # aggregation accelerator)
    aggregation_device: str = "same"


@store_record
@dataclass
class MoPPayload:
    """What a MoP rank holds beyond its row block and the whole adjacency."""

    # its column slice of every row's input features (the aggregation side)
    feature_columns: torch.Tensor
    pipeline_chunks: int  # fine-grained pipeline stages (§3.1.3); 1 = none
