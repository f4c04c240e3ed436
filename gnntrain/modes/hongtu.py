"""``mode=hongtu``: full-graph training with host-resident vertex data,
chunked layer-major execution and deduplicated transfers (papers/hongtu.txt).

Options schema only for now: ``gnntrain plan`` reports the mode as not yet
implemented (issue #7) and never runs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gnntrain.config.schema import ModeConfig
from gnntrain.modes.base import Mode, register_mode


@dataclass
class HongTuConfig(ModeConfig):
    name: str = "hongtu"
    chunks: int = 4  # n chunks per partition; 0 = smallest n that fits device_memory
    dedup: str = "p2p+reuse"  # none | p2p | reuse | p2p+reuse
    reorganize: bool = True
    device_memory: Optional[str] = None  # e.g. "1GiB"; null = the hardware profile's device memory


@register_mode
class HongTuMode(Mode):
    name = "hongtu"
    config_class = HongTuConfig
    implemented = False
    issue = "#7"
    models = ("gcn", "sage", "gin", "gat")
