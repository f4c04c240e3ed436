"""The plan's predictions on the console: the predicted epoch of a calibrated plan, and mode=auto's
ranked candidates with the reason each dropped one was dropped (docs/design.md#mode-auto)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gnntrain.sizing import format_bytes


def _ms(seconds: Optional[float]) -> str:
    return f"{seconds * 1e3:.2f}" if seconds is not None else "—"


def prediction_line(prediction: Optional[Dict[str, Any]]) -> str:
    if not prediction:
        return (
            "predicted epoch: — (the hardware profile is not calibrated: gnntrain calibrate writes "
            "one "
            "that is)"
        )
    return (
        f"predicted epoch: {_ms(prediction['epoch_s'])} ms (compute {_ms(prediction['compute_s'])} "
        "+ "
        f"comm {_ms(prediction['comm_s'])}), memory per rank "
        f"{format_bytes(prediction['memory_bytes'])}, "
        f"{format_bytes(prediction['comm_bytes'])} per epoch; costs measured on "
        f"{prediction['calibration']}"
    )


def auto_table(auto: Dict[str, Any]) -> Table:
    table = Table(
        title=f"mode=auto: {len(auto['ranked'])} candidate(s) ranked by predicted epoch time "
        f"({'approximate modes admitted' if auto['allow_approximate'] else 'exact modes only'})"
    )
    for header in ("#", "candidate", "epoch ms", "of it comm", "mem/rank", "bytes/epoch"):
        # the one column that folds on a narrow terminal; figures stay whole
        if header == "candidate":
            table.add_column(header, overflow="fold", ratio=1, min_width=14)
        else:
            table.add_column(header, justify="right", no_wrap=True)
    for row in auto["ranked"]:
        table.add_row(
            str(row["rank"]),
            escape(row["candidate"] + ("" if row["exact"] else " (approx.)")),
            _ms(row["predicted_epoch_s"]),
            _ms(row["predicted_comm_s"]),
            format_bytes(row["predicted_memory_bytes"]),
            format_bytes(row["predicted_comm_bytes"]),
        )
    return table


def print_predictions(plan, out: Optional[Console] = None, brief: bool = False) -> None:
    out = out or Console()
    if plan.auto:
        out.print(auto_table(plan.auto))
        if not brief:
            for drop in plan.auto["dropped"]:
                out.print(
                    f"  [dim]dropped[/dim] {escape(drop['candidate'])}: {escape(drop['reason'])}",
                    soft_wrap=True,
                )
        out.print(f"[bold]mode=auto chose[/bold] {escape(plan.auto['chosen'])}", soft_wrap=True)
    out.print(escape(prediction_line(plan.prediction)), soft_wrap=True)
