"""``mode=auto``: enumerate the plans this hardware allows, predict each, run the fastest that fits.

Candidates are every registered mode (or ``auto.modes``) × its ``Capabilities.auto_variants`` (the
options its paper varies: sparse/oblivious, replication, aggregation and bits, dedup) × the world
sizes the profile allows (``auto.ranks_per_node``, else 1, 2, 4, ... up to
``hardware.ranks_per_node`` per node). Each is resolved by :func:`gnntrain.plan.build_plan` (so an
impossible plan, or one whose memory does not fit the host, is dropped with the plan's own reason),
approximate ones are dropped unless ``auto.allow_approximate``, and the rest are ranked by
``ModePlanner.predict``'s epoch time on the profile's calibrated costs (docs/design.md#mode-auto).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

from omegaconf import DictConfig, OmegaConf, open_dict

from gnntrain.errors import PlanError
from gnntrain.modes import MODE_REGISTRY, ModePlanner
from gnntrain.modes.cost import check_profile, nearest_cost
from gnntrain.plan import build_mode, build_plan
from gnntrain.plan_types import RunPlan
from gnntrain.sizing import host_cores

__all__ = ["resolve_plan", "choose_plan", "candidate_configs"]


def resolve_plan(cfg: DictConfig, training: bool = True) -> RunPlan:
    """The run plan: :func:`choose_plan` for ``mode=auto``, else
    :func:`gnntrain.plan.build_plan` (``training``: as it says)."""
    return choose_plan(cfg) if cfg.mode.name == "auto" else build_plan(cfg, training)


def _world_choices(cfg: DictConfig) -> List[int]:
    asked = [int(r) for r in cfg.auto.ranks_per_node]
    if any(r < 1 for r in asked):
        raise PlanError(
            "auto.ranks_per_node",
            f"{asked}: every entry must be at least 1.",
            "e.g. auto.ranks_per_node=[1,2]",
        )
    if asked:
        return sorted(set(asked))
    limit = int(cfg.hardware.ranks_per_node)
    return sorted({1 << k for k in range(limit.bit_length()) if 1 << k <= limit} | {limit})


def _label(name: str, options: Dict[str, Any], ranks: int) -> str:
    opts = " ".join(f"{k}={v}" for k, v in options.items())
    return f"{name}{' ' + opts if opts else ''} ×{ranks}"


def candidate_configs(cfg: DictConfig) -> List[Tuple[str, Dict[str, Any], int, DictConfig]]:
    """(mode, option overrides, ranks per node, composed config) for every candidate."""
    names = [str(n) for n in cfg.auto.modes] or sorted(MODE_REGISTRY)
    unknown = [n for n in names if n not in MODE_REGISTRY]
    if unknown:
        raise PlanError(
            "auto.modes",
            f"unknown mode(s) {', '.join(unknown)}.",
            f"use some of {', '.join(sorted(MODE_REGISTRY))}",
        )
    out = []
    base = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for name in names:
        spec = MODE_REGISTRY[name]
        for options in spec.capabilities.auto_variants:
            for ranks in _world_choices(cfg):
                cand = OmegaConf.create(base)
                mode = OmegaConf.merge(
                    OmegaConf.structured(spec.options), {"name": name, **options}
                )
                with open_dict(cand):
                    cand.mode = mode
                    cand.hardware.ranks_per_node = ranks
                out.append((name, dict(options), ranks, cand))
    return out


def choose_plan(cfg: DictConfig) -> RunPlan:
    """The winner's plan, with ``plan.auto`` holding the ranked table and every dropped candidate's
    reason."""
    check_profile(cfg.hardware)
    # refuses an uncalibrated profile, naming the fix
    nearest_cost(cfg.hardware, host_cores(cfg.hardware))
    allow = bool(cfg.auto.allow_approximate)
    ranked: List[Tuple[float, Dict[str, Any], RunPlan]] = []
    dropped: List[Dict[str, str]] = []
    seen = set()
    for name, options, ranks, cand in candidate_configs(cfg):
        label = _label(name, options, ranks)
        try:
            plan = build_plan(cand)
        except PlanError as exc:
            dropped.append({"candidate": label, "reason": str(exc)})
            continue
        key = (name, tuple(sorted(options.items())), plan.world_size)
        if key in seen:
            # another ranks_per_node giving the same world size (mode=single is always one rank)
            continue
        seen.add(key)
        label = _label(name, options, plan.world_size)
        mode: ModePlanner = build_mode(cand)
        if plan.world_size < mode.spec.capabilities.min_world_size:
            dropped.append(
                {
                    "candidate": label,
                    "reason": f"{name} on {plan.world_size} rank(s) is mode=single with extra work",
                }
            )
            continue
        if not mode.is_exact() and not allow:
            dropped.append(
                {
                    "candidate": label,
                    "reason": "approximate (not equal to mode=single); "
                    "auto.allow_approximate=true admits it",
                }
            )
            continue
        pred = plan.prediction
        row = {
            "candidate": label,
            "mode": name,
            "options": options,
            "world_size": plan.world_size,
            "exact": mode.is_exact(),
            "predicted_epoch_s": pred["epoch_s"],
            "predicted_compute_s": pred["compute_s"],
            "predicted_comm_s": pred["comm_s"],
            "predicted_memory_bytes": pred["memory_bytes"],
            "predicted_comm_bytes": pred["comm_bytes"],
        }
        ranked.append((pred["epoch_s"], row, plan))
    if not ranked:
        reasons = "; ".join(f"{d['candidate']}: {d['reason']}" for d in dropped[:6])
        raise PlanError(
            "mode=auto",
            f"no candidate plan fits this hardware and dataset ({len(dropped)} dropped: "
            f"{reasons}).",
            "use a profile with more memory or more nodes, a smaller dataset, or "
            "auto.allow_approximate=true",
        )
    ranked.sort(key=lambda item: (item[0], not item[1]["exact"]))
    table = [dict(row, rank=i + 1) for i, (_, row, _) in enumerate(ranked)]
    winner = ranked[0][2]
    record = {
        "chosen": table[0]["candidate"],
        "allow_approximate": allow,
        "ranked": table,
        "dropped": dropped,
        "calibration": winner.prediction["calibration"],
    }
    return dataclasses.replace(winner, auto=record)
