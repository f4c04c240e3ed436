"""Host threads per trainer (HyScale §III-B, §IV-A): reserved sampler/loader cores for the
accelerator trainers, the rest for the CPU trainers, and each rank's split into its sampler pool
(T_SC), feature loader (T_Load) and training (T_TC) threads, which DRM's balance_thread moves."""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

SPLIT_KEYS = ("T_SC", "T_Load", "T_TC")


def rank_budgets(on_device: Sequence[bool], cores: int, sampler_threads: int) -> Tuple[int, ...]:
    """Host threads per rank, never more than ``cores`` in all (where ``cores`` >= the ranks).

    Without a device every trainer computes on the host: the cores are shared evenly. A rank with
    a device reserves its sampler pool plus one loader and one feeding thread
    (``sampler_threads`` + 2; 0 = auto: an even share of the cores), and the CPU trainers share
    what is left."""
    n = len(on_device)
    if n == 0:
        return ()
    acc = sum(bool(d) for d in on_device)
    cpu = n - acc
    if not acc or not cpu:
        even = max(1, cores // n)
        return tuple(even for _ in on_device)
    reserve = int(sampler_threads) + 2 if int(sampler_threads) > 0 else max(3, cores // n)
    reserve = max(1, min(reserve, (cores - cpu) // acc))  # leave every CPU trainer a core
    cpu_share = max(1, (cores - acc * reserve) // cpu)
    return tuple(reserve if d else cpu_share for d in on_device)


def split_threads(budget: int, on_device: bool) -> Dict[str, int]:
    """A rank's threads by task. A device rank's main thread only feeds its device (T_TC = 1), one
    thread loads features, the rest sample. A host rank trains on most of its threads and samples on
    a quarter. Below 3 threads the three tasks time-share the budget with one thread each."""
    budget = max(1, int(budget))
    if budget < len(SPLIT_KEYS):
        return {"T_SC": 1, "T_Load": 1, "T_TC": 1}
    if on_device:
        return {"T_SC": budget - 2, "T_Load": 1, "T_TC": 1}
    sc = max(1, budget // 4)
    return {"T_SC": sc, "T_Load": 1, "T_TC": budget - sc - 1}


def on_this_host(planned: Sequence[int], cores: Optional[int] = None) -> List[int]:
    """The planned threads per rank where this machine has the cores for all of them (the ranks of a
    HyScale run share one host), else an even share of its cores (a profile's cores_per_node
    describes its nodes, not the machine a run lands on)."""
    cores = len(os.sched_getaffinity(0)) if cores is None else int(cores)
    if sum(planned) <= cores:
        return [max(1, int(p)) for p in planned]
    even = max(1, cores // max(1, len(planned)))
    return [max(1, min(int(p), even)) for p in planned]
