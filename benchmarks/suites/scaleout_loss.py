"""The `scaleout` suite's optional host-loss trial (``SCALEOUT_HOST_LOSS=1``; #55, must-show 5):
the two-host ``mode=partition`` job with a checkpoint every epoch loses host 1 (every process in its
network namespace, killed as the chaos suite kills a host: gnntrain/launch/chaos.py) once epoch 2
has started, every saved tensor on the disk tier (``mode.host_budget=0``, so that the kill leaves
tables at any size). Checked: the job ends within :data:`END_LIMIT_S` with a line naming the lost
host, ``train.resume=true`` on both hosts ends with the uninterrupted run's losses (the partition
row's), and no disk-tier file is left in the hosts' (shared) disk-tier folder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional, Sequence

from benchmarks.suites.moonshot import _epochs
from benchmarks.suites.scaleout_hosts import RANKS_PER_HOST, START_LIMIT_S, Step, TwoHosts
from gnntrain.launch import leftovers
from gnntrain.launch.chaos import _await_epoch, _epochs_done, _failure, _lost_line
from gnntrain.launch.chaos_schedule import Trial
from gnntrain.launch.netem import kill_pids
from gnntrain.modes.saved_tier import disk_tier_folder

END_LIMIT_S = 60.0  # the kill to the job's end
LOST_HOST = 1
KILL_INTO_EPOCH = 0.5  # the kill lands this share of epoch 1's time into epoch 2


@dataclass
class HostLoss:
    """What the trial saw."""

    killed_pids: List[int] = field(default_factory=list)
    kill_epoch: Optional[int] = None  # epochs recorded when the kill landed
    time_to_end_s: Optional[float] = None
    line: str = ""  # the agents' line naming the lost host (else their first error line)
    named: bool = False
    left_after_kill: List[str] = field(default_factory=list)  # the killed ranks' tables
    resume: Optional[Step] = None
    identical: bool = False
    left_after_resume: List[str] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        ended = self.time_to_end_s is not None and self.time_to_end_s <= END_LIMIT_S
        resumed = self.resume is not None and self.resume.ok
        clean = not self.left_after_resume
        return not self.error and ended and self.named and resumed and self.identical and clean


def _tier_files(cache: Path) -> List[str]:
    folder = disk_tier_folder(SimpleNamespace(disk_dir=None), SimpleNamespace(cache_dir=str(cache)))
    return [item.describe() for item in leftovers.disk_tier([folder])]


def _kill_host(hosts: TwoHosts, job, run_dir: Path, record: HostLoss) -> Optional[float]:
    """Kill every process of host :data:`LOST_HOST` once epoch 2 has started (epoch 1 recorded and
    checkpointed, then :data:`KILL_INTO_EPOCH` of its time): the kill's perf_counter()."""
    if _await_epoch(job, 1, START_LIMIT_S) is None:
        record.error = f"the job never finished epoch 1: {_failure(job.wait(10))}"
        return None
    while job.running() and not any((run_dir / "checkpoints").glob("*")):
        time.sleep(0.01)
    epochs = _epochs(run_dir)
    time.sleep(KILL_INTO_EPOCH * float(epochs[0].get("epoch_time_s", 0.0)) if epochs else 0.0)
    if not job.running() or _epochs_done(run_dir) > 1:
        record.error = "the job finished epoch 2 before the kill"
        job.wait(10)
        return None
    record.killed_pids = leftovers.namespace_pids(hosts.cluster)[LOST_HOST]
    kill_pids(record.killed_pids)
    killed = time.perf_counter()
    record.kill_epoch = _epochs_done(run_dir)
    return killed


def host_loss_trial(
    hosts: TwoHosts, overrides: Sequence[str], root: Path, reference: Optional[List[float]]
) -> HostLoss:
    """Run the trial on ``hosts`` with ``overrides`` (the partition row's); ``reference``: the
    uninterrupted run's losses (None: run it here first, with a checkpoint every epoch too)."""
    record = HostLoss()
    # every saved tensor on the disk tier, so that the kill leaves tables at any size (the tier is
    # exact: the losses stay the uninterrupted run's)
    overrides = list(overrides) + ["train.checkpoint_every=1", "mode.host_budget=0"]
    if reference is None:
        ref = hosts.run(overrides, root / "reference")
        if not ref.ok or not ref.summary:
            record.error = f"the uninterrupted reference run failed ({ref.status})"
            return record
        reference = list(ref.summary["losses"])
    job = hosts.start(overrides, root / "lost")
    killed = _kill_host(hosts, job, job.run_dirs[0], record)
    if killed is None:
        return record
    result = job.wait(END_LIMIT_S, peer_grace_s=END_LIMIT_S)
    record.time_to_end_s = round(job.started + result.wall_s - killed, 2)
    victim = Trial(0, "partition", "host", LOST_HOST, LOST_HOST * RANKS_PER_HOST, 0.0)
    record.line, record.named = _lost_line(result.outputs, victim, hosts.cluster.address(LOST_HOST))
    if not record.line:
        record.line = _failure(result)
    record.left_after_kill = _tier_files(hosts.cache)
    record.resume = hosts.run(overrides + ["train.resume=true"], root / "lost")
    losses = (record.resume.summary or {}).get("losses") or []
    record.identical = bool(losses) and list(losses) == reference
    record.left_after_resume = _tier_files(hosts.cache)
    return record
