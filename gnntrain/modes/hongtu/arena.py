"""The device memory arena: an accounted cap on one rank's device working set (HongTu §4)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional, Sequence

import torch

from gnntrain.sizing import format_bytes


class DeviceMemoryExceeded(RuntimeError):
    pass


def cuda_peak_reader(device: torch.device) -> Callable[[], int]:
    """``torch.cuda.max_memory_allocated(device)`` without its cost: that call flattens every
    allocator statistic into a new dict (about 0.3 ms, measured on an H200: a dozen milliseconds of
    a small graph's HongTu epoch at one reading per hold); the nested statistics hold the same
    number."""
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index

    def peak() -> int:
        try:
            return int(torch._C._cuda_memoryStats(index)["allocated_bytes"]["all"]["peak"])
        except (AttributeError, KeyError, TypeError):  # another torch's layout: the public call
            return int(torch.cuda.max_memory_allocated(index))

    return peak


class DeviceArena:
    """Bytes one rank holds on its device, by purpose, with the peak; capped.

    On CUDA the tensors really live on the GPU (and ``torch.cuda`` reports its
    own peak too); on CPU hosts the same code path runs and this ledger is the
    device. The recompute working set is measured from autograd's saved
    tensors (:meth:`saved_tensors`).

    ``allocator_peak`` (on CUDA: ``torch.cuda.max_memory_allocated``) is read at
    every hold too, so the cap binds what the device really holds, not only
    what this ledger counts; its largest reading is :attr:`allocator_max`.
    """

    def __init__(self, cap: int, allocator_peak: Optional[Callable[[], int]] = None):
        self.cap = int(cap)
        self.held: Dict[str, int] = {}
        self.now = 0
        self.peak = 0
        self.allocator_peak = allocator_peak
        self.allocator_max = 0

    def _fix(self) -> str:
        return "raise mode.device_memory or mode.chunks (chunks=0 picks the smallest n that fits)"

    def hold(self, tag: str, nbytes: int) -> None:
        self.now += int(nbytes) - self.held.get(tag, 0)
        self.held[tag] = int(nbytes)
        if self.now > self.peak:
            self.peak = self.now
            if self.cap and self.peak > self.cap:
                parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.held.items() if v)
                raise DeviceMemoryExceeded(
                    f"device working set {format_bytes(self.peak)} exceeds mode.device_memory "
                    f"{format_bytes(self.cap)} ({parts}); {self._fix()}"
                )
        if self.allocator_peak is not None:
            self.allocator_max = max(self.allocator_max, int(self.allocator_peak()))
            if self.cap and self.allocator_max > self.cap:
                raise DeviceMemoryExceeded(
                    f"the device allocator's peak {format_bytes(self.allocator_max)} exceeds "
                    "mode.device_memory "
                    f"{format_bytes(self.cap)} (the working-set ledger counted "
                    f"{format_bytes(self.peak)}); "
                    f"{self._fix()}"
                )

    def hold_tensors(self, tag: str, *tensors: Optional[torch.Tensor]) -> None:
        self.hold(tag, tensor_bytes(*tensors))

    def rename(self, old: str, new: str) -> None:
        """The bytes held as ``old`` are now held as ``new`` (e.g. this batch's rows become the
        previous)."""
        self.drop(new)
        self.held[new] = self.held.pop(old, 0)

    def drop(self, *tags: str) -> None:
        for tag in tags:
            self.now -= self.held.pop(tag, 0)

    @contextmanager
    def saved_tensors(self, tag: str, exclude: Sequence[torch.Tensor] = ()) -> Iterator[None]:
        """Count what autograd saves for backward inside the block (each storage once)."""
        seen = {t.data_ptr() for t in exclude}
        total = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total[0] += t.numel() * t.element_size()
                self.hold(tag, total[0])
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield


def tensor_bytes(*tensors: Optional[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
