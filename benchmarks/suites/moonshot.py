"""The `moonshot` suite (#40): the 10M-node, 200M-directed-edge csbm, generated out of core and
trained for 2 full-graph epochs (3-layer GCN 128, float32) by HongTu's direct path with every vertex
table on the disk tier, each step inside a memory cgroup capped at 10 GiB, so exceeding the cap
kills it. The training run is killed (SIGKILL) during epoch 2 and resumed from its epoch-1
checkpoint; the report gives the generation time, each epoch's time, the host peaks, the disk bytes
per epoch (counted and the kernel's block I/O) against the plan's
prediction, and whether the disk tier left any file behind."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
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
def memory_cgroup(cap: int, name: str = "") -> Iterator[Optional[Tuple[Path, str]]]:
    """(a fresh memory cgroup capped at ``cap``, the file holding its peak), or None where none can
    be made (not root, no memory controller): cgroup v1 ``memory.limit_in_bytes``, else v2
    ``memory.max``. ``name``: the group's (default ``gnntrain-moonshot-<pid>``)."""
    name = name or f"gnntrain-moonshot-{os.getpid()}"
    made: Optional[Tuple[Path, str]] = None
    for folder, limit, no_swap, peak in (
        (
            ROOT / "memory" / name,
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "memory.max_usage_in_bytes",
        ),
        (ROOT / name, "memory.max", "memory.swap.max", "memory.peak"),
    ):
        if not folder.parent.is_dir() or not os.access(folder.parent, os.W_OK):
            continue
        try:
            folder.mkdir()
            (folder / limit).write_text(str(cap))
            if (folder / no_swap).exists():  # exceeding the cap kills instead of swapping
                (folder / no_swap).write_text(
                    str(cap) if no_swap.startswith("memory.memsw") else "0"
                )
            made = (folder, peak)
            break
        except OSError:
            with contextlib.suppress(OSError):
                folder.rmdir()
    try:
        yield made
    finally:
        for _ in range(50 if made is not None else 0):  # killed processes leave it a moment later
            try:
                made[0].rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def _in_cgroup(folder: Optional[Path]):
    def enter() -> None:  # in the child, before exec: every process it starts stays in the group
        if folder is not None:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    return enter


KILL_INTO_EPOCH_S = 60  # how long into epoch 2 the first training run is killed (--quick: 1 s)


def _peak(group: Optional[Tuple[Path, str]]) -> Optional[int]:
    """The cgroup's peak bytes so far (page cache included), then reset where the kernel allows
    it."""
    if group is None or not (group[0] / group[1]).exists():
        return None
    peak = int((group[0] / group[1]).read_text())
    with contextlib.suppress(OSError):
        (group[0] / group[1]).write_text("0")
    return peak


def _gib(value: Optional[float]) -> str:
    return "-" if value is None else f"{value / 2**30:.2f}"


def _epochs(run_dir: Path) -> list:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [
        json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")
    ]


def _train(
    command: list,
    group,
    run_dir: Path,
    kill_after_epochs: Optional[int],
    delay: float = KILL_INTO_EPOCH_S,
) -> Tuple[int, float, bool]:
    """Run ``command`` in the cgroup; with ``kill_after_epochs``, SIGKILL it ``delay`` seconds after
    that many epochs are logged and checkpointed. (exit code, wall seconds, whether it was
    killed)."""
    start = time.perf_counter()
    log = open(run_dir.parent / f"train-{int(time.time())}.log", "w")  # closed below
    proc = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_in_cgroup(group[0] if group else None),
        start_new_session=True,
    )
    killed = False
    if kill_after_epochs is not None:
        while proc.poll() is None:
            done = len(_epochs(run_dir)) >= kill_after_epochs and any(
                (run_dir / "checkpoints").glob("*")
            )
            if done:
                time.sleep(delay)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                break
            time.sleep(2)
    proc.wait()
    log.close()
    if proc.returncode != 0 and not killed:
        print(
            f"moonshot: {' '.join(command[3:6])} ... exited {proc.returncode}:\n"
            + "\n".join(Path(log.name).read_text().splitlines()[-15:]),
            file=sys.stderr,
        )
    return proc.returncode, time.perf_counter() - start, killed


@suite("moonshot")
def suite_moonshot(quick: bool) -> SuiteResult:
    """generate, train 2 epochs, kill during epoch 2, resume: each in a 10 GiB memory cgroup."""
    n = 200_000 if quick else 10_000_000
    options = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=20",
        "dataset.feat_dim=128",
    ]
    rows = []
    # on disk (a tmpfs /tmp would hold the graph in memory charged to the cgroup)
    scratch = cache_folder(None)
    with (
        tempfile.TemporaryDirectory(prefix="moonshot-", dir=scratch) as tmp,
        memory_cgroup(CAP_BYTES) as group,
    ):
        out = Path(tmp) / "graph"
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "gnntrain", "generate", "--out", str(out), *options],
            capture_output=True,
            text=True,
            preexec_fn=_in_cgroup(group[0] if group else None),
        )
        wall = time.perf_counter() - start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        cgroup_peak = _peak(group)
        if proc.returncode != 0:
            tail = " / ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            rows.append(
                ["generate", "-", "-", "-", "-", f"failed (exit {proc.returncode}): {tail[-300:]}"]
            )
        else:
            meta = json.loads((out / "meta.json").read_text())
            size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
            rows.append(
                [
                    f"gnntrain generate ({meta['num_nodes']:,} nodes, {meta['num_edges']:,} "
                    "directed edges)",
                    f"{wall:.0f}",
                    _gib(rss),
                    _gib(cgroup_peak),
                    f"{size / 2**30:.2f}",
                    "done",
                ]
            )
            rows += _train_rows(out, Path(tmp), group, 1.0 if quick else KILL_INTO_EPOCH_S)
            rows.append(_partition_row(out, group))
    capped = (
        f"inside a memory cgroup capped at {CAP_BYTES / 2**30:.0f} GiB "
        f"({group[0].parent.name if group else ''})"
        if group
        else "WITHOUT a memory cap (no writable memory cgroup here: run as root)"
    )
    return SuiteResult(
        title=f"moonshot: csbm {n:,} nodes, average degree 20, feat 128, {capped}",
        columns=[
            "step",
            "wall (s)",
            "process peak RSS (GiB)",
            "cgroup peak, page cache included (GiB)",
            "on disk (GiB)",
            "status",
        ],
        rows=rows,
        notes="The graph is written block by block (gnntrain/data/ingest/generated.py). Training: "
        "mode=hongtu "
        "mode.direct=true mode.host_budget=0 (every vertex table in a memory-mapped file), "
        "mode.chunks=0, "
        "3-layer GCN 128, float32, 2 epochs, checkpoint every epoch, evaluation after epoch 2 "
        "only; the "
        "first run is killed with SIGKILL 60 s (--quick: 1 s) into epoch 2 and resumed "
        "(train.resume=true). "
        "Process peak RSS counts the mapped pages of the tables it touches; the cgroup's peak also "
        "counts "
        "the page cache. Disk bytes: 'counted' is what the engine read and wrote through the tier, "
        "'block I/O' the kernel's /proc/self/io of the epoch (reads served by the page cache are "
        "not in it).",
    )


PARTS = 4


def ldg_probe(graph: str, parts: int) -> None:
    """(run in the cgroup) partitioner=ldg of the ingested ``graph`` through the mode's partition
    hook, which streams the mapped CSR; prints seconds, the metrics and, for scale, those of hashing
    (random parts)."""
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.partition import partition_graph
    from gnntrain.partition.partitioners import random_parts
    from gnntrain.partition.streaming import csr_metrics

    data = load_graph_dir(graph)
    cfg = type(
        "Cfg",
        (),
        {"name": "ldg", "seed": 0, "reorder": None, "vertex_weights": "nnz", "imbalance_eps": 0.05},
    )()
    start = time.perf_counter()
    part, _ = partition_graph(
        None, None, data.num_nodes, parts, cfg, data.content_hash, None, csr=data.csr
    )
    seconds = time.perf_counter() - start
    hashed = csr_metrics(*data.csr, random_parts(data.num_nodes, parts, 0), parts)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "edge_cut": part.metrics.edge_cut,
                "hashed_cut": hashed.edge_cut,
                "edges": data.num_edges,
                "vertex_balance": part.metrics.vertex_balance,
                "nnz_balance": part.metrics.nnz_balance,
                "edge_lists_built": data.edges_built,
                "total_volume": part.metrics.total_volume,
                "hashed_volume": hashed.total_volume,
                "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
        )
    )


def _partition_row(graph: Path, group) -> list:
    code = f"from benchmarks.suites.moonshot import ldg_probe; ldg_probe({str(graph)!r}, {PARTS})"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        preexec_fn=_in_cgroup(group[0] if group else None),
    )
    wall = time.perf_counter() - start
    peak = _peak(group)
    step = f"partition into {PARTS} parts, partitioner=ldg streaming the mapped CSR"
    if proc.returncode != 0:
        return [step, f"{wall:.0f}", "-", _gib(peak), "-", f"failed: {proc.stderr.strip()[-300:]}"]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return [
        step,
        f"{r['seconds']:.0f}",
        _gib(r["rss"]),
        _gib(peak),
        "-",
        f"edge cut {r['edge_cut'] / r['edges']:.1%} of edges (hashing: "
        f"{r['hashed_cut'] / r['edges']:.1%}); "
        f"total volume {r['total_volume']:,} rows (hashing: {r['hashed_volume']:,}); nnz balance "
        f"{r['nnz_balance']:.3f}, vertex balance {r['vertex_balance']:.3f}; edge lists built: "
        f"{r['edge_lists_built']}",
    ]


def _train_rows(graph: Path, tmp: Path, group, delay: float) -> list:
    run_dir, disk = tmp / "run", tmp / "disk-tier"
    command = [
        sys.executable,
        "-m",
        "gnntrain",
        "run",
        "dataset=files",
        f"dataset.path={graph}",
        "mode=hongtu",
        "mode.direct=true",
        "hardware.ranks_per_node=1",
        "kernel=native",
        "model.layers=3",
        "model.hidden=128",
        "train.dtype=float32",
        "train.epochs=2",
        "train.checkpoint_every=1",
        "train.eval_every=2",
        "train.progress=false",
        "mode.host_budget=0",
        "mode.chunks=0",
        f"mode.disk_dir={disk}",
        f"hydra.run.dir={run_dir}",
    ]
    rows = []
    code, wall, killed = _train(command, group, run_dir, kill_after_epochs=1, delay=delay)
    peak = _peak(group)
    first = _epochs(run_dir)
    left = sorted(p.name for p in disk.rglob("*.bin"))
    if not first:
        return [
            [
                "train (epochs 1-2)",
                f"{wall:.0f}",
                "-",
                _gib(peak),
                "-",
                f"failed (exit {code}) before epoch 1",
            ]
        ]
    rows.append(
        [
            "train epoch 1 (the run's first: includes A·x of the inputs, once per run)",
            f"{first[0]['epoch_time_s']:.0f}",
            "-",
            _gib(peak),
            "-",
            f"loss {first[0]['loss']:.4f}; then SIGKILL {delay:.0f} s into epoch 2"
            if killed
            else f"not killed (exit {code})",
        ]
    )
    rows.append(
        [
            "after the kill: disk-tier files of the killed run",
            "-",
            "-",
            "-",
            "-",
            ", ".join(left) or "none",
        ]
    )
    code, wall, _ = _train(command + ["train.resume=true"], group, run_dir, kill_after_epochs=None)
    peak = _peak(group)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    # a failed run's summary has empty fields
    summary = {k: v for k, v in summary.items() if v is not None}
    epochs = _epochs(run_dir)
    status = summary.get("status", f"exit {code}") + (
        f": {summary['error'][-200:]}" if "error" in summary else ""
    )
    left = sorted(p.name for p in disk.rglob("*")) if disk.exists() else []
    tiers = summary.get("mode_report", {}).get("tiers", {})
    rss = summary.get("peak_memory_bytes", {}).get("host_max_rank")
    rows.append(
        [
            "resumed: train epoch 2 (+ evaluation)",
            f"{epochs[-1]['epoch_time_s']:.0f}" if epochs else "-",
            _gib(rss),
            _gib(peak),
            "-",
            f"{status}; loss {epochs[-1]['loss']:.4f}; "
            f"test accuracy {summary.get('accuracy', {}).get('test', float('nan')):.4f}; "
            f"disk-tier files left: {', '.join(left) or 'none'}"
            if epochs
            else status,
        ]
    )
    predicted = tiers.get("predicted_disk_bytes_per_epoch", {})
    counted = tiers.get("measured_disk_bytes_per_epoch", {})
    block = tiers.get("block_io_bytes_last_epoch", {})
    for kind, io in (("disk_read", "read_bytes"), ("disk_write", "write_bytes")):
        if kind in predicted:
            ratio = block.get(io, 0) / predicted[kind] if predicted[kind] else float("nan")
            rows.append(
                [
                    f"epoch 2 {kind.replace('_', ' ')}: predicted / counted / block I/O (GiB)",
                    "-",
                    "-",
                    "-",
                    f"{_gib(predicted[kind])} / {_gib(counted.get(kind))} / {_gib(block.get(io))}",
                    f"block I/O / predicted = {ratio:.2f}",
                ]
            )
    return rows
