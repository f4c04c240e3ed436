"""The chaos suite's schedule and records (gnntrain/launch/chaos.py runs them): the modes and the
config each runs in, the seeded trials, one record per trial and the figures over all of them."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

MODES = ("partition", "supergcn", "mop", "hongtu", "hyscale")
VICTIMS = ("rank", "host")
WINDOW_SHARE = 0.9  # kill points fall in the first 90% of the training window, not after it


def mode_overrides(mode: str, world_size: int) -> List[str]:
    """The overrides that run ``mode`` deterministically across ``world_size`` ranks."""
    if mode == "hongtu":  # every vertex table on the disk tier, so a killed rank leaves files
        return ["mode=hongtu", "mode.host_budget=0"]
    if mode == "hyscale":
        # one rank per trainer (accelerator trainers run as CPU processes on a CPU profile); DRM
        # moves the shares by measured times, which no rerun replays, so the shares are static
        shares = ",".join([f"{1 / world_size:.6g}"] * world_size)
        return [
            "mode=hyscale",
            "mode.cpu_trainers=1",
            f"mode.accel_trainers={world_size - 1}",
            "mode.drm=false",
            f"mode.shares=[{shares}]",
            "mode.fanouts=[5,5]",
            "mode.batch_size=128",
        ]
    # supergcn's stochastic quantization is seeded per (seed, rank, epoch): it replays
    return [f"mode={mode}"]


@dataclass(frozen=True)
class ChaosSettings:
    """What every trial's job is: the cluster's shape and the small training run it kills."""

    hosts: int = 2
    ranks_per_host: int = 1
    modes: Tuple[str, ...] = MODES
    epochs: int = 20
    num_nodes: int = 600
    comm_timeout_s: float = 20.0
    end_limit_s: float = 60.0
    start_limit_s: float = 180.0  # launch to first epoch; past it the trial fails
    port: int = 29800  # the jobs' master ports count up from here
    # the share of trials killed while the job starts (torchrun's rendezvous, loading, partitioning,
    # the process group) instead of while it trains; 0 = the schedule, training only
    startup_share: float = 0.0

    @property
    def world_size(self) -> int:
        return self.hosts * self.ranks_per_host

    def overrides(self, mode: str) -> List[str]:
        return [
            "dataset=csbm",
            f"dataset.num_nodes={self.num_nodes}",
            f"train.epochs={self.epochs}",
            "train.checkpoint_every=1",
            "kernel=torch",
            "train.progress=false",
            f"comm_timeout_s={self.comm_timeout_s:g}",
        ] + mode_overrides(mode, self.world_size)


@dataclass(frozen=True)
class Trial:
    index: int
    mode: str
    victim: str  # rank | host
    host: int  # the victim's host (a rank's host)
    rank: int  # the rank killed (a host: its first rank)
    at: float  # kill point: a fraction of its phase's window, in [0, 1)
    phase: str = "training"  # training: after the first epoch; startup: launch to first epoch


def schedule(seed: int, trials: int, settings: ChaosSettings) -> List[Trial]:
    """The seeded trials: the same seed gives the same schedule."""
    rng = random.Random(seed)
    out: List[Trial] = []
    modes: List[str] = []
    for index in range(trials):
        if not modes:
            modes = list(settings.modes)
            rng.shuffle(modes)
        victim = rng.choice(VICTIMS)
        host = rng.randrange(settings.hosts)
        rank = host * settings.ranks_per_host + (
            rng.randrange(settings.ranks_per_host) if victim == "rank" else 0
        )
        at = round(rng.random(), 4)
        # drawn only where asked for, so that a schedule without start-up kills stays as it was
        startup = settings.startup_share > 0 and rng.random() < settings.startup_share
        out.append(
            Trial(index, modes.pop(0), victim, host, rank, at, "startup" if startup else "training")
        )
    return out


@dataclass
class TrialRecord:
    """One trial's figures (docs/bench/chaos.json keeps them all)."""

    index: int
    mode: str
    victim: str
    host: int
    rank: int
    at: float
    phase: str = "training"
    address: str = ""
    kill_s: Optional[float] = None  # after the killed run's first epoch (startup: its launch)
    kill_epoch: Optional[int] = None  # epochs completed when the kill landed
    killed_pids: List[int] = field(default_factory=list)
    time_to_end_s: Optional[float] = None
    message: str = ""  # the line naming what was lost
    named: bool = False  # it names the victim's rank and host
    # the victims' disk-tier tables and half-written files, which the resume removes
    left_for_resume: List[str] = field(default_factory=list)
    leftovers: List[str] = field(default_factory=list)
    resumed_from: Optional[int] = None
    losses_identical: bool = False
    model_identical: bool = False
    error: str = ""
    trial_s: float = 0.0
    phases_s: Dict[str, float] = field(default_factory=dict)  # reference, kill, resume (runs)

    @property
    def identical(self) -> bool:
        return self.losses_identical and self.model_identical

    def ok(self, end_limit_s: float) -> bool:
        return (
            not self.error
            and self.time_to_end_s is not None
            and self.time_to_end_s <= end_limit_s
            and self.named
            and not self.leftovers
            and self.identical
        )

    def to_json(self, end_limit_s: float) -> Dict[str, object]:
        return {**asdict(self), "ok": self.ok(end_limit_s)}

    def line(self, end_limit_s: float) -> str:
        """One line for a console."""
        what = f"{self.victim} {self.rank if self.victim == 'rank' else self.host}"
        where = "not killed"
        if self.kill_s is not None and self.phase == "startup":
            where = f"{self.kill_s:.2f} s after its launch (start-up)"
        elif self.kill_s is not None:
            where = f"at {self.kill_s:.2f} s (epoch {self.kill_epoch})"
        end = f"ended in {self.time_to_end_s:.1f} s" if self.time_to_end_s is not None else ""
        verdict = "ok" if self.ok(end_limit_s) else "FAILED"
        resume = (
            f"resumed from {self.resumed_from}, identical: {'yes' if self.identical else 'no'}"
            if self.resumed_from is not None
            else ""
        )
        parts = [f"trial {self.index}: {self.mode}, kill {what} {where}", end, resume]
        parts += [f"{len(self.leftovers)} leftovers" if self.leftovers else "", self.error]
        return f"{verdict:6} " + "; ".join(p for p in parts if p)


def figures(records: Sequence[TrialRecord], settings: ChaosSettings) -> Dict[str, object]:
    """The report's figures over all trials."""
    killed = [r for r in records if r.kill_s is not None]
    trained = [r for r in killed if r.phase == "training"]
    ends = [r.time_to_end_s for r in killed if r.time_to_end_s is not None]
    return {
        "trials": len(records),
        "passed": sum(r.ok(settings.end_limit_s) for r in records),
        "hosts": settings.hosts,
        "ranks_per_host": settings.ranks_per_host,
        "modes": {m: sum(r.mode == m for r in records) for m in settings.modes},
        "victims": {v: sum(r.victim == v for r in records) for v in VICTIMS},
        "phases": {p: sum(r.phase == p for r in records) for p in ("training", "startup")},
        "kill_epochs": sorted({r.kill_epoch for r in trained if r.kill_epoch is not None}),
        "kill_s_range": [
            min((r.kill_s for r in trained), default=0.0),
            max((r.kill_s for r in trained), default=0.0),
        ],
        "max_time_to_end_s": max(ends, default=None),
        "named": sum(r.named for r in records),
        "leftovers_found": sum(len(r.leftovers) for r in records),
        "resumes_identical": sum(r.identical for r in records),
        "errors": [f"trial {r.index}: {r.error}" for r in records if r.error],
    }
