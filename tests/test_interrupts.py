"""Ctrl-C and SIGTERM: every rank finishes the epoch in flight and stops; summary.json says
interrupted; a checkpoint of that epoch is saved; one line prints the exact resume command, which
ends bit-identical to a run never interrupted; a second interrupt exits at once."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import read_summary

COMMON = [
    "mode=partition",
    "hardware.ranks_per_node=2",
    "train.epochs=8",
    "dataset.num_nodes=600",
    "kernel=torch",
]


def _gnntrain(args, cwd: Path, fault: str = "") -> subprocess.CompletedProcess:
    """The CLI in a session of its own, as a terminal runs it (a Ctrl-C reaches its whole process
    group)."""
    env = dict(os.environ, GNNTRAIN_INJECT_FAULT=fault) if fault else dict(os.environ)
    env.pop("GNNTRAIN_INJECT_FAULT", None) if not fault else None
    exe = Path(sys.executable).parent / "gnntrain"
    return subprocess.run(
        [str(exe)] + list(args),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def test_ctrl_c_mid_epoch_stops_every_rank_and_the_printed_resume_ends_bit_identical(tmp_path):
    cache = f"cache_dir={tmp_path}/cache"
    full = _gnntrain(["run", f"hydra.run.dir={tmp_path}/full", cache] + COMMON, tmp_path)
    assert full.returncode == 0, full.stderr
    cut = _gnntrain(
        ["run", f"hydra.run.dir={tmp_path}/cut", cache] + COMMON, tmp_path, fault="0:4:ctrl-c"
    )
    assert cut.returncode == 130, cut.stdout + cut.stderr
    assert "Traceback" not in cut.stderr and "KeyboardInterrupt" not in cut.stderr
    (line,) = [x for x in cut.stderr.splitlines() if x.startswith("interrupted by")]
    assert line.startswith(
        "interrupted by SIGINT after epoch 5 of 8; summary.json says so. Resume with: gnntrain run"
    )
    summary = read_summary(tmp_path / "cut")
    assert summary["status"] == "interrupted" and summary["interrupted"]["last_epoch"] == 5
    assert (
        len(summary["losses"]) == 5
        and (tmp_path / "cut" / "checkpoints" / "epoch_000005.pt").exists()
    )
    command = shlex.split(line.split("Resume with: ", 1)[1])
    assert command[-2:] == [f"hydra.run.dir={tmp_path}/cut", "train.resume=true"]
    resumed = _gnntrain(command[1:], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    a, b = read_summary(tmp_path / "full"), read_summary(tmp_path / "cut")
    assert b["status"] == "completed" and a["losses"] == b["losses"]
    wa = torch.load(tmp_path / "full" / "model.pt", weights_only=True)
    wb = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sigterm_to_the_launcher_alone_stops_the_ranks_with_143(tmp_path):
    cut = _gnntrain(
        ["run", f"hydra.run.dir={tmp_path}/r", f"cache_dir={tmp_path}/cache"] + COMMON,
        tmp_path,
        fault="0:2:term-launcher",
    )
    assert cut.returncode == 143, cut.stdout + cut.stderr
    summary = read_summary(tmp_path / "r")
    assert summary["status"] == "interrupted" and summary["interrupted"] == {
        "signal": "SIGTERM",
        "last_epoch": 3,
        "epochs": 8,
    }
    assert "interrupted by SIGTERM after epoch 3 of 8" in cut.stderr


def test_the_forwarded_stop_is_never_a_second_interrupt_and_a_second_ctrl_c_is():
    from gnntrain.interrupts import FORWARDED, graceful_stop

    with graceful_stop(hard_exit=False) as stop:
        signal.raise_signal(FORWARDED)
        # the terminal's own Ctrl-C, after the launcher's forward
        signal.raise_signal(signal.SIGINT)
        assert stop.requested and stop.name == "SIGINT" and stop.exit_code == 130
        signal.raise_signal(FORWARDED)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is not stop.handle
