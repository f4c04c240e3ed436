"""What every GPU check shares (scripts/gpu_check.py): the run's settings and how a check trains
(Check), the exact runs' overrides and tolerance, and reading a run's summary (its median epoch, the
largest relative gap between two runs' losses, its disk tier's bytes)."""

from __future__ import annotations

import contextlib
import itertools
import statistics
from pathlib import Path
from typing import Dict, List

EXACT = [
    "train.dtype=float64",
    "model.dropout=0",
    "train.epochs=3",
    "train.seed=5",
    "train.eval_every=100",
]
# masks compared
EXACT_DROPOUT = [o for o in EXACT if not o.startswith("model.dropout")] + ["model.dropout=0.5"]
TOLERANCE = 1e-9
RUNS = itertools.count()


class Check:
    """The run's settings: device, sizes, data."""

    def __init__(self, device: str, quick: bool, data_dir: str, tmp: Path):
        self.device, self.quick, self.data_dir, self.tmp = device, quick, data_dir, tmp
        self.hardware = "hardware=gpu-1" if device == "cuda" else "hardware=local-cpu"
        # hongtu_budget's (overrides, budget, budget bytes, single's summary), reused by
        # hongtu_disk_budget
        self.budget_graph = None

    def train(self, overrides: List[str]) -> dict:
        from gnntrain.api import compose
        from gnntrain.launch import run_training
        from gnntrain.plan import build_plan

        cfg = compose(["train.progress=false", f"cache_dir={self.tmp / 'cache'}"] + overrides)
        run_dir = self.tmp / f"run{next(RUNS)}"
        run_dir.mkdir(parents=True)
        # the table per run
        with open(run_dir / "console.log", "w") as log, contextlib.redirect_stdout(log):
            return run_training(build_plan(cfg), run_dir)

    def on_device(self, overrides: List[str]) -> dict:
        # on a CPU "device" (the flow's dry run) the device side takes torch's CSR kernel, the CUDA
        # path's kernel, and the reference gnntrain's native CPU kernel, so the comparison still
        # sets two kernels apart
        kernel = ["kernel=torch"] if self.device == "cpu" else []
        return self.train([self.hardware, "hardware.ranks_per_node=1"] + kernel + overrides)

    def on_cpu(self, overrides: List[str]) -> dict:
        return self.train(
            ["hardware=local-cpu", "hardware.ranks_per_node=1", f"kernel={self.reference_kernel}"]
            + overrides
        )

    @property
    def reference_kernel(self) -> str:
        return "native" if self.device == "cpu" else "auto"

    def graphs(self) -> Dict[str, List[str]]:
        out = {"csbm": ["dataset=csbm"]}
        if self.data_dir and (Path(self.data_dir) / "cora_v2_d697a464").is_dir():
            out["cora"] = ["dataset=cora", f"data_dir={self.data_dir}"]
        return out


def _epoch(summary: dict) -> float:
    times = summary["epoch_time_s"]
    return statistics.median(times[1:] if len(times) > 1 else times)


def _rel(a: List[float], b: List[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b))


def _disk_tier(run: dict) -> dict:
    """The run's tables on disk and its disk bytes per epoch, measured and predicted (and whether
    they agree)."""
    tiers = run["mode_report"]["tiers"]
    measured, predicted = (
        tiers["measured_disk_bytes_per_epoch"],
        tiers["predicted_disk_bytes_per_epoch"],
    )
    return {
        "tables_on_disk": sorted(k for k, v in tiers["tables"].items() if v == "disk"),
        "measured_disk_bytes_per_epoch": measured,
        "predicted_disk_bytes_per_epoch": predicted,
        "disk_bytes_as_predicted": measured == predicted,
    }
