"""Crash-safe file writes: temp file in the same folder, fsync, rename.

A run killed mid-write leaves either the old file or the new one, never a
half-written one (partition cache entries, checkpoints, summary.json); a write
that fails (a full disk) leaves the old file and no temp file. Also the file lock
that serialises processes building one shared cache entry, and
:func:`on_disk_full`, which turns a full disk into one line naming the folder."""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Union

from gnntrain.errors import DiskFullError

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing) for the ``with`` block.

    Ranks of one job and concurrent jobs on one host serialise on it (``fcntl.flock``:
    released when the holder exits, even by a crash, so a killed rank never leaves it held).
    """
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# what a full cache folder (partition store and cache, decoded datasets) says to do
CACHE_FULL_FIX = (
    "free space there or point cache_dir (or GNNTRAIN_CACHE_DIR) at a larger disk, then run again."
)


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still put into ``folder``'s file system (its nearest
    existing ancestor's)."""
    probe = Path(folder).expanduser()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    stat = os.statvfs(probe)
    return int(stat.f_bavail * stat.f_frsize)


@contextmanager
def on_disk_full(
    folder: Path, what: str, needed: Union[int, Callable[[], int]], fix: str
) -> Iterator[None]:
    """Turn an ENOSPC or EDQUOT raised in the block into a :class:`DiskFullError` naming ``folder``,
    ``what`` was written, the bytes it ``needed`` (a number, or a function computing it) and the
    bytes free once the block cleaned up; other errors pass through."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise DiskFullError(
            str(folder),
            what,
            needed() if callable(needed) else needed,
            free_bytes(folder),
            fix,
            quota=exc.errno == errno.EDQUOT,
        ) from None
