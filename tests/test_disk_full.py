"""A full disk (#57): the checkpoint folder, the disk tier and the partition store, each on a small
tmpfs this test mounts, fill mid-run. The run stops with one line naming the folder, the bytes the
write needed, the bytes free and the fix; the last good checkpoint is intact; once space is freed,
``train.resume=true`` ends with the losses of an uninterrupted run."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
import torch
from conftest import compose, read_summary, run_cli

from gnntrain.errors import GnnTrainError
from gnntrain.launch import run_training
from gnntrain.plan import build_plan

PAGE = 4096
BASE = ["dataset=csbm", "dataset.num_nodes=300", "kernel=torch", "train.progress=false"]
EPOCHS = ["train.epochs=4", "train.checkpoint_every=1", "train.keep_checkpoints=0"]
KEPT = "then resume with train.resume=true"


@contextlib.contextmanager
def tmpfs(folder: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``folder`` for the block (skips where none can be)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def grow(folder: Path, size: int) -> None:
    """Free space the way an operator would: the file system grows."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def free(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


def assert_intact(checkpoints: Path, epochs: List[int]) -> None:
    """Exactly these checkpoints, each matching its checksum and loadable; no temp file."""
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == sorted(
        n for e in epochs for n in (f"epoch_{e:06d}.pt", f"epoch_{e:06d}.pt.sha1")
    ), names
    for epoch in epochs:
        data = (checkpoints / f"epoch_{epoch:06d}.pt").read_bytes()
        sidecar = (checkpoints / f"epoch_{epoch:06d}.pt.sha1").read_text()
        assert hashlib.sha1(data).hexdigest() == sidecar
        assert (
            torch.load(checkpoints / f"epoch_{epoch:06d}.pt", weights_only=True)["epoch"] == epoch
        )


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Dict[str, object]:
    """The uninterrupted 2-rank partition run every scenario here ends equal to."""
    root = tmp_path_factory.mktemp("disk-full-reference")
    summary = run_training(
        build_plan(compose(BASE + EPOCHS + [f"cache_dir={root}/cache"])), root / "run"
    )
    checkpoints = root / "run" / "checkpoints"
    return {
        "losses": summary["losses"],
        "sizes": {e: (checkpoints / f"epoch_{e:06d}.pt").stat().st_size for e in (1, 2, 3)},
        "cache": root / "cache",
    }


def test_a_full_checkpoint_folder_stops_a_two_rank_run_with_one_line(tmp_path, reference):
    run, sizes = tmp_path / "run", reference["sizes"]
    room = pages(sizes[1]) + pages(sizes[2]) + 2 * PAGE + 2 * PAGE  # epoch 3 does not fit
    with tmpfs(run / "checkpoints", room) as checkpoints:
        args = ["run", f"hydra.run.dir={run}", f"cache_dir={reference['cache']}"] + BASE + EPOCHS
        proc = run_cli(args, cwd=tmp_path)
        out = proc.stdout + proc.stderr
        expected = (
            f"no space left in {checkpoints}: checkpoint epoch_000003.pt needs {sizes[3]} bytes, "
            f"{free(checkpoints)} are free there. Fix: free space there or keep fewer checkpoints "
            f"(train.keep_checkpoints), {KEPT} (epoch_000002.pt is intact)."
        )
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and errors == [f"error: {expected}"], out
        assert "Traceback" not in out and "Timed out" not in out and "Terminating" not in out, out
        assert read_summary(run)["error"] == expected
        assert_intact(checkpoints, [1, 2])
        grow(checkpoints, 4 * room)
        resume = BASE + EPOCHS + [f"cache_dir={reference['cache']}", "train.resume=true"]
        summary = run_training(build_plan(compose(resume)), run)
        assert summary["losses"] == reference["losses"] and summary["resume"]["from_epoch"] == 2
        assert_intact(checkpoints, [1, 2, 3, 4])


def test_a_full_store_folder_stops_a_resumed_run_before_its_ranks_start(tmp_path, reference):
    """The resumed run's store must be built again (another cache folder): its folder is full. The
    staging folder is removed; the checkpoints are untouched; once the disk grows, the resume
    ends as the uninterrupted run."""
    cache, run = tmp_path / "cache", tmp_path / "run"
    first = compose(BASE + ["train.epochs=2", "train.checkpoint_every=1", f"cache_dir={cache}"])
    run_training(build_plan(first), run)
    assert_intact(run / "checkpoints", [1, 2])
    (built,) = (p for p in (cache / "parts").iterdir() if p.is_dir())
    needed = sum(
        p.stat().st_size for p in built.rglob("*") if p.is_file() and p.name != "meta.json"
    )
    with tmpfs(tmp_path / "small" / "parts", pages(needed) // 2) as parts:
        resume = compose(BASE + EPOCHS + ["train.resume=true", f"cache_dir={tmp_path / 'small'}"])
        with pytest.raises(GnnTrainError) as failed:
            run_training(build_plan(resume), run)
        assert str(failed.value) == (
            f"no space left in {parts}: the partition store {built.name} needs {needed} bytes, "
            f"{free(parts)} are free there. Fix: free space there or point cache_dir (or "
            "GNNTRAIN_CACHE_DIR) at a larger disk, then run again."
        )
        # no staging folder left: only the store's lock
        assert [p.name for p in parts.iterdir()] == [f".{built.name}.lock"]
        assert_intact(run / "checkpoints", [1, 2])
        grow(parts, 4 * pages(needed))
        summary = run_training(build_plan(resume), run)
        assert summary["losses"] == reference["losses"] and summary["resume"]["from_epoch"] == 2


HONGTU = [
    "dataset=csbm",
    "dataset.num_nodes=400",
    "mode=hongtu",
    "mode.host_budget=0",
    "hardware.ranks_per_node=1",
    "kernel=torch",
    "train.progress=false",
] + EPOCHS


def test_a_disk_tier_that_fills_mid_epoch_stops_with_one_line(tmp_path, cache_dir, monkeypatch):
    """HongTu's tables on disk: the plan saw room, then another writer filled the disk while epoch
    3 made its first table (a filler written at that moment). Before, a mapped page written on
    the full disk killed the rank with SIGBUS."""
    from gnntrain.modes.hongtu import tiers

    common = HONGTU + [f"cache_dir={cache_dir}"]
    uninterrupted = run_training(
        build_plan(compose(common + [f"mode.disk_dir={tmp_path / 'roomy'}"])), tmp_path / "ref"
    )
    run, made = tmp_path / "run", []
    create = tiers.DiskTable.create

    def filled_at_epoch_3(path, shape, dtype):
        if not made and (run / "checkpoints" / "epoch_000002.pt.sha1").exists():
            filler = disk / "filler"
            with open(filler, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, free(disk))
            made.append((path.stem, shape[0] * shape[1] * dtype.itemsize))
        return create(path, shape, dtype)

    with tmpfs(tmp_path / "disk", 4 << 20) as disk:
        cfg = compose(common + [f"mode.disk_dir={disk}"])
        plan = build_plan(cfg)
        monkeypatch.setattr(tiers.DiskTable, "create", staticmethod(filled_at_epoch_3))
        with pytest.raises(GnnTrainError) as failed:
            run_training(plan, run)
        ((table, nbytes),) = made
        assert str(failed.value) == (
            f"no space left in {disk}: the disk tier's table {table} (rank0) needs {nbytes} bytes, "
            "0 are free there. Fix: free space there, point mode.disk_dir at a larger disk or "
            f"raise mode.host_budget, {KEPT}."
        )
        assert read_summary(run)["error"] == str(failed.value)
        assert [p.name for p in disk.iterdir()] == ["filler"]  # the tables are gone
        assert_intact(run / "checkpoints", [1, 2])
        (disk / "filler").unlink()
        resumed = run_training(
            build_plan(compose(common + [f"mode.disk_dir={disk}", "train.resume=true"])), run
        )
    assert resumed["losses"] == uninterrupted["losses"]


def test_a_saved_tensor_tier_that_fills_mid_epoch_stops_with_one_line(tmp_path, cache_dir):
    """mode=single's saved-tensor tier and the checkpoints share a small disk: as the checkpoints
    accumulate, epoch 3's forward pass cannot write its saved tensor (the features, 300 x 128
    float32: 153600 bytes a pass)."""
    common = BASE + EPOCHS + ["mode=single", "mode.host_budget=0", f"cache_dir={cache_dir}"]
    uninterrupted = run_training(
        build_plan(compose(common + [f"mode.disk_dir={tmp_path / 'roomy'}"])), tmp_path / "ref"
    )
    sizes = [p.stat().st_size for p in sorted((tmp_path / "ref" / "checkpoints").glob("*.pt"))]
    saved = 300 * 128 * 4
    # epochs 1 and 2 fit beside their checkpoints; epoch 3's forward pass is one page short
    room = pages(sizes[0]) + pages(sizes[1]) + 2 * PAGE + pages(saved) - PAGE
    run = tmp_path / "run"
    with tmpfs(tmp_path / "disk", room) as disk:
        (disk / "checkpoints").mkdir()
        run.mkdir()
        (run / "checkpoints").symlink_to(disk / "checkpoints")
        cfg = compose(common + [f"mode.disk_dir={disk / 'tier'}"])
        with pytest.raises(GnnTrainError) as failed:
            run_training(build_plan(cfg), run)
        assert str(failed.value) == (
            f"no space left in {disk / 'tier'}: the disk tier's saved tensor saved2.bin (rank0) "
            f"needs {saved} bytes, {free(disk)} are free there. Fix: free space there, point "
            f"mode.disk_dir at a larger disk or raise mode.host_budget, {KEPT}."
        )
        assert not list((disk / "tier").rglob("*.bin"))
        assert_intact(disk / "checkpoints", [1, 2])
        grow(disk, 4 * room)
        resumed = run_training(
            build_plan(compose(common + [f"mode.disk_dir={disk / 'tier'}", "train.resume=true"])),
            run,
        )
    assert resumed["losses"] == uninterrupted["losses"]


def test_the_rank_that_caused_a_failure_is_reported_not_the_peer_that_lost_it(tmp_path):
    """A rank that stops closes its connections, so a peer may fail first with a lost-peer
    RankFailure: the launcher reports the cause (a user error's one line, else that rank's
    traceback), whichever rank torch saw first."""
    import pickle
    from types import SimpleNamespace

    from gnntrain.launch.launcher import _failure_message

    def ends(kind: str, message: str) -> str:
        return f'Traceback (most recent call last):\n  File "x.py", line 1\n{kind}: {message}\n'

    lost = ends("gnntrain.errors.RankFailure", "lost rank 1 on host 127.0.0.1: ...")
    causes = {
        "full": ends("gnntrain.errors.DiskFullError", "no space left in /x: ... Fix: free it."),
        "crash": ends("RuntimeError", "injected fault on rank 1 at epoch 2"),
    }
    files = [tmp_path / "rank0", tmp_path / "rank1", tmp_path / "rank2"]  # rank 2: stopped
    context = SimpleNamespace(error_files=[str(f) for f in files])
    files[0].write_bytes(pickle.dumps(lost))
    files[1].write_bytes(pickle.dumps(causes["full"]))
    assert _failure_message(context, 0, lost) == "no space left in /x: ... Fix: free it."
    files[1].write_bytes(pickle.dumps(causes["crash"]))
    message = _failure_message(context, 0, lost)
    assert message.startswith("rank 1 failed: RuntimeError: injected fault on rank 1"), message
    files[1].unlink()  # only the peer's error: said as it is
    assert _failure_message(context, 0, lost).startswith("rank 0 failed: gnntrain.errors.RankF")


def test_a_checkpoint_whose_checksum_does_not_fit_is_removed(tmp_path):
    """The checkpoint fits, its .sha1 sidecar does not: no checkpoint without its checksum is
    left (it would be skipped on resume while holding the space), and the previous one stays."""
    from gnntrain.checkpoint import Checkpointer

    state = {"epoch": 1, "plan_hash": "p", "model": {"w": torch.zeros(4000)}, "history": []}
    with tmpfs(tmp_path / "checkpoints", 4 << 20) as checkpoints:
        checkpointer = Checkpointer(checkpoints, "p")
        checkpointer.save_state(state)
        size = (checkpoints / "epoch_000001.pt").stat().st_size
        grow(checkpoints, 2 * pages(size) + PAGE)  # epoch 2's file, not its sidecar
        with pytest.raises(GnnTrainError) as failed:
            checkpointer.save_state({**state, "epoch": 2})
        assert str(failed.value) == (
            f"no space left in {checkpoints}: checkpoint epoch_000002.pt needs {size} bytes, "
            f"{free(checkpoints)} are free there. Fix: free space there or keep fewer checkpoints "
            f"(train.keep_checkpoints), {KEPT} (epoch_000001.pt is intact)."
        )
        assert_intact(checkpoints, [1])
