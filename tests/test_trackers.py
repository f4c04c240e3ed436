"""The logger group: CSV, TensorBoard, MLflow and W&B (offline) each hold every epoch's loss of
metrics.jsonl, read back with the tracker's own reader; a tracker that is not installed is a plan
error naming the extra."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import compose

EPOCHS = 5


@pytest.fixture(scope="module")
def tracked_run(cache_dir, tmp_path_factory):
    import gnntrain.api as gt

    run_dir = tmp_path_factory.mktemp("tracked")
    result = gt.run(
        [
            f"cache_dir={cache_dir}",
            "mode=partition",
            f"train.epochs={EPOCHS}",
            "train.eval_every=2",
            "train.progress=false",
            "logger=[csv,tensorboard,mlflow,wandb]",
        ],
        run_dir=run_dir,
    )
    assert result.status == "completed"
    losses = [
        json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(losses) == EPOCHS
    return run_dir, losses


def test_csv_logger_holds_every_epoch(tracked_run):
    run_dir, losses = tracked_run
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert [float(r["loss"]) for r in rows] == pytest.approx(losses, rel=1e-12)
    assert rows[0]["val_acc"] == "" and rows[1]["val_acc"] != ""  # evaluated every 2nd epoch
    assert float(rows[-1]["bytes_halo_fwd"]) > 0 and "time_compute_s" in rows[0]


def test_tensorboard_events_read_back(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, losses = tracked_run
    events = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0}
    )
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == list(range(EPOCHS))
    assert [e.value for e in events.Scalars("loss")] == pytest.approx(losses, rel=1e-6)
    assert "bytes_allreduce" in events.Tags()["scalars"] and events.Tags()["images"] == [
        "run_curves"
    ]


def test_mlflow_file_store_reads_back(tracked_run, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run_dir, losses = tracked_run
    client = mlflow.MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("gnntrain")
    (run,) = client.search_runs([experiment.experiment_id])
    history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
    assert [m.value for m in history] == pytest.approx(losses, rel=1e-12)
    assert run.data.params["mode.name"] == "partition" and run.info.status == "FINISHED"
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "run_curves.png"} <= names


def test_wandb_offline_writes_its_run_folder(tracked_run):
    run_dir, _ = tracked_run
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))


def test_a_missing_tracker_is_a_plan_error_naming_the_extra(monkeypatch):
    import importlib.util

    from gnntrain.errors import PlanError
    from gnntrain.plan import build_plan

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(
        PlanError, match=r"logger=mlflow needs the mlflow package.*pip install 'gnntrain\[mlflow\]'"
    ):
        build_plan(compose(["logger=[csv,mlflow]", "mode=single"]))
    with pytest.raises(Exception, match="logger"):
        compose(["logger=nosuch"])
