"""Seconds per named stage within one epoch, forward and backward."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator

import torch


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
