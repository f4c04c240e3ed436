"""Time to accuracy for ``gnntrain report``: the training wall time until a run's validation
accuracy first reaches a target, and the validation-accuracy-over-time plot.

Mini-batch systems often reach a target accuracy sooner even when their epochs are not faster (Bajaj
et al., VLDB'25), so epoch time alone misleads a comparison of modes. Wall time here is the running
sum of ``epoch_time_s`` in ``metrics.jsonl``: training epochs only, not startup, preprocessing or
the evaluation passes (the report states it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# the default target: every run's best validation accuracy, the lowest of them, minus 1 pp
DEFAULT_MARGIN = 0.01
WALL_TIME_NOTE = (
    "wall time = the sum of training epoch times (metrics.jsonl epoch_time_s), without startup, "
    "preprocessing or evaluation"
)


def val_curve(metrics: List[Dict[str, Any]]) -> List[Tuple[int, float, float]]:
    """(epoch number from 1, training seconds so far, validation accuracy) of every evaluated
    epoch."""
    curve, elapsed = [], 0.0
    for i, record in enumerate(metrics):
        elapsed += float(record.get("epoch_time_s") or 0.0)
        if record.get("val_acc") is not None:
            curve.append((i + 1, elapsed, float(record["val_acc"])))
    return curve


def default_target(runs: List[Dict[str, Any]]) -> Optional[float]:
    """The best validation accuracy every run with one reached, minus DEFAULT_MARGIN (None: no run
    has one)."""
    bests = [
        max(acc for _, _, acc in curve)
        for curve in (val_curve(s.get("_metrics") or []) for s in runs)
        if curve
    ]
    return round(min(bests) - DEFAULT_MARGIN, 6) if bests else None


def time_to_target(metrics: List[Dict[str, Any]], target: float) -> Optional[Tuple[int, float]]:
    """(epochs, training seconds) to the first evaluated epoch with validation accuracy >=
    ``target``; None when the run never reaches it."""
    for epoch, seconds, acc in val_curve(metrics):
        if acc >= target - 1e-12:
            return epoch, seconds
    return None


def parse_target(args: List[str]) -> Tuple[List[str], Optional[float]]:
    """(the directories, the ``--target-val`` fraction or None); ValueError naming the fix when it
    is bad."""
    rest, target, i = [], None, 0
    while i < len(args):
        arg = args[i]
        if arg == "--target-val" or arg.startswith("--target-val="):
            value = (
                arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            )
            i += 1 if "=" in arg else 2
            try:
                target = float(value)
            except ValueError:
                target = None
            if target is None or not 0.0 < target <= 1.0:
                raise ValueError(
                    f"--target-val needs a validation accuracy in (0, 1], e.g. --target-val 0.75 "
                    f"(got '{value}')"
                )
            continue
        rest.append(arg)
        i += 1
    return rest, target


def target_cells(s: Dict[str, Any], target: Optional[float]) -> List[str]:
    """The report's two cells for one run: epochs to target and seconds to target."""
    if target is None or not val_curve(s.get("_metrics") or []):
        return ["—", "—"]
    hit = time_to_target(s["_metrics"], target)
    return ["not reached", "not reached"] if hit is None else [str(hit[0]), f"{hit[1]:.3f}"]


def plot_val_over_time(
    runs: List[Dict[str, Any]], target: Optional[float], label, out: Path
) -> Optional[Path]:
    """report_val_time.png: validation accuracy against training wall time, one line per run, the
    target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [(label(s), val_curve(s.get("_metrics") or [])) for s in runs]
    curves = [(name, c) for name, c in curves if c]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, curve in curves:
        ax.plot([t for _, t, _ in curve], [a for _, _, a in curve], marker=".", label=name)
    if target is not None:
        ax.axhline(target, linestyle="--", color="gray", label=f"target {target:.4f}")
    ax.set(
        title="Validation accuracy over training wall time",
        xlabel="training wall time (s, sum of epoch times)",
        ylabel="validation accuracy",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = out / "report_val_time.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
