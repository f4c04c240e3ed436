"""A disk tier for the full-graph modes that train through autograd: single, partition, SuperGCN and
MoP (#55; HongTu has its own, `modes/hongtu/tiers.py`).

What such a rank holds between forward and backward is what autograd saves for the backward pass:
each layer's input and aggregate, the halo rows received, the activation masks. Those are the
per-layer vertex tables of these modes, and they dominate a rank's memory at scale (the plan's
"activations"). PyTorch lets a caller intercept every tensor autograd saves
(``torch.autograd.graph.saved_tensors_hooks``, *Hooks for saved tensors* in the autograd notes):
the pack hook runs when forward saves it, the unpack hook when backward needs it.
:class:`SavedTensorTier` keeps saved tensors in memory up to ``mode.host_budget`` bytes per rank and
writes the rest to files
under ``mode.disk_dir`` (raw bytes, read back bit for bit: the tier is exact by construction), each
read once in backward and every file removed when the epoch's backward is done. Its bytes go through
the accounting layer as ``disk_write`` / ``disk_read`` (not network traffic), beside the plan's
prediction.

``mode.host_budget: null`` is resolved by the plan (:class:`SavedTierPlanner`): no tier where the
estimate fits the host, else the budget that makes it fit. The prediction
(:meth:`SavedTierPlanner.saved_bytes`): what autograd saves beyond the budget is written once in
forward and read once in backward.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch

from gnntrain.atomic import on_disk_full
from gnntrain.config.schema import ModeConfig
from gnntrain.modes.base import ModePlanner
from gnntrain.modes.cost import CommEstimate
from gnntrain.sizing import format_bytes, host_memory_bytes, launcher_bytes

SPILL_MIN_BYTES = 1 << 16  # smaller saved tensors (weights, scalars) stay in memory
_NUMPY = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


@dataclass
class DiskTierConfig(ModeConfig):
    """The saved-tensor disk tier's options, shared by the modes that have it."""

    # saved tensors a rank keeps in memory, e.g. 2GiB; the rest goes to files in disk_dir.
    # null = what the profile's host memory leaves after the rest of the estimate (no tier where
    # everything fits)
    host_budget: Optional[str] = None
    disk_dir: Optional[str] = None  # null = <cache_dir>/disk-tier


def disk_tier_folder(options, settings) -> Path:
    """Where a mode's disk tier keeps its scratch files (this tier's and HongTu's):
    ``mode.disk_dir``, else ``<cache_dir>/disk-tier``."""
    from gnntrain.data import cache_folder

    if options.disk_dir:
        return Path(options.disk_dir).expanduser()
    return cache_folder(settings.cache_dir) / "disk-tier"


@dataclass(frozen=True)
class _OnDisk:
    path: Path
    dtype: torch.dtype
    shape: torch.Size
    device: torch.device
    nbytes: int


class SavedTensorTier:
    """One rank's spill of autograd's saved tensors beyond ``budget`` bytes into ``folder``."""

    def __init__(self, folder: Path, budget: int, comm, disk_dir: Optional[Path] = None):
        self.folder, self.budget, self.comm = Path(folder), int(budget), comm
        self.disk_dir = Path(disk_dir or folder)  # mode.disk_dir: what a full disk names
        self.held = 0  # bytes of saved tensors kept in memory this epoch
        self._names = itertools.count()
        self.moved = {"disk_write": 0, "disk_read": 0}  # this rank's bytes, the whole run

    def pack(self, tensor: torch.Tensor) -> Any:
        nbytes = tensor.numel() * tensor.element_size()
        keep = (
            nbytes < SPILL_MIN_BYTES
            or self.held + nbytes <= self.budget
            or tensor.dtype not in _NUMPY
            or tensor.layout != torch.strided
        )
        if keep:
            self.held += nbytes if nbytes >= SPILL_MIN_BYTES else 0
            return tensor
        start = time.perf_counter()
        path = self.folder / f"saved{next(self._names)}.bin"
        with on_disk_full(
            self.disk_dir,
            f"the disk tier's saved tensor {path.name} ({self.folder.parent.name})",
            nbytes,
            "free space there, point mode.disk_dir at a larger disk or raise mode.host_budget, "
            "then resume with train.resume=true.",
        ):
            self.folder.mkdir(parents=True, exist_ok=True)
            try:  # a Python file: numpy's tofile reports a full disk with no error number
                with open(path, "wb") as f:
                    f.write(memoryview(tensor.detach().to("cpu").contiguous().numpy()).cast("B"))
            except OSError:
                path.unlink(missing_ok=True)
                raise
        self._count("disk_write", nbytes, time.perf_counter() - start)
        return _OnDisk(path, tensor.dtype, tensor.shape, tensor.device, nbytes)

    def unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, _OnDisk):
            return packed
        start = time.perf_counter()
        values = np.fromfile(packed.path, dtype=_NUMPY[packed.dtype]).reshape(packed.shape)
        self._count("disk_read", packed.nbytes, time.perf_counter() - start)
        return torch.from_numpy(values).to(packed.device)

    def _count(self, kind: str, nbytes: int, seconds: float) -> None:
        self.moved[kind] += nbytes
        if self.comm is not None:
            self.comm.record_copy(kind, nbytes, seconds)

    @contextlib.contextmanager
    def epoch(self) -> Iterator[None]:
        """Forward and backward of one epoch: saved tensors beyond the budget go to files, which
        are removed when it ends (whatever happens)."""
        self.held = 0
        try:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
                yield
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        """Remove this rank's files, then its folder and the run's, once empty (the last rank to
        close removes the run's)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        for folder in (self.folder.parent, self.folder.parent.parent):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


# the share of a rank's host memory the saved-tensor tier spills down to, where it must spill
SPILL_TARGET = 0.8


class SavedTierPlanner(ModePlanner):
    """A mode with the saved-tensor tier: its budget resolved at plan time, its estimate's memory
    capped at the budget and its disk bytes per epoch predicted."""

    def saved_tier_budget(self, ctx=None) -> Optional[int]:
        """mode.host_budget in bytes; unset, at plan time (``ctx``), the saved tensors a rank may
        keep so that its estimate fits the profile's host memory, or None where everything fits (no
        tier)."""
        if self.options.host_budget not in (None, ""):
            from gnntrain.modes.hongtu.config import parse_bytes

            return parse_bytes(self.options.host_budget, "mode.host_budget")
        if ctx is None:
            return None
        hw = self.settings.hardware
        # the node's memory less the process that started its ranks (plan_fit.node_peak_bytes)
        ranks = max(1, min(ctx.world_size, int(hw.ranks_per_node)))
        host = (host_memory_bytes(hw) - launcher_bytes(ctx.world_size)) // ranks
        estimate = self.estimate_memory(ctx).training_bytes
        if estimate <= host:
            return None
        # spill down to SPILL_TARGET of the rank's share, not to all of it: the estimate is within
        # 0.9-1.2x of measured peaks, and the node also holds its launcher and page cache (a plan
        # spilling exactly the excess approved SuperGCN at 2M nodes in 8 GiB hosts, and the kernel
        # killed it); everything, where even that is not enough (the plan then refuses)
        excess = estimate - int(host * SPILL_TARGET)
        return max(0, self.saved_bytes(ctx) - excess)

    def saved_bytes(self, ctx) -> int:
        """What autograd saves per rank for one backward pass (measured: single, partition and
        SuperGCN on a 20k-node csbm, 3-layer GCN 128): per layer, the tensor the update
        multiplies by its weight (its input width, aggregated first or not), and for every layer but
        the last its activation's output and its dropout mask."""
        rows = -(-ctx.num_nodes // max(1, self.num_parts(ctx.world_size)))
        inputs, outputs = list(ctx.dims[:-1]), list(ctx.dims[1:-1])
        per_output = 2 if float(self.settings.model.dropout) > 0 else 1
        return int(rows * (sum(inputs) + per_output * sum(outputs)) * ctx.dtype_bytes)

    def disk_folder(self) -> Path:
        return disk_tier_folder(self.options, self.settings)

    def resolved_options(self, ctx) -> Dict[str, Any]:
        budget = self.saved_tier_budget(ctx)
        return {} if budget is None else {"host_budget": f"{budget}B"}

    def estimate(self, ctx):
        """The estimate with activations beyond the budget on disk: written once in forward, read
        once in backward."""
        estimate = super().estimate(ctx)
        budget = self.saved_tier_budget(ctx)
        if budget is None:
            return estimate
        memory = estimate.memory
        spilled = max(0, self.saved_bytes(ctx) - budget)
        comm = estimate.comm or CommEstimate(0, {}, "")
        disk = {"disk_write": spilled * ctx.world_size, "disk_read": spilled * ctx.world_size}
        return dataclasses.replace(
            estimate,
            memory=dataclasses.replace(
                memory, activation_bytes=max(0, memory.activation_bytes - spilled)
            ),
            comm=dataclasses.replace(comm, by_kind={**comm.by_kind, **disk}),
        )

    def disk_tier(self, ctx) -> Optional[Dict[str, Any]]:
        budget = self.saved_tier_budget(ctx)
        if budget is None:
            return None
        saved = self.saved_bytes(ctx)
        return {
            "saved tensors per rank": format_bytes(saved),
            "in memory at most": format_bytes(budget),
            "on disk per rank, written and read per epoch": format_bytes(max(0, saved - budget)),
            "folder": str(self.disk_folder()),
        }

    def attach_saved_tier(self, strategy, ctx) -> None:
        """Give a rank's strategy its tier (a no-op without a budget)."""
        budget = self.saved_tier_budget()
        if budget is None:
            return
        from gnntrain.modes.hongtu.tiers import scratch_folder

        folder = scratch_folder(str(self.disk_folder()), ctx, ctx.rank) / "saved"
        strategy.saved_tier = SavedTensorTier(folder, budget, ctx.comm, self.disk_folder())
