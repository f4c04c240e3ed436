"""The CLI end to end through a subprocess: output files, summary fields,
progress and table, help, and the commands besides run."""
from __future__ import annotations

import json
import time

from conftest import CORA, read_summary, requires_shared, run_cli
from gnntrain.metrics.recorder import SUMMARY_FIELDS


def test_help_starts_fast_and_lists_commands(tmp_path):
    start = time.perf_counter()
    proc = run_cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("run", "plan", "partition", "report", "datasets"):
        assert command in proc.stdout
    assert time.perf_counter() - start < 10


def test_help_does_not_import_torch_or_dgl():
    import subprocess
    import sys

    code = "import sys; import gnntrain.cli; sys.exit(int('torch' in sys.modules or 'dgl' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_rank_paths_do_not_import_dgl():
    """A rank holding its shard as tensors trains with the torch kernel without DGL."""
    import subprocess
    import sys

    code = ("import sys; from gnntrain.modes import partition, single, fullgraph; "
            "from gnntrain.launch import launcher; sys.exit(int('dgl' in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_default_run_end_to_end(tmp_path):
    proc = run_cli(["run", f"hydra.run.dir={tmp_path}/run", "train.epochs=5", f"cache_dir={tmp_path}/cache"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "run"
    for name in ("plan.yaml", "metrics.jsonl", "summary.json"):
        assert (run / name).exists(), name
    summary = read_summary(run)
    for key in SUMMARY_FIELDS:
        assert key in summary, key
    assert summary["status"] == "completed" and summary["world_size"] == 2 and len(summary["losses"]) == 5
    assert set(summary["accuracy"]) == {"train", "val", "test"}
    assert summary["comm_bytes"]["per_epoch"] > 0 and summary["comm_bytes"]["max_rank_send"] > 0
    assert summary["peak_memory_bytes"]["host_max_rank"] > 0
    assert {"compute", "comm"} <= set(summary["time_breakdown_s"])
    assert summary["partition"]["num_parts"] == 2
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == list(range(5))
    assert all({"epoch", "loss", "epoch_time_s", "comm_bytes", "val_acc"} <= set(x) for x in lines)
    assert "completed" in proc.stdout and "accuracy" in proc.stdout  # final table


@requires_shared
def test_single_on_cora_through_cli(tmp_path):
    proc = run_cli(["run", "mode=single", f"hydra.run.dir={tmp_path}/run", "train.epochs=3",
                    f"cache_dir={tmp_path}/cache"] + CORA, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = read_summary(tmp_path / "run")
    assert s["dataset"] == "cora" and s["world_size"] == 1 and s["comm_bytes"]["per_epoch"] == 0


def test_run_with_missing_dataset_fails_cleanly(tmp_path):
    proc = run_cli(["run", "dataset=citeseer", f"data_dir={tmp_path}/nothing", f"hydra.run.dir={tmp_path}/run",
                    f"cache_dir={tmp_path}/cache"], cwd=tmp_path, env_extra={"GNNTRAIN_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "citeseer" in out and "Traceback" not in out
    s = read_summary(tmp_path / "run")
    assert s["status"] == "failed" and "citeseer" in s["error"]


def test_datasets_command_lists_all(tmp_path):
    proc = run_cli(["datasets"], cwd=tmp_path)
    assert proc.returncode == 0
    for name in ("csbm", "rmat", "cora", "citeseer", "pubmed", "reddit", "ogbn-arxiv", "ogbn-products"):
        assert name in proc.stdout


def test_partition_command_reports_metrics_and_cache(tmp_path):
    args = ["partition", f"hydra.run.dir={tmp_path}/p", f"cache_dir={tmp_path}/cache", "hardware.ranks_per_node=4"]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "total communication volume" in first.stdout and "built and cached" in first.stdout
    second = run_cli(args, cwd=tmp_path)
    assert "cache hit" in second.stdout


def test_unknown_command(tmp_path):
    proc = run_cli(["train"], cwd=tmp_path)
    assert proc.returncode == 2 and "unknown command" in proc.stdout
