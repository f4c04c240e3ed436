"""The `scaleout` suite's steps (benchmarks/suites/scaleout.py): a ``gnntrain`` command in a memory
cgroup, the one-time partitioning in host 0's cgroup, and two emulated hosts (:class:`TwoHosts`:
network namespaces as ``gnntrain netem`` makes them, each host's torchrun agent and ranks inside the
host's own memory cgroup) that run a training job, with each host's cgroup peak."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from benchmarks.suites.cgroup_sampler import CgroupPeak, CgroupSampler
from benchmarks.suites.moonshot import _in_cgroup, _peak, memory_cgroup
from gnntrain.launch import netem
from gnntrain.launch.netem_jobs import JobResult, RunningJob, start_job

GNNTRAIN = [sys.executable, "-m", "gnntrain"]
HOSTS = 2
RANKS_PER_HOST = 2
START_LIMIT_S = 3600.0  # a job's launch to its end; past it the job is killed
ENV = {"GNNTRAIN_OFFLINE": "1"}


@dataclass
class Step:
    """One step's outcome: its status, wall seconds, the peak of each cgroup it ran in (bytes),
    and a training run's summary.json and run folder (host 0's)."""

    status: str
    seconds: float
    peaks: List[Optional[int]]
    summary: Optional[dict] = None
    run_dir: Optional[Path] = None
    figures: dict = field(default_factory=dict)
    at_peak: List[CgroupPeak] = field(default_factory=list)  # each cgroup's breakdown at its peak

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def oom_kills(group) -> int:
    """How many processes the kernel killed in the cgroup for exceeding its cap (v1
    ``memory.oom_control``, v2 ``memory.events``), 0 where it does not say."""
    if group is None:
        return 0
    for name in ("memory.oom_control", "memory.events"):
        with contextlib.suppress(OSError):
            for line in (group[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def _status(code: int, kills: int, summary: Optional[dict] = None) -> str:
    if kills:
        return f"OOM-killed ({kills} process(es))"
    if code != 0:
        return f"exit {code}"
    if summary is not None and summary.get("status") != "completed":
        return str(summary.get("status"))
    return "ok"


def _read_summary(run_dir: Path) -> Optional[dict]:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def step(command: List[str], group, log: Path, run_dir: Optional[Path] = None) -> Step:
    """Run ``command`` in the cgroup: its outcome, with the cgroup's peak (and, with ``run_dir``,
    the run's summary)."""
    _peak(group)  # reset where the kernel allows it
    kills = oom_kills(group)
    start = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_in_cgroup(group[0] if group else None),
            env={**os.environ, **ENV},
        ).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        print(f"scaleout: {log.stem} exited {code}:\n{log.read_text()[-3000:]}", file=sys.stderr)
    summary = _read_summary(run_dir) if run_dir is not None else None
    status = _status(code, oom_kills(group) - kills, summary)
    return Step(status, seconds, [_peak(group)], summary, run_dir)


def partition_once(overrides: Sequence[str]) -> None:
    """(run in host 0's cgroup) The partitioning of the plan for ``overrides`` into the partition
    cache, as the job's first rank would make it (no part of the store is built): prints its
    figures as JSON."""
    from gnntrain.api import compose
    from gnntrain.launch.shards import load_and_partition
    from gnntrain.plan import build_plan

    # as gnntrain partition plans: parts are made, nothing trains, so the run's plan can then size
    # each rank's halo from this partitioning instead of the bound
    plan = build_plan(compose(list(overrides)), training=False)
    start = time.perf_counter()
    data, _, part, hit = load_and_partition(plan)
    metrics = part.metrics if part is not None else None
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - start,
                "cache_hit": hit,
                "edges": data.num_edges,
                "edge_cut": getattr(metrics, "edge_cut", None),
                "parts": plan.world_size,
            }
        )
    )


def partition_step(overrides: Sequence[str], group, log: Path) -> Step:
    """:func:`partition_once` in ``group``, as a step."""
    code = (
        "from benchmarks.suites.scaleout_hosts import partition_once; "
        f"partition_once({list(overrides)!r})"
    )
    done = step([sys.executable, "-c", code], group, log)
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    if done.ok and lines:
        done.figures = json.loads(lines[-1])
    return done


class TwoHosts:
    """Two emulated hosts on one machine: a ``gnntrain netem`` cluster (links of ``gbit`` Gbit/s)
    whose host i runs inside its own memory cgroup capped at ``cap`` bytes. A context manager: the
    cluster and the cgroups are removed on leaving it, whatever happened."""

    def __init__(self, cap: int, gbit: float, cache: Path):
        self.cap, self.gbit, self.cache = cap, gbit, cache
        self.name = f"gtso{os.getpid() % 100000}"
        self.groups: list = []
        self.cluster: Optional[netem.EmulatedCluster] = None
        self._stack = contextlib.ExitStack()
        self._port = 29700 + os.getpid() % 100
        self._sampler = CgroupSampler([])

    def __enter__(self) -> "TwoHosts":
        with contextlib.ExitStack() as stack:
            self.groups = [
                stack.enter_context(
                    memory_cgroup(self.cap, f"gnntrain-scaleout-{os.getpid()}-h{i}")
                )
                for i in range(HOSTS)
            ]
            if netem.STATE_DIR.joinpath(f"{self.name}.json").exists():
                netem.destroy(self.name)  # one an earlier run of this pid left
            self.cluster = netem.create(self.name, HOSTS, netem.Link(self.gbit))
            stack.callback(netem.destroy, self.name)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self) -> str:
        return self.cluster.describe() if self.cluster else "no cluster"

    def start(self, overrides: Sequence[str], run_root: Path) -> RunningJob:
        """Start ``gnntrain run overrides`` on both hosts (each host's ranks in its cgroup), the
        cgroups' peaks reset."""
        for group in self.groups:
            _peak(group)
        self._port += 1
        self._kills = [oom_kills(g) for g in self.groups]
        self._sampler = CgroupSampler([g[0] if g else None for g in self.groups]).start()
        return start_job(
            self.cluster,
            list(overrides),
            run_root,
            RANKS_PER_HOST,
            self._port,
            {**ENV, "GNNTRAIN_CACHE_DIR": str(self.cache)},
            rendezvous_timeout_s=120,
            host_cgroups=[[g[0]] if g else [] for g in self.groups],
        )

    def finish(self, job: RunningJob, result: JobResult) -> Step:
        """The job's outcome as a step: each host's cgroup peak, its summary (host 0's)."""
        kills = sum(oom_kills(g) - k for g, k in zip(self.groups, self._kills))
        at_peak = self._sampler.stop()
        code = next((rc for rc in result.returncodes if rc != 0), 0)
        summary = result.summary()
        if code != 0 and not kills:
            # gnntrain's own one-line errors, else the outputs' ends (torchrun's report)
            said = [line for out in result.outputs for line in out.splitlines()]
            said = [line for line in said if line.startswith("error:")] or [
                out[-2000:] for out in result.outputs
            ]
            print(
                f"scaleout: a job in {job.run_dirs[0].parent} failed:\n" + "\n".join(said),
                file=sys.stderr,
            )
        return Step(
            _status(code, kills, summary),
            result.wall_s,
            [_peak(g) for g in self.groups],
            summary,
            job.run_dirs[0],
            at_peak=at_peak,
        )

    def run(self, overrides: Sequence[str], run_root: Path) -> Step:
        """``gnntrain run overrides`` on both hosts, to its end."""
        job = self.start(overrides, run_root)
        return self.finish(job, job.wait(START_LIMIT_S))
