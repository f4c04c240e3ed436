"""The HyScale suites: `hyscale` (the paper's ablation: static split, + DRM, + prefetch) and
`hyscale_sampler` (the torch-native neighbour sampler against DGL's, #20)."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.harness import SHARED, SuiteResult, compose, interleaved_summaries, median_epoch
from benchmarks.registry import suite


@suite("hyscale")
def suite_hyscale(quick: bool) -> SuiteResult:
    """HyScale-GNN's ablation (§VI-E): serial single trainer, hybrid static split, + DRM, +
    prefetch."""
    n, reps, epochs = (20000, 1, 3) if quick else (20000, 2, 4)
    graph = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=10",
        "dataset.feat_dim=128",
        "dataset.train_fraction=0.5",
        "dataset.test_fraction=0.3",
        "model=sage",
        "model.hidden=64",
        "mode=hyscale",
        "mode.fanouts=[10,5]",
        "mode.batch_size=1024",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        "train.progress=false",
        "comm_timeout_s=600",
    ]
    hybrid = ["mode.cpu_trainers=1", "mode.accel_trainers=1"]
    # static: an even split, fixed (the baseline DRM improves on); then the §V model's split (the
    # initial shares every hybrid run now starts from), + DRM, + prefetch
    steps = [
        ("static split (even)", ["mode.shares=[0.5,0.5]", "mode.drm=false", "mode.prefetch=false"]),
        ("model split (§V)", ["mode.drm=false", "mode.prefetch=false"]),
        ("+ DRM", ["mode.drm=true", "mode.prefetch=false"]),
        ("+ prefetch", ["mode.drm=true", "mode.prefetch=true"]),
    ]
    candidates = [
        (
            "serial single trainer (1 rank x 2 threads)",
            [
                "mode.cpu_trainers=0",
                "mode.accel_trainers=1",
                "mode.drm=false",
                "mode.prefetch=false",
            ],
        )
    ]
    for label, emulate in (("", []), (" [CPU trainer 2x slower]", ["mode.slowdown=[2,1]"])):
        candidates += [(f"hybrid {name}{label}", hybrid + extra + emulate) for name, extra in steps]
    runs = interleaved_summaries(graph, candidates, reps)
    times = {name: [median_epoch(s) for s in runs[name]] for name in runs}
    shares = {name: [s["mode_report"]["shares_final"] for s in runs[name]] for name in runs}
    model = {
        name: [s["mode_report"].get("predicted_vs_measured_epoch_s") or {} for s in runs[name]]
        for name in runs
    }
    base = statistics.median(times[candidates[0][0]])
    rows, model_errors = [], {}
    for name, _ in candidates:
        t = statistics.median(times[name])
        predicted = [m.get("predicted") for m in model[name] if m.get("predicted")]
        error = ""
        if predicted and name.startswith("hybrid") and "DRM" not in name and "prefetch" not in name:
            # the §V model predicts a fixed split's epoch (DRM moves the split, prefetch overlaps
            # stages)
            model_errors[name] = statistics.median(predicted) / t - 1.0
            error = f"{statistics.median(predicted) * 1e3:.0f} ({100 * model_errors[name]:+.0f}%)"
        rows.append(
            [
                name,
                f"{t * 1e3:.0f}",
                f"{min(times[name]) * 1e3:.0f}-{max(times[name]) * 1e3:.0f}",
                f"{base / t:.2f}x",
                " / ".join(f"{x:.2f}" for x in shares[name][-1]),
                error,
            ]
        )
    on = statistics.median(times["hybrid + prefetch"])
    off = statistics.median(times["hybrid + DRM"])
    slow = " [CPU trainer 2x slower]"
    gain = statistics.median(times[f"hybrid static split (even){slow}"]) / statistics.median(
        times[f"hybrid + prefetch{slow}"]
    )
    return SuiteResult(
        title=f"hyscale ablation: epoch time (csbm {n} nodes, avg degree 10, f0=128, SAGE hidden "
        f"64, fanouts "
        f"[10,5], global batch 1024, {n // 2} train nodes)",
        columns=[
            "candidate",
            "median epoch (ms)",
            "min-max over reps (ms)",
            "speedup vs serial single",
            "final shares",
            "§V model's epoch (ms, error)",
        ],
        rows=rows,
        extra={
            "prefetch_on_off_ratio": round(on / off, 3),
            "drm_prefetch_over_static_slowed": round(gain, 3),
            "model_error_by_setting": {k: round(v, 3) for k, v in model_errors.items()},
        },
        notes=f"{reps} interleaved repetitions; per repetition the median epoch (first epoch "
        f"dropped). The "
        f"prefetch on/off epoch-time ratio (+ prefetch / + DRM, equal hardware) is {on / off:.2f}; "
        "with the "
        f"CPU trainer 2x slower, + DRM + prefetch is {gain:.2f}x the even static split (issue 58: "
        ">= 1.2x). "
        "The §V model's column is its predicted epoch for a fixed split (static and model rows) "
        "against "
        "the measured one (issue 58: within 25%). This "
        "host has 2 CPU cores and no GPU: the 'accelerator' trainer is a second CPU process, so "
        "hybrid "
        "rows split the same 2 cores (1 thread each) that the single trainer uses alone, and "
        "gradients "
        "cross gloo/loopback. The bracketed rows emulate a heterogeneous pair "
        "(mode.slowdown=[2,1]: the "
        "CPU trainer's training takes twice as long), which is what DRM is for. Paper (CPU-FPGA, "
        "cumulative): 1.13x static, 1.33x + DRM, 1.79x + prefetch.",
    )


def _sample_statistics(data, fanouts: list, draws: int) -> dict:
    """Per sampler, over ``draws`` seeds of a 2-layer sample of Cora's training nodes: the number of
    input nodes |V0|, and the mean full-graph in-degree of the sources each kept edge points at."""
    import torch

    from gnntrain.modes.hyscale.sampler import make_sampler

    degree = torch.bincount(data.dst, minlength=data.num_nodes).to(torch.float64)
    weight = torch.ones((data.dst.numel(), 2), dtype=torch.float64)
    seeds = data.train_mask.nonzero().flatten()
    stats = {}
    for kind in ("dgl", "torch"):
        sampler = make_sampler(kind, data.dst, data.src, weight, data.num_nodes, fanouts)
        inputs, source_degree = [], []
        for draw in range(draws):
            input_nodes, blocks = sampler.sample(seeds, 1000 + draw)
            inputs.append(float(input_nodes.numel()))
            last = blocks[-1]
            source_degree.append(float(degree[input_nodes[last.src]].mean()))
        stats[kind] = {
            "input nodes V0": torch.tensor(inputs),
            "source in-degree": torch.tensor(source_degree),
        }
    return stats


@suite("hyscale_sampler")
def suite_hyscale_sampler(quick: bool) -> SuiteResult:
    """The torch-native neighbour sampler against DGL's (issue #20): sample statistics on Cora, then
    HyScale's test accuracy on Cora with each, interleaved over seeds. Both samplers run in one
    process, so the suite runs on the DGL stack: .venv-dgl/bin/python -m benchmarks
    hyscale_sampler."""
    from gnntrain.backends import dgl_problem

    if dgl_problem() is not None:
        raise SystemExit(
            "hyscale_sampler compares against DGL's sampler in one process: run it on the DGL "
            "stack, .venv-dgl/bin/python -m benchmarks hyscale_sampler (make venv-dgl builds it)"
        )
    import math
    import statistics
    import tempfile

    from gnntrain.data import load_dataset
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    data = load_dataset(compose(["dataset=cora", f"data_dir={SHARED}"]))
    draws = 50 if quick else 400
    rows = []
    for fanouts in ([5, 5], [10, 10]):
        stats = _sample_statistics(data, fanouts, draws)
        for name in ("input nodes V0", "source in-degree"):
            a, b = stats["dgl"][name], stats["torch"][name]
            rel = float(b.mean() / a.mean() - 1)
            z = float(
                (b.mean() - a.mean())
                / math.sqrt(float(a.var()) / a.numel() + float(b.var()) / b.numel())
            )
            rows.append(
                [
                    f"{name}, fanouts {fanouts}",
                    f"{float(a.mean()):.2f} (sd {float(a.std()):.2f})",
                    f"{float(b.mean()):.2f} (sd {float(b.std()):.2f})",
                    f"{100 * rel:+.2f}% (z {z:+.2f})",
                    "abs(z) < 3 " + ("(met)" if abs(z) < 3 else "(MISSED)"),
                ]
            )
    epochs, seeds = (10, 2) if quick else (40, 5)
    base = [
        "dataset=cora",
        f"data_dir={SHARED}",
        "mode=hyscale",
        "mode.fanouts=[10,10]",
        "mode.batch_size=64",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        "train.progress=false",
    ]
    acc = {"dgl": [], "torch": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            for kind in acc:
                summary = run_training(
                    build_plan(compose(base + [f"mode.sampler={kind}", f"train.seed={seed}"])),
                    Path(tmp) / f"{kind}-{seed}",
                )
                acc[kind].append(summary["accuracy"]["test"])
    diff = statistics.mean(acc["torch"]) - statistics.mean(acc["dgl"])
    rows.append(
        [
            f"HyScale test accuracy on Cora (%), mean of {seeds} seeds",
            f"{100 * statistics.mean(acc['dgl']):.2f} "
            f"({100 * min(acc['dgl']):.1f}-{100 * max(acc['dgl']):.1f})",
            f"{100 * statistics.mean(acc['torch']):.2f} ({100 * min(acc['torch']):.1f}-"
            f"{100 * max(acc['torch']):.1f})",
            f"torch - dgl {100 * diff:+.2f} pp",
            "within 1 pp " + ("(met)" if abs(diff) <= 0.01 else "(MISSED)"),
        ]
    )
    return SuiteResult(
        title="HyScale's torch-native neighbour sampler against DGL's, on Cora",
        columns=["figure", "DGL sampler", "torch sampler", "difference", "goal"],
        rows=rows,
        notes=f"Sample statistics: a 2-layer sample of Cora's 140 training nodes drawn {draws} "
        f"times per sampler "
        f"(different seeds); V0 is the set of input nodes, 'source in-degree' the mean full-graph "
        "in-degree of the sources of the output layer's kept edges (uniform sampling keeps "
        "high-degree "
        "neighbours as often as the graph offers them). z is the two-sample z-score of the means; "
        "each "
        "node keeps exactly min(fanout, in-degree) edges under both. Accuracy: GCN 2-layer hidden "
        "16, "
        f"1 CPU + 1 emulated accelerator trainer, fanouts [10,10], global batch 64, {epochs} "
        "epochs, "
        f"seeds 0-{seeds - 1}, each seed run with both samplers back to back.",
    )
