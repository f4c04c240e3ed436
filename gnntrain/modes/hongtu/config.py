"""HongTu's options, constants and the device-memory size parser."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from gnntrain.config.schema import ModeConfig
from gnntrain.errors import PlanError

DEDUP = ("none", "p2p", "reuse", "p2p+reuse")
REORGANIZE_VERSION = 3  # bump when Algorithm 4 changes: cached batch orders are keyed by it


@dataclass
class HongTuConfig(ModeConfig):
    name: str = "hongtu"
    # n chunks per partition; 0 = the smallest n whose device working set fits device_memory
    chunks: int = 4
    dedup: str = "p2p+reuse"  # none | p2p | reuse | p2p+reuse
    # greedy chunk-to-batch assignment and batch order (Algorithm 4), cached
    reorganize: bool = True
    # e.g. "1GiB"; null = the hardware profile's device_memory_gb (0 = no cap)
    device_memory: Optional[str] = None
    # vertex tables a rank keeps in host memory, e.g. "2GiB"; the rest on disk.
    host_budget: Optional[str] = None
    # null: what the profile's host memory leaves after the rest of the estimate (no disk tier where
    # all fits)
    disk_dir: Optional[str] = None  # the disk tier's scratch folder; null = <cache_dir>/disk-tier
    # one rank on a CPU device: the SpMM reads neighbours in place, topology from the CSR
    direct: bool = False


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: Any, key: str = "mode.device_memory") -> int:
    """'1GiB', '512MiB', '2GB', '1e9' or a number → bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise PlanError(key, f"cannot read {text!r} as a size.", "write e.g. 1GiB, 512MiB or 2GB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
