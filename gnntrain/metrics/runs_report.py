"""``gnntrain report DIR...``: the runs' summary.json files gathered into one table (printed to
follow the terminal's width), report.md, and PNG plots of loss, epoch time, communication and
validation accuracy over time."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Dict, List

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gnntrain.metrics.report import _fits, terminal
from gnntrain.sizing import format_bytes


def collect(dirs: List[str]) -> List[Dict[str, Any]]:
    runs = []
    for d in dirs:
        for path in sorted(Path(d).rglob("summary.json")):
            try:
                s = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                s = {"status": "unreadable"}
            s["_dir"] = str(path.parent)
            metrics = path.parent / "metrics.jsonl"
            s["_metrics"] = (
                [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
                if metrics.exists()
                else []
            )
            runs.append(s)
    return runs


def _label(s: Dict[str, Any]) -> str:
    return f"{s.get('mode')}/{s.get('dataset')}/p{s.get('world_size')} ({Path(s['_dir']).name})"


def _fmt_acc(acc: Any) -> str:
    return f"{acc:.4f}" if isinstance(acc, (int, float)) and math.isfinite(acc) else "—"


def report_command(args: List[str]) -> int:
    from gnntrain.metrics.accuracy_time import (
        WALL_TIME_NOTE,
        default_target,
        parse_target,
        plot_val_over_time,
        target_cells,
    )

    err, console = Console(stderr=True, soft_wrap=True), terminal()
    try:
        args, target = parse_target(list(args))
    except ValueError as exc:
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}")
        return 2
    if not args:
        err.print(
            "[bold red]error:[/bold red] gnntrain report needs at least one directory (gnntrain "
            "report DIR...)"
        )
        return 2
    missing = [a for a in args if not Path(a).is_dir()]
    if missing:
        err.print(f"[bold red]error:[/bold red] not a directory: {escape(', '.join(missing))}")
        return 2
    runs = collect(args)
    if not runs:
        err.print(f"[bold red]error:[/bold red] no summary.json under {escape(', '.join(args))}")
        return 1
    out = Path(args[0])
    chosen = (
        "--target-val"
        if target is not None
        else "default: the lowest of the runs' best, minus 1 pp"
    )
    target = target if target is not None else default_target(runs)
    headers = [
        "run",
        "mode",
        "dataset",
        "world size",
        "test acc",
        "median epoch (ms)",
        "comm/epoch",
        "peak mem",
        "epochs to target",
        "time to target (s)",
        "status",
    ]
    numeric = {
        "world size",
        "test acc",
        "median epoch (ms)",
        "comm/epoch",
        "peak mem",
        "epochs to target",
        "time to target (s)",
    }
    rows = []
    for s in runs:
        acc = (s.get("accuracy") or {}).get("test")
        med = s.get("epoch_time_median_s")
        comm = (s.get("comm_bytes") or {}).get("per_epoch")
        mem = (s.get("peak_memory_bytes") or {}).get("host_max_rank")
        rows.append(
            [Path(s["_dir"]).name]
            + [str(s.get(k) or "—") for k in ("mode", "dataset", "world_size")]
            + [
                _fmt_acc(acc),
                f"{med * 1000:.2f}" if med else "—",
                format_bytes(comm) if comm is not None else "—",
                format_bytes(mem) if mem else "—",
                *target_cells(s, target),
                str(s.get("status") or "—"),
            ]
        )
    title = f"gnntrain report: {len(runs)} run(s)"
    table = Table(title=title)
    for h in headers:  # headers wrap at words, values stay whole, a long run name folds
        table.add_column(
            h,
            justify="right" if h in numeric else "left",
            **({"overflow": "fold", "ratio": 1} if h == "run" else {"no_wrap": True}),
        )
    for r in rows:
        table.add_row(*(escape(c) for c in r))
    details: List[str] = []
    if not _fits(table, console):
        # narrow terminal: runs get short numbers in the table (figures keep their columns, the time
        # to target shares one column with its epochs); each run's name, what it was and how it
        # ended follow
        table = Table(title=title)
        table.add_column("#", justify="right", no_wrap=True)
        with_target = any(r[8] != "—" for r in rows)  # no column for a figure no run has
        for h in headers[4:8] + (["to target"] if with_target else []):
            wraps = h in ("median epoch (ms)", "to target")
            table.add_column(
                h, justify="right", no_wrap=not wraps, **({"overflow": "fold"} if wraps else {})
            )
        for number, (r, s) in enumerate(zip(rows, runs), start=1):
            what = [
                f"{s['mode']} on {s['dataset']}" if s.get("mode") and s.get("dataset") else "",
                _ranks(s.get("world_size")),
                str(s.get("status") or ""),
            ]
            to_target = f"{r[9]} s\n{r[8]} epochs" if r[8][0].isdigit() else r[8]
            table.add_row(str(number), *r[4:8], *([to_target] if with_target else []))
            head, tail = f"{number:>{len(str(len(rows)))}}  {r[0]}", ", ".join(x for x in what if x)
            one_line = f"{head}: {tail}"
            details.append(
                one_line
                if cell_len(one_line) <= console.width
                else f"{head}\n{' ' * (len(str(len(rows))) + 2)}{tail}"
            )
    console.print(table)
    for line in details:
        console.print(escape(line), overflow="fold")
    target_line = (
        f"validation accuracy target {target:.4f} ({chosen}); {WALL_TIME_NOTE}"
        if target is not None
        else "no run recorded a validation accuracy: no time to target"
    )
    console.print(f"[dim]{escape(target_line)}[/dim]", soft_wrap=True)
    md = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md += ["", target_line]
    pngs = _plots(runs, out)
    val_png = plot_val_over_time(
        [s for s in runs if s.get("status") == "completed"], target, _label, out
    )
    pngs += [val_png] if val_png is not None else []
    md += ["", *[f"![{p.stem}]({p.name})" for p in pngs]]
    (out / "report.md").write_text("# gnntrain report\n\n" + "\n".join(md) + "\n")
    console.print(f"[dim]wrote {escape(str(out / 'report.md'))} and {len(pngs)} plot(s)[/dim]")
    return 0


def _ranks(world_size) -> str:
    return "" if not world_size else f"{world_size} rank" + ("" if int(world_size) == 1 else "s")


def _plots(runs: List[Dict[str, Any]], out: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [s for s in runs if s.get("status") == "completed"]
    paths: List[Path] = []
    if not done:
        return paths
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in done:
        ax.plot(range(1, len(s["losses"]) + 1), s["losses"], label=_label(s))
    ax.set(
        title="Training loss per epoch", xlabel="epoch", ylabel="global train loss (cross-entropy)"
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    paths.append(out / "report_loss.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    labels = [_label(s) for s in done]
    bottom = [0.0] * len(done)
    for part in ("compute", "comm"):
        vals = [1000 * (s.get("time_breakdown_s") or {}).get(part, 0.0) for s in done]
        ax.barh(labels, vals, left=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(title="Median epoch time breakdown", xlabel="time per epoch (ms)")
    ax.legend()
    paths.append(out / "report_time.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    by_mode: Dict[str, List[float]] = {}
    for s in done:
        by_mode.setdefault(str(s.get("mode")), []).append(
            (s.get("comm_bytes") or {}).get("per_epoch") or 0
        )
    modes = sorted(by_mode)
    ax.bar(modes, [statistics.median(by_mode[m]) / 2**20 for m in modes])
    ax.set(
        title="Communication per epoch by mode (median over runs)",
        xlabel="mode",
        ylabel="bytes sent per epoch, all ranks (MiB)",
    )
    paths.append(out / "report_comm.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
