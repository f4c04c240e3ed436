"""What a rank gets besides its shard: the plan, its communicator, device,
and (on rank 0) the metrics recorder."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from gnntrain.comm import Communicator
from gnntrain.metrics.recorder import RunRecorder
from gnntrain.plan_types import RunPlan


@dataclass
class RankContext:
    plan: RunPlan
    comm: Communicator
    device: torch.device
    run_dir: Optional[Path]
    recorder: Optional[RunRecorder] = None  # rank 0 only
    preprocess_s: float = 0.0  # launcher-side preprocessing already spent

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def dtype(self) -> torch.dtype:
        return {"float32": torch.float32, "float64": torch.float64}[self.plan.dtype]


def peak_host_bytes() -> int:
    """Peak resident set size of this process image.

    Linux's ``VmHWM`` (the high-water mark of this address space). Not ``ru_maxrss``: a
    spawned rank's ``ru_maxrss`` carries over the launcher's resident size at fork time
    (it survives exec), so every rank would report at least the launcher's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def peak_device_bytes(device: torch.device) -> Optional[int]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return None
