"""The `ablations` suite's run matrix (benchmarks/suites/ablations.py): each paper's comparisons as
runs (paper, comparison, p, variant, overrides, baseline variant, the paper's claim), which of them
also run on loopback, on a slower link and on the core-per-host cluster, in how many interleaved
rounds, and the order they run in."""

from __future__ import annotations

from typing import List, Optional, Tuple

# (paper, comparison, p, variant, overrides, baseline variant of the comparison, the paper's claim)
Run = Tuple[str, str, int, str, List[str], Optional[str], str]

SPARSITY = "sparsity-aware"
SUPERGCN = "SuperGCN"
MIXGCN = "MixGCN"
HONGTU = "HongTu"

# the 1D comparison: CAGNET's broadcast stages (the paper's baseline), the all-to-all of every row,
# and SA
ONE_D = "sparse vs cagnet vs dense-alltoall"
ONE_D_DENSER = ONE_D + ", denser R-MAT"
DENSER_EDGES_PER_NODE = 16  # edges drawn per node on the denser graph (4 on the suite's R-MAT)
CAGNET = "cagnet (broadcast stages)"
DENSE = "dense-alltoall (all-gather)"

CLAIMS = {
    "sparse": "SA lowers volume to METIS's total volume x f; up to 14x faster per epoch than "
    "CAGNET (256 A100s); "
    "SA alone can be slower than broadcast at small p",
    "dense": "the all-to-all of every row moves CAGNET's bytes, (p-1) N f per layer, in one "
    "collective",
    "1.5d": "1.5D replication c trades a c-way all-reduce for 1/c of the halo; its all-reduce gets "
    "no benefit "
    "from sparsity",
    "hybrid": "pre/post hybrid (minimum vertex cover): 1.4-1.8x faster than pre (Fig. 8, ABCI, 256 "
    "ranks)",
    "int2": "int2 halo: 2.4-2.8x faster than without communication optimisations (Fig. 8)",
    "mop": "MoP volume N(m-1)/m (d_0 + 4 sum d_l), independent of the graph; partition's grows "
    "with remote "
    "neighbours; up to 10.4x faster than CAGNET",
    "pipeline": "the fine-grained pipeline overlaps aggregate -> exchange -> update across s node "
    "batches",
    "dedup": "P2P + reuse cut host->device rows by 25-71% (Table 8)",
}


def _one_d_runs(parts, n: int) -> List[Run]:
    """The 1D comparison at each p, on the suite's R-MAT and on a denser one; CAGNET is the
    baseline."""
    runs: List[Run] = []
    for comparison, extra in (
        (ONE_D, []),
        (ONE_D_DENSER, [f"dataset.num_edges={DENSER_EDGES_PER_NODE * n}"]),
    ):
        for p in parts:
            runs.append(
                (
                    SPARSITY,
                    comparison,
                    p,
                    CAGNET,
                    ["mode=partition", "mode.comm=cagnet"] + extra,
                    None,
                    "",
                )
            )
            runs.append(
                (
                    SPARSITY,
                    comparison,
                    p,
                    DENSE,
                    ["mode=partition", "mode.comm=dense-alltoall"] + extra,
                    CAGNET,
                    CLAIMS["dense"],
                )
            )
            runs.append(
                (
                    SPARSITY,
                    comparison,
                    p,
                    "sparse",
                    ["mode=partition", "mode.comm=sparse"] + extra,
                    CAGNET,
                    CLAIMS["sparse"],
                )
            )
    return runs


def _runs(quick: bool, n: int) -> List[Run]:
    parts = (2, 4) if quick else (2, 4, 8)
    runs: List[Run] = _one_d_runs(parts, n)
    runs.append((SPARSITY, "1.5D vs 1D", 4, "1D sparse", ["mode=partition"], None, ""))
    runs.append(
        (
            SPARSITY,
            "1.5D vs 1D",
            4,
            "1.5D c=2 sparse",
            ["mode=partition", "mode.replication=2"],
            "1D sparse",
            CLAIMS["1.5d"],
        )
    )
    sgcn = ["mode=supergcn", "mode.label_propagation=0"]
    runs.append(
        (
            SUPERGCN,
            "pre -> hybrid -> int2",
            4,
            "pre fp32",
            sgcn + ["mode.aggregation=pre", "mode.bits=32"],
            None,
            "",
        )
    )
    runs.append(
        (
            SUPERGCN,
            "pre -> hybrid -> int2",
            4,
            "hybrid fp32",
            sgcn + ["mode.aggregation=hybrid", "mode.bits=32"],
            "pre fp32",
            CLAIMS["hybrid"],
        )
    )
    runs.append(
        (
            SUPERGCN,
            "pre -> hybrid -> int2",
            4,
            "hybrid int2",
            sgcn + ["mode.aggregation=hybrid", "mode.bits=2"],
            "pre fp32",
            CLAIMS["int2"],
        )
    )
    for m in parts:
        runs.append(
            (MIXGCN, "MoP vs partition", m, "partition sparse", ["mode=partition"], None, "")
        )
        runs.append(
            (MIXGCN, "MoP vs partition", m, "MoP", ["mode=mop"], "partition sparse", CLAIMS["mop"])
        )
        runs.append(
            (
                MIXGCN,
                "MoP vs partition",
                m,
                "MoP pipeline s=4",
                ["mode=mop", "mode.pipeline_chunks=4"],
                "MoP",
                CLAIMS["pipeline"],
            )
        )
    hongtu = ["mode=hongtu", "mode.chunks=4"]
    runs.append((HONGTU, "dedup", 2, "none", hongtu + ["mode.dedup=none"], None, ""))
    runs.append(
        (
            HONGTU,
            "dedup",
            2,
            "p2p+reuse",
            hongtu + ["mode.dedup=p2p+reuse"],
            "none",
            CLAIMS["dedup"],
        )
    )
    return runs


# the pairs that also run on loopback (the local launcher), to show what a laptop would conclude
LOOPBACK = {(SPARSITY, ONE_D, 4), (SUPERGCN, "pre -> hybrid -> int2", 4)}
# #23's must-show comparisons run in this many interleaved rounds (every variant once per round) and
# pool their epochs: 4 ranks share 2 cores here, and one run's epochs can sit 10-20% above another's
ROUNDS = {(SPARSITY, ONE_D, 4): 3, (SUPERGCN, "pre -> hybrid -> int2", 4): 3}
# comparisons repeated on a slower emulated link, to show where their savings overtake the compute
# they add
SLOW_LINK_GBIT_S = 0.25
SLOW = {(SUPERGCN, "pre -> hybrid -> int2", 4)}
# the must-show comparisons also run on a cluster whose every host has a core of its own: each host
# capped at its share of this machine and the whole cluster time-dilated to match
# (netem.dilation_for), so the compute that coding and hybrid aggregation add is priced as on a real
# cluster, not at 2 ranks per core
CLUSTER = {(SPARSITY, ONE_D, 4), (SUPERGCN, "pre -> hybrid -> int2", 4)}
CORES_PER_HOST = 1
NETWORKS = ("cluster", "emulated", "slow", "loopback")
# METIS vertex weight per row, in nnz: a row's update (2-layer SAGE, D = 128, forward + backward)
# took 21 us against 0.9 us per nnz of aggregation on this machine (time_breakdown_s of a p=4
# supergcn run). With nnz weights alone the R-MAT graph's 47% isolated rows all went to one part: 4x
# the rows, whose update then set every epoch's pace (0.56 s against 0.38 s balanced, pre fp32, 1
# Gbit/s cluster)
ROW_WEIGHT = 23


def _rounds(runs: List[Run], rounds=None) -> List[Tuple[int, int, Run]]:
    """(run index, round, run) in execution order: a comparison listed in ROUNDS runs all its
    variants, then all of them again, and so on; every other run once, where it stands."""
    rounds = ROUNDS if rounds is None else rounds
    order: List[Tuple[int, int, Run]] = []
    done = set()
    for i, run in enumerate(runs):
        key = run[:3]
        if key in done:
            continue
        if key in rounds:
            done.add(key)
            group = [(j, r) for j, r in enumerate(runs) if r[:3] == key]
            order += [(j, k, r) for k in range(rounds[key]) for j, r in group]
        else:
            order.append((i, 0, run))
    return order
