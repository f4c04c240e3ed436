"""The `linkpred_scale` bench suite (#56, must-show 4): link prediction on a 1M-node generated graph
with `mode=partition` at p=4 keeps its per-rank peak within 1.3x of node classification's on the
same plan. Both train 2 epochs of the same GCN on the same csbm graph (average degree 10, 64
features, 64 classes so that the output is as wide as link prediction's embeddings, 2 layers of
64), one after the other; each rank's peak (VmHWM, from
summary.json) and the epoch time side by side. Run with ``python -m benchmarks linkpred_scale``
(``--quick``: 50k nodes)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.harness import SuiteResult, run_cli_measured
from benchmarks.registry import suite

GIB = 2**30
GOAL = 1.3  # link prediction's per-rank peak <= 1.3x node classification's


@suite("linkpred_scale")
def suite_linkpred_scale(quick: bool) -> SuiteResult:
    n = 50_000 if quick else 1_000_000
    graph = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=10",
        "dataset.feat_dim=64",
        # 64 classes: the GNN's output is 64 wide in both tasks (link prediction's embeddings are
        # model.hidden wide), so both train the same model shape and differ only by the task
        "dataset.num_classes=64",
        "model=gcn",
        "model.layers=2",
        "model.hidden=64",
        "mode=partition",
        "hardware.ranks_per_node=4",
        "train.epochs=2",
        "train.progress=false",
        "comm_timeout_s=1800",
    ]
    tasks = {
        "node classification": ["task=node_classification"],
        "link prediction": ["task=link_prediction", "task.edge_batch=16384"],
    }
    rows, peaks = [], {}
    with tempfile.TemporaryDirectory(prefix="gnntrain-bench-lpscale-", dir="/var/tmp") as tmp:
        tmp = Path(tmp)
        cache = f"cache_dir={tmp}/cache"
        for name, task in tasks.items():
            summary, _, wall, tail = run_cli_measured([cache] + graph + task, tmp / name[:4])
            if summary is None:
                raise RuntimeError(f"linkpred_scale: the {name} run failed: {tail}")
            per_rank = summary["peak_memory_bytes"]["host_per_rank"]
            peaks[name] = max(per_rank)
            by_kind = summary["comm_bytes"]["by_kind"]
            endpoint = sum(v for k, v in by_kind.items() if k.startswith("endpoint_"))
            rows.append(
                [
                    name,
                    " / ".join(f"{p / GIB:.2f}" for p in per_rank),
                    f"{max(per_rank) / GIB:.2f}",
                    f"{summary['epoch_time_median_s']:.1f}",
                    f"{summary['comm_bytes']['per_epoch'] / GIB:.3f}",
                    f"{endpoint / GIB:.3f}",
                    f"{wall:.0f}",
                ]
            )
    ratio = peaks["link prediction"] / peaks["node classification"]
    rows[1].append(f"{ratio:.2f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'MISSED'})")
    rows[0].append("1.00")
    return SuiteResult(
        title=f"linkpred_scale: link prediction vs node classification, partition p=4, csbm {n:,} "
        "nodes (average degree 10, 64 features, 64 classes, GCN 2 x 64), 2 epochs",
        columns=[
            "task",
            "peak per rank (GiB)",
            "max rank (GiB)",
            "median epoch (s)",
            "sent per epoch (GiB)",
            "endpoint exchange (GiB)",
            "wall incl. generate and partition (s)",
            "max rank vs node classification",
        ],
        rows=rows,
        notes="Both runs plan, generate, partition (the partition cache is shared: the link "
        "prediction graph is the train edges' graph, so it is partitioned anew) and train in their "
        "own `gnntrain run`; the peaks are each rank's VmHWM from summary.json. Link prediction's "
        "extra per-rank state: the owner map of every node (12 bytes a node), one index table of "
        "8 bytes a node per scored batch table, the fetched far endpoints' rows and their "
        "gradients, this epoch's negatives, and the rank's train, validation and test edges with "
        "100 fixed negatives per held-out edge.",
        extra={"ratio": ratio},
    )
