"""Rank identity from torchrun / SLURM environments, and the local launcher's
failure handling: a rank that raises, is killed or stalls ends the job
promptly with a message naming it, and summary.json says failed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from conftest import read_summary

from gnntrain.launch.rank_identity import expand_nodelist, external_identity


def test_no_external_launcher():
    assert external_identity({}) is None
    # one task: spawn locally
    assert external_identity({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None


def test_torchrun_environment():
    ident = external_identity(
        {
            "RANK": "2",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "node7",
            "MASTER_PORT": "29555",
        }
    )
    assert (ident.rank, ident.world_size, ident.master_addr, ident.master_port, ident.source) == (
        2,
        4,
        "node7",
        29555,
        "torchrun",
    )


def test_slurm_environment_derives_master_and_port():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
    }
    ident = external_identity(env)
    assert (ident.rank, ident.world_size, ident.local_rank, ident.source) == (3, 4, 1, "slurm")
    assert ident.master_addr == "gpu07" and ident.master_port == 20000 + 1234


@pytest.mark.parametrize(
    "nodelist,hosts",
    [
        ("gpu[07-09,12]", ["gpu07", "gpu08", "gpu09", "gpu12"]),
        ("a1,b[1-2]", ["a1", "b1", "b2"]),
        ("single", ["single"]),
    ],
)
def test_nodelist_expansion(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


RUN_MARK = "GNNTRAIN_TEST_RUN_MARK"  # set in the launcher's environment; spawned ranks inherit it


def _run_ranks(mark: str) -> dict:
    """Live rank processes of the run marked ``mark``: spawned interpreters (``spawn_main``), or the
    fork server's children (the server itself is not a rank), whose environment carries the mark.
    Found through /proc, whoever their parent is now."""
    found = {}
    for pid in psutil.pids():
        try:
            p = psutil.Process(pid)
            command = " ".join(p.cmdline())
            if p.environ().get(RUN_MARK) != mark:
                continue
            forked = (
                "forkserver" in command
                and p.parent() is not None
                and "forkserver" in " ".join(p.parent().cmdline())
            )
            if "spawn_main" not in command and not forked:
                continue
            if p.status() != psutil.STATUS_ZOMBIE:
                found[pid] = p
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _alive(p: psutil.Process) -> bool:
    try:  # is_running also compares the creation time: a reused pid is not our rank
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


# the stall ends by the collective timeout
@pytest.mark.parametrize(
    "action,needle", [("raise", "injected fault"), ("kill", "SIGKILL"), ("hang", "Timed out")]
)
def test_failing_rank_ends_the_job(tmp_path, action, needle):
    mark = uuid.uuid4().hex
    # the fault comes late (epoch 20 of 24), so the scan below sees the ranks alive before one fails
    env = {**os.environ, "GNNTRAIN_INJECT_FAULT": f"1:20:{action}", RUN_MARK: mark}
    exe = Path(sys.executable).parent / "gnntrain"
    cmd = ([str(exe)] if exe.exists() else [sys.executable, "-m", "gnntrain"]) + [
        # kernel=torch: no DGL import inside the ranks, so a short collective timeout only catches
        # the fault
        "run",
        f"hydra.run.dir={tmp_path}/run",
        f"cache_dir={tmp_path}/cache",
        "train.epochs=24",
        "comm_timeout_s=5",
        "kernel=torch",
    ]
    # output to files, not pipes: a leftover process holding a pipe would stall the read, not fail
    # the check
    seen = {}
    start = time.perf_counter()
    with open(tmp_path / "out.txt", "w") as out_f:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out_f, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None and time.perf_counter() - start < 120:
                seen.update(_run_ranks(mark))  # the rank pids, recorded while they run
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    elapsed = time.perf_counter() - start
    out = (tmp_path / "out.txt").read_text()
    leftovers = {pid: p for pid, p in {**seen, **_run_ranks(mark)}.items() if _alive(p)}
    for p in leftovers.values():  # this test's own processes: do not leave them to the next test
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert proc.returncode == 1, out
    # rank processes were seen running, so the leftover check looks at real processes (a scan of
    # /proc on a loaded 2-core machine can take longer than a short-lived rank lives, so one is
    # enough)
    assert seen, f"rank processes seen while running: {sorted(seen)}\n{out}"
    assert not leftovers, (
        f"rank processes alive after the launcher exited: {sorted(leftovers)}\n{out}"
    )
    assert needle in out and "rank" in out
    assert elapsed < 30, f"took {elapsed:.0f}s"
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and summary["error"]


def test_run_on_the_torchrun_path_as_the_readme_writes_it(tmp_path):
    """The same worker entry point runs when ranks come from torchrun, started as the README says
    (``.venv/bin/torchrun ... -m gnntrain run``) with nothing on PATH, and each line is printed
    once (every rank used to print "outputs:")."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [
        str(torchrun),
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "gnntrain",
        "run",
        "hardware.ranks_per_node=2",
        f"hydra.run.dir={tmp_path}/run",
        f"cache_dir={tmp_path}/cache",
        "train.epochs=3",
        "train.progress=false",
    ]
    env = dict(os.environ, PATH="/usr/bin:/bin")  # the venv's bin is not on PATH
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "completed" and summary["world_size"] == 2
    assert proc.stdout.count(f"outputs: {tmp_path}/run") == 1, proc.stdout


def _report_peak(queue) -> None:
    from gnntrain.runtime import peak_host_bytes

    queue.put(peak_host_bytes())


def test_spawned_rank_peak_memory_is_its_own():
    """ru_maxrss survives fork+exec, so a spawned rank would report the launcher's peak;
    peak_host_bytes reads the process image's own high-water mark."""
    import multiprocessing as mp

    import torch

    from gnntrain.runtime import peak_host_bytes

    ballast = torch.ones(2**30 // 8, dtype=torch.float64)  # 1 GiB resident in the launcher
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_report_peak, args=(queue,))
    child.start()
    child_peak = queue.get(timeout=120)
    child.join(timeout=60)
    assert peak_host_bytes() >= ballast.numel() * 8
    assert child_peak < peak_host_bytes() - 2**29, (child_peak, peak_host_bytes())


def test_threads_never_exceed_the_cores_a_rank_has(monkeypatch):
    """A profile's cores_per_node (32 on cpu-cluster) planned 16 threads per rank on a 2-core
    machine; a rank takes its share of the cores it may run on instead."""
    import os

    from gnntrain.launch.rank import local_ranks, threads_here

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)))
    for key in ("LOCAL_WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert threads_here(16, world_size=2) == 1 and threads_here(16, world_size=1) == 2
    assert threads_here(1, world_size=1) == 1  # never more than planned
    assert (
        local_ranks(8, {"LOCAL_WORLD_SIZE": "2"}) == 2
        and local_ranks(8, {"SLURM_PROCID": "3"}) == 1
    )
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # torchrun, one rank on this host
    assert threads_here(16, world_size=8) == 2


def test_ranks_started_with_different_overrides_stop_with_one_line(tmp_path):
    """Two ranks as an external launcher starts them (RANK/WORLD_SIZE/MASTER_*), one command line
    each, one of them with another hidden width: both stop at the start-up exchange, naming the
    key."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from gnntrain.launch import find_free_port

    port = str(find_free_port())
    exe = Path(sys.executable).parent / "gnntrain"
    procs = []
    for rank, hidden in ((0, 16), (1, 32)):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                [
                    str(exe),
                    "run",
                    f"hydra.run.dir={tmp_path}/r{rank}",
                    f"cache_dir={tmp_path}/c",
                    "dataset.num_nodes=300",
                    "kernel=torch",
                    f"model.hidden={hidden}",
                    "train.progress=false",
                    "comm_timeout_s=60",
                ],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 1, out + err
        assert (
            "the ranks planned different runs: model.hidden 16 (rank 0) vs 32 (rank 1) (rank 1 "
            "differs from "
            "rank 0)" in err
        ), err
        assert "Traceback" not in err
