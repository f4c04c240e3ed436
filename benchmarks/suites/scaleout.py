"""The `scaleout` suite (#55), on one host: the whole multi-rank path of a graph larger than one
process would hold, every step inside a memory cgroup, beside the one-rank direct path.

The graph is the `communities` generator's (feat 128), written to disk block by block; the model a
3-layer GCN 128 in float32. Steps, each a fresh `gnntrain` process in a cgroup capped at
``SCALEOUT_CAP_GIB`` (default 10), so that exceeding it kills the step:

1. ``gnntrain generate`` writes the graph;
2. ``gnntrain partition`` partitions it with KaMinPar into 4 parts and builds the part store part by
   part from the mapped CSR (no process holds the edge lists);
3. ``mode=partition`` at p = 4 trains 2 epochs (the plan sets the saved-tensor disk tier's budget
   where the estimate would not fit the cap);
4. HongTu's direct path on one rank trains the same 2 epochs with every table on disk (the
   moonshot's configuration), the baseline the issue prices partition against (goal: epoch <= 1.5x).

Sizes: ``SCALEOUT_NODES`` (default 10,000,000, the moonshot's; ``--quick``: 200,000). Not here yet:
two emulated hosts in network namespaces (`gnntrain netem`), one cgroup each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite
from benchmarks.suites.moonshot import _gib, _in_cgroup, _peak, memory_cgroup

GNNTRAIN = [sys.executable, "-m", "gnntrain"]
MODEL = ["model.layers=3", "model.hidden=128", "train.dtype=float32", "train.eval_every=2"]


def _step(args: List[str], group, log: Path) -> dict:
    """Run one ``gnntrain`` command in the cgroup: its exit code, seconds and the cgroup's peak."""
    _peak(group)  # reset where the kernel allows it
    start = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(
            GNNTRAIN + args,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_in_cgroup(group[0] if group else None),
            env={**os.environ, "GNNTRAIN_OFFLINE": "1"},
        ).returncode
    if code != 0:
        print(
            f"scaleout: gnntrain {args[0]} exited {code}:\n{log.read_text()[-3000:]}",
            file=sys.stderr,
        )
    return {"code": code, "seconds": time.perf_counter() - start, "peak": _peak(group)}


def _summary(run_dir: Path) -> Optional[dict]:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def _median_epoch(summary: Optional[dict]) -> Optional[float]:
    if not summary or not summary.get("epoch_time_s"):
        return None
    times = summary["epoch_time_s"]
    return sorted(times)[len(times) // 2]


@suite("scaleout")
def suite_scaleout(quick: bool) -> SuiteResult:
    nodes = 200_000 if quick else int(os.environ.get("SCALEOUT_NODES", 10_000_000))
    cap = int(float(os.environ.get("SCALEOUT_CAP_GIB", 10)) * 2**30)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="gnntrain-scaleout-", dir="/var/tmp") as tmp,
        memory_cgroup(cap) as group,
    ):
        tmp = Path(tmp)
        graph = tmp / "graph"
        cache = [f"cache_dir={tmp / 'cache'}", f"hardware.host_memory_gb={cap / 2**30:g}"]
        files = ["dataset=files", f"dataset.path={graph}"]
        gen = _step(
            [
                "generate",
                "--out",
                str(graph),
                "dataset=communities",
                f"dataset.num_nodes={nodes}",
                "dataset.feat_dim=128",
            ],
            group,
            tmp / "generate.log",
        )
        meta = json.loads((graph / "meta.json").read_text()) if gen["code"] == 0 else {}
        rows.append(["generate (communities, block writer)", gen, None, None])
        partition = files + MODEL + cache + ["mode=partition", "partitioner=kaminpar"]
        partition += ["hardware.ranks_per_node=4"]
        store = _step(["partition"] + partition, group, tmp / "partition.log")
        rows.append(["partition (KaMinPar, 4 parts) + part store, part by part", store, None, None])
        runs = {
            "mode=partition p=4, 2 epochs": partition,
            "HongTu direct path, 1 rank, tables on disk, 2 epochs": files
            + MODEL
            + cache
            + ["mode=hongtu", "mode.direct=true", "mode.host_budget=0", "mode.chunks=0"]
            + ["hardware.ranks_per_node=1", "kernel=native"],
        }
        epochs = {}
        for name, overrides in runs.items():
            run_dir = tmp / name.split()[0].replace("=", "-")
            step = _step(
                ["run"] + overrides + ["train.epochs=2", f"hydra.run.dir={run_dir}"],
                group,
                tmp / f"{run_dir.name}.log",
            )
            summary = _summary(run_dir)
            epochs[name] = _median_epoch(summary)
            rows.append([name, step, summary, epochs[name]])
    table = []
    for name, step, summary, epoch in rows:
        by_kind = ((summary or {}).get("comm_bytes") or {}).get("by_kind") or {}
        sent = sum(v for k, v in by_kind.items() if not k.startswith("disk"))
        table.append(
            [
                name,
                "ok" if step["code"] == 0 else f"exit {step['code']}",
                f"{step['seconds']:.0f}",
                _gib(step["peak"]),
                "-" if epoch is None else f"{epoch:.1f}",
                "-" if summary is None else _gib(sent),
                "-" if summary is None else _gib(by_kind.get("disk_read", 0)),
                "-" if summary is None else _gib(by_kind.get("disk_write", 0)),
            ]
        )
    partition_epoch, direct_epoch = epochs.values()
    ratio = partition_epoch / direct_epoch if partition_epoch and direct_epoch else float("nan")
    return SuiteResult(
        title=f"scale-out on one host: communities graph, {meta.get('num_nodes', nodes):,} nodes, "
        f"{meta.get('num_edges', 0):,} directed edges, feat 128, 3-layer GCN 128, float32",
        columns=[
            "step",
            "status",
            "wall (s)",
            "cgroup peak GiB",
            "median epoch (s)",
            "sent per epoch GiB",
            "disk read per epoch GiB",
            "disk written per epoch GiB",
        ],
        rows=table,
        notes=f"Every step ran in one memory cgroup capped at {cap / 2**30:g} GiB (its peak "
        "includes page cache). partition p=4 epoch / direct path epoch = "
        f"{ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'}). Two emulated hosts "
        "(network namespaces) with a cgroup each are not part of this suite yet.",
    )
