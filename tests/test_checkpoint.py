"""Checkpoints: atomic, verified, refused across plans; a run killed after
epoch e and resumed ends bit-identical to an uninterrupted run (CPU)."""

from __future__ import annotations

import pytest
import torch
from conftest import read_summary, run_cli


def _final_state(run_dir, epoch):
    return torch.load(run_dir / "checkpoints" / f"epoch_{epoch:06d}.pt", weights_only=True)


# partition and mop are slow (make test-all): test_interrupts' Ctrl-C test kills and resumes the
# default partition run, and the dropout masks every full-graph mode replays are one function of the
# global row (test_exactness::test_dropout_masks_match_across_layouts)
@pytest.mark.parametrize(
    "mode_args",
    [
        pytest.param(["mode=partition", "hardware.ranks_per_node=2"], marks=pytest.mark.slow),
        ["mode=single"],
        pytest.param(["mode=mop", "hardware.ranks_per_node=2"], marks=pytest.mark.slow),
        # quantization noise is seeded per (rank, epoch), so it replays too
        ["mode=supergcn", "mode.bits=2", "mode.label_propagation=0.2", "hardware.ranks_per_node=2"],
        # DRM moves shares by measured times, so only static shares replay
        [
            "mode=hyscale",
            "mode.drm=false",
            "mode.shares=[0.4,0.6]",
            "mode.fanouts=[5,5]",
            "mode.batch_size=128",
        ],
        # every vertex table on the disk tier: a killed rank leaves its files,
        # the resumed run rebuilds and then removes them
        pytest.param(
            ["mode=hongtu", "mode.host_budget=0", "hardware.ranks_per_node=2"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_killed_then_resumed_run_is_bit_identical(tmp_path, mode_args):
    common = [
        "train.epochs=6",
        "train.checkpoint_every=1",
        f"cache_dir={tmp_path}/cache",
        "dataset.num_nodes=600",
        "kernel=torch",
    ] + mode_args  # dropout stays on (0.5): its masks must replay too
    full = run_cli(["run", f"hydra.run.dir={tmp_path}/full"] + common, cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    killed = run_cli(
        ["run", f"hydra.run.dir={tmp_path}/cut"] + common,
        cwd=tmp_path,
        env_extra={"GNNTRAIN_INJECT_FAULT": "0:4:kill"},
    )
    assert killed.returncode != 0  # single runs in-process, so its kill takes the CLI down (-9)
    assert (tmp_path / "cut" / "checkpoints" / "epoch_000004.pt").exists()
    assert not (tmp_path / "cut" / "checkpoints" / "epoch_000005.pt").exists()
    resumed = run_cli(
        ["run", f"hydra.run.dir={tmp_path}/cut", "train.resume=true"] + common, cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    a, b = read_summary(tmp_path / "full"), read_summary(tmp_path / "cut")
    assert a["losses"] == b["losses"] and len(b["losses"]) == 6
    fa, fb = _final_state(tmp_path / "full", 6), _final_state(tmp_path / "cut", 6)
    for key in fa["model"]:
        assert torch.equal(fa["model"][key], fb["model"][key]), key
    assert (tmp_path / "cut" / "metrics.jsonl").read_text().count("\n") == 6
    # hongtu's disk tier: nothing left
    assert not list((tmp_path / "cache" / "disk-tier").rglob("*.bin"))


def test_corrupt_newest_checkpoint_falls_back(tmp_path):
    common = [
        "mode=single",
        "train.checkpoint_every=2",
        f"cache_dir={tmp_path}/cache",
        "dataset.num_nodes=300",
    ]
    assert (
        run_cli(
            ["run", f"hydra.run.dir={tmp_path}/r", "train.epochs=4"] + common, cwd=tmp_path
        ).returncode
        == 0
    )
    newest = tmp_path / "r" / "checkpoints" / "epoch_000004.pt"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    proc = run_cli(
        ["run", f"hydra.run.dir={tmp_path}/r2", f"resume={tmp_path}/r", "train.epochs=5"] + common,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checksum mismatch" in proc.stderr
    s = read_summary(tmp_path / "r2")
    assert len(s["losses"]) == 5 and "resumed after epoch 2" in proc.stdout


def test_checkpoint_of_another_plan_is_refused(tmp_path):
    base = [
        "train.epochs=2",
        "train.checkpoint_every=1",
        f"cache_dir={tmp_path}/cache",
        "dataset.num_nodes=300",
    ]
    assert (
        run_cli(
            ["run", "mode=single", f"hydra.run.dir={tmp_path}/a"] + base, cwd=tmp_path
        ).returncode
        == 0
    )
    proc = run_cli(
        ["run", "mode=partition", f"resume={tmp_path}/a", f"hydra.run.dir={tmp_path}/b"] + base,
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "another plan" in out and "Traceback" not in out
    assert ": mode.name single -> partition). " in out, out  # the keys that differ, named
    proc = run_cli(
        ["run", "mode=partition", "train.resume=true", f"hydra.run.dir={tmp_path}/a"] + base,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "another plan" in proc.stderr
    # the refused resume kept the run's own files
    assert read_summary(tmp_path / "a")["status"] == "completed"
    assert "  mode:\n    name: single\n" in (tmp_path / "a" / "plan.yaml").read_text()
    proc = run_cli(
        ["run", "mode=single", "train.resume=true", f"hydra.run.dir={tmp_path}/c"] + base,
        cwd=tmp_path,
    )
    # never silently from scratch
    assert (
        proc.returncode == 0
        and f"train.resume=true: no checkpoint in {tmp_path}/c/checkpoints yet; training "
        "from epoch 1"
        in proc.stdout + proc.stderr
    )


def test_resume_without_checkpoint_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_cli(
        [
            "run",
            "mode=single",
            f"resume={tmp_path}/empty",
            f"hydra.run.dir={tmp_path}/b",
            "dataset.num_nodes=300",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "no valid checkpoint" in proc.stdout + proc.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_resume_without_checkpoint_is_refused_under_an_external_launcher(tmp_path, rank):
    """As torchrun starts them (RANK/WORLD_SIZE set): every rank refuses before any rendezvous,
    instead of silently training from scratch, and only rank 0 prints the plan."""
    (tmp_path / "empty").mkdir()
    env = {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "test",
    }
    proc = run_cli(
        [
            "run",
            f"resume={tmp_path}/empty",
            f"hydra.run.dir={tmp_path}/r{rank}",
            "dataset.num_nodes=300",
        ],
        cwd=tmp_path,
        env_extra=env,
        timeout=120,
    )
    assert proc.returncode == 1 and "no valid checkpoint" in proc.stderr
    assert ("run plan" in proc.stdout) is (rank == 0)


@pytest.mark.parametrize(
    "mode_args",
    [
        ["mode=single"],
        [
            "mode=hyscale",
            "mode.cpu_trainers=1",
            "mode.accel_trainers=0",
            "mode.fanouts=[5,5]",
            "mode.batch_size=128",
        ],
    ],
)
def test_preemption_while_the_next_snapshot_is_built_saves_the_last_epoch(
    tmp_path, cache_dir, monkeypatch, mode_args
):
    """submitit's USR2 handler runs between any two bytecodes of the main thread. One that lands
    while epoch 4's boundary snapshot is being copied must still save epoch 3 (an earlier version
    cleared the old state first and saved nothing, so the requeued job restarted from epoch 0),
    and the requeued job (SLURM_RESTART_COUNT=1) resumes from it to the same losses."""
    from conftest import compose

    from gnntrain.checkpoint import Checkpointer, save_for_preemption
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    real_snapshot = Checkpointer.snapshot

    def snapshot_hit_by_signal(self, epoch, *args):
        if epoch == 4:
            save_for_preemption()
        return real_snapshot(self, epoch, *args)

    monkeypatch.setattr(Checkpointer, "snapshot", snapshot_hit_by_signal)
    cfg = compose(
        [
            f"cache_dir={cache_dir}",
            "train.progress=false",
            "train.epochs=6",
            "dataset.num_nodes=600",
            "kernel=torch",
        ]
        + mode_args
    )
    first = run_training(build_plan(cfg), tmp_path / "first")
    saved = sorted(p.name for p in (tmp_path / "first" / "checkpoints").glob("epoch_*.pt"))
    assert saved == ["epoch_000003.pt"]

    monkeypatch.setattr(Checkpointer, "snapshot", real_snapshot)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    (tmp_path / "requeued").mkdir()
    (tmp_path / "first" / "checkpoints").rename(tmp_path / "requeued" / "checkpoints")
    requeued = run_training(build_plan(cfg), tmp_path / "requeued")
    assert requeued["status"] == "completed"
    assert requeued["losses"] == first["losses"] and len(first["losses"]) == 6


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    """train.keep_checkpoints=k: after each save the k newest remain (sidecars too); 0 keeps every
    one."""
    from gnntrain.checkpoint import Checkpointer

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    kept = Checkpointer(tmp_path / "k", "h", keep=2)
    every = Checkpointer(tmp_path / "all", "h", keep=0)
    for epoch in range(1, 6):
        kept.save(epoch, model, optimizer, [])
        every.save(epoch, model, optimizer, [])
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == [
        "epoch_000004.pt",
        "epoch_000004.pt.sha1",
        "epoch_000005.pt",
        "epoch_000005.pt.sha1",
    ]
    assert len(list((tmp_path / "all").glob("*.pt"))) == 5
    assert kept.load_latest()["epoch"] == 5


def test_a_run_keeps_three_checkpoints_by_default(train, tmp_path):
    train(["mode=single", "train.epochs=5", "train.checkpoint_every=1", "dataset.num_nodes=300"])
    assert sorted(p.name for p in (tmp_path / "run1" / "checkpoints").glob("*.pt")) == [
        "epoch_000003.pt",
        "epoch_000004.pt",
        "epoch_000005.pt",
    ]


def test_a_resume_with_changed_settings_applies_them_and_says_so(train, tmp_path):
    """train.resume with another lr (and more epochs): trained at the new lr from the resumed epoch
    on (its losses leave the unchanged resume's), printed old -> new, recorded in summary.json and
    metrics.jsonl."""
    import json
    import shutil

    base = [
        "mode=single",
        "train.checkpoint_every=2",
        "dataset.num_nodes=300",
        "train.dtype=float64",
    ]
    train(base + ["train.epochs=4"])
    # resume=DIR writes its new checkpoints there too
    shutil.copytree(tmp_path / "run1", tmp_path / "copy")
    same = train(base + ["train.epochs=6", f"resume={tmp_path / 'run1'}"])
    changed = train(
        base
        + ["train.epochs=6", f"resume={tmp_path / 'copy'}", "train.lr=0.5", "train.weight_decay=0"]
    )
    assert same["losses"][:4] == changed["losses"][:4] and same["losses"][4] == changed["losses"][4]
    # epoch 6 is the first trained at lr 0.5
    assert abs(same["losses"][5] - changed["losses"][5]) > 1e-6
    assert changed["resume"] == {
        "from_epoch": 4,
        "changed": {
            "train.lr": [0.01, 0.5],
            "train.weight_decay": [0.0005, 0.0],
            "train.epochs": [4, 6],
        },
    }
    assert same["resume"]["changed"] == {"train.epochs": [4, 6]}
    records = [
        json.loads(line) for line in (tmp_path / "run3" / "metrics.jsonl").read_text().splitlines()
    ]
    assert (
        records[4]["resume_changed"]["train.lr"] == [0.01, 0.5]
        and "resume_changed" not in records[5]
    )


def _two_node_job(tmp_path, overrides, port: int, timeout: float = 120):
    """One ``torchrun --nnodes=2`` agent per "node" on loopback, each with a run folder of its own
    (as on two hosts without a shared file system): [(returncode, output)] by node."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [
                str(bin_dir / "torchrun"),
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                "--no-python",
                str(bin_dir / "gnntrain"),
                "run",
                *overrides,
                f"hydra.run.dir={tmp_path / f'node{node}'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in range(2)
    ]
    return [(p.communicate(timeout=timeout)[0], p.returncode) for p in procs]


def test_a_resume_across_nodes_starts_every_rank_from_rank_0s_checkpoint(tmp_path):
    """Only rank 0 writes checkpoints, into its own node's run folder. train.resume=true across two
    nodes whose run folders are not shared: every rank resumes from rank 0's newest checkpoint (an
    earlier version had node 1 find none and train from epoch 1 while rank 0 resumed after epoch 3,
    so the ranks' collectives no longer matched and the job hung until comm_timeout_s)."""
    common = [
        "dataset.num_nodes=600",
        "mode=partition",
        "hardware.nodes=2",
        "hardware.ranks_per_node=1",
        "hardware.cores_per_node=1",
        "kernel=torch",
        "train.progress=false",
        "train.checkpoint_every=1",
        f"cache_dir={tmp_path}/cache",
        "comm_timeout_s=15",
    ]
    first = _two_node_job(tmp_path, common + ["train.epochs=3"], port=29561)
    assert [rc for _, rc in first] == [0, 0], first[0][0][-3000:] + first[1][0][-3000:]
    assert not (tmp_path / "node1" / "checkpoints").exists()  # rank 0's node holds them all
    trained = read_summary(tmp_path / "node0")["losses"]
    resumed = _two_node_job(tmp_path, common + ["train.epochs=5", "train.resume=true"], port=29562)
    (out0, rc0), (out1, rc1) = resumed
    assert rc0 == 0 and rc1 == 0, out0[-3000:] + out1[-3000:]
    assert "resumed after epoch 3" in out0 and "training from epoch 1" not in out1, out1[-2000:]
    summary = read_summary(tmp_path / "node0")
    assert summary["resume"]["from_epoch"] == 3 and len(summary["losses"]) == 5
    assert summary["losses"][:3] == trained


def test_a_resume_removes_the_temp_files_of_checkpoint_writes_a_kill_cut_short(train, tmp_path):
    """A rank 0 killed while it wrote a checkpoint leaves that write's temp file (gnntrain.atomic's
    ``.NAME.XXXX.tmp``, a checkpoint's size) in checkpoints/; the chaos suite found them left for
    good. The resume removes them before it trains (nothing else writes there then)."""
    base = ["mode=single", "train.checkpoint_every=1", "dataset.num_nodes=300"]
    train(base + ["train.epochs=2"])
    folder = tmp_path / "run1" / "checkpoints"
    cut = [folder / ".epoch_000003.pt.k2j4x9.tmp", folder / ".epoch_000003.pt.sha1.a8c1.tmp"]
    for path in cut:
        path.write_bytes(b"half a checkpoint")
    (folder / "notes.txt").write_text("not ours")
    summary = train(base + ["train.epochs=3", f"resume={tmp_path / 'run1'}"])
    assert summary["resume"]["from_epoch"] == 2 and len(summary["losses"]) == 3
    assert not any(path.exists() for path in cut) and (folder / "notes.txt").exists()
