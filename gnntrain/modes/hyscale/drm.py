"""Dynamic resource management (HyScale §IV-A, Algorithm 1): bottleneck detection and share
rebalancing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

STAGES = ("sample", "load", "transfer", "train")
# what every trainer reports after each step (one float each, all-reduced): its stages, its wait
# in the gradient sync, and ``busy`` (see :func:`work_seconds`)
REPORTED = STAGES + ("sync", "busy")


@dataclass(frozen=True)
class DRMState:
    """What DRM carries between iterations: shares, EMA throughputs per balanced
    pair (seeds/s per trainer), and the threads of the CPU tasks."""

    shares: Tuple[float, ...]
    rates: Dict[str, Tuple[float, ...]] = field(default_factory=dict)  # "train" | "sample"
    threads: Dict[str, int] = field(default_factory=dict)  # "T_SC" | "T_Load" | "T_TC"
    bottleneck: str = ""
    action: str = ""


def algorithm1(stages: Dict[str, float], threads: Dict[str, int]) -> Tuple[str, str, Optional[str]]:
    """HyScale-GNN §IV-A, Algorithm 1: (bottleneck, action, pair or thread donor).

    ``stages`` holds T_SC, T_SA, T_Load, T_TC and T_Accel = max(T_Tran, T_TA)
    for the sides present. Actions: ``balance_work`` with pair ``sample``
    (T_SC↔T_SA) or ``train`` (T_TC↔T_Accel), or ``balance_thread`` with the
    donating CPU task. A thread move needs a donor with more than one thread;
    where there is none, and the bottleneck is a CPU sampler or trainer, the
    rule falls back to balance_work on that pair (the paper leaves this open).
    """
    ranked = sorted(stages, key=lambda k: (-stages[k], k))
    bottleneck, fastest = ranked[0], ranked[-1]
    second = ranked[-2] if len(ranked) > 1 else fastest
    cpu = [k for k in ("T_SC", "T_Load", "T_TC") if k in stages]
    fastest_cpu = min(cpu, key=lambda k: (stages[k], k)) if cpu else fastest
    if bottleneck == "T_SA":
        return bottleneck, "balance_work", "sample"
    if bottleneck == "T_Accel":
        return bottleneck, "balance_work", "train"
    donor = fastest_cpu if bottleneck == "T_Load" else fastest
    pair = {"T_SC": "sample", "T_TC": "train"}.get(bottleneck)
    if bottleneck == "T_SC" and (fastest == "T_SA" or (fastest == "T_Accel" and second == "T_SA")):
        return bottleneck, "balance_work", "sample"
    if bottleneck == "T_TC" and (
        fastest == "T_Accel" or (fastest == "T_SA" and second == "T_Accel")
    ):
        return bottleneck, "balance_work", "train"
    if donor != bottleneck and threads.get(donor, 1) > 1:
        return bottleneck, "balance_thread", donor
    if pair is not None:
        return bottleneck, "balance_work", pair
    return bottleneck, "none", None


def rebalance(
    shares: Sequence[float],
    rates: Sequence[float],
    batch: Sequence[int],
    seconds: Sequence[float],
    ema: float,
    min_share: float,
) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """Damped proportional rule: shares ∝ EMA of measured throughput b_i/t_i, floored at
    ``min_share``; the shares sum to 1, so the global batch stays fixed."""
    new_rates = []
    for old, b, t in zip(rates, batch, seconds):
        if b <= 0 or t <= 0:
            new_rates.append(old)  # nothing measured this time
            continue
        sample = b / t
        new_rates.append(sample if old <= 0 else ema * sample + (1 - ema) * old)
    if not all(r > 0 for r in new_rates):
        return tuple(shares), tuple(new_rates)
    target = [r / sum(new_rates) for r in new_rates]
    return floor_shares(target, min_share), tuple(new_rates)


def floor_shares(shares: Sequence[float], min_share: float) -> Tuple[float, ...]:
    """Raise shares below ``min_share`` to it and scale the others down to keep the sum at 1."""
    out = list(shares)
    fixed: set = set()
    while True:
        low = [i for i, s in enumerate(out) if i not in fixed and s < min_share]
        if not low:
            return tuple(out)
        fixed.update(low)
        free = [i for i in range(len(out)) if i not in fixed]
        rest = 1.0 - min_share * len(fixed)
        free_total = sum(out[i] for i in free)
        for i in range(len(out)):
            out[i] = min_share if i in fixed else out[i] * rest / free_total


def side_stages(times: Sequence[Dict[str, float]], accel: Sequence[bool]) -> Dict[str, float]:
    """Per-trainer stage seconds → Algorithm 1's inputs (the slowest trainer of each side)."""
    cpu = [t for t, a in zip(times, accel) if not a]
    acc = [t for t, a in zip(times, accel) if a]
    stages = {"T_Load": max(t["load"] for t in times)}
    if cpu:
        stages["T_SC"] = max(t["sample"] for t in cpu)
        stages["T_TC"] = max(t["train"] for t in cpu)
    if acc:
        stages["T_SA"] = max(t["sample"] for t in acc)
        stages["T_Accel"] = max(max(t["transfer"], t["train"]) for t in acc)
    return stages


def work_seconds(
    times: Sequence[Dict[str, float]], accel: Sequence[bool], pair: str
) -> Tuple[str, list]:
    """The seconds that balance_work divides each trainer's slice by, and the EMA they feed.

    Here a trainer samples, loads and trains the same slice, so one share moves all of its stages
    at once (in the paper the CPU sampler's and the accelerator sampler's work are split apart from
    the trainers'). Where the trainers report ``busy`` (the time from asking for the batch to the
    end of its backward: its serial stages, or its wait on the pipeline plus training with
    prefetch), that whole time is the throughput's denominator, for either pair and in one EMA: a
    rate from one stage alone would let a stage's blip (one slow draw) set every stage's split.
    Without it, the pair's own stage: training (with an accelerator's transfer) or sampling."""
    if all("busy" in t for t in times):
        return "work", [t["busy"] for t in times]
    if pair == "train":  # an accelerator trainer's work includes its transfer
        return pair, [t["train"] + (t["transfer"] if a else 0.0) for t, a in zip(times, accel)]
    return pair, [t["sample"] for t in times]


def drm_step(
    state: DRMState,
    times: Sequence[Dict[str, float]],
    batch: Sequence[int],
    accel: Sequence[bool],
    ema: float,
    min_share: float,
) -> DRMState:
    """One DRM decision from one iteration's per-trainer stage times (pure: no clocks)."""
    bottleneck, action, arg = algorithm1(side_stages(times, accel), state.threads)
    rates, shares, threads = dict(state.rates), state.shares, dict(state.threads)
    if action == "balance_work":
        key, seconds = work_seconds(times, accel, arg)
        shares, rates[key] = rebalance(
            shares, rates.get(key, (0.0,) * len(shares)), batch, seconds, ema, min_share
        )
    elif action == "balance_thread":
        threads[arg] -= 1
        threads[bottleneck] = threads.get(bottleneck, 1) + 1
    return DRMState(
        shares=tuple(shares),
        rates=rates,
        threads=threads,
        bottleneck=bottleneck,
        action=f"{action}({arg})" if arg else action,
    )


class ShareSchedule:
    """Shares per global iteration; the sampler of batch k waits until they are decided."""

    def __init__(self) -> None:
        self._shares: Dict[int, Tuple[float, ...]] = {}
        self._cond = threading.Condition()

    def set(self, k: int, shares: Sequence[float]) -> None:
        with self._cond:
            self._shares[k] = tuple(shares)
            self._cond.notify_all()

    def get(self, k: int) -> Tuple[float, ...]:
        with self._cond:
            self._cond.wait_for(lambda: k in self._shares)
            return self._shares[k]
