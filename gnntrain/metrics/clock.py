"""Seconds per named stage within one epoch, forward and backward, on any device.

CUDA kernels run asynchronously: a wall clock read right after a launch measures the launch,
not the work. Every timer here therefore *settles* the device first (:func:`settle`: a CUDA
event recorded on the current stream and waited for), so a stage is charged for the kernels it
queued. On CPU settling is a no-op.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Union

import torch

DeviceLike = Union[torch.device, str, None]
SYNC_DEVICE_TYPES = {"cuda"}  # devices whose work is queued, not done, when a call returns


def cuda_event_sync(device: torch.device) -> None:
    """Wait until the work queued so far on ``device``'s current stream has run."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    event.synchronize()


_sync_hook: Callable[[torch.device], None] = cuda_event_sync


def set_sync_hook(hook: Callable[[torch.device], None]) -> Callable[[torch.device], None]:
    """Replace how a device is settled (tests stand a fake in for CUDA); returns the previous hook."""
    global _sync_hook
    previous, _sync_hook = _sync_hook, hook
    return previous


def settle(device: DeviceLike) -> None:
    """Before a timer reads the wall clock: wait for ``device``'s queued work (no-op on CPU)."""
    if device is not None:
        device = torch.device(device)
        if device.type in SYNC_DEVICE_TYPES:
            _sync_hook(device)


def timed(device: DeviceLike) -> Callable[[], float]:
    """A wall clock that settles ``device`` before every reading."""
    def now() -> float:
        settle(device)
        return time.perf_counter()

    return now


class StageClock:
    """Seconds per named stage within one epoch (aggregation, quantization, ...).

    ``span(name)`` times a block; ``through(name, fn, x)`` times ``fn(x)`` in
    forward *and* the matching backward, by bracketing it with identity
    autograd nodes whose backward hooks read the clock. On CUDA every reading
    settles the device first (see the module docstring).
    """

    def __init__(self, device: DeviceLike = None) -> None:
        self.seconds: Dict[str, float] = {}
        self.now = timed(device)

    def reset(self) -> None:
        self.seconds = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.add(name, self.now() - start)

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
            ctx.mark["t"] = ctx.clock.now()
        elif "t" in ctx.mark:
            ctx.clock.add(ctx.name, ctx.clock.now() - ctx.mark.pop("t"))
        return grad, None, None, None, None
