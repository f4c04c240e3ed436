"""HyScale's options and the DRM timing constants."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List

from gnntrain.config.schema import ModeConfig

# a decision after iteration t applies to batch t + DRM_LAG (depth-2 queue + the batch in flight)
DRM_LAG = 3
# the run's first iterations pay one-time costs (allocations, lazy init): DRM ignores them
DRM_WARMUP = 1


class SamplerKind(str, Enum):
    """Neighbour sampler: DGL's where it imports (auto), or the torch-native one."""

    auto = "auto"
    dgl = "dgl"
    torch = "torch"


@dataclass
class HyScaleConfig(ModeConfig):
    name: str = "hyscale"
    cpu_trainers: int = 1
    accel_trainers: int = 1
    # per layer, input side first; -1 = all
    fanouts: List[int] = field(default_factory=lambda: [25, 10])
    batch_size: int = 1024  # global: split across the trainers by their shares
    prefetch: bool = True  # depth-2 two-stage prefetch (§IV-B); false = serial stages
    drm: bool = True  # dynamic resource management (§IV-A)
    shares: List[float] = field(default_factory=list)  # initial share per trainer; empty = equal
    drm_min_share: float = 0.05  # no trainer's share falls below this fraction of the batch
    drm_ema: float = 0.5  # weight of the newest throughput sample in the EMA
    # per trainer >= 1: emulate a slower device (tests)
    slowdown: List[float] = field(default_factory=list)
    sampler: SamplerKind = SamplerKind.auto  # auto = dgl where DGL imports, else torch
    # host threads of an accelerator trainer's sampler pool (§III-B: cores reserved for its sampling
    # and loading); 0 = auto (an even share of the host's cores); CPU trainers' pools come from
    # their own share
    sampler_threads: int = 0
