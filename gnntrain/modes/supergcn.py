"""``mode=supergcn``: pre/post/hybrid aggregated halo exchange with int2/4/8
stochastic quantization and label propagation (papers/supergcn.txt).

Options schema only for now: ``gnntrain plan`` reports the mode as not yet
implemented (issue #5) and never runs it.
"""
from __future__ import annotations

from dataclasses import dataclass

from gnntrain.config.schema import ModeConfig
from gnntrain.modes.base import Mode, register_mode


@dataclass
class SuperGCNConfig(ModeConfig):
    name: str = "supergcn"
    aggregation: str = "hybrid"  # pre | post | hybrid
    bits: int = 2  # 32 | 8 | 4 | 2
    quantize_backward: bool = True
    label_propagation: float = 0.0  # fraction of train nodes given a label embedding, in [0, 1)


@register_mode
class SuperGCNMode(Mode):
    name = "supergcn"
    config_class = SuperGCNConfig
    implemented = False
    issue = "#5"
    exact = False  # exact only with bits=32
