"""#22: `gnntrain report` time to accuracy (table columns, default target, --target-val, the
plot)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from gnntrain.metrics.accuracy_time import default_target, parse_target, time_to_target, val_curve


def _fake_run(root: Path, name: str, epoch_s: list, val: list, mode: str = "single") -> Path:
    """A run directory as gnntrain writes it: summary.json and one metrics.jsonl line per epoch."""
    d = root / name
    d.mkdir(parents=True)
    records = [
        {"epoch": i, "loss": 1.0, "epoch_time_s": t, **({"val_acc": v} if v is not None else {})}
        for i, (t, v) in enumerate(zip(epoch_s, val))
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "status": "completed",
        "mode": mode,
        "dataset": "cora",
        "world_size": 1,
        "losses": [1.0] * len(val),
        "accuracy": {"test": 0.7},
        "epoch_time_median_s": 0.01,
        "time_breakdown_s": {"compute": 0.01},
        "comm_bytes": {"per_epoch": 0},
        "peak_memory_bytes": {"host_max_rank": 1},
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_time_to_target_sums_epoch_times_up_to_the_first_hit():
    metrics = [
        {"epoch_time_s": 0.5, "val_acc": 0.2},
        {"epoch_time_s": 0.25},
        {"epoch_time_s": 0.25, "val_acc": 0.6},
        {"epoch_time_s": 1.0, "val_acc": 0.8},
    ]
    assert val_curve(metrics) == [(1, 0.5, 0.2), (3, 1.0, 0.6), (4, 2.0, 0.8)]
    assert time_to_target(metrics, 0.6) == (3, 1.0)
    assert time_to_target(metrics, 0.7) == (4, 2.0)
    assert time_to_target(metrics, 0.9) is None


def test_the_default_target_is_the_lowest_best_minus_one_point():
    runs = [
        {"_metrics": [{"epoch_time_s": 1, "val_acc": 0.5}, {"epoch_time_s": 1, "val_acc": 0.8}]},
        {"_metrics": [{"epoch_time_s": 1, "val_acc": 0.7}]},
        {"_metrics": [{"epoch_time_s": 1}]},
    ]
    assert default_target(runs) == pytest.approx(0.69)
    assert default_target([{"_metrics": []}]) is None


@pytest.mark.parametrize("bad", ["0", "1.5", "abc", ""])
def test_a_bad_target_names_the_option(bad):
    with pytest.raises(ValueError, match="--target-val"):
        parse_target(["d", "--target-val", bad] if bad else ["d", "--target-val"])
    assert parse_target(["a", "--target-val=0.75", "b"]) == (["a", "b"], 0.75)


def test_report_prints_time_to_target_and_plots_it(tmp_path):
    _fake_run(tmp_path, "fast", [0.1, 0.1, 0.1], [0.5, 0.7, 0.72])
    _fake_run(tmp_path, "slow", [1.0, 1.0, 1.0], [0.3, 0.6, 0.8], mode="hyscale")
    _fake_run(tmp_path, "never", [0.2, 0.2], [0.1, 0.2], mode="partition")
    proc = run_cli(
        ["report", str(tmp_path), "--target-val", "0.7"], cwd=ROOT, env_extra={"COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "report.md").read_text()
    rows = {
        line.split(" | ")[0].strip("| "): line for line in md.splitlines() if line.startswith("| ")
    }
    assert "| 2 | 0.200 |" in rows["fast"] and "| 3 | 3.000 |" in rows["slow"]
    assert "| not reached | not reached |" in rows["never"]
    assert (
        "target 0.7000 (--target-val)" in md
        and (tmp_path / "report_val_time.png").stat().st_size > 0
    )
    assert "report_val_time.png" in md

    default = run_cli(["report", str(tmp_path)], cwd=ROOT, env_extra={"COLUMNS": "200"})
    assert default.returncode == 0
    md = (tmp_path / "report.md").read_text()
    # the lowest best (0.2, the run that never learnt) minus 1 pp
    assert "target 0.1900 (default" in md
    assert "| 1 | 0.100 |" in md  # every run reaches the default target
    bad = run_cli(["report", str(tmp_path), "--target-val", "2"], cwd=ROOT)
    assert bad.returncode == 2 and "--target-val" in bad.stderr
