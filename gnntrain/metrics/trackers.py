"""Experiment trackers (the ``logger`` config group): CSV, TensorBoard, MLflow, Weights & Biases.

Rank 0's :class:`~gnntrain.metrics.recorder.RunRecorder` drives them: the composed config at the
start, one row of scalars per epoch (loss, accuracies, epoch time and its split, bytes by kind), and
at the end the summary and the run's plots (loss and accuracy per epoch) as artifacts. Several at
once: ``logger=[tensorboard,csv]``. A tracker whose package is missing is refused at plan time,
naming the pip extra (:func:`check_installed`).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from gnntrain.errors import PlanError
from gnntrain.plan_types import SPLITS

# tracker -> (module, pip extra)
PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}


def enabled(cfg) -> List[str]:
    """The trackers the config turns on, in a fixed order."""
    node = cfg.get("logger") if hasattr(cfg, "get") else None
    if not node:
        return []
    return [
        name for name in ("csv", "tensorboard", "mlflow", "wandb") if node.get(name) is not None
    ]


def check_installed(cfg) -> None:
    for name in enabled(cfg):
        if name in PACKAGES and importlib.util.find_spec(PACKAGES[name][0]) is None:
            raise PlanError(
                "logger",
                f"logger={name} needs the {PACKAGES[name][0]} package, which is not installed.",
                f"pip install 'gnntrain[{PACKAGES[name][1]}]', or drop {name} from logger=[...]",
            )


def scalars(record: Dict[str, Any]) -> Dict[str, float]:
    """One epoch's metrics as flat scalars: loss, the task's metrics per split (accuracies, AUC,
    RMSE, ...), time (total and per stage), bytes by kind."""
    out = {
        "loss": float(record["loss"]),
        "epoch_time_s": float(record["epoch_time_s"]),
        "comm_bytes": float(record.get("comm_bytes", 0)),
        "max_rank_send": float(record.get("max_rank_send", 0)),
    }
    for key, value in record.items():  # every evaluated metric of the task: <split>_<metric>
        if key.split("_", 1)[0] in SPLITS and isinstance(value, (int, float)):
            out[key] = float(value)
    for stage, seconds in (record.get("time_breakdown_s") or {}).items():
        out[f"time_{stage}_s"] = float(seconds)
    for kind, nbytes in (record.get("comm_by_kind") or {}).items():
        out[f"bytes_{kind}"] = float(nbytes)
    return out


def _flat(config: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = (
                value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
            )
    return out


def run_plots(history: List[Dict[str, Any]], out_dir: Path) -> List[Path]:
    """The run's own plots: loss and accuracy per epoch (PNG), for the trackers' artifacts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return []
    epochs = [int(r["epoch"]) + 1 for r in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r["loss"] for r in history])
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="global train loss")
    # the task's headline metric: the first one the records give per split (acc, auc, rmse)
    evaluated = next((r for r in history if any(k.startswith("val_") for k in r)), {})
    metric = next((k[4:] for k in evaluated if k.startswith("val_")), "acc")
    for split in SPLITS:
        key = f"{split}_{metric}"
        points = [(int(r["epoch"]) + 1, r[key]) for r in history if key in r]
        if points:
            ax_acc.plot(*zip(*points), label=split)
    ax_acc.set(title=metric, xlabel="epoch", ylabel=metric)
    ax_acc.legend()
    fig.tight_layout()
    path = Path(out_dir) / "run_curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


class Tracker:
    def __init__(self, options: Dict[str, Any], run_dir: Path, name: str):
        self.options, self.run_dir, self.name = options, Path(run_dir), name

    def start(self, config: Dict[str, Any]) -> None: ...

    def epoch(self, step: int, values: Dict[str, float]) -> None: ...

    def finish(self, summary: Dict[str, Any], artifacts: List[Path]) -> None: ...


class CsvTracker(Tracker):
    """``metrics.csv`` (or ``logger.csv.file``): one row per epoch, a column per scalar; columns
    that first appear later (an evaluation's accuracies) are added by rewriting the file."""

    def start(self, config):
        self.path = self.run_dir / str(self.options.get("file") or "metrics.csv")
        self.rows: List[Dict[str, Any]] = []
        self.columns: List[str] = ["epoch"]

    def epoch(self, step, values):
        self.rows.append({"epoch": step, **values})
        new = [k for k in values if k not in self.columns]
        self.columns += new
        if new or len(self.rows) == 1:
            with open(self.path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.columns)
                writer.writeheader()
                writer.writerows(self.rows)
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.columns).writerow(self.rows[-1])


class TensorBoardTracker(Tracker):
    def start(self, config):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(
            log_dir=str(self.run_dir / str(self.options.get("dir") or "tensorboard"))
        )
        self.writer.add_text(
            "config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0
        )

    def epoch(self, step, values):
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def finish(self, summary, artifacts):
        self.writer.add_text(
            "summary", "```\n" + json.dumps(summary, indent=2, default=str) + "\n```", 0
        )
        for path in artifacts:
            import matplotlib.image as mpimg

            self.writer.add_image(path.stem, mpimg.imread(path)[..., :3], 0, dataformats="HWC")
        self.writer.close()


class MlflowTracker(Tracker):
    """A local file store under the run directory by default (``logger.mlflow.tracking_uri`` to send
    it elsewhere), experiment ``logger.mlflow.experiment``."""

    def start(self, config):
        import os

        import mlflow

        uri = self.options.get("tracking_uri")
        # MLflow 3 keeps its file store behind this switch; a file store needs no server or database
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = (self.run_dir / "mlruns").resolve().as_uri()
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        name = str(self.options.get("experiment") or "gnntrain")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(name)
        )
        self.run_id = self.client.create_run(
            experiment_id, run_name=self.options.get("run_name") or self.run_dir.name
        ).info.run_id
        for key, value in list(_flat(config).items())[:500]:
            self.client.log_param(self.run_id, key, str(value)[:500])

    def epoch(self, step, values):
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()]
        )

    def finish(self, summary, artifacts):
        self.client.log_dict(self.run_id, summary, "summary.json")
        for path in artifacts:
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(
            self.run_id, "FINISHED" if summary.get("status") == "completed" else "FAILED"
        )


class WandbTracker(Tracker):
    """Offline by default (``logger.wandb.mode=online`` with a key to sync); its folder is under the
    run."""

    def start(self, config):
        import os

        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=str(self.options.get("project") or "gnntrain"),
            mode=str(self.options.get("mode") or "offline"),
            dir=str(self.run_dir),
            config=config,
            name=self.options.get("run_name") or self.run_dir.name,
            reinit="finish_previous",
        )

    def epoch(self, step, values):
        self.run.log(values, step=step)

    def finish(self, summary, artifacts):
        import wandb

        self.run.summary.update(
            {k: v for k, v in summary.items() if isinstance(v, (int, float, str))}
        )
        for path in artifacts:
            self.run.log({path.stem: wandb.Image(str(path))})
        self.run.finish()


KINDS = {
    "csv": CsvTracker,
    "tensorboard": TensorBoardTracker,
    "mlflow": MlflowTracker,
    "wandb": WandbTracker,
}


class Trackers:
    """Every enabled tracker, fed together; one that fails is reported once and dropped, never the
    run."""

    def __init__(self, cfg, run_dir: Path):
        node = cfg.get("logger") or {}
        self.items = [
            KINDS[name](dict(node.get(name) or {}), run_dir, name) for name in enabled(cfg)
        ]
        self.run_dir = Path(run_dir)
        self.history: List[Dict[str, Any]] = []

    def _each(self, method: str, *args) -> None:
        import logging

        for tracker in list(self.items):
            try:
                getattr(tracker, method)(*args)
            except (
                Exception
            ) as exc:  # a tracker is an observer: its failure must not end the training
                logging.getLogger(__name__).warning(
                    "logger %s failed in %s (%s: %s); it is switched off",
                    tracker.name,
                    method,
                    type(exc).__name__,
                    exc,
                )
                self.items.remove(tracker)

    def start(self, config: Dict[str, Any]) -> None:
        self._each("start", config)

    def epoch(self, record: Dict[str, Any]) -> None:
        self.history.append(record)
        self._each("epoch", int(record["epoch"]), scalars(record))

    def finish(self, summary: Dict[str, Any]) -> Optional[List[Path]]:
        if not self.items:
            return None
        artifacts = run_plots(self.history, self.run_dir)
        self._each("finish", summary, artifacts)
        return artifacts
