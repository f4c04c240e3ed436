"""What a run writes: ``metrics.jsonl`` per epoch and ``summary.json`` at the
end (also on failure), exactly as in docs/design.md#outputs; plus rank 0's progress bar
and final table."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gnntrain.atomic import atomic_write_bytes
from gnntrain.metrics.trackers import Trackers, enabled
from gnntrain.sizing import format_bytes

SUMMARY_FIELDS = (
    "status",
    "mode",
    "dataset",
    "model",
    "world_size",
    "epochs",
    "dtype",
    "losses",
    "accuracy",
    "epoch_time_s",
    "epoch_time_median_s",
    "time_breakdown_s",
    "comm_bytes",
    "peak_memory_bytes",
    "partition",
)


def write_json_atomic(path: Path, payload: Dict[str, Any]) -> None:
    atomic_write_bytes(Path(path), json.dumps(payload, indent=2).encode())


def _identity(plan) -> Dict[str, Any]:
    return {
        "mode": plan.mode,
        "dataset": plan.dataset,
        "model": plan.model,
        "world_size": plan.world_size,
        "epochs": plan.epochs,
        "dtype": plan.dtype,
    }


def build_summary(plan, result: Dict[str, Any], partition: Dict[str, Any]) -> Dict[str, Any]:
    """summary.json for a completed run, from rank 0's result."""
    if result.get("predict") is not None:  # gnntrain predict: no epochs, the output instead
        return {
            "status": "completed",
            "task": "predict",
            **_identity(plan),
            "predict": result["predict"],
            "peak_memory_bytes": result["peak_memory_bytes"],
            "partition": partition,
            "setup": result.get("setup"),
        }
    history: List[Dict[str, Any]] = result["history"]
    if not history:  # stopped before its first epoch completed
        return {
            "status": "interrupted",
            **_identity(plan),
            "interrupted": result.get("interrupted"),
            "losses": [],
            "peak_memory_bytes": result.get("peak_memory_bytes"),
        }
    times = [h["epoch_time_s"] for h in history]
    median_time = statistics.median(times)
    # the epoch whose time is the (lower) median gives the per-epoch figures, among the steady
    # epochs: the first pays one-time costs (a kept A·x computed, caches warmed) and moves other
    # bytes where there are later ones
    steady = history[1:] if len(history) > 1 else history
    steady_times = [h["epoch_time_s"] for h in steady]
    med = steady[steady_times.index(statistics.median_low(steady_times))]
    # median per stage: compute and comm always, plus any stages the mode timed (aggregation, ...)
    stages = dict.fromkeys(k for h in history for k in h["time_breakdown_s"])
    breakdown = {
        k: statistics.median(h["time_breakdown_s"].get(k, 0.0) for h in history) for k in stages
    }
    breakdown["preprocess"] = result.get("setup", {}).get("preprocess_s", 0.0)
    return {
        "status": "completed",
        **_identity(plan),
        "losses": [h["loss"] for h in history],
        "accuracy": result["accuracy"],
        # every evaluated metric of the run's task, by split (the last evaluation's)
        "metrics": result.get("metrics", {}),
        "epoch_time_s": times,
        "epoch_time_median_s": median_time,
        "time_breakdown_s": breakdown,
        "comm_bytes": {
            "per_epoch": med["comm_bytes"],
            "by_kind": med["comm_by_kind"],
            "max_rank_send": med["max_rank_send"],
            "setup": result.get("setup", {}).get("setup_comm_bytes", 0),
        },
        "peak_memory_bytes": result["peak_memory_bytes"],
        "partition": partition,
        "plan_hash": plan.plan_hash,
        "kernel": plan.kernel,
        # all ranks, by path: unweighted (row scales) | weighted
        "spmm_calls": result.get("spmm_calls"),
        "rank_hosts": result.get("rank_hosts"),  # the address each rank reached rank 0's host from
        # set by `gnntrain netem run` (an emulated cluster network); absent on real or loopback
        # networks
        **(
            {"network": os.environ["GNNTRAIN_NETWORK"]}
            if os.environ.get("GNNTRAIN_NETWORK")
            else {}
        ),
        # a time-dilated emulated cluster: its times are these real ones / time_dilation
        **(
            {"time_dilation": float(os.environ["GNNTRAIN_TIME_DILATION"])}
            if float(os.environ.get("GNNTRAIN_TIME_DILATION") or 1) != 1
            else {}
        ),
        **({"mode_report": result["mode_report"]} if result.get("mode_report") else {}),
        **({"prediction": plan.prediction} if getattr(plan, "prediction", None) else {}),
        # mode=auto: the choice and its table
        **({"auto": plan.auto} if getattr(plan, "auto", None) else {}),
        # resumed from a checkpoint: from which epoch, and the settings changed then ({key: [old,
        # new]})
        **({"resume": result["resume"]} if result.get("resume") else {}),
        # Ctrl-C or SIGTERM: stopped after this epoch (a checkpoint of it is saved), resumable
        **(
            {"status": "interrupted", "interrupted": result["interrupted"]}
            if result.get("interrupted")
            else {}
        ),
    }


def failed_summary(plan, error: str, partial: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    summary = {"status": "failed", "error": error}
    if plan is not None:
        summary.update(_identity(plan))
    for key in SUMMARY_FIELDS:
        summary.setdefault(key, None)
    summary.update(partial or {})
    summary["status"], summary["error"] = "failed", error
    return summary


PROGRESS_LINE_EVERY_S = 5.0  # GNNTRAIN_PROGRESS_EVERY_S overrides


def _duration(seconds: float) -> str:
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60:d}m{rest % 60:02d}s"


class RunRecorder:
    """Rank 0's writer: appends metrics.jsonl, shows progress, writes summary.json."""

    def __init__(
        self, run_dir: Path, plan, progress: bool = True, console: Optional[Console] = None
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.plan = plan
        self.console = console or Console(stderr=False)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.metrics_path.write_text("")
        self.show_progress = progress
        self._progress: Optional[Progress] = None
        self._task = None
        # not a terminal (a log file, a pipe, a batch job): a plain line every few seconds instead
        # of a bar
        self.line_every_s = float(
            os.environ.get("GNNTRAIN_PROGRESS_EVERY_S", PROGRESS_LINE_EVERY_S)
        )
        self._lines = progress and not self.console.is_terminal
        self._epoch_times: List[float] = []
        self._last_line = -math.inf
        self._total = 0
        self._clock = time.monotonic
        config = getattr(plan, "config_obj", None)
        self.trackers = (
            Trackers(config, self.run_dir) if config is not None and enabled(config) else None
        )

    def start(
        self,
        epochs: int,
        resumed: Optional[List[Dict[str, Any]]] = None,
        changed: Optional[Dict[str, list]] = None,
    ) -> None:
        for record in resumed or []:  # epochs restored from a checkpoint keep their lines
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        if resumed:
            self.console.print(f"[dim]resumed after epoch {len(resumed)} from a checkpoint[/dim]")
        for key, (old, new) in (changed or {}).items():  # applied from the resumed epoch on
            self.console.print(
                f"resume: {key} {old} -> {new} (from epoch {len(resumed or []) + 1} on)",
                highlight=False,
                markup=False,
            )
        self._total = epochs
        if self.trackers is not None:
            self.trackers.start(dict(self.plan.config))
            for record in resumed or []:
                self.trackers.epoch(record)
        self._epoch_times = [float(r.get("epoch_time_s", 0.0)) for r in resumed or []]
        if self._lines:
            self.console.print(
                f"training {self.plan.mode}/{self.plan.dataset}: {epochs} epochs "
                f"(a progress line every {self.line_every_s:g} s)",
                highlight=False,
            )
        elif self.show_progress:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("val {task.fields[val]}"),
                TextColumn("{task.fields[dt]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                f"{self.plan.mode}/{self.plan.dataset}",
                total=epochs,
                completed=len(resumed or []),
                loss="-",
                val="-",
                dt="-",
            )

    def epoch(self, record: Dict[str, Any]) -> None:
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.trackers is not None:
            self.trackers.epoch(record)
        self._epoch_times.append(float(record["epoch_time_s"]))
        # a running median: one slow epoch does not jump
        median_ms = 1000 * statistics.median(self._epoch_times)
        # the task's first validation metric (accuracy, AUC, RMSE)
        first_val = next((k for k in record if k.startswith("val_")), None)
        val = f"{first_val[4:]} {record[first_val]:.3f}" if first_val else "-"
        if self._progress is not None:
            self._progress.update(
                self._task,
                advance=1,
                loss=f"{record['loss']:.4f}",
                val=val,
                dt=f"{median_ms:.1f} ms/epoch",
            )
        elif self._lines:
            done = int(record["epoch"]) + 1
            now = self._clock()
            if now - self._last_line >= self.line_every_s or done == self._total:
                self._last_line = now
                eta = (self._total - done) * median_ms / 1000
                self.console.print(
                    f"epoch {done}/{self._total}  loss {record['loss']:.4f}  val {val}  "
                    f"{median_ms:.1f} ms/epoch (median)  ETA {_duration(eta)}",
                    highlight=False,
                )

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def finish(self, summary: Dict[str, Any]) -> None:
        self.stop()
        write_json_atomic(self.run_dir / "summary.json", summary)
        if summary.get("task") == "predict":
            p = summary["predict"]
            peak = format_bytes((summary.get("peak_memory_bytes") or {}).get("host_max_rank"))
            self.console.print(
                f"wrote {p['what']} of {p['rows']:,} nodes to {p['out']} in {p['seconds']:.2f} s "
                f"({summary.get('mode')}, {summary.get('world_size')} rank(s), peak host memory "
                f"{peak} per rank)",
                soft_wrap=True,
                highlight=False,
            )
            return
        if self.trackers is not None:
            self.trackers.finish(summary)
        self.console.print(summary_table(summary))


def _fmt_number(x: float) -> str:
    if not math.isfinite(x):
        return "—"
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.4g}"


def fmt_value(value: Any, key: str = "") -> str:
    """A value as a person reads it, never a Python repr: None is "auto", booleans yes/no,
    numbers under a key naming bytes get units, NaN is a dash, sequences are joined
    with commas and mappings as ``k: v; ...`` (a printer that can nest shows them as children)."""
    if value is None:
        return "auto"
    if isinstance(value, Enum):
        value = value.value
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalars and arrays
        value = value.tolist()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        k = str(key).lower()
        if k.endswith("bytes") or "bytes_" in k or "bytes " in k:
            return format_bytes(value)
        return _fmt_number(value)
    if isinstance(value, dict):
        return "; ".join(f"{fmt_value(k)}: {fmt_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(fmt_value(v) for v in value) or "none"
    return str(value)


def _fmt_acc(acc: Any) -> str:
    return f"{acc:.4f}" if isinstance(acc, (int, float)) and math.isfinite(acc) else "—"


def summary_table(summary: Dict[str, Any]) -> Table:
    table = Table(
        title=f"gnntrain {summary.get('mode')} on {summary.get('dataset')}", show_header=False
    )
    table.add_column("field", style="bold")
    table.add_column("value")
    acc = [_fmt_acc((summary.get("accuracy") or {}).get(s)) for s in ("train", "val", "test")]
    median = summary.get("epoch_time_median_s")
    rows = [
        ("status", summary.get("status")),
        (
            "model / ranks / dtype",
            " / ".join(str(summary.get(k) or "—") for k in ("model", "world_size", "dtype")),
        ),
        ("final loss", f"{summary['losses'][-1]:.6f}" if summary.get("losses") else "—"),
    ]
    # a split without a figure (never evaluated, or no nodes) reads "—"
    if any(a != "—" for a in acc):
        rows.append(("accuracy train/val/test", " / ".join(acc)))
    else:  # another task's metrics (AUC, MRR, RMSE, ...), per split
        for split, values in (summary.get("metrics") or {}).items():
            shown = ", ".join(f"{name} {_fmt_acc(v)}" for name, v in values.items())
            rows.append((f"{split} metrics", shown))
    rows.append(("median epoch time", f"{median * 1000:.2f} ms" if median is not None else "—"))
    tb = summary.get("time_breakdown_s") or {}
    rows.append(
        (
            "compute / comm / preprocess",
            " / ".join(f"{tb.get(k, 0):.4f} s" for k in ("compute", "comm", "preprocess")),
        )
    )
    extra = [k for k in tb if k not in ("compute", "comm", "preprocess")]
    if extra:  # stages the mode timed, e.g. SuperGCN's aggregation / quantization / other
        rows.append((" / ".join(extra), " / ".join(f"{tb[k]:.4f} s" for k in extra)))
    cb = summary.get("comm_bytes") or {}
    rows.append(("comm per epoch (all ranks)", format_bytes(cb.get("per_epoch"))))
    for kind, value in sorted((cb.get("by_kind") or {}).items()):
        rows.append((f"  {kind}", format_bytes(value)))
    rows.append(("max rank send per epoch", format_bytes(cb.get("max_rank_send"))))
    pm = summary.get("peak_memory_bytes") or {}
    rows.append(("peak host memory (max rank)", format_bytes(pm.get("host_max_rank"))))
    if pm.get("device_max_rank") is not None:
        rows.append(("peak device memory (max rank)", format_bytes(pm.get("device_max_rank"))))
    # the mode's own lines
    rows += [tuple(row) for row in (summary.get("mode_report") or {}).get("table", [])]
    part = summary.get("partition") or {}
    if part.get("num_parts", 1) > 1:
        rows.append(
            (
                "partition",
                f"{part.get('num_parts')} parts, cut {part.get('edge_cut')}, "
                f"volume {part.get('total_volume')}, max send {part.get('max_send_volume')}",
            )
        )
    for k, v in rows:
        table.add_row(escape(str(k)), escape(v if isinstance(v, str) else fmt_value(v)))
    return table
