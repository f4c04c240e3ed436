"""SLURM integration on a real one-node cluster started by scripts/slurm-local.sh:
a 2-job sweep through hydra/launcher=slurm, and a plain sbatch template with
2 tasks. Skips only when apt-get cannot install slurm-wlm/munge (never in CI)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, compose, read_summary, run_cli

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm_env():
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm-local.sh"), "start"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode == 3 and not os.environ.get("CI"):
        pytest.skip(f"apt-get cannot install slurm-wlm/munge here: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conf = re.search(r"SLURM_CONF=(\S+)", proc.stdout).group(1)
    yield {"SLURM_CONF": conf}
    subprocess.run(["bash", str(ROOT / "scripts" / "slurm-local.sh"), "stop"], timeout=120)


def _job_state(env, job_id: str, settle_s: float = 60) -> str:
    """The job's final state from scontrol (a job may still be finishing when its result is
    back)."""
    deadline = time.monotonic() + settle_s
    while True:
        out = subprocess.run(
            ["scontrol", "show", "job", job_id],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        ).stdout
        match = re.search(r"JobState=(\w+)", out)
        state = match.group(1) if match else out
        if state not in ("RUNNING", "COMPLETING", "PENDING") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def _queue(env) -> dict:
    """Job id -> state of every job squeue lists, finished ones included (MinJobAge=300 keeps them);
    array tasks one a line, as <array id>_<index>."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-o", "%i %T"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_sweep_through_submitit_slurm(slurm_env, tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli(
        [
            "run",
            "-m",
            "hydra/launcher=slurm",
            "mode=single,partition",
            "train.epochs=3",
            "train.progress=false",
            f"hydra.sweep.dir={sweep}",
            f"cache_dir={tmp_path}/cache",
            "hardware.timeout_min=10",
        ],
        cwd=tmp_path,
        timeout=600,
        env_extra=slurm_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # submitit sends a sweep as one job array: one array task per sweep job (e.g. 4_0, 4_1)
    job_ids = sorted(
        p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name)
    )
    assert len(job_ids) == 2
    # the queue's own view, right after the sweep returned: the array holds exactly these tasks, and
    # within seconds none is still pending or running (a job must not linger once its result is
    # back)
    array_ids = {job_id.split("_")[0] for job_id in job_ids}
    deadline = time.monotonic() + 15
    while True:
        ours = {
            job: state for job, state in _queue(slurm_env).items() if job.split("_")[0] in array_ids
        }
        if set(ours.values()) <= {"COMPLETED", "COMPLETING"} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(ours) == job_ids and set(ours.values()) <= {"COMPLETED", "COMPLETING"}, ours
    summaries = sorted(sweep.rglob("summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        assert read_summary(path.parent)["status"] == "completed", path
    for job_id in job_ids:
        assert _job_state(slurm_env, job_id) == "COMPLETED"
    queue = _queue(slurm_env)  # squeue agrees once the states have settled
    assert {job_id: queue.get(job_id) for job_id in job_ids} == dict.fromkeys(
        job_ids, "COMPLETED"
    ), queue


def test_sbatch_template_with_two_tasks(slurm_env, tmp_path):
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        **slurm_env,
        "GNNTRAIN": str(Path(sys.executable).parent / "gnntrain"),
        "RUN_DIR": str(run_dir),
    }
    # not `sbatch --wait`: it polls at 2, 8, then 32 s intervals, up to half a minute after the job
    # ends
    proc = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--output={tmp_path}/slurm-%j.out",
            str(ROOT / "scripts" / "sbatch" / "gnntrain.sbatch"),
            "train.epochs=3",
            "train.progress=false",
            f"cache_dir={tmp_path}/cache",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = re.search(r"(\d+)", proc.stdout).group(1)
    state = _job_state(slurm_env, job_id, settle_s=600)
    logs = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert state == "COMPLETED", state + logs
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["world_size"] == 2


def test_unreachable_controller_is_one_line(tmp_path):
    """No controller at SLURM_CONF: submitit's error surfaces as one line naming the launcher."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n"
    )
    proc = run_cli(
        ["run", "-m", "hydra/launcher=slurm", "train.epochs=1", f"hydra.sweep.dir={tmp_path}/s"],
        cwd=tmp_path,
        timeout=300,
        env_extra={"SLURM_CONF": str(conf)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "hydra/launcher=slurm" in out and "Traceback" not in out
    assert len([line for line in out.splitlines() if "error" in line.lower()]) == 1


def test_preempted_job_checkpoints_requeues_and_resumes(slurm_env, tmp_path):
    """submitit's preemption signal (USR2) on a running job: the last completed epoch is
    checkpointed, the job is requeued, and the requeued job resumes from it and completes.

    The job stalls at the start of epoch 40 (fault injection; a requeued job runs clean), so the
    signal always lands mid-run: the checkpoint must be exactly epoch 40's. (Racing a free-running
    job made this test flaky and hid a real bug: the boundary state was empty while the next one
    was copied, see test_checkpoint.py.)"""
    sweep = tmp_path / "sweep"
    epochs, stall = 80, 40
    cmd = [
        str(Path(sys.executable).parent / "gnntrain"),
        "run",
        "-m",
        "hydra/launcher=slurm",
        "mode=single",
        "hardware.ranks_per_node=1",
        f"train.epochs={epochs}",
        "train.eval_every=500",
        "dataset.num_nodes=300",
        "train.progress=false",
        f"hydra.sweep.dir={sweep}",
        f"cache_dir={tmp_path}/cache",
        "kernel=torch",
    ]
    env = {**os.environ, **slurm_env}
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env={**env, "GNNTRAIN_INJECT_FAULT": f"0:{stall}:hang"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = sweep / "0-single-csbm" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (
        metrics.exists() and metrics.read_text().count("\n") >= stall
    ):
        time.sleep(0.2)
    assert metrics.exists() and metrics.read_text().count("\n") == stall, (
        "the job never reached the stall"
    )
    job_id = next(
        p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name)
    )
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, env=env)
    # SLURM holds a requeued job until a begin time ~2 minutes out. Bring it forward, but not to
    # "now": a restart in the same second as the requeue can race the old step's cleanup
    # ("credential revoked").
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        show = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env
        ).stdout
        if "Restarts=0" not in show and "JobState=PENDING" in show:
            time.sleep(2)
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now+5"], env=env)
            break
        time.sleep(0.5)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    summary = read_summary(sweep / "0-single-csbm")
    assert summary["status"] == "completed" and len(summary["losses"]) == epochs
    saved = sorted(p.name for p in (sweep / "0-single-csbm" / "checkpoints").glob("epoch_*.pt"))
    assert saved == [f"epoch_{stall:06d}.pt"], saved
    logs = "".join(
        p.read_text(errors="replace") for p in (sweep / ".submitit" / job_id).glob("*.out")
    )
    assert f"resumed after epoch {stall}" in logs
    show = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env
    ).stdout
    assert re.search(r"Restarts=[1-9]", show), show


# ------------------------------------------------------------------ two nodes
@pytest.fixture(scope="module")
def two_node_slurm():
    """scripts/slurm-local.sh's two-node form: slurmd gtnode1/gtnode2, each in a network namespace
    of its own with its own address (10.78.0.1/.2), behind a bridge to slurmctld."""
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root")
    script = str(ROOT / "scripts" / "slurm-local.sh")
    proc = subprocess.run(
        ["bash", script, "start-two-node"], capture_output=True, text=True, timeout=900
    )
    if proc.returncode == 3 and not os.environ.get("CI"):
        pytest.skip(f"apt-get cannot install slurm-wlm/munge here: {proc.stderr.strip()[-300:]}")
    if proc.returncode == 4:
        pytest.skip(f"network namespaces cannot be made here: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield {"SLURM_CONF": re.search(r"SLURM_CONF=(\S+)", proc.stdout).group(1)}
    subprocess.run(["bash", script, "stop-two-node"], timeout=120)


def test_two_node_job_runs_one_rank_per_node(two_node_slurm, tmp_path):
    """hydra/launcher=slurm hardware.nodes=2: one task per node, the master address taken from the
    job's node list (gtnode1's NodeAddr), gloo across the bridge; partition equals single."""
    from conftest import EXACT, assert_exact

    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    sweep = tmp_path / "sweep"
    graph = ["dataset=csbm", "dataset.num_nodes=600"] + EXACT
    proc = run_cli(
        [
            "run",
            "-m",
            "hydra/launcher=slurm",
            "mode=partition",
            *graph,
            "hardware.nodes=2",
            "hardware.ranks_per_node=1",
            "train.progress=false",
            f"hydra.sweep.dir={sweep}",
            f"cache_dir={tmp_path}/cache",
            "hardware.timeout_min=10",
        ],
        cwd=tmp_path,
        timeout=600,
        env_extra=two_node_slurm,
    )
    logs = "".join(p.read_text(errors="replace") for p in (sweep / ".submitit").rglob("*_log.*"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs[-3000:]
    summary = read_summary(sweep / "0-partition-csbm")
    assert summary["status"] == "completed" and summary["world_size"] == 2
    # rank 0 on gtnode1, rank 1 on gtnode2
    assert summary["rank_hosts"] == ["10.78.0.1", "10.78.0.2"]
    assert "hostname=gtnode1" in logs and "hostname=gtnode2" in logs
    single = run_training(build_plan(compose(graph + ["mode=single"])), tmp_path / "single")
    assert_exact(summary["losses"], single["losses"])
