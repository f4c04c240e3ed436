"""A chaos suite on an emulated cluster (gnntrain/launch/netem.py): a seeded schedule of trials,
each of which kills a rank or a whole host of a training job at a random time and checks what an
HPC engineer relies on after a failure (docs/design.md#chaos):

1. the job ends within ``end_limit_s`` (60 s) of the kill, with one line naming the rank(s) lost
   and their host (``lost rank 1 on host 10.79.x.2``);
2. nothing is left behind on any host: no process or listening port in the hosts' namespaces, no
   shared memory segment, no held lock, no disk-tier table but the killed ranks' own (which the
   next run removes), and after the resume none at all, nor a half-written file
   (gnntrain/launch/leftovers.py);
3. ``train.resume=true`` on the same run folders finishes with the losses and ``model.pt`` of an
   uninterrupted run of the same config, bit for bit (every mode here is deterministic on CPU in
   the configuration :func:`mode_overrides` gives it). That reference runs once per mode, in this
   process with the local launcher: the same ranks on one host, one thread each, the same losses
   and weights bit for bit as across the hosts (all five modes, checked when it changed), and about
   1 s against a cluster job's 8-10 s (two torchrun agents and two fresh ranks importing torch).

Trial i draws its mode (the modes in seeded shuffled rounds, so any ``len(MODES)`` consecutive
trials cover them all), its victim (a rank: that rank's process; a host: every process in its
namespace, the torchrun agent included), which one, and the kill point as a fraction of the
training window (the reference run's seconds from its first epoch to its last), measured from the
killed run's first epoch. :func:`run_chaos` runs them; ``gnntrain netem chaos`` and ``python -m
benchmarks chaos`` (``make chaos``) are its commands.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from gnntrain.launch import leftovers, netem
from gnntrain.launch.chaos_schedule import WINDOW_SHARE, ChaosSettings, Trial, TrialRecord
from gnntrain.launch.forkserver import environment_variable
from gnntrain.launch.netem import EmulatedCluster, Link, kill_pids
from gnntrain.launch.netem_jobs import JobResult, RunningJob, start_job
from gnntrain.launch.output_relay import RANK_OUTPUT

_LOST = re.compile(r"lost ranks? ([\d, ]+) on host ([0-9a-fA-F:.]*[0-9a-fA-F])")
# before the process group formed: the hosts are not known yet (gnntrain.comm.peers)
_NEVER_JOINED = re.compile(r"rank \d+: ranks? ([\d, ]+) did not join")


@dataclass
class Reference:
    """An uninterrupted run of one mode's config: its losses, weights and training window."""

    losses: List[float]
    model: Dict[str, object]
    window_s: float  # first epoch's end to the last's


class _EpochClock:
    """perf_counter() when a run folder's first and last epochs are recorded, read by a thread
    while this process trains (an in-process run holds the main thread)."""

    def __init__(self, run_dir: Path, epochs: int):
        self.run_dir, self.epochs = run_dir, epochs
        self.first: Optional[float] = None
        self.last: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set() and self.last is None:
            done = _epochs_done(self.run_dir)
            if done >= 1 and self.first is None:
                self.first = time.perf_counter()
            if done >= self.epochs:
                self.last = time.perf_counter()
            self._stop.wait(0.005)

    def __enter__(self) -> "_EpochClock":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _epochs_done(run_dir: Path) -> int:
    try:
        return (run_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _await_epoch(job: RunningJob, epochs: int, limit_s: float) -> Optional[float]:
    """perf_counter() once rank 0 has recorded ``epochs`` epochs; None if the job ended first or
    the limit passed."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        if _epochs_done(job.run_dirs[0]) >= epochs:
            return time.perf_counter()
        if not job.running():
            return None
        time.sleep(0.01)
    return None


def _model(run_dir: Path) -> Dict[str, object]:
    import torch

    path = run_dir / "model.pt"
    return torch.load(path, weights_only=True) if path.exists() else {}


def _same_model(a: Dict[str, object], b: Dict[str, object]) -> bool:
    import torch

    return bool(a) and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _failure(result: JobResult) -> str:
    """The first of gnntrain's error lines of a failed job's agents, else the last exception's."""
    lines = [line.strip() for out in result.outputs for line in out.splitlines()]
    ours = [line for line in lines if line.startswith("error:")]
    raised = [line for line in lines if "Error" in line.split(":")[0]]
    fallback = ["exit codes " + ", ".join(map(str, result.returncodes))]
    return (ours[:1] or raised[-1:] or fallback)[0][:300]


class ChaosRun:
    """Trials on one cluster, with a reference run per mode (made when first needed)."""

    def __init__(self, cluster: EmulatedCluster, settings: ChaosSettings, workdir: Path):
        self.cluster, self.settings, self.workdir = cluster, settings, Path(workdir)
        self.references: Dict[str, Reference] = {}
        self._startup_s: Dict[str, float] = {}
        self._port = settings.port

    def _next_port(self) -> int:
        self._port += 1
        return self._port

    def _env(self, cache: Path) -> Dict[str, str]:
        return {"GNNTRAIN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "GNNTRAIN_OFFLINE": "1"}

    def _start(self, mode: str, root: Path, cache: Path, extra: Sequence[str] = ()) -> RunningJob:
        overrides = self.settings.overrides(mode) + list(extra)
        return start_job(
            self.cluster,
            overrides,
            root,
            self.settings.ranks_per_host,
            self._next_port(),
            self._env(cache),
            rendezvous_timeout_s=self.settings.comm_timeout_s,
        )

    def reference(self, mode: str) -> Reference:
        """The uninterrupted run of ``mode``'s config (run once, then reused): in this process
        with the local launcher, the job's ranks on one host with one thread each."""
        if mode in self.references:
            return self.references[mode]
        from gnntrain.launch.compose import compose
        from gnntrain.launch.launcher import run_training
        from gnntrain.plan import build_plan

        root = self.workdir / f"reference-{mode}"
        world = self.settings.world_size
        overrides = self.settings.overrides(mode) + [
            "hardware.nodes=1",
            f"hardware.ranks_per_node={world}",
            f"hardware.cores_per_node={world}",
            f"cache_dir={root / 'cache'}",
        ]
        (root / "output").mkdir(parents=True, exist_ok=True)
        try:  # its output (the ranks' and the launcher's) into files under root, not the terminal
            with (
                _EpochClock(root / "run", self.settings.epochs) as clock,
                environment_variable(RANK_OUTPUT, str(root / "output")),
                open(root / "output" / "launcher", "w") as log,
                contextlib.redirect_stdout(log),
                contextlib.redirect_stderr(log),
            ):
                summary = run_training(build_plan(compose(overrides)), root / "run")
        except Exception as exc:
            raise ChaosError(f"the reference run of mode {mode} failed: {exc}") from exc
        if summary.get("status") != "completed" or clock.first is None or clock.last is None:
            raise ChaosError(f"the reference run of mode {mode} ended {summary.get('status')}")
        self.references[mode] = Reference(
            list(summary["losses"]), _model(root / "run"), clock.last - clock.first
        )
        shutil.rmtree(root, ignore_errors=True)
        return self.references[mode]

    def startup_s(self, mode: str) -> float:
        """Launch to the first epoch's end of ``mode``'s job across the cluster (measured once,
        for start-up kills: torchrun's rendezvous and the fresh ranks are most of it)."""
        if mode in self._startup_s:
            return self._startup_s[mode]
        root = self.workdir / f"startup-{mode}"
        job = self._start(mode, root / "run", root / "cache")
        first = _await_epoch(job, 1, self.settings.start_limit_s)
        result = job.wait(self.settings.start_limit_s)
        if not result.ok or first is None:
            raise ChaosError(f"the start-up timing run of mode {mode} failed: {_failure(result)}")
        self._startup_s[mode] = first - job.started
        shutil.rmtree(root, ignore_errors=True)
        return self._startup_s[mode]

    def _victims(self, trial: Trial) -> List[int]:
        """The pids to kill: every process of the host, or the rank's own process."""
        pids = leftovers.namespace_pids(self.cluster)[trial.host]
        if trial.victim == "host":
            return pids
        ranked = {pid: leftovers.process_environment(pid).get("RANK") for pid in pids}
        mine = [pid for pid, rank in ranked.items() if rank == str(trial.rank)]
        return [pid for pid in mine if ranked.get(leftovers.parent_pid(pid)) != str(trial.rank)][:1]

    def trial(self, trial: Trial) -> TrialRecord:
        """Run one trial to its end: kill, time the end, sweep, resume, compare, sweep."""
        started = time.perf_counter()
        record = TrialRecord(**asdict(trial), address=self.cluster.address(trial.host))
        root = self.workdir / f"trial-{trial.index}"
        run, cache = root / "run", root / "cache"
        try:
            reference = self._timed(record, "reference", lambda: self.reference(trial.mode))
            shm_before = leftovers.shm_names()
            self._timed(
                record,
                "kill",
                lambda: self._kill_and_watch(trial, record, reference, run, cache, shm_before),
            )
            self._timed(
                record,
                "resume",
                lambda: self._resume_and_compare(trial, record, reference, run, cache, shm_before),
            )
        except Exception as exc:  # one trial's failure is its record's, not the whole run's
            record.error = (
                str(exc) if isinstance(exc, ChaosError) else f"{type(exc).__name__}: {exc}"
            )
        finally:
            for pids in leftovers.namespace_pids(self.cluster).values():  # never into the next
                kill_pids(pids)
            record.trial_s = time.perf_counter() - started
            if record.ok(self.settings.end_limit_s):
                shutil.rmtree(root, ignore_errors=True)
        return record

    @staticmethod
    def _timed(record: TrialRecord, phase: str, step: Callable[[], object]) -> object:
        start = time.perf_counter()
        try:
            return step()
        finally:
            record.phases_s[phase] = round(time.perf_counter() - start, 2)

    def _kill_and_watch(
        self,
        trial: Trial,
        record: TrialRecord,
        reference: Reference,
        run: Path,
        cache: Path,
        shm_before,
    ) -> None:
        startup_s = self.startup_s(trial.mode) if trial.phase == "startup" else 0.0
        job = self._start(trial.mode, run, cache)
        if trial.phase == "startup":
            first = job.started
            target = first + trial.at * WINDOW_SHARE * startup_s
        else:
            first = _await_epoch(job, 1, self.settings.start_limit_s)
            if first is None:
                result = job.wait(10)
                raise ChaosError(f"the run to kill never trained: {_failure(result)}")
            target = self._training_kill_point(job, trial, reference, first)
        while time.perf_counter() < target and job.running():
            time.sleep(0.005)
        if not job.running():
            job.wait(10)
            raise ChaosError("the run ended before its kill point")
        if trial.phase == "startup" and _epochs_done(run / "host0"):
            raise ChaosError("missed: the run trained an epoch before its start-up kill point")
        victims = self._victims(trial)
        while not victims and job.running() and time.perf_counter() < first + 60:
            time.sleep(0.01)  # a rank killed while the job starts: once its process exists
            victims = self._victims(trial)
        if not victims:
            raise ChaosError(f"no process of {trial.victim} {trial.rank} to kill")
        kill_pids(victims)
        killed = time.perf_counter()
        record.killed_pids = victims
        record.kill_s = round(killed - first, 3)
        record.kill_epoch = _epochs_done(run / "host0")
        result = job.wait(self.settings.end_limit_s, peer_grace_s=self.settings.end_limit_s)
        record.time_to_end_s = round(job.started + result.wall_s - killed, 2)
        record.message, record.named = _lost_line(result.outputs, trial, record.address)
        found = _settled_sweep(
            self.cluster, [run, cache], [cache / "disk-tier"], shm_before, victims
        )
        record.left_for_resume = [
            item.describe()
            for item in leftovers.disk_tier([cache / "disk-tier"])
            + leftovers.partial_files([run, cache])
        ]
        record.leftovers += [f"after the kill: {item.describe()}" for item in found]

    def _training_kill_point(
        self, job: RunningJob, trial: Trial, reference: Reference, first: float
    ) -> float:
        """When to kill: ``trial.at`` of the window, anchored to the epoch it falls in. The run's
        own epochs are awaited and only the rest of one is timed from the reference: timed from
        the first epoch alone, a run slower than its reference (a loaded machine) drew kills past
        its last epoch (5 of 50 trials, a job already finished, or a rank already gone)."""
        gaps = self.settings.epochs - 1  # the window runs from the first epoch's end to the last's
        position = trial.at * WINDOW_SHARE * gaps
        whole = int(position)
        anchor = _await_epoch(job, 1 + whole, self.settings.start_limit_s) if whole else first
        if anchor is None:
            job.wait(10)
            raise ChaosError("the run ended before its kill point")
        return anchor + (position - whole) * reference.window_s / max(gaps, 1)

    def _resume_and_compare(
        self,
        trial: Trial,
        record: TrialRecord,
        reference: Reference,
        run: Path,
        cache: Path,
        shm_before,
    ) -> None:
        job = self._start(trial.mode, run, cache, ["train.resume=true"])
        result = job.wait(self.settings.start_limit_s)
        summary = result.summary() or {}
        if not result.ok or summary.get("status") != "completed":
            raise ChaosError(f"the resumed run failed: {_failure(result)}")
        record.resumed_from = int((summary.get("resume") or {}).get("from_epoch", 0))
        record.losses_identical = list(summary.get("losses", [])) == reference.losses
        record.model_identical = _same_model(_model(run / "host0"), reference.model)
        found = _settled_sweep(self.cluster, [run, cache], [cache / "disk-tier"], shm_before, ())
        record.leftovers += [f"after the resume: {item.describe()}" for item in found]


class ChaosError(Exception):
    """A trial that could not run its steps (the record keeps the message)."""


def _lost_line(outputs: Sequence[str], trial: Trial, address: str) -> Tuple[str, bool]:
    """The first line naming lost ranks, and whether it names the victim's rank and host (or, for
    a peer that never joined the process group, its rank: no host is known then)."""
    for out in outputs:
        for line in out.splitlines():
            lost, never = _LOST.search(line), _NEVER_JOINED.search(line)
            match = lost or never
            if match:
                ranks = {int(r) for r in match.group(1).replace(" ", "").split(",") if r}
                host = never is not None or match.group(2) == address
                return line.strip()[:300], trial.rank in ranks and host
    return "", False


def _settled_sweep(
    cluster: EmulatedCluster, folders, disk_tier_folders, shm_before, killed: Sequence[int]
) -> List[leftovers.Leftover]:
    """A sweep that lets processes that are exiting finish (up to 3 s) before it counts them;
    ``killed``: right after a kill, the killed processes (their tables and half-written files are
    the next run's to remove)."""
    deadline = time.monotonic() + 3.0
    while True:
        found = leftovers.sweep(
            cluster, folders, disk_tier_folders, shm_before, killed, half_written=not killed
        )
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def run_chaos(
    cluster: EmulatedCluster,
    trials: Sequence[Trial],
    settings: ChaosSettings,
    workdir: Path,
    progress: Optional[Callable[[TrialRecord], None]] = None,
) -> List[TrialRecord]:
    """Every trial, in order, on ``cluster``; failed trials keep their folders in ``workdir``."""
    runner = ChaosRun(cluster, settings, workdir)
    records = []
    for trial in trials:
        records.append(runner.trial(trial))
        if progress is not None:
            progress(records[-1])
    return records


def chaos_on_new_cluster(
    name: str,
    link: Link,
    trials: Sequence[Trial],
    settings: ChaosSettings,
    workdir: Path,
    progress: Optional[Callable[[TrialRecord], None]] = None,
) -> List[TrialRecord]:
    """:func:`run_chaos` on a cluster made for it (``settings.hosts`` hosts on ``link``), deleted
    afterwards."""
    cluster = netem.create(name, settings.hosts, link)
    try:
        return run_chaos(cluster, trials, settings, workdir, progress)
    finally:
        netem.destroy(name)
