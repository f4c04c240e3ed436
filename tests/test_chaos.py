"""The chaos suite (gnntrain/launch/chaos.py): its seeded schedule, what its sweeps detect, and five
seeded trials on an emulated cluster, each killing a rank or a host mid-training; every trial must
end within 60 s naming what was lost, leave nothing behind and resume bit-identical.

The trials need root, iproute2 and tc (skipped with the reason otherwise); ``make chaos`` runs 50.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gnntrain.atomic import file_lock
from gnntrain.errors import GnnTrainError
from gnntrain.launch import chaos, leftovers, netem
from gnntrain.launch.chaos_schedule import MODES, ChaosSettings, Trial, figures, schedule

NAME = f"gtch{os.getpid() % 100000}"
SEED = 1  # five trials: every mode once, ranks and hosts both killed, host 0 (rank 0) among them


def test_the_schedule_is_seeded_and_covers_every_mode_and_victim():
    settings = ChaosSettings(hosts=3, ranks_per_host=2)
    trials = schedule(7, 50, settings)
    assert trials == schedule(7, 50, settings) and trials != schedule(8, 50, settings)
    for start in range(0, 50, len(MODES)):  # seeded shuffled rounds: each covers every mode
        assert sorted(t.mode for t in trials[start : start + len(MODES)]) == sorted(MODES)
    assert {t.victim for t in trials} == {"rank", "host"}
    assert {t.host for t in trials} == {0, 1, 2}
    for t in trials:
        assert 0 <= t.at < 1 and t.rank // settings.ranks_per_host == t.host
        assert t.victim == "rank" or t.rank == 2 * t.host  # a host is named by its first rank
    assert {t.rank % 2 for t in trials if t.victim == "rank"} == {0, 1}
    assert {t.phase for t in trials} == {"training"}  # the schedule: kills in training
    mixed = schedule(7, 50, ChaosSettings(hosts=3, ranks_per_host=2, startup_share=0.3))
    assert 5 <= sum(t.phase == "startup" for t in mixed) <= 25


def test_the_line_naming_the_loss_must_name_the_victims_rank_and_host():
    trial = Trial(0, "partition", "host", 1, 1, 0.5)
    line = "error: lost rank 1 on host 10.79.3.2: rank 0's connection to it broke (...)."
    assert chaos._lost_line(["noise\n", f"x\n{line}\n"], trial, "10.79.3.2") == (line, True)
    assert chaos._lost_line([line], trial, "10.79.3.1")[1] is False  # another host
    assert chaos._lost_line([line.replace("rank 1", "rank 0")], trial, "10.79.3.2")[1] is False
    two = "error: lost ranks 2, 3 on host 10.79.3.2: ..."
    assert chaos._lost_line([two], Trial(0, "mop", "rank", 1, 3, 0.5), "10.79.3.2")[1] is True
    assert chaos._lost_line(["Timed out after 20 s"], trial, "10.79.3.2") == ("", False)
    # killed while the job started: no host is known before the handshake, so the rank it is
    never = "error: rank 0: rank 1 did not join within comm_timeout_s (20 s): a host or rank ..."
    assert chaos._lost_line([never], trial, "10.79.3.2") == (never, True)
    assert chaos._lost_line([never], Trial(0, "mop", "host", 0, 0, 0.5), "10.79.3.1")[1] is False


def test_the_sweep_finds_held_locks_disk_tier_tables_and_half_written_files(tmp_path):
    lock = tmp_path / "cache" / "parts" / ".csbm-p2.lock"
    with file_lock(lock):
        assert [x.what for x in leftovers.held_locks([tmp_path])] == [".csbm-p2.lock (held)"]
    # released: the file stays (by design), and is no leftover
    assert lock.exists() and leftovers.held_locks([tmp_path]) == []

    tier = tmp_path / "cache" / "disk-tier"
    (tier / "run-abc" / "rank1").mkdir(parents=True)
    (tier / "run-abc" / "rank1" / "owner").write_text("host 4242")
    (tier / "run-abc" / "rank1" / "act1.bin").write_bytes(b"\0" * 8)
    assert {x.what for x in leftovers.disk_tier([tier])} == {
        "run-abc/rank1/owner",
        "run-abc/rank1/act1.bin",
    }
    assert leftovers.disk_tier([tier], allowed_owners=[4242]) == []  # the killed rank's own

    (tmp_path / "run" / "host0" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "host0" / "checkpoints" / ".epoch_000003.pt.k2j4.tmp").write_bytes(b"x")
    assert [x.what for x in leftovers.partial_files([tmp_path])] == [".epoch_000003.pt.k2j4.tmp"]


def test_a_new_shared_memory_segment_counts_unless_another_program_holds_it():
    before = leftovers.shm_names()
    path = leftovers.SHM / f"gnntrain-chaos-test-{os.getpid()}"
    try:
        with open(path, "wb"):
            # this process is not the job's: what it holds is not the job's leftover
            assert leftovers.shm_segments(before) == []
            # held only by the job's own processes (a leftover process holds it): counted
            assert [x.what for x in leftovers.shm_segments(before, [os.getpid()])] == [path.name]
        assert [x.what for x in leftovers.shm_segments(before)] == [path.name]
    finally:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------ on an emulated cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = netem.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(netem, "STATE_DIR", tmp_path_factory.mktemp("netem-state"))
        try:
            made = netem.create(NAME, 2, netem.Link(gbit_s=1.0))
        except GnnTrainError as exc:
            pytest.skip(f"cannot make network namespaces here: {exc}")
        try:
            yield made
        finally:
            netem.destroy(NAME)


def test_the_sweep_finds_processes_and_ports_left_in_a_hosts_namespace(cluster):
    server = (
        "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29799)); s.listen(); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", cluster.namespace(1), sys.executable, "-c", server],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        found = leftovers.sweep(cluster, [], [], leftovers.shm_names())
        assert [(x.kind, x.where) for x in found] == [
            ("process", cluster.namespace(1)),
            ("port", cluster.namespace(1)),
        ], found
        assert str(proc.pid) in found[0].what and "0.0.0.0:29799" in found[1].what
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while leftovers.sweep(cluster, [], [], leftovers.shm_names()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers.sweep(cluster, [], [], leftovers.shm_names()) == []


def test_five_seeded_trials_end_in_time_leave_nothing_and_resume_bit_identical(cluster, tmp_path):
    """Five seeded trials (every mode once, ranks and hosts killed): each job ends within 60 s
    with a line naming the rank and host lost, nothing is left on any host after the kill (but the
    killed ranks' disk-tier tables) nor after the resume, and ``train.resume=true`` ends with the
    uninterrupted run's losses and model.pt, bit for bit."""
    settings = ChaosSettings(epochs=12, port=29840)
    trials = schedule(SEED, 5, settings)
    assert sorted(t.mode for t in trials) == sorted(MODES)
    assert {t.victim for t in trials} == {"rank", "host"} and any(t.host == 0 for t in trials)
    records = chaos.run_chaos(cluster, trials, settings, tmp_path)
    for record in records:
        print(record.line(settings.end_limit_s), f"[{record.trial_s:.1f} s: {record.phases_s}]")
    summary = figures(records, settings)
    print(summary)
    failed = [r.to_json(settings.end_limit_s) for r in records if not r.ok(settings.end_limit_s)]
    assert not failed, failed
    assert summary["leftovers_found"] == 0 and summary["resumes_identical"] == 5
    assert summary["max_time_to_end_s"] < 60
    # the hongtu trial killed a rank that held tables on the disk tier; its resume removed them
    assert any(r.left_for_resume for r in records if r.mode == "hongtu"), records
