"""Host → device row loads through reusable pinned staging buffers on a side stream: the one stager of
HongTu's chunk loads (HongTu §4.2) and HyScale's feature batches (HyScale-GNN §IV-B).

A gather ``host[index]`` lands in pageable memory, and a copy from pageable memory is
synchronous whatever ``non_blocking`` says. So on CUDA the rows are gathered straight into
one of two pinned buffers, copied on a side stream, and the compute stream waits for that
copy (a CUDA event) only where it uses the rows. A buffer is refilled only once its previous
copy has landed (its event), so the host-side gather and the copy of step t+1 overlap the
device's compute of step t. On a CPU "device" the gather is the whole load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

import torch

Index = Union[torch.Tensor, slice]


@dataclass
class StagedRows:
    """Rows gathered on the host (:meth:`HostToDeviceStager.gather`), in buffer ``slot`` (None: not staged)."""

    rows: torch.Tensor
    slot: Optional[int]


class HostToDeviceStager:
    """Loads host rows onto ``device``; double-buffered pinned staging on CUDA."""

    def __init__(self, device: torch.device, buffers: int = 2, staged: Optional[bool] = None):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        # staged: gather into the reusable buffers, then copy out (always on CUDA; on the CPU only to test
        # the buffer rotation, with unpinned buffers and a synchronous copy)
        self.staged = self.cuda if staged is None else bool(staged)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._buffers: List[Optional[torch.Tensor]] = [None] * buffers
        self._landed: List[Optional[object]] = [None] * buffers  # CUDA events: the buffer's last copy is done
        self._next = 0

    def _staging(self, slot: int, rows: int, like: torch.Tensor) -> torch.Tensor:
        """A pinned buffer of at least ``rows`` rows shaped like ``like``'s rows (grown as needed)."""
        buf = self._buffers[slot]
        shape = (rows,) + tuple(like.shape[1:])
        if buf is None or buf.dtype != like.dtype or buf.shape[1:] != shape[1:] or buf.shape[0] < rows:
            buf = torch.empty((max(rows, 1),) + shape[1:], dtype=like.dtype, pin_memory=self.cuda)
            self._buffers[slot] = buf
        return buf[:rows]

    def gather(self, host: torch.Tensor, index: Index) -> StagedRows:
        """``host[index]`` on the host side: into the next reusable (pinned, on CUDA) buffer, once that
        buffer's previous copy has landed; plain rows when not staged. Callers that gather and copy on
        different threads (HyScale's pipeline) keep ``buffers`` above the number of batches in flight."""
        if not self.staged:
            return StagedRows(host[index], None)
        slot, self._next = self._next, (self._next + 1) % len(self._buffers)
        if self._landed[slot] is not None:
            self._landed[slot].synchronize()  # the buffer's previous copy has left it
        if isinstance(index, slice):
            start, stop, _ = index.indices(host.shape[0])
            staging = self._staging(slot, stop - start, host)
            staging.copy_(host[index])
        else:
            staging = self._staging(slot, int(index.numel()), host)
            torch.index_select(host, 0, index.to(torch.int64), out=staging)
        return StagedRows(staging, slot)

    def copy(self, staged: StagedRows) -> torch.Tensor:
        """The gathered rows on the device, ready for the current stream to use (on CUDA: copied on the
        side stream, which the current stream waits for)."""
        rows = staged.rows
        if staged.slot is None:
            return rows if self.device.type == "cpu" else rows.to(self.device)
        if not self.cuda:
            return rows.to(self.device, copy=True)  # the buffer is refilled by a later gather
        compute = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            out = rows.to(self.device, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record(self.stream)
        self._landed[staged.slot] = landed
        compute.wait_event(landed)
        out.record_stream(compute)  # allocated on the side stream, used on the compute stream
        return out

    def load(self, host: torch.Tensor, index: Index) -> torch.Tensor:
        """``host[index]`` on the device, ready for the current stream to use."""
        return self.copy(self.gather(host, index))
