"""HongTu's vertex tables on the host tier, or on the disk tier below it.

HongTu (Scalable Full-Graph GNN Training on Multiple GPUs, §4.1) keeps every layer's vertex data
(activations, cached aggregations, gradients) in host memory and streams chunks through the device.
When ``mode.host_budget`` cannot hold them, tables go to files instead, one file per table,
row-major in the partition's relabelled order, so a chunk's own rows are one contiguous byte range.
The files are memory-mapped (shared: writes reach the file, the page cache is the buffer and the
kernel writes dirty pages behind); a table's blocks are reserved when it is made
(``posix_fallocate``), so a disk that fills is one error naming the folder, never a SIGBUS when a
mapped page is first written. The schedule is known in advance, so the engine advises the kernel:
the rows the next chunk reads are asked for ahead (``MADV_WILLNEED``) and a finished chunk's written
range is released (``MADV_DONTNEED``; the page cache keeps it until written back). The engine works
on mapped tables as on any host tensor, so the disk tier is exact by construction.

Which tables go first: caches (read and written one chunk range at a time) before gradients
(scatter-added at arbitrary rows), before activations (gathered at arbitrary neighbour rows). The
input features and the logits stay on the host. Files are scratch: made per run under
``mode.disk_dir`` and removed when the engine closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.atomic import on_disk_full
from gnntrain.errors import PlanError
from gnntrain.sizing import format_bytes

HOST, DISK = "host", "disk"
PAGE = mmap.PAGESIZE


def table_names(num_layers: int, cached: bool) -> List[str]:
    """Every per-rank vertex table the engine allocates, in the order the disk tier takes them."""
    caches = [f"cache{layer}" for layer in range(num_layers)] if cached else []
    grads = [f"grad{layer}" for layer in range(1, num_layers)]
    acts = [f"act{layer}" for layer in range(1, num_layers)]
    return caches + grads + acts


def table_width(name: str, dims: Sequence[int]) -> int:
    return int(dims[int(re.search(r"\d+$", name).group())])


def assign_tiers(
    rows: int, dims: Sequence[int], cached: bool, value_bytes: int, budget: Optional[int]
) -> Dict[str, str]:
    """Table → tier for a rank of ``rows`` rows: everything on the host under no budget; otherwise
    the disk tier takes tables in :func:`table_names` order until the rest fits ``budget`` bytes."""
    names = table_names(len(dims) - 1, cached)
    tiers = dict.fromkeys(names, HOST)
    if budget is None:
        return tiers
    size = {n: rows * table_width(n, dims) * value_bytes for n in names}
    held = sum(size.values())
    for name in names:
        if held <= budget:
            break
        tiers[name] = DISK
        held -= size[name]
    return tiers


def disk_bytes_needed(
    rows: int, dims: Sequence[int], tiers: Dict[str, str], value_bytes: int
) -> int:
    """File bytes one rank's disk tier holds at its peak (every disk table at once)."""
    return sum(rows * table_width(n, dims) * value_bytes for n, t in tiers.items() if t == DISK)


OWNER = "owner"  # in a rank's scratch folder: "<host> <pid>" of the process whose tables it holds


def remove_stale_scratch(folder: Path) -> int:
    """Remove the rank folders under ``folder`` whose owner process on this host is gone (a killed
    run's tables: scratch that nothing will read); returns the bytes freed. Folders of other hosts
    (a shared disk) and of live processes stay."""
    from gnntrain.data.ondisk import _alive

    freed = 0
    for owner in Path(folder).expanduser().glob(f"run-*/rank*/{OWNER}"):
        try:
            host, pid = owner.read_text().split()
        except (OSError, ValueError):
            continue
        if (
            host != socket.gethostname()
            or not pid.isdigit()
            or int(pid) == os.getpid()
            or _alive(int(pid))
        ):
            continue
        freed += sum(f.stat().st_blocks * 512 for f in owner.parent.iterdir() if f.is_file())
        shutil.rmtree(owner.parent, ignore_errors=True)
        with contextlib.suppress(OSError):
            owner.parent.parent.rmdir()
    return freed


def check_free_space(folder: Path, needed: int) -> None:
    """Refuse at plan time when the folder's file system cannot hold the disk tier (after removing
    the tables of killed runs, :func:`remove_stale_scratch`: a resumed run's own included)."""
    remove_stale_scratch(folder)
    probe = Path(folder).expanduser()
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise PlanError(
            "mode.disk_dir",
            f"the disk tier needs {format_bytes(needed)} in {folder}, but only "
            f"{format_bytes(free)} is free there.",
            "free space there, point mode.disk_dir at a larger disk, or raise mode.host_budget",
        )


@dataclass
class DiskTable:
    """One table in a memory-mapped scratch file (zeros when made: a sparse file)."""

    path: Path
    tensor: torch.Tensor
    mapping: Optional[mmap.mmap]
    row_bytes: int
    fd: int = -1  # kept open for posix_fadvise (evict)

    @classmethod
    def create(cls, path: Path, shape: Tuple[int, int], dtype: torch.dtype) -> "DiskTable":
        rows, width = int(shape[0]), int(shape[1])
        row_bytes = width * torch.empty((), dtype=dtype).element_size()
        nbytes = rows * row_bytes
        if nbytes == 0:
            return cls(path, torch.zeros(shape, dtype=dtype), None, row_bytes)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            # every block reserved now: a full disk is an error here, not a SIGBUS when a mapped
            # page is first written mid-epoch
            os.posix_fallocate(fd, 0, nbytes)
            mapping = mmap.mmap(fd, nbytes)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        tensor = torch.frombuffer(mapping, dtype=dtype).view(rows, width)
        return cls(path, tensor, mapping, row_bytes, fd)

    def _advise(self, advice: int, lo: int, hi: int) -> None:
        if self.mapping is None or hi <= lo:
            return
        start = (lo * self.row_bytes) // PAGE * PAGE
        end = min(len(self.mapping), hi * self.row_bytes)
        self.mapping.madvise(advice, start, end - start)

    def prefetch(self, lo: int, hi: int) -> None:
        """Ask the kernel for rows [lo, hi) ahead of their use."""
        self._advise(mmap.MADV_WILLNEED, lo, hi)

    def release(self, lo: int, hi: int) -> None:
        """Drop rows [lo, hi) from this process's memory (the page cache keeps what is not written
        yet)."""
        self._advise(mmap.MADV_DONTNEED, lo, hi)

    def evict(self, lo: int = 0, hi: Optional[int] = None) -> None:
        """Drop rows [lo, hi) (all by default) from the page cache too: their dirty pages start
        their write-back and clean ones leave memory (``POSIX_FADV_DONTNEED``), so a table read once
        more, much later, stops holding memory the next table's random reads need."""
        hi = self.tensor.shape[0] if hi is None else hi
        self.release(lo, hi)
        if self.fd >= 0 and hi > lo:
            os.posix_fadvise(
                self.fd, lo * self.row_bytes, (hi - lo) * self.row_bytes, os.POSIX_FADV_DONTNEED
            )

    def close(self) -> None:
        self.tensor = torch.empty(0)
        if self.mapping is not None:
            try:
                self.mapping.close()
            except BufferError:  # a view of it is still alive somewhere: the file goes anyway
                pass
            self.mapping = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.path.unlink(missing_ok=True)


@dataclass
class VertexTables:
    """One rank's vertex tables: host tensors, or disk tables in ``scratch`` (this rank's folder:
    emptied on first use, so a resumed run rebuilds what a killed one left, and removed by
    :meth:`close`)."""

    tiers: Dict[str, str]
    scratch: Optional[Path]
    pin: bool = False
    disk: Dict[str, DiskTable] = field(default_factory=dict)
    _ready: bool = False

    @classmethod
    def for_rank(cls, tiers: Dict[str, object], ctx, rank: int) -> "VertexTables":
        """A rank's tables from the plan's tier figures (``tables``, ``disk_dir``)."""
        return cls(tiers["tables"], scratch_folder(tiers["disk_dir"], ctx, rank))

    def on_disk(self, name: str) -> bool:
        return self.tiers.get(name) == DISK and self.scratch is not None

    def allocate(
        self, name: str, shape: Tuple[int, int], dtype: torch.dtype, zeroed: bool = True
    ) -> torch.Tensor:
        """A table ``name``, zeroed (a new file is: ``zeroed=False`` only spares host memory the
        fill); a disk table replaces the file of its previous allocation."""
        if not self.on_disk(name):
            make = torch.zeros if zeroed else torch.empty
            return make(shape, dtype=dtype, pin_memory=self.pin)  # pinned where it is born: no copy
        if name in self.disk:
            self.disk.pop(name).close()
        nbytes = int(shape[0]) * int(shape[1]) * torch.empty((), dtype=dtype).element_size()
        with on_disk_full(
            self.scratch.parent.parent,
            f"the disk tier's table {name} ({self.scratch.name})",
            nbytes,
            "free space there, point mode.disk_dir at a larger disk or raise mode.host_budget, "
            "then resume with train.resume=true.",
        ):
            if not self._ready:
                shutil.rmtree(self.scratch, ignore_errors=True)
                self.scratch.mkdir(parents=True)
                self._ready = True  # close() removes the folder from here on
                (self.scratch / OWNER).write_text(f"{socket.gethostname()} {os.getpid()}")
            table = DiskTable.create(self.scratch / f"{name}.bin", shape, dtype)
        self.disk[name] = table
        return table.tensor

    def _of(self, tensor: Optional[torch.Tensor]) -> Optional[DiskTable]:
        if tensor is None or not self.disk:
            return None
        return next(
            (t for t in self.disk.values() if t.tensor.data_ptr() == tensor.data_ptr()), None
        )

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is one of this rank's disk tables."""
        return self._of(tensor) is not None

    def prefetch_rows(self, lo: int, hi: int, *tensors: Optional[torch.Tensor]) -> None:
        for table in filter(None, map(self._of, tensors)):
            table.prefetch(lo, hi)

    def release_rows(self, lo: int, hi: int, *tensors: Optional[torch.Tensor]) -> None:
        for table in filter(None, map(self._of, tensors)):
            table.release(lo, hi)

    def evict_rows(self, lo: int, hi: Optional[int], *tensors: Optional[torch.Tensor]) -> None:
        """:meth:`DiskTable.evict` of rows [lo, hi) (hi None: to the end) of each disk table in
        ``tensors``."""
        for table in filter(None, map(self._of, tensors)):
            table.evict(lo, hi)

    def close(self) -> None:
        """Remove every file of the disk tier (the run's end, a failure or an interrupt)."""
        for table in self.disk.values():
            table.close()
        self.disk.clear()
        if self._ready:
            shutil.rmtree(self.scratch, ignore_errors=True)
            try:
                self.scratch.parent.rmdir()  # the run's folder, once its last rank is done
            except OSError:
                pass
            self._ready = False


def scratch_folder(folder: Optional[str], ctx, rank: int) -> Optional[Path]:
    """This rank's disk-tier folder: one per run directory (a resumed run rebuilds it), none without
    tables on disk."""
    if folder is None:
        return None
    run = (
        str(Path(ctx.run_dir).resolve())
        if ctx.run_dir is not None
        else f"{ctx.plan.plan_hash}-{os.getpid()}"
    )
    return Path(folder) / f"run-{hashlib.sha256(run.encode()).hexdigest()[:12]}" / f"rank{rank}"
