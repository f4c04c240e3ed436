"""The `ablations` bench suite (#23): each paper's headline ablation at small scale, run across an
emulated cluster network (gnntrain/launch/netem.py: one host per rank, every link shaped to the
same bandwidth), beside the same comparison on loopback where the savings cannot show in time.

Run with ``python -m benchmarks ablations`` (as root). ``python -m benchmarks ablations-1d`` runs
only the 1D communication comparison (sparse vs CAGNET's broadcast stages vs the dense all-to-all, p
= 2, 4, 8, on R-MAT and on a denser R-MAT), with the same settings; ``--quick`` shrinks it to a
smoke test.

Its run matrix is in ablations_matrix.py, its table and verdicts in ablations_report.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from benchmarks.harness import ROOT, SuiteResult
from benchmarks.registry import suite
from benchmarks.suites.ablations_matrix import (
    CLUSTER,
    CORES_PER_HOST,
    DENSER_EDGES_PER_NODE,
    LOOPBACK,
    NETWORKS,
    ONE_D_DENSER,
    ROUNDS,
    ROW_WEIGHT,
    SLOW,
    SLOW_LINK_GBIT_S,
    Run,
    _one_d_runs,
    _rounds,
    _runs,
)
from benchmarks.suites.ablations_report import _label, _rows, _verdicts


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
    shared-core emulated network alone, one round."""
    n, width, epochs = (4_000, 32, 3) if quick else (100_000, 128, 6)
    networks, rounds = (("emulated",), {}) if quick else (NETWORKS, ROUNDS)
    return _run_suite(_one_d_runs((2, 4, 8), n), n, width, epochs, gbit_s, networks, rounds)


def _run_suite(
    runs: List[Run], n: int, width: int, epochs: int, gbit_s: float, networks, rounds
) -> SuiteResult:
    from gnntrain.launch import netem, netem_jobs

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
                        # a second try on another port, should the first be taken
                        for attempt in range(2):
                            job = netem_jobs.run_job(
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
