"""HyScale's mode_report in summary.json: shares and stage times per trainer and iteration, and
the performance model's predictions set against what was measured."""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

from gnntrain.modes.hyscale.drm import STAGES


def mode_report(trainer, history: List[Dict[str, Any]]) -> Dict[str, Any]:
    """summary.json ``mode_report``: shares and stage times per trainer, predicted vs
    measured."""
    its = [it for h in history for it in h["hyscale"]["iterations"]]
    med = statistics.median
    per_trainer = {
        s: [med(it["stage_s"][s][r] for it in its) for r in range(trainer.world)]
        for s in STAGES + ("sync",)
    }
    accel = trainer.accel

    def measured(it) -> Dict[str, float]:
        st = it["stage_s"]
        trans = [t for t, a in zip(st["transfer"], accel) if a]
        sync = max(st["sync"])
        return {
            "T_samp_s": max(st["sample"]),
            "T_load_s": sum(st["load"]),
            "T_trans_s": max(trans or [0.0]),
            "T_sync_s": sync,
            "T_prop_s": max(st["train"]) + sync,
            "T_exec_s": it["iter_s"],
        }

    initial = dict(history[0]["hyscale"].get("initial") or {})
    moves, last = [], None
    for it in its:
        if it.get("threads") != last:
            last = it.get("threads")
            moves.append({"iter": it["iter"], "threads": last})
    rows = [measured(it) for it in its]
    got = {k: med(r[k] for r in rows) for k in rows[0]} if rows else {}
    details = trainer.ctx.plan.mode_details
    predicted = {
        k[:-3] + "_s": v / 1e3 for k, v in details["performance model (per iteration)"].items()
    }
    predicted["V0_per_trainer"] = details["predicted |V0| per trainer"]
    # the model calibrated at start (stage costs measured on each rank) where it ran; else the
    # plan's guess
    predicted.update(initial.get("predicted_iteration_s") or {})
    if initial.get("model_per_seed_s"):
        predicted["T_sync_s"] = initial["model_per_seed_s"]["sync_s"]
    return {
        "trainers": [
            ("accel" if a else "cpu") + f":{d}"
            for a, d in zip(accel, trainer.ctx.plan.rank_devices)
        ],
        "shares_final": [round(s, 5) for s in history[-1]["hyscale"]["shares"]],
        "shares_per_iteration": [it["shares"] for it in its],
        "batch_per_iteration": [it["batch"] for it in its],
        "stage_time_median_s": per_trainer,
        "predicted_vs_measured_s": {
            k: {"predicted": predicted.get(k), "measured": got.get(k)}
            for k in ("T_samp_s", "T_load_s", "T_trans_s", "T_sync_s", "T_prop_s", "T_exec_s")
        },
        "input_rows_rank0_median": med(it["input_rows"] for it in its) if its else None,
        "predicted_V0_per_trainer": predicted.get("V0_per_trainer"),
        "iterations": len(its),
        "prefetch": bool(trainer.o.prefetch),
        "drm": bool(trainer.o.drm),
        # §III-B/§V: the initial split and what the model predicted for it; the threads per
        # trainer (sampler pool / loader / training) and balance_thread's moves of the CPU
        # trainers' threads
        "initial_shares": list(initial.get("shares", its[0]["shares"] if its else [])),
        "initial_shares_source": initial.get("source", "resumed"),
        "model_T_samp_per_seed_s": initial.get("T_samp_per_seed_s"),
        "model_per_seed_s": initial.get("model_per_seed_s"),
        # the hardware profile's plan-time guess
        "profile_per_seed_s": initial.get("profile_per_seed_s"),
        "model_predicted_iteration_s": initial.get("predicted_iteration_s"),
        "sampler_pool_threads": [sp["T_SC"] for sp in trainer.splits],
        "threads_per_trainer": [dict(sp) for sp in trainer.splits],
        "cpu_threads_over_time": moves,
        "predicted_vs_measured_epoch_s": {
            "predicted": (
                initial["predicted_iteration_s"]["T_exec_s"] * trainer.per_epoch
                if "predicted_iteration_s" in initial
                else None
            ),
            "measured": med(h["epoch_time_s"] for h in history if "epoch_time_s" in h)
            if any("epoch_time_s" in h for h in history)
            else None,
        },
        "table": [
            ["final shares", " / ".join(f"{s:.3f}" for s in history[-1]["hyscale"]["shares"])]
        ]
        + [
            [f"{k[:-2]} predicted / measured", f"{_ms(predicted.get(k))} / {_ms(got.get(k))}"]
            for k in ("T_samp_s", "T_load_s", "T_trans_s", "T_sync_s", "T_prop_s", "T_exec_s")
        ],
    }


def _ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"
