"""The transfer half of one rank's HongTu engine (HongTu §4.2 and §5): vertex tables on the host
tier, loads and write-backs of a chunk's rows, the device buffers D_t carried from step to step, the
exchange between ranks, and the ⊕-add of gradient rows into the host.
:class:`~gnntrain.modes.hongtu.engine.HongTuEngine` runs the layers over these; the attributes used
here (tables, stager, d2h, arena, clock, comm, layout, ...) are set
in its constructor."""

from __future__ import annotations

import time
from typing import Dict, Iterator, List, Optional, Tuple

import torch

from gnntrain.modes.hongtu.indices import Index, StepIndex, pick
from gnntrain.modes.hongtu.schedule import Step, Sweep
from gnntrain.modes.hongtu.transfer_model import STAGING_SLICE_BYTES


class ChunkTransfers:
    """Host tables and the row transfers of HongTu's chunk loop (see the module docstring)."""

    _written: Dict[int, Optional[List[Tuple[int, int]]]]

    # ---------------------------------------------------------- host memory
    def _host(self, name: str, shape, like: torch.Tensor, zeroed: bool = True) -> torch.Tensor:
        """A vertex table on its tier (tiers.VertexTables: host memory, or a mapped file);
        ``zeroed=False`` for a table whose every row is written before it is read (activations,
        caches, logits: one chunk writes each own row), which skips the host-memory fill."""
        table = self.tables.allocate(name, shape, like.dtype, zeroed=zeroed)
        self._written[table.data_ptr()] = []  # a fresh table: no rows written yet (see _fresh)
        return table

    def _fresh(self, host: torch.Tensor, index: Index) -> bool:
        """Whether a ⊕-add into ``host[index]`` may be a plain write: a slice of a zeroed in-memory
        table none of whose rows has been written since it was allocated (0 + x is x, the same
        bits); records the rows."""
        written = self._written.get(host.data_ptr())
        if written is None or self.tables.holds(host):
            return False
        if not isinstance(index, slice):
            self._written[host.data_ptr()] = None  # rows by index: every later add stays an add
            return False
        lo, hi, _ = index.indices(host.shape[0])
        fresh = all(hi <= a or b <= lo for a, b in written)
        written.append((lo, hi))
        return fresh

    def _disk(self, host: torch.Tensor, kind: str, rows: int, width: int) -> None:
        """Count ``rows`` read from or written to ``host`` when it lives on the disk tier."""
        if rows and self.tables.holds(host):
            nbytes = rows * width * self.value_bytes
            self.comm.record_copy(kind, nbytes, 0.0)
            self.disk[kind] = self.disk.get(kind, 0) + nbytes

    def _local(self, c: int) -> slice:
        v_lo, v_hi = self.layout.rows(c)
        return slice(v_lo - self.lo, v_hi - self.lo)

    # ------------------------------------------------------------ transfers
    def _count(
        self,
        direction: str,
        kind: str,
        rows: int,
        width: int,
        seconds: float = 0.0,
        record: bool = True,
        ledger: Optional[str] = None,
    ) -> None:
        """Rows moved, by (direction, kind); the bytes go to the ledger under ``ledger`` (default
        ``kind``)."""
        self.rows[(direction, kind)] = self.rows.get((direction, kind), 0) + int(rows)
        if record and rows:
            self.comm.record_copy(ledger or kind, rows * width * self.value_bytes, seconds)

    def to_device(
        self, host: torch.Tensor, index, direction: str, rows_kind: str = "h2d"
    ) -> torch.Tensor:
        """Load ``host[index]`` onto the device through the pinned stager; the gather is part of the
        transfer's time (on a CPU arena it is the whole of it: the device copy itself is free; on
        CUDA the copy runs on a side stream and overlaps compute, so only its issue is timed)."""
        start = time.perf_counter()
        out = self.stager.load(host, index)
        self._count(
            direction,
            rows_kind,
            out.shape[0],
            out.shape[1],
            time.perf_counter() - start,
            ledger="h2d",
        )
        self._disk(host, "disk_read", out.shape[0], out.shape[1])
        return out

    def to_host(
        self, host: torch.Tensor, index: Index, rows: torch.Tensor, direction: str, add: bool
    ) -> None:
        """Write (or ⊕-add) device rows into host memory through the write-back queue: the copy is
        issued now (its issue is the transfer's time), the write or ⊕-add runs when the queue
        settles (host accumulation's time)."""
        start = time.perf_counter()
        self.d2h.write(
            host,
            index,
            rows,
            self._accumulate(host, index) if add and not self._fresh(host, index) else None,
        )
        self._bound_write_backs()
        self._count(direction, "d2h", rows.shape[0], rows.shape[1], time.perf_counter() - start)
        if add:  # ⊕-add reads the rows it adds into
            self._disk(host, "disk_read", rows.shape[0], rows.shape[1])
        self._disk(host, "disk_write", rows.shape[0], rows.shape[1])

    def _accumulate(self, host: torch.Tensor, index: Index):
        """The host-side ⊕-add of landed rows into ``host[index]``, timed as host accumulation."""

        def add(moved: torch.Tensor) -> None:
            start = time.perf_counter()
            host.index_add_(0, index, moved) if isinstance(index, torch.Tensor) else host[
                index
            ].add_(moved)
            self.clock.add("host_accumulate", time.perf_counter() - start)

        return add

    def _bound_write_backs(self) -> None:
        """Land every write-back now where those in flight would pass the budget's headroom (one
        step's flushes can be most of its resident rows)."""
        if self.in_flight_limit is not None and self.d2h.in_flight_bytes() > self.in_flight_limit:
            self.d2h.settle(0)

    def _land(self, keep: int) -> None:
        """Settle the write-back queue to ``keep`` steps in flight (none where they would pass the
        budget's headroom); the arena counts what stays."""
        self.d2h.close_group()
        self.d2h.settle(keep)
        self._bound_write_backs()
        self.arena.hold("d2h_in_flight", self.d2h.in_flight_bytes())

    def _carry(
        self,
        step: Step,
        idx: StepIndex,
        prev: Optional[torch.Tensor],
        make,
        width: int,
        dtype: torch.dtype,
        tag: str,
        direction: str,
    ) -> torch.Tensor:
        """D_t's device buffer with the rows kept from D_{t−1} (reuse) copied in; the previous
        buffer is released once they are."""
        out = make((step.resident.size, width), dtype=dtype, device=self.device)
        self.arena.hold_tensors(tag, out)
        if prev is not None and step.kept_now.numel():
            for part in self._slices(step.kept_now.numel(), width):
                out[pick(idx.kept_now, part)] = prev[pick(idx.kept_prev, part)]
        self._count(direction, "reused", step.kept_now.numel(), width)
        self.arena.drop(f"{tag}_prev")
        return out

    def gather(
        self,
        step: Step,
        idx: StepIndex,
        sweep: Sweep,
        host: torch.Tensor,
        prev: Optional[torch.Tensor],
        direction: str,
    ) -> torch.Tensor:
        """Assemble D_t on the device: kept rows, own host loads, rows from other ranks."""
        width = host.shape[1]
        resident = self._carry(
            step, idx, prev, torch.empty, width, host.dtype, f"{direction}_resident", direction
        )
        for part in self._slices(step.load_rows.numel(), width):
            resident[pick(idx.load_pos, part)] = self.to_device(
                host, pick(idx.load_rows, part), direction
            )
        if sweep.needs_exchange:
            if sweep.p2p:  # the owner loaded the rows; hand them over device to device
                outgoing = resident[idx.give_index]
                kind = "peer"
            else:  # rows straight from the owner's host
                outgoing = host[step.give_index].to(self.device)
                self._disk(host, "disk_read", outgoing.shape[0], width)
                kind = "h2d"
            incoming = self.comm.all_to_all(outgoing, step.give_counts, step.take_counts, kind)
            self._count(direction, kind, step.take_pos.numel(), width, record=False)
            resident[idx.take_pos] = incoming.to(self.device)
        return resident

    def scatter_add(
        self,
        step: Step,
        idx: StepIndex,
        sweep: Sweep,
        host: torch.Tensor,
        block: torch.Tensor,
        prev: Optional[torch.Tensor],
        direction: str,
    ) -> torch.Tensor:
        """Accumulate the chunk's gradient rows into D_t; flush the rows leaving the device."""
        width = block.shape[1]
        acc = self._carry(
            step, idx, prev, torch.zeros, width, block.dtype, f"{direction}_grad_sums", direction
        )
        if idx.need_pos is None:
            acc += block
        else:
            add_rows(acc, idx.need_pos, block)
        if sweep.needs_exchange:
            outgoing = acc[idx.send_pos]
            kind = "peer" if sweep.p2p else "d2h"
            incoming = self.comm.all_to_all(outgoing, step.send_counts, step.recv_counts, kind)
            self._count(direction, kind, step.send_pos.numel(), width, record=False)
            if sweep.p2p:
                add_rows(acc, idx.recv_index, incoming.to(self.device))
            # after the flushes already queued, so the host's summation order is the issue order
            else:
                self._written[host.data_ptr()] = None  # rows by index: later flushes add
                moved = incoming.to("cpu")
                self.d2h.then(lambda: self._accumulate(host, step.recv_index)(moved))
                self._disk(host, "disk_read", step.recv_index.numel(), width)
                self._disk(host, "disk_write", step.recv_index.numel(), width)
        for part in self._slices(step.flush_rows.numel(), width):
            self.to_host(
                host,
                pick(idx.flush_rows, part),
                acc[pick(idx.flush_pos, part)],
                direction,
                add=True,
            )
        return acc

    def _slices(self, rows: int, width: int) -> Iterator[slice]:
        """Row slices of at most STAGING_SLICE_BYTES: the copies between the resident buffers and
        the host move slice by slice, so their device transients stay one slice (the arena's
        "staging" entry)."""
        step = max(1, STAGING_SLICE_BYTES // max(1, width * self.value_bytes))
        # a slice of rows and (at most) its indices
        in_flight = 2 * min(rows, step) * width * self.value_bytes
        if in_flight > self.arena.held.get("staging", 0):
            self.arena.hold("staging", in_flight)
        for lo in range(0, rows, step):
            yield slice(lo, min(rows, lo + step))


def add_rows(target: torch.Tensor, index: Index, rows: torch.Tensor) -> None:
    """``target[index] += rows`` for distinct positions: ``index_add_`` for a tensor, an in-place
    add on a slice (the same sums)."""
    if isinstance(index, slice):
        target[index] += rows
    else:
        target.index_add_(0, index, rows)
