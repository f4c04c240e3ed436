"""The `moonshot` suite (#40): the 10M-node, 200M-directed-edge csbm, generated out of core inside a memory
cgroup capped at 10 GiB, so exceeding the cap kills it. Training it with HongTu's disk tier (2 epochs) is the
issue's next step and is not run yet: this suite records the generation, the first half of the report."""
from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite
from gnntrain.data import cache_folder

CAP_BYTES = 10 * 2**30
ROOT = Path("/sys/fs/cgroup")


@contextlib.contextmanager
def memory_cgroup(cap: int) -> Iterator[Optional[Tuple[Path, str]]]:
    """(a fresh memory cgroup capped at ``cap``, the file holding its peak), or None where none can be made
    (not root, no memory controller): cgroup v1 ``memory.limit_in_bytes``, else v2 ``memory.max``."""
    name = f"gnntrain-moonshot-{os.getpid()}"
    made: Optional[Tuple[Path, str]] = None
    for folder, limit, no_swap, peak in (
            (ROOT / "memory" / name, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
             "memory.max_usage_in_bytes"),
            (ROOT / name, "memory.max", "memory.swap.max", "memory.peak")):
        if not folder.parent.is_dir() or not os.access(folder.parent, os.W_OK):
            continue
        try:
            folder.mkdir()
            (folder / limit).write_text(str(cap))
            if (folder / no_swap).exists():  # exceeding the cap kills instead of swapping
                (folder / no_swap).write_text(str(cap) if no_swap.startswith("memory.memsw") else "0")
            made = (folder, peak)
            break
        except OSError:
            with contextlib.suppress(OSError):
                folder.rmdir()
    try:
        yield made
    finally:
        if made is not None:
            with contextlib.suppress(OSError):
                made[0].rmdir()


def _in_cgroup(folder: Optional[Path]):
    def enter() -> None:  # in the child, before exec: every process it starts stays in the group
        if folder is not None:
            (folder / "cgroup.procs").write_text(str(os.getpid()))
    return enter


@suite("moonshot")
def suite_moonshot(quick: bool) -> SuiteResult:
    """`gnntrain generate` of the issue's graph (csbm, 10M nodes, average degree 20, 128 features) in a
    10 GiB memory cgroup: wall time, the process's peak RSS, the cgroup's peak (page cache included)."""
    n = 200_000 if quick else 10_000_000
    options = ["dataset=csbm", f"dataset.num_nodes={n}", "dataset.avg_degree=20", "dataset.feat_dim=128"]
    rows = []
    scratch = cache_folder(None)  # on disk (a tmpfs /tmp would hold the graph in memory charged to the cgroup)
    with tempfile.TemporaryDirectory(prefix="moonshot-", dir=scratch) as tmp, memory_cgroup(CAP_BYTES) as group:
        out = Path(tmp) / "graph"
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "gnntrain", "generate", "--out", str(out), *options],
                              capture_output=True, text=True,
                              preexec_fn=_in_cgroup(group[0] if group else None))
        wall = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        peak_file = group[0] / group[1] if group else None
        cgroup_peak = int(peak_file.read_text()) if peak_file is not None and peak_file.exists() else None
        if proc.returncode != 0:
            tail = " / ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            rows.append(["generate", "-", "-", "-", "-", f"failed (exit {proc.returncode}): {tail[-300:]}"])
        else:
            import json

            meta = json.loads((out / "meta.json").read_text())
            size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
            rows.append([f"gnntrain generate ({meta['num_nodes']:,} nodes, {meta['num_edges']:,} directed edges)",
                         f"{wall:.0f}", f"{rss / 2**30:.2f}" + ("" if rss > before * 1024 else " (an earlier child's)"),
                         "-" if cgroup_peak is None else f"{cgroup_peak / 2**30:.2f}", f"{size / 2**30:.2f}", "done"])
        rows.append(["train 2 epochs, mode=hongtu with the disk tier", "-", "-", "-", "-",
                     "not run yet: HongTu still builds its topology from the whole edge list in memory (#40)"])
    capped = (f"inside a memory cgroup capped at {CAP_BYTES / 2**30:.0f} GiB ({group[0].parent.name if group else ''})"
              if group else "WITHOUT a memory cap (no writable memory cgroup here: run as root)")
    return SuiteResult(
        title=f"moonshot: csbm {n:,} nodes, average degree 20, feat 128, {capped}",
        columns=["step", "wall (s)", "process peak RSS (GiB)", "cgroup peak, page cache included (GiB)",
                 "on disk (GiB)", "status"],
        rows=rows,
        notes="The graph is written block by block (gnntrain/data/ingest/generated.py): edges through ingest's "
              "counting sort in files, feature rows appended as drawn, labels from the finished CSR; the folder "
              "holds the same graph as dataset=csbm with these options. Process peak RSS counts the mapped pages of "
              "the CSR it writes; the cgroup's peak also counts the page cache of every file written.",
    )
