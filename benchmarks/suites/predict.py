"""The `predict` bench suite (#39): on a 1M-node csbm graph (average degree 20, f=128, 3-layer GCN
hidden 128), train `mode=partition` at p=4 for 2 epochs, then `gnntrain predict` its logits and its
embeddings with the same plan; each rank's peak (VmHWM, from summary.json) of the predict job
against the training job's. Run with ``python -m benchmarks predict`` (``--quick``: 50k nodes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite

GIB = 2**30


def _gnntrain(args, cwd: Path) -> float:
    exe = Path(sys.executable).parent / "gnntrain"
    start = time.perf_counter()
    proc = subprocess.run(
        [str(exe)] + [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, GNNTRAIN_OFFLINE="1"),
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    return time.perf_counter() - start


@suite("predict")
def suite_predict(quick: bool) -> SuiteResult:
    n = 50_000 if quick else 1_000_000
    graph = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=20",
        "dataset.feat_dim=128",
        "model=gcn",
        "model.layers=3",
        "model.hidden=128",
        "mode=partition",
        "hardware.ranks_per_node=4",
        "kernel=torch",
        "comm_timeout_s=1800",
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gnntrain-bench-predict-", dir="/var/tmp") as tmp:
        tmp = Path(tmp)
        cache = f"cache_dir={tmp}/cache"
        # the store, built once
        _gnntrain(["partition", cache, f"hydra.run.dir={tmp}/part"] + graph, tmp)
        wall = _gnntrain(
            ["run", cache, f"hydra.run.dir={tmp}/run", "train.epochs=2", "train.progress=false"]
            + graph,
            tmp,
        )
        trained = json.loads((tmp / "run" / "summary.json").read_text())
        train_peaks = trained["peak_memory_bytes"]["host_per_rank"]
        rows.append(
            [
                "train 2 epochs",
                f"{wall:.0f}",
                " / ".join(f"{p / GIB:.2f}" for p in train_peaks),
                f"{max(train_peaks) / GIB:.2f}",
                "1.00",
                "",
            ]
        )
        for what, fmt in (("logits", "parquet"), ("embeddings", "npy")):
            out = tmp / f"{what}.{fmt}"
            wall = _gnntrain(
                ["predict", tmp / "run", "--what", what, "--format", fmt, "--out", out, cache], tmp
            )
            summary = json.loads((tmp / f".predict-{what}" / "summary.json").read_text())
            peaks = summary["peak_memory_bytes"]["host_per_rank"]
            ratio = max(peaks) / max(train_peaks)
            every = all(p <= t for p, t in zip(peaks, train_peaks))
            rows.append(
                [
                    f"predict {what} ({fmt}, {out.stat().st_size / GIB:.2f} GiB)",
                    f"{wall:.0f}",
                    " / ".join(f"{p / GIB:.2f}" for p in peaks),
                    f"{max(peaks) / GIB:.2f}",
                    f"{ratio:.2f}",
                    "every rank <= its training peak " + ("(met)" if every else "(MISSED)"),
                ]
            )
    return SuiteResult(
        title=f"predict with the run's own plan: csbm {n:,} nodes, degree 20, f=128, 3-layer GCN "
        f"hidden 128, "
        f"partition p=4",
        columns=[
            "job",
            "wall s (incl. start-up)",
            "peak host GiB per rank",
            "max rank",
            "vs training",
            "goal",
        ],
        rows=rows,
        notes="Each job is a `gnntrain` command of its own; per-rank peaks are the ranks' VmHWM "
        "from the job's "
        "summary.json. The partition store is built once before (gnntrain partition), so neither "
        "job "
        "pays for it. Embeddings: the input of the last layer (128 wide). Ranks share 2 cores.",
    )
