"""What a rank gets besides its shard: the plan, its communicator, device,
and (on rank 0) the metrics recorder."""
from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from gnntrain.comm import Communicator


@dataclass
class RankContext:
    plan: "object"  # gnntrain.plan.RunPlan
    comm: Communicator
    device: torch.device
    run_dir: Optional[Path]
    recorder: Optional["object"] = None  # gnntrain.metrics.RunRecorder on rank 0
    preprocess_s: float = 0.0  # launcher-side preprocessing already spent

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def dtype(self) -> torch.dtype:
        return {"float32": torch.float32, "float64": torch.float64}[self.plan.dtype]


def peak_host_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def peak_device_bytes(device: torch.device) -> Optional[int]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return None
