"""``mode=mop``: MixGCN's mixture of parallelism (papers/mixgcn-mop.txt).

Options schema only for now: ``gnntrain plan`` reports the mode as not yet
implemented (issue #6) and never runs it.
"""
from __future__ import annotations

from dataclasses import dataclass

from gnntrain.config.schema import ModeConfig
from gnntrain.modes.base import Mode, register_mode


@dataclass
class MoPConfig(ModeConfig):
    name: str = "mop"
    pipeline_chunks: int = 1


@register_mode
class MoPMode(Mode):
    name = "mop"
    config_class = MoPConfig
    implemented = False
    issue = "#6"
