"""Rank identity from torchrun / SLURM environments, and the local launcher's
failure handling: a rank that raises, is killed or stalls ends the job
promptly with a message naming it, and summary.json says failed."""
from __future__ import annotations

import time

import psutil
import pytest

from conftest import read_summary, run_cli
from gnntrain.launch.launcher import expand_nodelist, external_identity


def test_no_external_launcher():
    assert external_identity({}) is None
    assert external_identity({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None  # one task: spawn locally


def test_torchrun_environment():
    ident = external_identity({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "node7",
                               "MASTER_PORT": "29555"})
    assert (ident.rank, ident.world_size, ident.master_addr, ident.master_port, ident.source) == (
        2, 4, "node7", 29555, "torchrun")


def test_slurm_environment_derives_master_and_port():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "1234",
           "SLURM_JOB_NODELIST": "gpu[07-08]"}
    ident = external_identity(env)
    assert (ident.rank, ident.world_size, ident.local_rank, ident.source) == (3, 4, 1, "slurm")
    assert ident.master_addr == "gpu07" and ident.master_port == 20000 + 1234


@pytest.mark.parametrize("nodelist,hosts", [
    ("gpu[07-09,12]", ["gpu07", "gpu08", "gpu09", "gpu12"]),
    ("a1,b[1-2]", ["a1", "b1", "b2"]),
    ("single", ["single"]),
])
def test_nodelist_expansion(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("action,needle", [("raise", "injected fault"), ("kill", "SIGKILL"),
                                           ("hang", "rank")])
def test_failing_rank_ends_the_job(tmp_path, action, needle):
    start = time.perf_counter()
    # kernel=torch: no DGL import inside the ranks, so a short collective timeout only catches the fault
    proc = run_cli(["run", f"hydra.run.dir={tmp_path}/run", f"cache_dir={tmp_path}/cache", "train.epochs=4",
                    "comm_timeout_s=5", "kernel=torch"], cwd=tmp_path, timeout=120,
                   env_extra={"GNNTRAIN_INJECT_FAULT": f"1:1:{action}"})
    elapsed = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert needle in out and "rank" in out
    assert elapsed < 30, f"took {elapsed:.0f}s"
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and summary["error"]
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if "spawn_main" in " ".join(p.info["cmdline"] or [])
                 and p.ppid() == proc.pid]
    assert not leftovers


def test_run_on_the_torchrun_path(tmp_path):
    """The same worker entry point runs when ranks come from torchrun."""
    import sys
    from pathlib import Path

    torchrun = Path(sys.executable).parent / "torchrun"
    import subprocess

    cmd = [str(torchrun), "--standalone", "--nproc-per-node=2", "--no-python", str(Path(sys.executable).parent /
           "gnntrain"), "run", f"hydra.run.dir={tmp_path}/run", f"cache_dir={tmp_path}/cache", "train.epochs=3",
           "train.progress=false"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "completed" and summary["world_size"] == 2


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
