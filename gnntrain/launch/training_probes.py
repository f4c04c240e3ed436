"""The training probes of ``gnntrain calibrate`` (gnntrain/launch/calibrate.py): real runs of
small graphs on the profile being measured, fitting the fixed costs the measured rates do not
explain (per layer, per optimizer step, per collective call: :func:`fit_overheads`) and each mode's
factor between measured and modelled compute (:func:`fit_mode_factors`)."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from omegaconf import OmegaConf

from gnntrain.config.schema import option_value
from gnntrain.sizing import host_cores

PROBE_GRAPH = {
    "name": "csbm",
    "source": "generated",
    "num_nodes": 2000,
    "avg_degree": 8.0,
    "feat_dim": 32,
    "num_classes": 4,
    "train_fraction": 0.3,
}
PROBE_EPOCHS = 25


@contextlib.contextmanager
def _quiet_stdout():
    """The probe runs' summary tables (and their spawned ranks') go to /dev/null, not the
    console."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _probe_config(cfg, mode: str, layers: int, cores: int, ranks: int, cost: Dict[str, Any]):
    """A tiny run of ``mode`` on this profile (``cores`` per node, ``ranks`` per node, ``cost`` as
    measured so far) for the training probes."""
    from gnntrain.config.schema import ModelConfig
    from gnntrain.data.generators import get_generator
    from gnntrain.modes import MODE_REGISTRY

    probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    probe.dataset = OmegaConf.merge(OmegaConf.structured(get_generator("csbm").config), PROBE_GRAPH)
    probe.model = OmegaConf.merge(
        OmegaConf.structured(ModelConfig), {"name": "gcn", "layers": layers, "hidden": 16}
    )
    probe.mode = OmegaConf.merge(OmegaConf.structured(MODE_REGISTRY[mode].options), {"name": mode})
    probe.hardware.cores_per_node, probe.hardware.ranks_per_node, probe.hardware.nodes = (
        cores,
        ranks,
        1,
    )
    probe.hardware.cost = cost
    probe.train.update(
        epochs=PROBE_EPOCHS,
        progress=False,
        eval_every=PROBE_EPOCHS,
        checkpoint_every=0,
        dtype="float32",
    )
    probe.kernel, probe.resume, probe.port = "auto", None, 0
    return probe


def _train_probe(cfg, scratch: Path, name: str) -> Tuple[float, Dict[str, Any]]:
    """(median epoch seconds after the first, the plan's prediction) of one probe run."""
    from gnntrain.launch.launcher import run_training
    from gnntrain.plan import build_plan

    plan = build_plan(cfg)
    with _quiet_stdout():
        summary = run_training(plan, scratch / name)
    return statistics.median(summary["epoch_time_s"][1:]), plan.prediction


MODE_PROBE_GRAPH = {
    "name": "csbm",
    "source": "generated",
    "num_nodes": 40000,
    "avg_degree": 10.0,
    "feat_dim": 64,
    "num_classes": 8,
    "train_fraction": 0.3,
}
MODE_PROBE_EPOCHS = 10


def _probe_ranks(cfg) -> int:
    """Ranks a training probe may use: 2, or on a CUDA profile the GPUs there are (each rank owns
    one)."""
    import torch

    return min(2, torch.cuda.device_count()) if option_value(cfg.hardware.device) == "cuda" else 2


# calibrate --quick: a rougher factor per mode
QUICK_MODE_PROBE = {"num_nodes": 6000, "epochs": 3, "reps": 1}


def fit_mode_factors(
    cfg, scratch: Path, cost: Dict[str, Any], say: Callable[[str], None], quick: bool = False
) -> None:
    """``cost["mode_factor"]``: every mode, with the first options ``mode=auto`` tries, trains a 40
    000-node graph (hidden width 64) twice, on one rank where it runs on one, else on two; the
    factor is the median of (measured - fixed costs) / the modelled compute that grows with the
    graph. At this size the fixed costs are under a tenth of an epoch, so their own noise hardly
    moves the factor."""
    import copy

    from gnntrain.modes import MODE_REGISTRY

    fitted = dict(copy.deepcopy(cost), calibrated="probe", mode_factor={})
    factors: Dict[str, float] = {}
    for name in sorted(MODE_REGISTRY):
        can = MODE_REGISTRY[name].capabilities
        ranks = max(1, min(_probe_ranks(cfg), int(can.min_world_size)))
        probe = _probe_config(cfg, name, 2, host_cores(cfg.hardware), ranks, fitted)
        probe.dataset = OmegaConf.merge(
            probe.dataset,
            MODE_PROBE_GRAPH,
            {"num_nodes": QUICK_MODE_PROBE["num_nodes"]} if quick else {},
        )
        probe.model.hidden = 64
        probe.train.epochs = probe.train.eval_every = (
            QUICK_MODE_PROBE["epochs"] if quick else MODE_PROBE_EPOCHS
        )
        probe.mode = OmegaConf.merge(probe.mode, dict(can.auto_variants[0]))
        ratios = []
        for rep in range(QUICK_MODE_PROBE["reps"] if quick else 2):
            measured, predicted = _train_probe(probe, scratch, f"mode-{name}-{rep}")
            fixed = predicted["epoch_s"] - predicted["scaling_compute_s"]
            ratios.append((measured - fixed) / max(1e-9, predicted["scaling_compute_s"]))
        factors[name] = round(min(4.0, max(0.25, statistics.median(ratios))), 3)
    cost["mode_factor"] = factors
    shown = (
        f"{QUICK_MODE_PROBE['num_nodes'] if quick else MODE_PROBE_GRAPH['num_nodes']:,}".replace(
            ",", " "
        )
    )
    say(
        f"measured / modelled compute per mode ({shown}-node probe{', quick' if quick else ''}): "
        + ", ".join(f"{k} {v:.2f}" for k, v in factors.items())
    )


def _least_squares(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """(slope, intercept) of the least-squares line through ``points``."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / max(1e-12, sum((x - mx) ** 2 for x in xs))
    return slope, my - slope * mx


def fit_overheads(cfg, scratch: Path, cost: Dict[str, Any], say: Callable[[str], None]) -> None:
    """Fill ``cost``'s fixed costs from real runs on a 2000-node graph, where they dominate: per
    thread count, mode=single with 1 and 3 layers gives the cost per layer and per step (what the
    measured rates do not explain: the least-squares line through 1-3 layers, twice); then
    mode=partition on 2 ranks (three times, the median) gives the cost per collective call beyond
    latency and bytes."""
    import copy

    zero = copy.deepcopy(cost)
    zero.update(
        op_overhead_us=[0.0] * len(cost["threads"]),
        epoch_overhead_us=[0.0] * len(cost["threads"]),
        collective_overhead_us=0.0,
        calibrated="probe",
    )
    for i, threads in enumerate(cost["threads"]):
        # (layers, measured - predicted without fixed costs), layers 1-3 twice, interleaved
        points = []
        for rep in range(2):
            for layers in (1, 2, 3):
                measured, predicted = _train_probe(
                    _probe_config(cfg, "single", layers, threads, 1, zero),
                    scratch,
                    f"single-{threads}-{layers}-{rep}",
                )
                points.append((layers, measured - predicted["epoch_s"]))
        slope, intercept = _least_squares(points)
        cost["op_overhead_us"][i] = round(max(0.0, slope) * 1e6, 2)
        cost["epoch_overhead_us"][i] = round(max(0.0, intercept) * 1e6, 2)
    ranks = 2
    threads = max(1, host_cores(cfg.hardware) // ranks)
    fitted = dict(copy.deepcopy(cost), calibrated="probe", collective_overhead_us=0.0)
    per_call: List[float] = []
    if _probe_ranks(cfg) < 2:
        say(
            "one GPU: no 2-rank training probe, so no cost per collective call beyond the probe's "
            "latency"
        )
    for rep in range(3 if _probe_ranks(cfg) >= 2 else 0):
        measured, predicted = _train_probe(
            _probe_config(cfg, "partition", 2, threads * ranks, ranks, fitted),
            scratch,
            f"partition-2-{rep}",
        )
        per_call.append(
            (measured - predicted["epoch_s"]) / max(1, int(predicted["collective_calls"]))
        )
    cost["collective_overhead_us"] = round(
        max(0.0, statistics.median(per_call) if per_call else 0.0) * 1e6, 2
    )
    say(
        f"fixed costs from training probes: per layer {cost['op_overhead_us']} µs, per step "
        f"{cost['epoch_overhead_us']} µs (by thread count {cost['threads']}), per collective call "
        "in training "
        f"{cost['collective_overhead_us']:.0f} µs"
    )
