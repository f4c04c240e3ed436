"""Host ↔ device row transfers that overlap compute: the one stager of HongTu's chunk loads (HongTu
§4.2) and HyScale's feature batches (HyScale-GNN §IV-B), and HongTu's device → host write-back
queue.

A gather ``host[index]`` lands in pageable memory, and a copy from pageable memory is synchronous
whatever ``non_blocking`` says. So on CUDA the rows are gathered straight into one of two pinned
buffers, copied on a side stream, and the compute stream waits for that copy (a CUDA event) only
where it uses the rows. A buffer is refilled only once its previous copy has landed (its event), so
the host-side gather and the copy of step t+1 overlap the device's compute of step t. On a CPU
"device" the gather is the whole load. Rows that are a contiguous slice of a pinned host table need
no gather: they are copied from the table itself.

The way back (:class:`DeviceToHostQueue`) mirrors it: rows are copied on a second side stream into
pinned memory (the host table itself where the rows are a slice of a pinned table) and the host-side
work that needs them (a write into an unpinned table, HongTu's ⊕-add) runs only when the caller
settles the queue, after it has issued the next step's loads and compute. Nothing waits for the
device in between.
"""

from __future__ import annotations

from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Union

import torch

from gnntrain.metrics.clock import DeviceTimeline

Index = Union[torch.Tensor, slice]


@dataclass
class StagedRows:
    """Rows gathered on the host (:meth:`HostToDeviceStager.gather`), in buffer ``slot`` (None: not
    staged)."""

    rows: torch.Tensor
    slot: Optional[int]


class HostToDeviceStager:
    """Loads host rows onto ``device``; double-buffered pinned staging on CUDA."""

    def __init__(
        self,
        device: torch.device,
        buffers: int = 2,
        staged: Optional[bool] = None,
        timeline: Optional[DeviceTimeline] = None,
        in_flight_limit: Optional[int] = None,
    ):
        self.device = torch.device(device)
        self.timeline = timeline  # records each copy's busy interval ("h2d") where given
        # device bytes of loads the compute stream may not have used yet (None: unbounded). A load
        # is allocated on the side stream and freed only once the compute stream has passed its use,
        # so a host that runs ahead of the device keeps them all allocated; past the limit, a load
        # waits for the oldest use.
        self.in_flight_limit = in_flight_limit
        self._handed: Deque[List] = deque()  # [event after the use (None: not marked yet), bytes]
        self.cuda = self.device.type == "cuda"
        # staged: gather into the reusable buffers, then copy out (always on CUDA; on the CPU only
        # to test the buffer rotation, with unpinned buffers and a synchronous copy)
        self.staged = self.cuda if staged is None else bool(staged)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._buffers: List[Optional[torch.Tensor]] = [None] * buffers
        self._landed: List[Optional[object]] = [
            None
        ] * buffers  # CUDA events: the buffer's last copy is done
        self._next = 0

    def _staging(self, slot: int, rows: int, like: torch.Tensor) -> torch.Tensor:
        """A pinned buffer of at least ``rows`` rows shaped like ``like``'s rows (grown as
        needed)."""
        buf = self._buffers[slot]
        shape = (rows,) + tuple(like.shape[1:])
        if (
            buf is None
            or buf.dtype != like.dtype
            or buf.shape[1:] != shape[1:]
            or buf.shape[0] < rows
        ):
            buf = torch.empty((max(rows, 1),) + shape[1:], dtype=like.dtype, pin_memory=self.cuda)
            self._buffers[slot] = buf
        return buf[:rows]

    def gather(self, host: torch.Tensor, index: Index) -> StagedRows:
        """``host[index]`` on the host side: into the next reusable (pinned, on CUDA) buffer, once
        that buffer's previous copy has landed; plain rows when not staged. Callers that gather and
        copy on different threads (HyScale's pipeline) keep ``buffers`` above the number of batches
        in flight."""
        if not self.staged:
            return StagedRows(host[index], None)
        if (
            isinstance(index, slice)
            and self.cuda
            and host.is_pinned()
            and host[index].is_contiguous()
        ):
            # already pinned and contiguous: copied from where it lies
            return StagedRows(host[index], -1)
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
        """The gathered rows on the device, ready for the current stream to use (on CUDA: copied on
        the side stream, which the current stream waits for)."""
        rows = staged.rows
        if staged.slot is None:
            return rows if self.device.type == "cpu" else rows.to(self.device)
        if not self.cuda:
            return rows.to(self.device, copy=True)  # the buffer is refilled by a later gather
        compute = torch.cuda.current_stream(self.device)
        nbytes = rows.numel() * rows.element_size()
        self._bound(compute, nbytes)
        with torch.cuda.stream(self.stream):
            with _span(self.timeline, "h2d", self.stream):
                out = rows.to(self.device, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record(self.stream)
        if staged.slot >= 0:
            self._landed[staged.slot] = landed
        compute.wait_event(landed)
        out.record_stream(compute)  # allocated on the side stream, used on the compute stream
        if self.in_flight_limit is not None:
            self._handed.append([None, nbytes])
        return out

    def _bound(self, compute, nbytes: int) -> None:
        """Keep the loads not yet used by the compute stream within ``in_flight_limit`` (see
        ``__init__``): the loads handed out before this call have had their uses queued by now, so
        one event marks them all."""
        if self.in_flight_limit is None or not self._handed:
            return
        if self._handed[-1][0] is None:
            used = torch.cuda.Event()
            used.record(compute)
            for entry in self._handed:
                if entry[0] is None:
                    entry[0] = used
        total = sum(entry[1] for entry in self._handed)
        while self._handed and total + nbytes > self.in_flight_limit:
            event, done = self._handed.popleft()
            event.synchronize()
            total -= done

    def load(self, host: torch.Tensor, index: Index) -> torch.Tensor:
        """``host[index]`` on the device, ready for the current stream to use."""
        return self.copy(self.gather(host, index))


@dataclass
class _Write:
    """One device → host copy in flight: ``landed`` (a CUDA event; None on a CPU device) marks the
    copy's end; ``then`` is the host-side work that needs the copied rows."""

    landed: Optional[object]
    rows: Optional[torch.Tensor]  # the device rows, kept alive until the copy has read them
    then: Optional[Callable[[], None]]
    is_copy: bool = True  # False: host work queued with :meth:`DeviceToHostQueue.then`


class DeviceToHostQueue:
    """Device rows written back to host tables without a synchronous copy (HongTu §4.2: the
    transfers of a chunk overlap the compute of the next).

    :meth:`write` issues ``host[index] = rows`` or ``accumulate(landed rows)``; :meth:`close_group`
    ends one step's writes; :meth:`settle` (``keep`` groups left in flight) waits for the oldest
    groups' copies and runs their host-side work, in issue order, so summation orders never change.
    A caller issues step t+1's loads and compute before settling step t. On CUDA the copy waits for
    the compute stream's work so far (an event), runs on its own side stream into pinned memory (the
    table itself where the rows are a slice of a pinned table), and the device rows stay referenced
    until it lands. On a CPU "device" the rows are the host rows: without ``staged`` the work runs
    at once; with it (tests) it is deferred like CUDA's.
    """

    def __init__(
        self,
        device: torch.device,
        staged: Optional[bool] = None,
        timeline: Optional[DeviceTimeline] = None,
    ):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.staged = self.cuda if staged is None else bool(staged)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.timeline = timeline
        self.closed: Deque[List[_Write]] = deque()
        self.open: List[_Write] = []
        self.issued = self.settled = 0  # copies issued and landed (tests read them)

    def in_flight_bytes(self) -> int:
        """Device bytes kept alive by copies that have not been settled."""
        return sum(
            w.rows.numel() * w.rows.element_size()
            for g in (*self.closed, self.open)
            for w in g
            if w.rows is not None
        )

    def write(
        self,
        host: torch.Tensor,
        index: Index,
        rows: torch.Tensor,
        accumulate: Optional[Callable[[torch.Tensor], None]] = None,
    ) -> None:
        """``host[index] = rows`` (or ``accumulate(rows on the host)``) once the rows have
        landed."""
        self.issued += 1
        if not self.staged:
            moved = rows if rows.device.type == "cpu" else rows.to("cpu")
            accumulate(moved) if accumulate is not None else host.__setitem__(index, moved)
            self.settled += 1
            return
        # a CPU stand-in for the deferred path: a private copy, written when settled
        if not self.cuda:
            moved = rows.detach().clone()
            then = (
                (lambda: accumulate(moved))
                if accumulate is not None
                else (lambda: host.__setitem__(index, moved))
            )
            self.open.append(_Write(None, None, then))
            return
        direct = (
            accumulate is None
            and isinstance(index, slice)
            and host.is_pinned()
            and host[index].is_contiguous()
        )
        target = (
            host[index] if direct else torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
        )
        produced = torch.cuda.Event()
        produced.record(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(produced)
            with _span(self.timeline, "d2h", self.stream):
                target.copy_(rows, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record(self.stream)
        if direct:
            then = None
        elif accumulate is not None:
            then = lambda: accumulate(target)
        else:
            then = lambda: host.__setitem__(index, target)
        self.open.append(_Write(landed, rows, then))

    def then(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the host after every write issued so far has landed (e.g. release a disk
        table's rows once they are written)."""
        if not self.staged:
            work()
            return
        self.open.append(_Write(None, None, work, is_copy=False))

    def close_group(self) -> None:
        """End the current step's writes; later writes form the next group."""
        if self.open:
            self.closed.append(self.open)
            self.open = []

    def settle(self, keep: int = 0) -> None:
        """Land every closed group but the newest ``keep`` (with ``keep`` 0 the open group too),
        running their host-side work in issue order."""
        if keep == 0:
            self.close_group()
        while len(self.closed) > keep:
            for w in self.closed.popleft():
                if w.landed is not None:
                    w.landed.synchronize()
                w.rows = None
                if w.is_copy:
                    self.settled += 1
                if w.then is not None:
                    w.then()


def _span(timeline: Optional[DeviceTimeline], name: str, stream):
    """The copy's busy interval on ``timeline`` where there is one (HongTu's engine), else
    nothing."""
    return timeline.span(name, stream) if timeline is not None else nullcontext()
