"""``mode=hyscale``: hybrid CPU + accelerator mini-batch training with
two-stage prefetch and dynamic resource management (papers/hyscale-gnn.txt).

Options schema only for now: ``gnntrain plan`` reports the mode as not yet
implemented (issue #8) and never runs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from gnntrain.config.schema import ModeConfig
from gnntrain.modes.base import Mode, register_mode


@dataclass
class HyScaleConfig(ModeConfig):
    name: str = "hyscale"
    cpu_trainers: int = 1
    accel_trainers: int = 1
    fanouts: List[int] = field(default_factory=lambda: [25, 10])
    batch_size: int = 1024
    prefetch: bool = True
    drm: bool = True


@register_mode
class HyScaleMode(Mode):
    name = "hyscale"
    config_class = HyScaleConfig
    implemented = False
    issue = "#8"
    exact = False
