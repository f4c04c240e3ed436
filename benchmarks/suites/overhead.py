"""The `overhead` suite: each exact mode at 2 ranks against single at equal total threads."""

from __future__ import annotations

import statistics

from benchmarks.harness import SuiteResult, interleaved_summaries, median_epoch
from benchmarks.registry import suite


@suite("overhead")
def suite_overhead(quick: bool) -> SuiteResult:
    """Each exact mode at 2 ranks (1 thread each) against single (1 rank, 2 threads): epoch-time
    ratio."""
    n, reps, epochs = (20000, 2, 6) if quick else (100000, 3, 10)
    graph = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=10",
        "dataset.feat_dim=64",
        "model=gcn",
        "model.hidden=64",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        "train.progress=false",
        "comm_timeout_s=600",
    ]
    modes = [
        ("single (1 rank x 2 threads)", ["mode=single"]),
        ("partition sparse", ["mode=partition", "hardware.ranks_per_node=2"]),
        (
            "partition dense-alltoall",
            ["mode=partition", "mode.comm=dense-alltoall", "hardware.ranks_per_node=2"],
        ),
        ("partition cagnet", ["mode=partition", "mode.comm=cagnet", "hardware.ranks_per_node=2"]),
        ("mop", ["mode=mop", "hardware.ranks_per_node=2"]),
        ("supergcn bits=32 hybrid", ["mode=supergcn", "mode.bits=32", "hardware.ranks_per_node=2"]),
        (
            "hongtu p2p+reuse, 4 chunks per rank (CPU arena)",
            ["mode=hongtu", "mode.chunks=4", "hardware.ranks_per_node=2"],
        ),
    ]
    # like for like (issue 58): A·x of the inputs kept by every mode that can (single, MoP, HongTu),
    # then by none
    settings = [
        ("A·x kept", ["train.cache_input_aggregation=true"]),
        ("A·x recomputed", ["train.cache_input_aggregation=false"]),
    ]
    candidates = [
        (f"{name} [{label}]", extra + flag) for label, flag in settings for name, extra in modes
    ]
    runs = interleaved_summaries(graph, candidates, reps)
    times = {name: [median_epoch(s) for s in runs[name]] for name in runs}
    parts = {
        name: [
            (
                s["time_breakdown_s"]["compute"],
                s["time_breakdown_s"]["comm"],
                s["comm_bytes"]["per_epoch"],
            )
            for s in runs[name]
        ]
        for name in runs
    }
    rows, ratios = [], {}
    for label, _ in settings:
        base = statistics.median(times[f"{modes[0][0]} [{label}]"])
        for mode_name, _ in modes:
            name = f"{mode_name} [{label}]"
            t = statistics.median(times[name])
            ratios[name] = round(t / base, 3)
            compute = statistics.median(c for c, _, _ in parts[name])
            comm = statistics.median(m for _, m, _ in parts[name])
            # MoP (#17: it aggregates d_in-wide at every layer) and HongTu (issue 58, like for
            # like): 1.5
            limit = 1.5 if mode_name.startswith(("mop", "hongtu")) else 1.3
            goal = (
                ""
                if mode_name.startswith("single")
                else f"<= {limit} " + ("(met)" if t / base <= limit else "(MISSED)")
            )
            rows.append(
                [
                    name,
                    f"{t * 1e3:.1f}",
                    f"{min(times[name]) * 1e3:.1f}-{max(times[name]) * 1e3:.1f}",
                    f"{t / base:.2f}",
                    goal,
                    f"{compute * 1e3:.1f}",
                    f"{comm * 1e3:.1f}",
                    f"{parts[name][0][2] / 2**20:.2f}",
                ]
            )
    return SuiteResult(
        title=f"overhead: exact modes at 2 ranks vs single at equal total threads (csbm {n} nodes, "
        f"avg degree 10, "
        f"2-layer GCN, width 64, float32, {epochs} epochs)",
        columns=[
            "candidate",
            "median epoch (ms)",
            "min-max over reps (ms)",
            "ratio to single",
            "goal",
            "compute (ms)",
            "comm (ms)",
            "comm MiB/epoch",
        ],
        rows=rows,
        extra={"ratio_to_single": ratios},
        notes=f"{reps} interleaved repetitions; each ratio is against single with the same A·x "
        f"setting "
        "(train.cache_input_aggregation: kept by single, MoP and HongTu where true; partition and "
        "SuperGCN exchange x's halo every epoch either way, docs/design.md#like-for-like); per "
        "repetition the median epoch (first epoch dropped). compute = "
        "epoch - time blocked in collectives on the slowest rank; both ranks share the machine's 2 "
        "cores "
        "and talk over gloo/loopback, so a ratio above 1 is the cost of communication and of "
        "splitting "
        "the SpMM, not a speedup target. HongTu keeps vertex data on the host and moves each "
        "chunk's "
        "working set through the (CPU) device arena, layer by layer, recomputing in backward: its "
        "paper reports 1.3-3.8x slower than in-memory training on graphs that fit "
        "(notes/hongtu.md); "
        "its comm column is the host<->device copies.",
    )
