"""What a rank gets besides its shard: the plan, its communicator, device,
and (on rank 0) the metrics recorder."""
from __future__ import annotations

import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional

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


class StageClock:
    """Seconds per named stage within one epoch (aggregation, quantization, ...).

    ``span(name)`` times a block; ``through(name, fn, x)`` times ``fn(x)`` in
    forward *and* the matching backward, by bracketing it with identity
    autograd nodes whose backward hooks read the clock.
    """

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}

    def reset(self) -> None:
        self.seconds = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def through(self, name: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            with self.span(name):
                return fn(x)
        mark: Dict[str, float] = {}
        x = _BackwardMark.apply(x, self, name, mark, False)
        with self.span(name):
            y = fn(x)
        return _BackwardMark.apply(y, self, name, mark, True)


class _BackwardMark(torch.autograd.Function):
    """Identity; in backward, the ``end`` mark starts a stopwatch that the ``start`` mark stops."""

    @staticmethod
    def forward(ctx, x, clock, name, mark, is_end):  # type: ignore[override]
        ctx.clock, ctx.name, ctx.mark, ctx.is_end = clock, name, mark, is_end
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.is_end:
            ctx.mark["t"] = time.perf_counter()
        elif "t" in ctx.mark:
            ctx.clock.add(ctx.name, time.perf_counter() - ctx.mark.pop("t"))
        return grad, None, None, None, None
