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
    """Replace how a device is settled (tests stand a fake in for CUDA); returns the previous
    hook."""
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

    def through(
        self, name: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
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


class DeviceTimeline:
    """Busy intervals of named device activities (compute, host→device and device→host copies) on
    one time axis, without waiting for the device: on CUDA each interval is a pair of events
    recorded on the stream that does the work, read back once per epoch (:meth:`resolve`) against a
    reference event; on a CPU "device" the work is done when its call returns, so an interval is the
    call's wall time.

    The point is the *overlap*: :meth:`resolve` reports each activity's busy seconds, the wall span
    from :meth:`reset` to the last interval's end, and how many of the copy seconds ran while
    compute ran (the union of compute intervals intersected with each copy activity's union). A
    serial loop overlaps nothing.
    """

    def __init__(self, device: DeviceLike = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        self.reset()

    def reset(self) -> None:
        self._spans: list = []  # (name, start, end): CUDA events, or perf_counter seconds
        self._origin = self._mark(None)

    def _mark(self, stream) -> object:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return event

    @contextmanager
    def span(self, name: str, stream=None) -> Iterator[None]:
        """Time the work queued inside the block on ``stream`` (the current stream by default)."""
        start = self._mark(stream)
        try:
            yield
        finally:
            self._spans.append((name, start, self._mark(stream)))

    def _seconds(self, mark) -> float:
        if not self.cuda:
            return mark - self._origin
        mark.synchronize()
        return self._origin.elapsed_time(mark) / 1e3

    def resolve(self) -> Dict[str, float]:
        """``{name}_s`` busy seconds per activity, ``wall_s``, and ``{name}_overlapped_s``: the
        seconds of each non-compute activity that ran while some compute ran."""
        intervals: Dict[str, list] = {}
        for name, start, end in self._spans:
            intervals.setdefault(name, []).append((self._seconds(start), self._seconds(end)))
        merged = {name: _union(spans) for name, spans in intervals.items()}
        out = {f"{name}_s": sum(b - a for a, b in spans) for name, spans in merged.items()}
        out["wall_s"] = max((b for spans in merged.values() for _, b in spans), default=0.0)
        compute = merged.get("compute", [])
        for name, spans in merged.items():
            if name != "compute":
                out[f"{name}_overlapped_s"] = _intersection(spans, compute)
        return out


def _union(spans: list) -> list:
    """Sorted, disjoint intervals covering ``spans``."""
    out: list = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersection(xs: list, ys: list) -> float:
    """Total length of the intersection of two unions of disjoint sorted intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total
