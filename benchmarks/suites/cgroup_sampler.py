"""What a memory cgroup holds at its peak: a background sampler of each cgroup's charge and its
``memory.stat`` breakdown (anonymous memory, page cache and the mapped, dirty and writeback parts of
it) and of each of its processes' RSS, keeping the sample where the charge was highest.

A cgroup's cap kills on its *charge*, which is more than its processes' RSS: file pages the group
read or wrote (a rank's mapped part files, the disk tier's files) count until the kernel reclaims
them, and dirty pages cannot be reclaimed before they are written back. The sampler is what
explains a host's peak, and an OOM kill's cause, in the scaleout suite's notes.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

# memory.stat keys (cgroup v1, hierarchical "total_" first; v2 names after) -> our names
STAT_KEYS = {
    "rss": ("total_rss", "anon"),
    "cache": ("total_cache", "file"),
    "mapped_file": ("total_mapped_file", "file_mapped"),
    "dirty": ("total_dirty", "file_dirty"),
    "writeback": ("total_writeback", "file_writeback"),
}


@dataclass
class CgroupPeak:
    """The cgroup's sample of highest charge: the charge, its ``memory.stat`` parts (bytes) and
    each process's RSS (command name -> bytes, summed over processes of one name)."""

    charge: int = 0
    stat: Dict[str, int] = field(default_factory=dict)
    processes: Dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        gib = lambda b: f"{b / 2**30:.2f}"
        parts = ", ".join(f"{name} {gib(value)}" for name, value in self.stat.items())
        procs = ", ".join(f"{name} {gib(rss)}" for name, rss in self.processes.items())
        return f"{gib(self.charge)} GiB charged ({parts}; RSS: {procs or 'none'})"


def _charge(folder: Path) -> Optional[int]:
    for name in ("memory.usage_in_bytes", "memory.current"):
        with contextlib.suppress(OSError, ValueError):
            return int((folder / name).read_text())
    return None


def _stat(folder: Path) -> Dict[str, int]:
    raw: Dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                raw[key] = int(value)
    return {ours: next((raw[k] for k in keys if k in raw), 0) for ours, keys in STAT_KEYS.items()}


def _rss(pid: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _role(pid: str) -> str:
    """``agent`` (torchrun's), ``rank`` (a gnntrain rank or helper) or the executable's name."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    text = b" ".join(argv).decode(errors="replace")
    if "torch.distributed.run" in text or "torchrun" in text:
        return "agent"
    if "gnntrain" in text or "multiprocessing" in text:
        return "rank"
    return Path(argv[0].decode(errors="replace")).name or "other"


def _process_rss(folder: Path) -> Dict[str, int]:
    """The RSS of the cgroup's processes, summed per role (:func:`_role`)."""
    totals: Dict[str, int] = {}
    try:
        pids = (folder / "cgroup.procs").read_text().split()
    except OSError:
        return totals
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):  # a process that ended meanwhile
            role = _role(pid)
            totals[role] = totals.get(role, 0) + _rss(pid)
    return totals


class CgroupSampler:
    """Samples ``folders`` every ``interval_s`` in a thread, from ``start()`` to ``stop()``; each
    folder's highest-charge sample in :attr:`peaks`. A context manager."""

    def __init__(self, folders: Sequence[Optional[Path]], interval_s: float = 0.25) -> None:
        self.folders = list(folders)
        self.interval_s = interval_s
        self.peaks: List[CgroupPeak] = [CgroupPeak() for _ in self.folders]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _sample(self) -> None:
        for index, folder in enumerate(self.folders):
            charge = _charge(folder) if folder is not None else None
            if charge is not None and charge > self.peaks[index].charge:
                self.peaks[index] = CgroupPeak(charge, _stat(folder), _process_rss(folder))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> "CgroupSampler":
        self.peaks = [CgroupPeak() for _ in self.folders]
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="cgroup-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> List[CgroupPeak]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.peaks

    def __enter__(self) -> "CgroupSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
