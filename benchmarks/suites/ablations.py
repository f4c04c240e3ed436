"""The `ablations` bench suite (#23): each paper's headline ablation at small scale, run across an
emulated cluster network (gnntrain/launch/netem.py: one host per rank, every link shaped to the
same bandwidth), beside the same comparison on loopback where the savings cannot show in time.

Run with ``python -m benchmarks ablations`` (as root). ``python -m benchmarks ablations-1d`` runs
only the
1D communication comparison (sparse vs CAGNET's broadcast stages vs the dense all-to-all, p = 2, 4,
8, on
R-MAT and on a denser R-MAT), with the same settings; ``--quick`` shrinks it to a smoke test.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from benchmarks.harness import ROOT, SuiteResult
from benchmarks.registry import suite

MIB = 2**20

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
# capped
# at its share of this machine and the whole cluster time-dilated to match (netem.dilation_for), so
# the
# compute that coding and hybrid aggregation add is priced as on a real cluster, not at 2 ranks per
# core
CLUSTER = {(SPARSITY, ONE_D, 4), (SUPERGCN, "pre -> hybrid -> int2", 4)}
CORES_PER_HOST = 1
NETWORKS = ("cluster", "emulated", "slow", "loopback")
# METIS vertex weight per row, in nnz: a row's update (2-layer SAGE, D = 128, forward + backward)
# took
# 21 us against 0.9 us per nnz of aggregation on this machine (time_breakdown_s of a p=4 supergcn
# run).
# With nnz weights alone the R-MAT graph's 47% isolated rows all went to one part: 4x the rows,
# whose
# update then set every epoch's pace (0.56 s against 0.38 s balanced, pre fp32, 1 Gbit/s cluster)
ROW_WEIGHT = 23


def _rounds(runs: List[Run], rounds=None) -> List[Tuple[int, int, Run]]:
    """(run index, round, run) in execution order: a comparison listed in ROUNDS runs all its
    variants,
    then all of them again, and so on; every other run once, where it stands."""
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


def _epochs(summary: dict) -> List[float]:
    return list(summary["epoch_time_s"][1:])  # the first epoch warms caches and the allocator


def _run_local(overrides: List[str], p: int, run_dir: Path, env: Dict[str, str]) -> Optional[dict]:
    import json

    from gnntrain.api import cli

    proc = cli(
        ["run", *overrides, f"hardware.ranks_per_node={p}", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        timeout=1800,
        env=env,
    )
    path = run_dir / "summary.json"
    if proc.returncode != 0 or not path.exists():
        return None
    return json.loads(path.read_text())


@suite("ablations")
def suite_ablations(quick: bool, gbit_s: float = 1.0) -> SuiteResult:
    n, width, epochs = (20_000, 64, 4) if quick else (100_000, 128, 6)
    return _run_suite(_runs(quick, n), n, width, epochs, gbit_s, NETWORKS, ROUNDS)


@suite("ablations-1d")
def suite_ablations_1d(quick: bool, gbit_s: float = 1.0) -> SuiteResult:
    """Only the 1D comparison, p = 2, 4, 8 on both graphs; quick: a 4,000-node smoke test on the
    shared-core
    emulated network alone, one round."""
    n, width, epochs = (4_000, 32, 3) if quick else (100_000, 128, 6)
    networks, rounds = (("emulated",), {}) if quick else (NETWORKS, ROUNDS)
    return _run_suite(_one_d_runs((2, 4, 8), n), n, width, epochs, gbit_s, networks, rounds)


def _run_suite(
    runs: List[Run], n: int, width: int, epochs: int, gbit_s: float, networks, rounds
) -> SuiteResult:
    from gnntrain.launch import netem

    graph = [
        "dataset=rmat",
        f"dataset.num_nodes={n}",
        f"dataset.num_edges={4 * n}",
        f"dataset.feat_dim={width}",
        "model=sage",
        f"model.hidden={width}",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        "train.progress=false",
        "kernel=torch",
        "comm_timeout_s=1200",
        f"partitioner.row_weight={ROW_WEIGHT}",
    ]
    title = (
        f"ablations under an emulated {gbit_s:g} Gbit/s network: R-MAT {n:,} nodes, {4 * n:,} "
        "edges drawn, "
        f"2-layer SAGE, D = {width}, float32, METIS parts balanced by nnz + {ROW_WEIGHT} per row, "
        "median of "
        f"epochs 2-{epochs} (pooled over interleaved runs where marked), one rank per emulated host"
        + (
            f"; the denser R-MAT draws {DENSER_EDGES_PER_NODE * n:,} edges"
            if any(r[1] == ONE_D_DENSER for r in runs)
            else ""
        )
    )
    columns = [
        "paper",
        "comparison",
        "p",
        "variant",
        "network",
        "median epoch s",
        "comm MiB/epoch (all ranks)",
        "max rank send MiB",
        "time: baseline / this",
        "bytes: this / baseline",
        "paper's claim",
    ]
    reason = netem.unavailable_reason()
    if reason:
        return SuiteResult(title=title, columns=columns, rows=[], notes=f"not run: {reason}")
    link = netem.Link(gbit_s=gbit_s)
    links = {"cluster": link, "emulated": link, "slow": netem.Link(gbit_s=SLOW_LINK_GBIT_S)}
    epochs: Dict[
        Tuple[int, str], List[float]
    ] = {}  # (run index, network) -> epoch times over its rounds
    summaries: Dict[Tuple[int, str], dict] = {}
    failures: List[str] = []
    clusters: Dict[Tuple[int, str], "netem.EmulatedCluster"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GNNTRAIN_CACHE_DIR": f"{tmp}/cache", "OMP_NUM_THREADS": "1"}
        try:
            for i, round_, (paper, comparison, p, variant, extra, _, _) in _rounds(runs, rounds):
                for network in networks:
                    if (
                        (network == "loopback" and (paper, comparison, p) not in LOOPBACK)
                        or (network == "slow" and (paper, comparison, p) not in SLOW)
                        or (network == "cluster" and (paper, comparison, p) not in CLUSTER)
                    ):
                        continue
                    run_dir = Path(tmp) / f"{i}-{round_}-{network}"
                    if network != "loopback":
                        if (p, network) not in clusters:
                            clusters[(p, network)] = netem.create(
                                _cluster_name(p, network),
                                p,
                                links[network],
                                cores_per_host=CORES_PER_HOST if network == "cluster" else 0,
                            )
                        for attempt in range(
                            2
                        ):  # a second try on another port, should the first be taken
                            job = netem.run_job(
                                clusters[(p, network)],
                                graph + extra,
                                run_dir / f"try{attempt}",
                                port=29700 + 100 * attempt + i,
                                timeout_s=1800,
                                env=env,
                            )
                            if job.ok:
                                break
                        summary = job.summary() if job.ok else None
                        dilation = job.dilation
                        errors = [
                            line
                            for out in job.outputs
                            for line in out.splitlines()
                            if "error" in line.lower() and "elastic/errors.html" not in line
                        ]
                        tail = " / ".join(errors[-2:] or job.outputs[0].strip().splitlines()[-2:])
                    else:
                        summary = _run_local(graph + extra, p, run_dir, env)
                        tail, dilation = "the local run failed", 1.0
                    if summary is None or summary.get("status") != "completed":
                        label = _label(network, links)
                        failures.append(
                            f"{paper} {variant} p={p} ({label}) round {round_ + 1}: {tail[-300:]}"
                        )
                        continue
                    # a dilated cluster's real seconds / its dilation = the emulated cluster's
                    # seconds
                    epochs.setdefault((i, network), []).extend(
                        t / dilation for t in _epochs(summary)
                    )
                    summaries[(i, network)] = summary
        finally:
            for p, network in clusters:
                netem.destroy(_cluster_name(p, network))
    rows, results = _rows(runs, epochs, summaries, links, rounds)
    return SuiteResult(
        title=title,
        columns=columns,
        rows=rows,
        notes=_verdicts(results, links)
        + (" Failed: " + "; ".join(failures) + "." if failures else ""),
    )


def _cluster_name(p: int, network: str) -> str:
    return f"gtab{p}" + {"slow": "s", "cluster": "c"}.get(network, "")


def _judged_on(comparison: Tuple[str, str, int]) -> str:
    """The network whose row carries the paper's claim: the core-per-host cluster where it ran."""
    return "cluster" if comparison in CLUSTER else "emulated"


def _label(network: str, links: dict) -> str:
    if network == "cluster":
        return f"{links[network].describe()}, a core per host (time-dilated)"
    return links[network].describe() if network in links else "loopback"


def _rows(runs: List[Run], epochs, summaries, links, rounds) -> Tuple[List[List[str]], dict]:
    """One row per run and network, in the runs' order: the median of its pooled epochs, its bytes,
    and
    both against the comparison's baseline on the same network."""
    rows, results = [], {}
    for i, (paper, comparison, p, variant, _, baseline, claim) in enumerate(runs):
        for network in NETWORKS:
            if (i, network) not in summaries:
                continue
            summary = summaries[(i, network)]
            t, sent = statistics.median(epochs[(i, network)]), summary["comm_bytes"]["per_epoch"]
            results[(paper, comparison, p, variant, network)] = (t, sent)
            base = results.get((paper, comparison, p, baseline, network)) if baseline else None
            times = rounds.get((paper, comparison, p), 1)
            label = _label(network, links)
            rows.append(
                [
                    paper,
                    comparison,
                    str(p),
                    variant,
                    label,
                    f"{t:.3f}" + (f" ({times} runs)" if times > 1 else ""),
                    f"{sent / MIB:.1f}",
                    f"{summary['comm_bytes']['max_rank_send'] / MIB:.1f}",
                    f"{base[0] / t:.2f}x" if base else "",
                    f"{sent / base[1]:.3f}" if base else "",
                    claim if network == _judged_on((paper, comparison, p)) else "",
                ]
            )
    return rows, results


def _verdicts(results: dict, links: dict) -> str:
    """#23's 'must show 1' at p=4 under a 1 Gbit/s link: judged on the cluster with a core per host,
    and
    given as well with the hosts sharing this machine's cores, on loopback, and for SuperGCN at the
    slower link."""

    def time_of(paper, comparison, variant, network):
        return results.get((paper, comparison, 4, variant, network), (None,))[0]

    lines = []
    for network in ("cluster", "emulated"):
        sparse, dense, cagnet = (
            time_of(SPARSITY, ONE_D, v, network) for v in ("sparse", DENSE, CAGNET)
        )
        if sparse and dense:
            lb = [time_of(SPARSITY, ONE_D, v, "loopback") for v in ("sparse", DENSE)]
            lines.append(
                f"p=4, {_label(network, links)}: partition sparse {sparse:.3f} s vs dense-alltoall "
                f"{dense:.3f} s per epoch, {dense / sparse:.2f}x (goal: sparse below "
                "dense-alltoall: "
                f"{'met' if sparse < dense else 'MISSED'})"
                + (
                    f"; on loopback {lb[1] / lb[0]:.2f}x"
                    if all(lb) and network == "emulated"
                    else ""
                )
                + (
                    f"; CAGNET's broadcast stages {cagnet:.3f} s, {cagnet / sparse:.2f}x sparse's"
                    if cagnet
                    else ""
                )
            )
    variants = ("pre fp32", "hybrid fp32", "hybrid int2")
    for network in ("cluster", "emulated", "slow"):
        pre, hybrid, int2 = (
            time_of(SUPERGCN, "pre -> hybrid -> int2", v, network) for v in variants
        )
        if not (pre and hybrid and int2):
            continue
        lb = [time_of(SUPERGCN, "pre -> hybrid -> int2", v, "loopback") for v in variants]
        lines.append(
            f"SuperGCN p=4, {_label(network, links)}: pre fp32 {pre:.3f} s, hybrid fp32 "
            f"{hybrid:.3f} s "
            f"({pre / hybrid:.2f}x), hybrid int2 {int2:.3f} s ({pre / int2:.2f}x) (goal int2 < "
            "hybrid < "
            f"pre: {'met' if int2 < hybrid < pre else 'MISSED'})"
            + (
                f"; on loopback {lb[0] / lb[1]:.2f}x and {lb[0] / lb[2]:.2f}x"
                if all(lb) and network == "emulated"
                else ""
            )
        )
    return (
        ". ".join(lines)
        + (". " if lines else "")
        + (
            "Every rank is its own emulated host (a network namespace on one bridge, gnntrain "
            "netem), so all of its "
            "traffic crosses its shaped link (1 thread per rank). On the 'core per host' network "
            "each host is capped "
            "at its share of this machine (a cpu cgroup) and the cluster runs time-dilated: links "
            "shaped and caps set "
            "to 1/dilation of the emulated cluster's, times divided by the dilation (Gupta et al., "
            "NSDI 2006), so the "
            "compute that hybrid aggregation and int2 coding add costs what it would on hosts with "
            "a core each; on "
            "the other networks the hosts share this machine's 2 cores, which prices that compute "
            "at up to twice "
            "as much. Ratios are taken within one comparison and one network; SuperGCN also runs "
            "at "
            f"{SLOW_LINK_GBIT_S:g} Gbit/s."
        )
    )
