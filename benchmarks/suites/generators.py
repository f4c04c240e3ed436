"""The `generators` suite: time and memory of generating the synthetic graphs (R-MAT, csbm) at
scale."""

from __future__ import annotations

import time

from benchmarks.harness import SuiteResult, compose
from benchmarks.registry import suite


@suite("generators")
def suite_generators(quick: bool) -> SuiteResult:
    import resource

    from gnntrain.data import load_dataset

    n = 100000 if quick else 1000000
    rows = []
    for name, extra in [("rmat", f"dataset.num_edges={10 * n}"), ("csbm", "dataset.avg_degree=20")]:
        start = time.perf_counter()
        data = load_dataset(
            compose([f"dataset={name}", f"dataset.num_nodes={n}", extra, "dataset.feat_dim=16"])
        )
        took = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        rows.append(
            [
                name,
                str(data.num_nodes),
                str(data.num_edges),
                f"{took:.1f}",
                "< 60 s " + ("(met)" if took < 60 else "(MISSED)"),
                f"{peak:.2f}",
            ]
        )
    return SuiteResult(
        title="generated graphs at scale (features 16-d)",
        columns=[
            "dataset",
            "nodes",
            "directed edges",
            "time (s)",
            "goal",
            "process peak RSS so far (GiB)",
        ],
        rows=rows,
        notes="RSS is the process peak up to that row (it includes earlier rows).",
    )
