"""The `auto` bench suite (#22): calibrate this host, then on several graphs let ``mode=auto`` rank
every exact candidate, measure every candidate, and report side by side the predicted and measured
epoch time and per-rank memory, and the auto pick's measured time over the fastest measured.

Run with ``python -m benchmarks auto``. Every candidate runs as its own
``gnntrain run`` (own process tree, so each memory peak is its own).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from benchmarks.harness import SHARED, SuiteResult, compose, median_epoch, run_cli_measured
from benchmarks.registry import suite

MIB = 2**20
EPOCHS = 15


def _graphs(shared: Path, quick: bool) -> Dict[str, List[str]]:
    cora = ["dataset=cora", f"data_dir={shared}"]
    graphs = {
        "cora (2.7k nodes, f=1433)": cora,
        "citeseer (3.3k nodes, f=3703)": ["dataset=citeseer", f"data_dir={shared}"],
        "csbm 50k, degree 10, f=128": [
            "dataset=csbm",
            "dataset.num_nodes=50000",
            "dataset.avg_degree=10",
            "dataset.feat_dim=128",
            "model.hidden=64",
        ],
        "rmat 64k nodes, f=64": [
            "dataset=rmat",
            "dataset.num_nodes=65536",
            "dataset.num_edges=524288",
        ],
        "csbm 100k, degree 10, f=64, SAGE": [
            "dataset=csbm",
            "dataset.num_nodes=100000",
            "dataset.avg_degree=10",
            "dataset.feat_dim=64",
            "model=sage",
            "model.hidden=64",
        ],
    }
    return dict(list(graphs.items())[:2]) if quick else graphs


def _candidate_overrides(row: dict) -> List[str]:
    return [
        f"mode={row['mode']}",
        *[f"mode.{k}={v}" for k, v in row["options"].items()],
        f"hardware.ranks_per_node={row['world_size']}",
    ]


@suite("auto")
def suite_auto(quick: bool) -> SuiteResult:
    from gnntrain.launch.calibrate import calibrate, write_profile

    rows, errors, picks = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        user_dir = tmp_path / "user-config"
        os.environ["GNNTRAIN_USER_CONFIG_DIR"] = str(user_dir)
        os.environ.setdefault("GNNTRAIN_CACHE_DIR", str(tmp_path / "cache"))

        start = time.perf_counter()
        cfg = compose([])
        hw = cfg.hardware
        measured = calibrate(cfg, Path(os.environ["GNNTRAIN_CACHE_DIR"]), tmp_path, say=print)
        calibrate_s = time.perf_counter() - start
        write_profile(hw, measured, "bench-calibrated", user_dir)
        common = ["hardware=bench-calibrated", f"train.epochs={EPOCHS}", "train.progress=false"]
        for graph, overrides in _graphs(SHARED, quick).items():
            auto_dir = tmp_path / f"auto-{len(picks)}"
            summary, _, _, tail = run_cli_measured([*overrides, *common, "mode=auto"], auto_dir)
            if summary is None:
                errors.append(f"{graph}: mode=auto failed ({tail})")
                continue
            table = summary["auto"]["ranked"]
            times: Dict[str, float] = {}
            for i, row in enumerate(table):
                run_dir = tmp_path / f"{len(picks)}-{i}"
                s, _, _, tail = run_cli_measured(
                    [*overrides, *common, *_candidate_overrides(row)], run_dir
                )
                if s is None:
                    errors.append(f"{graph} {row['candidate']}: failed ({tail})")
                    continue
                t, mem = median_epoch(s), s["peak_memory_bytes"]["host_max_rank"]
                times[row["candidate"]] = t
                rows.append(
                    {
                        "graph": graph,
                        "candidate": row["candidate"],
                        "rank": row["rank"],
                        "predicted_ms": row["predicted_epoch_s"] * 1e3,
                        "measured_ms": t * 1e3,
                        "time_ratio": row["predicted_epoch_s"] / t,
                        "predicted_mem": row["predicted_memory_bytes"],
                        "measured_mem": mem,
                        "mem_ratio": row["predicted_memory_bytes"] / mem,
                    }
                )
            chosen = summary["auto"]["chosen"]
            if times and chosen in times:
                fastest = min(times, key=times.get)
                picks.append(
                    {
                        "graph": graph,
                        "chosen": chosen,
                        "chosen_ms": times[chosen] * 1e3,
                        "fastest": fastest,
                        "fastest_ms": times[fastest] * 1e3,
                        "ratio": times[chosen] / times[fastest],
                        "auto_run_ms": median_epoch(summary) * 1e3,
                    }
                )
    errs = [abs(r["time_ratio"] - 1) for r in rows]
    worst = max(rows, key=lambda r: max(r["time_ratio"], 1 / r["time_ratio"])) if rows else None
    mems = [r["mem_ratio"] for r in rows]
    table_rows = [
        [
            r["graph"],
            r["candidate"],
            str(r["rank"]),
            f"{r['predicted_ms']:.2f}",
            f"{r['measured_ms']:.2f}",
            f"{r['time_ratio']:.2f}",
            f"{r['predicted_mem'] / MIB:.0f}",
            f"{r['measured_mem'] / MIB:.0f}",
            f"{r['mem_ratio']:.2f}",
        ]
        for r in rows
    ]
    table_rows += [
        [
            p["graph"],
            f"auto pick: {p['chosen']}",
            "",
            "",
            f"{p['chosen_ms']:.2f}",
            f"pick / fastest measured ({p['fastest']}, {p['fastest_ms']:.2f} ms) = "
            f"{p['ratio']:.2f}x",
            "",
            "",
            "",
        ]
        for p in picks
    ]
    notes = (
        f"`gnntrain calibrate` (in-process, this run) took {calibrate_s:.0f} s. Predicted epoch "
        "time over "
        f"measured, all {len(rows)} exact candidates: median absolute error "
        f"{100 * statistics.median(errs):.0f}%"
        if errs
        else "no candidate measured"
    )
    if worst is not None:
        notes += (
            f", worst {worst['time_ratio']:.2f}x ({worst['graph']}, {worst['candidate']}); memory "
            "predicted "
            f"over measured {min(mems):.2f}-{max(mems):.2f}x. Auto pick over the fastest measured "
            "exact "
            f"candidate: "
            + ", ".join(f"{p['ratio']:.2f}x" for p in picks)
            + ". Epoch times are medians of "
            f"{EPOCHS - 1} training epochs (the first dropped), each candidate its own `gnntrain "
            "run`."
        )
    if errors:
        notes += " Failed: " + "; ".join(errors)
    return SuiteResult(
        title="mode=auto: predicted vs measured epoch time and memory per candidate, and the pick",
        columns=[
            "graph",
            "candidate (mode, options, ranks)",
            "auto rank",
            "predicted ms",
            "measured ms",
            "predicted / measured",
            "predicted MiB/rank",
            "measured MiB/rank",
            "mem ratio",
        ],
        rows=table_rows,
        notes=notes,
        extra={
            "calibrate_s": calibrate_s,
            "measurements": rows,
            "picks": picks,
            "profile": measured,
        },
    )
