"""``gnntrain run`` across an emulated cluster (gnntrain/launch/netem.py): one ``torchrun`` agent
per host, each in its host's network namespace (and cpu group), watched until all have exited
(:func:`run_job`, :class:`JobResult`; :func:`start_job` for a caller that acts while it runs, as
the chaos suite does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from gnntrain.launch.netem import INTERFACE, EmulatedCluster

FAILED_PEER_GRACE_S = 90.0  # after one agent fails, how long the others get to notice and exit


@dataclass
class JobResult:
    returncodes: List[int]
    outputs: List[str]  # stdout + stderr of each host's agent
    run_dirs: List[Path]  # each host's hydra.run.dir; host 0's holds rank 0's summary
    wall_s: float
    dilation: float = 1.0  # the cluster's time dilation: emulated seconds = real seconds / dilation

    @property
    def ok(self) -> bool:
        return all(rc == 0 for rc in self.returncodes)

    def summary(self) -> Optional[dict]:
        path = self.run_dirs[0] / "summary.json"
        return json.loads(path.read_text()) if path.exists() else None


def run_job(
    cluster: EmulatedCluster,
    overrides: Sequence[str],
    run_root: Path,
    ranks_per_host: int = 1,
    port: int = 29610,
    timeout_s: Optional[float] = None,
    env: Optional[Dict[str, str]] = None,
) -> JobResult:
    """``gnntrain run overrides`` across the cluster, to its end: :func:`start_job`, then
    :meth:`RunningJob.wait`."""
    return start_job(cluster, overrides, run_root, ranks_per_host, port, env).wait(timeout_s)


@dataclass
class RunningJob:
    """A job's agents while they run (:func:`start_job`): one per host, each its own session."""

    cluster: EmulatedCluster
    procs: List[subprocess.Popen]
    run_dirs: List[Path]
    started: float  # time.perf_counter() at the start

    def __post_init__(self) -> None:
        self._outputs = [_drain(p) for p in self.procs]  # no agent blocks on a full pipe

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(
        self, timeout_s: Optional[float] = None, peer_grace_s: float = FAILED_PEER_GRACE_S
    ) -> JobResult:
        """Wait until every agent has exited. Once one has failed, the others get ``peer_grace_s``
        to notice and exit; past that, or past ``timeout_s``, the rest are killed (their outputs
        say so)."""
        procs = self.procs
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        notes = [""] * len(procs)
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            failed = any(p.returncode not in (None, 0) for p in procs)
            if failed and (deadline is None or deadline > now + peer_grace_s):
                # the others should end on their own; never hang on them
                deadline = now + peer_grace_s
            if deadline is not None and now > deadline:
                for i, p in enumerate(procs):
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                        notes[i] = "\n(killed: " + (
                            "another host's agent failed)"
                            if failed
                            else f"the job ran past {timeout_s} s)"
                        )
                break
            time.sleep(0.05)
        texts = [out.result() + note for out, note in zip(self._outputs, notes)]
        return JobResult(
            [p.wait() for p in procs],
            texts,
            self.run_dirs,
            time.perf_counter() - self.started,
            self.cluster.dilation,
        )


def start_job(
    cluster: EmulatedCluster,
    overrides: Sequence[str],
    run_root: Path,
    ranks_per_host: int = 1,
    port: int = 29610,
    env: Optional[Dict[str, str]] = None,
    rendezvous_timeout_s: Optional[float] = None,
    host_cgroups: Optional[Sequence[Sequence[Path]]] = None,
) -> RunningJob:
    """Start ``gnntrain run overrides`` across the cluster: one ``torchrun`` agent per host, rank 0
    on host 0, gloo bound to the shaped interface. Each host's ranks get the host's cores
    (``hardware.cores_per_node``: its cap, or its share of this machine's) unless the overrides set
    them; a capped host's agent runs inside the host's cpu group. ``rendezvous_timeout_s``: how long
    an agent waits for the others to join (torchrun's static rendezvous waits 600 s by default, so
    a host lost before it joined would hang the others that long). ``host_cgroups``: per host, more
    cgroup folders its agent joins beside its cpu group (e.g. a memory cgroup per host, as the
    scaleout suite gives each emulated host)."""
    bin_dir = Path(sys.executable).parent
    overrides = list(overrides) + [
        f"hardware.nodes={cluster.hosts}",
        f"hardware.ranks_per_node={ranks_per_host}",
    ]
    if not any(o.startswith("hardware.cores_per_node=") for o in overrides):
        cores = cluster.cores_per_host or max(1, (os.cpu_count() or 1) // cluster.hosts)
        overrides.append(f"hardware.cores_per_node={cores}")
    base_env = dict(
        os.environ,
        **(env or {}),
        GLOO_SOCKET_IFNAME=INTERFACE,
        GNNTRAIN_NETWORK=f"emulated '{cluster.name}': {cluster.describe()}",
        GNNTRAIN_TIME_DILATION=f"{cluster.dilation:.6g}",
    )
    run_dirs = [Path(run_root) / f"host{i}" for i in range(cluster.hosts)]
    procs = []
    start = time.perf_counter()
    for i in range(cluster.hosts):
        cmd = [
            "ip",
            "netns",
            "exec",
            cluster.namespace(i),
            str(bin_dir / "torchrun"),
            f"--nnodes={cluster.hosts}",
            f"--nproc-per-node={ranks_per_host}",
            f"--node-rank={i}",
            f"--master-addr={cluster.address(0)}",
            f"--master-port={port}",
            *([f"--rdzv-conf=timeout={rendezvous_timeout_s:g}"] if rendezvous_timeout_s else []),
            "--no-python",
            str(bin_dir / "gnntrain"),
            "run",
            *overrides,
            f"hydra.run.dir={run_dirs[i]}",
        ]
        groups = [cluster.cgroup(i)] if cluster.cgroup(i) is not None else []
        groups += list(host_cgroups[i]) if host_cgroups else []
        procs.append(
            subprocess.Popen(
                joining(groups, cmd),
                env=base_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    return RunningJob(cluster, procs, run_dirs, start)


def joining(groups: Sequence[Path], cmd: Sequence[str]) -> List[str]:
    """``cmd`` run so that its process first joins each cgroup folder of ``groups`` (its
    ``cgroup.procs``), then becomes ``cmd``: every process it starts stays in them."""
    if not groups:
        return list(cmd)
    files = [str(Path(group) / "cgroup.procs") for group in groups]
    script = 'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
    return ["sh", "-c", script + 'exec "$@"', str(len(files)), *files, *cmd]


def _drain(proc: subprocess.Popen):
    """Read an agent's output on a thread; ``.result()`` gives it all once the agent has exited."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(proc.stdout.read)
    pool.shutdown(wait=False)
    return future
