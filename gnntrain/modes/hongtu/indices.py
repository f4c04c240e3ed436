"""A sweep's index tensors on the device, uploaded once instead of at every use (HongTu §4.2: the
chunk loop's transfers are the rows, not its bookkeeping).

Each :class:`~gnntrain.modes.hongtu.schedule.Step` names the positions it touches in its resident
buffer (rows kept from the previous step, loaded, exchanged, flushed, the chunk's own rows). They
are fixed once the graph is chunked. They are packed into one pinned int64 tensor per step and moved
with one asynchronous copy: for the whole run at the first use when they fit beside the planned
working set (no device budget, or the budget's headroom above the estimate holds them), else one
step at a time, each step's pack issued one step ahead from pinned memory. Contiguous index runs
(``arange(a, b)``) are kept as slices, which need no upload and turn the scatter ``resident[pos] =
rows`` into a plain copy.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch

from gnntrain.modes.hongtu.schedule import Step

Index = Union[torch.Tensor, slice]
FIELDS = (
    "kept_prev",
    "kept_now",
    "load_pos",
    "need_pos",
    "give_index",
    "take_pos",
    "send_pos",
    "recv_index",
    "flush_pos",
    "v_pos",
)
# host row indices unless the sweep hands rows over device to device
HOST_SIDE = {"give_index", "recv_index"}
HOST_ROWS = ("load_rows", "flush_rows")  # host table rows: read on the host, never uploaded


def as_slice(index: Optional[torch.Tensor]) -> Optional[Index]:
    """``slice(a, b)`` where ``index`` is ``arange(a, b)`` (one contiguous run), else ``index``
    itself."""
    if index is None or index.numel() == 0:
        return index
    first, last = int(index[0]), int(index[-1])
    if last - first + 1 == index.numel() and (
        index.numel() == 1 or bool((index[1:] - index[:-1] == 1).all())
    ):
        return slice(first, last + 1)
    return index


class StepIndex:
    """One step's index tensors where the device reads them (device tensors, or slices), and its
    host-side rows (:data:`HOST_ROWS`: host tensors, or slices)."""

    def __init__(self, values: Dict[str, Optional[Index]]):
        self.values = values

    def __getattr__(self, name: str) -> Optional[Index]:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None


def pick(index: Index, part: slice) -> Index:
    """``index[part]`` for a tensor or a slice (a sub-slice)."""
    if isinstance(index, slice):
        start, stop, _ = index.indices(index.stop)
        lo, hi, _ = part.indices(stop - start)
        return slice(start + lo, start + hi)
    return index[part]


class DeviceIndices:
    """Every step's index tensors of the engine's sweeps, on ``device`` (see the module
    docstring)."""

    def __init__(
        self,
        device: torch.device,
        sweeps: Dict[str, List[Step]],
        v_pos: Dict[int, torch.Tensor],
        p2p: bool,
        headroom: Optional[int],
    ):
        self.device = device
        self.apart = device.type != "cpu"  # a device apart from the host (CUDA; ``meta`` in tests)
        self.pin = device.type == "cuda"
        self.p2p = p2p
        self.sweeps = sweeps
        self.v_pos = v_pos
        self.uploads = 0  # host → device copies of index packs (tests and the report read it)
        self._packs: Dict[
            Tuple[str, int], Tuple[torch.Tensor, Dict[str, Tuple[int, int]], Dict]
        ] = {}
        for name, steps in sweeps.items():
            for t, step in enumerate(steps):
                self._packs[(name, t)] = self._pack(step)
        self.total_bytes = sum(p[0].numel() * 8 for p in self._packs.values())
        # whole run on the device when it fits beside the planned working set (headroom None: no
        # cap)
        self.resident = self.apart and (headroom is None or self.total_bytes <= headroom)
        self._on_device: Dict[Tuple[str, int], StepIndex] = {}
        self._current: Optional[Tuple[Tuple[str, int], StepIndex]] = None
        self._ahead: Optional[Tuple[Tuple[str, int], StepIndex]] = None

    def _fields(self, step: Step) -> Dict[str, Optional[torch.Tensor]]:
        out = {name: getattr(step, name) for name in FIELDS if name != "v_pos"}
        out["v_pos"] = self.v_pos[step.chunk]
        if not self.p2p:
            for name in HOST_SIDE:
                out.pop(name)
        return out

    def _pack(self, step: Step):
        """(pinned pack of the tensors that are not slices, their (offset, length), the slices and
        host rows)."""
        tensors, spans, offset = [], {}, 0
        slices: Dict[str, Optional[Index]] = {
            name: as_slice(getattr(step, name)) for name in HOST_ROWS
        }
        for name, value in self._fields(step).items():
            value = as_slice(value)
            if value is None or isinstance(value, slice):
                slices[name] = value
                continue
            spans[name] = (offset, value.numel())
            offset += value.numel()
            tensors.append(value)
        pack = torch.cat(tensors) if tensors else torch.empty(0, dtype=torch.int64)
        return (pack.pin_memory() if self.pin else pack), spans, slices

    def most_bytes_held(self) -> int:
        """The largest :meth:`bytes_held` of the run: every pack, or two consecutive steps'
        packs."""
        if not self.apart:
            return 0
        if self.resident:
            return self.total_bytes
        sizes = [self._packs[key][0].numel() * 8 for key in self._packs]
        return max((a + b for a, b in zip(sizes, sizes[1:])), default=sum(sizes))

    def bytes_held(self) -> int:
        """Device bytes of index packs held now."""
        if not self.apart:
            return 0
        if self.resident:
            return self.total_bytes if self._on_device else 0
        return sum(
            self._packs[key][0].numel() * 8 for key, _ in filter(None, (self._current, self._ahead))
        )

    def _upload(self, keys: List[Tuple[str, int]]) -> Dict[Tuple[str, int], StepIndex]:
        host = (
            torch.cat([self._packs[k][0] for k in keys])
            if len(keys) > 1
            else self._packs[keys[0]][0]
        )
        if self.pin and len(keys) > 1:
            host = host.pin_memory()
        on_device = host.to(self.device, non_blocking=True)
        self.uploads += 1
        out, offset = {}, 0
        for key in keys:
            pack, spans, slices = self._packs[key]
            values: Dict[str, Optional[Index]] = dict(slices)
            for name, (lo, n) in spans.items():
                values[name] = on_device[offset + lo : offset + lo + n]
            offset += pack.numel()
            out[key] = StepIndex(values)
        return out

    def step(self, sweep: str, t: int) -> StepIndex:
        """Step ``t`` of ``sweep``'s indices on the device; with per-step packs, step t+1's is
        issued too."""
        key = (sweep, t)
        if not self.apart:  # the host tensors themselves (a CPU "device" reads them in place)
            pack, spans, slices = self._packs[key]
            values: Dict[str, Optional[Index]] = dict(slices)
            values.update({name: pack[lo : lo + n] for name, (lo, n) in spans.items()})
            return StepIndex(values)
        if self.resident:
            if not self._on_device:
                self._on_device = self._upload(list(self._packs))
            return self._on_device[key]
        if self._ahead is not None and self._ahead[0] == key:
            self._current = self._ahead
        elif self._current is None or self._current[0] != key:
            self._current = (key, self._upload([key])[key])
        nxt = (sweep, t + 1)
        self._ahead = (nxt, self._upload([nxt])[nxt]) if nxt in self._packs else None
        return self._current[1]
