"""The `diskio` suite: how HongTu's disk tier should move rows, memory maps or pread/pwrite (#40).

The engine's three access patterns on one table file, each a whole layer's sweep over its chunks:
its own chunk's rows read as one range (the cached aggregation, read back in backward), its own
chunk's rows written as one range (an activation or cache, written in forward), and neighbour rows
gathered at sorted row indices (the next layer's input). Each pattern runs through the disk tier's
own ``DiskTable`` (a shared memory map with WILLNEED ahead and DONTNEED behind) and through
pread/pwrite into one reusable buffer (``posix_fadvise`` WILLNEED ahead; a gather reads the spans
that cover its rows, gaps under 64 KiB read through). The page cache is dropped before each
measurement when this process may (root), so both read from the device.
"""

from __future__ import annotations

import mmap
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite

WIDTH = 128
GAP_BYTES = 64 * 2**10  # a gather's rows closer than this are read in one span


def _drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _spans(rows, row_bytes: int) -> List[Tuple[int, int]]:
    """[lo, hi) row spans covering the sorted ``rows``, gaps under GAP_BYTES read through."""
    import numpy as np

    if rows.size == 0:
        return []
    gap = max(1, GAP_BYTES // row_bytes)
    breaks = np.flatnonzero(np.diff(rows) > gap)
    starts = np.concatenate([[rows[0]], rows[breaks + 1]])
    ends = np.concatenate([rows[breaks], [rows[-1]]]) + 1
    return list(zip(starts.tolist(), ends.tolist()))


def _patterns(rows: int, chunks: int, density: float, seed: int = 0):
    """Chunk ranges, and per chunk the sorted neighbour rows a gather reads (``density`` of the
    table)."""
    import numpy as np

    bounds = np.linspace(0, rows, chunks + 1).astype(np.int64)
    rng = np.random.default_rng(seed)
    gathers = [np.sort(rng.choice(rows, int(rows * density), replace=False)) for _ in range(chunks)]
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])], gathers


def _close(table) -> None:
    """Unmap (the tensor first: it holds the map's buffer); the file stays for the next
    measurement."""
    table.tensor = None
    try:
        table.mapping.close()
    except BufferError:  # a view is still alive: unmapped when it goes
        pass


def _mmap_methods(path: Path, rows: int, ranges, gathers) -> Dict[str, Callable[[], int]]:
    import torch

    from gnntrain.modes.hongtu.tiers import DiskTable

    # the written file as the disk tier maps its own (DiskTable.create makes it empty)
    def opened() -> DiskTable:
        with open(path, "r+b") as f:
            mapping = mmap.mmap(f.fileno(), rows * WIDTH * 4)
        tensor = torch.frombuffer(mapping, dtype=torch.float32).view(rows, WIDTH)
        return DiskTable(path, tensor, mapping, WIDTH * 4)

    def read_ranges() -> int:
        table, moved = opened(), 0
        buf = torch.empty(max(b - a for a, b in ranges), WIDTH)
        for i, (lo, hi) in enumerate(ranges):
            if i + 1 < len(ranges):
                table.prefetch(*ranges[i + 1])
            buf[: hi - lo].copy_(table.tensor[lo:hi])
            table.release(lo, hi)
            moved += (hi - lo) * table.row_bytes
        _close(table)
        return moved

    def write_ranges() -> int:
        table, moved = opened(), 0
        buf = torch.ones(max(b - a for a, b in ranges), WIDTH)
        for lo, hi in ranges:
            table.tensor[lo:hi].copy_(buf[: hi - lo])
            table.release(lo, hi)
            moved += (hi - lo) * table.row_bytes
        table.mapping.flush()  # on the device, as pwrite's fdatasync
        _close(table)
        return moved

    def gather_rows() -> int:
        table, moved = opened(), 0
        for rows_needed in gathers:
            index = torch.from_numpy(rows_needed)
            moved += int(table.tensor[index].numel()) * 4
        _close(table)
        return moved

    return {
        "read chunk ranges": read_ranges,
        "write chunk ranges": write_ranges,
        "gather rows": gather_rows,
    }


def _pread_methods(path: Path, rows: int, ranges, gathers) -> Dict[str, Callable[[], int]]:
    import numpy as np

    row_bytes = WIDTH * 4

    def read_ranges() -> int:
        fd, moved = os.open(path, os.O_RDONLY), 0
        buf = np.empty((max(b - a for a, b in ranges), WIDTH), np.float32)
        for i, (lo, hi) in enumerate(ranges):
            if i + 1 < len(ranges):
                a, b = ranges[i + 1]
                os.posix_fadvise(fd, a * row_bytes, (b - a) * row_bytes, os.POSIX_FADV_WILLNEED)
            moved += os.preadv(fd, [memoryview(buf[: hi - lo]).cast("B")], lo * row_bytes)
            os.posix_fadvise(fd, lo * row_bytes, (hi - lo) * row_bytes, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        return moved

    def write_ranges() -> int:
        fd, moved = os.open(path, os.O_WRONLY), 0
        buf = np.ones((max(b - a for a, b in ranges), WIDTH), np.float32)
        for lo, hi in ranges:
            moved += os.pwritev(fd, [memoryview(buf[: hi - lo]).cast("B")], lo * row_bytes)
        os.fdatasync(fd)
        os.close(fd)
        return moved

    def gather_rows() -> int:
        fd, moved = os.open(path, os.O_RDONLY), 0
        span_buf = np.empty((0, WIDTH), np.float32)
        for rows_needed in gathers:
            out = np.empty((rows_needed.size, WIDTH), np.float32)
            filled = 0
            for lo, hi in _spans(rows_needed, row_bytes):
                if span_buf.shape[0] < hi - lo:
                    span_buf = np.empty((hi - lo, WIDTH), np.float32)
                os.preadv(fd, [memoryview(span_buf[: hi - lo]).cast("B")], lo * row_bytes)
                take = rows_needed[filled : np.searchsorted(rows_needed, hi)]
                out[filled : filled + take.size] = span_buf[take - lo]
                filled += take.size
            moved += out.nbytes
        os.close(fd)
        return moved

    return {
        "read chunk ranges": read_ranges,
        "write chunk ranges": write_ranges,
        "gather rows": gather_rows,
    }


@suite("diskio")
def suite_diskio(quick: bool) -> SuiteResult:
    """mmap (the disk tier's DiskTable) against pread/pwrite on HongTu's access patterns, cold page
    cache."""
    rows, chunks, reps = (200_000, 4, 2) if quick else (2_000_000, 4, 3)
    table_gib = rows * WIDTH * 4 / 2**30
    results: Dict[Tuple[str, str], List[float]] = {}
    moved: Dict[Tuple[str, str], int] = {}
    cold = True
    with tempfile.TemporaryDirectory(dir=os.environ.get("GNNTRAIN_DISKIO_DIR")) as tmp:
        path = Path(tmp) / "table.bin"
        with open(path, "wb") as f:  # the table's bytes on the device, written once
            block = bytes(range(256)) * (WIDTH * 4 * 1024 // 256)
            for _ in range(0, rows, 1024):
                f.write(block)
            f.truncate(rows * WIDTH * 4)
        for density in (0.05, 0.6):
            ranges, gathers = _patterns(rows, chunks, density)
            for _ in range(reps):
                for method, methods in (("mmap", _mmap_methods), ("pread/pwrite", _pread_methods)):
                    for pattern, run in methods(path, rows, ranges, gathers).items():
                        if pattern != "gather rows" and density != 0.05:
                            continue  # the range patterns do not depend on the gather's density
                        name = (
                            pattern
                            if pattern != "gather rows"
                            else f"gather rows ({density:.0%} of the table per chunk)"
                        )
                        cold = _drop_caches() and cold
                        start = time.perf_counter()
                        moved[(name, method)] = run()
                        results.setdefault((name, method), []).append(time.perf_counter() - start)
    rows_out = []
    for name in dict.fromkeys(n for n, _ in results):
        base = statistics.median(results[(name, "mmap")])
        for method in ("mmap", "pread/pwrite"):
            t = results[(name, method)]
            med = statistics.median(t)
            rows_out.append(
                [
                    name,
                    method,
                    f"{med:.3f}",
                    f"{min(t):.3f}-{max(t):.3f}",
                    f"{moved[(name, method)] / med / 2**30:.2f}",
                    f"{med / base:.2f}",
                ]
            )
    return SuiteResult(
        title=f"diskio: the disk tier's row moves, mmap vs pread/pwrite ({rows:,} rows x {WIDTH} "
        f"float32 = "
        f"{table_gib:.2f} GiB table, {chunks} chunks)",
        columns=[
            "pattern (one layer's sweep)",
            "method",
            "median s",
            "min-max s",
            "GiB/s",
            "vs mmap",
        ],
        rows=rows_out,
        notes=f"{reps} repetitions each, interleaved. "
        + (
            "Page cache dropped before every measurement (cold reads from the device)."
            if cold
            else "The page cache could not be dropped (not root): reads may be served from memory."
        )
        + " mmap: gnntrain.modes.hongtu.tiers.DiskTable, as the engine uses it (WILLNEED on the "
        "next chunk, "
        "DONTNEED on the finished one, msync at the end of a write sweep). pread/pwrite: one "
        "reusable buffer, "
        "posix_fadvise WILLNEED ahead, fdatasync at the end of a write sweep; a gather preads the "
        "spans "
        "covering its sorted rows (gaps under 64 KiB read through) and selects from them.",
    )
