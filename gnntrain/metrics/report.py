"""Terminal output: the plan, partition metrics, dataset list, and
``gnntrain report`` (table, report.md and PNG plots from summary.json files)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from gnntrain.metrics.recorder import fmt_value
from gnntrain.sizing import format_bytes

console = Console()  # width follows the terminal (rich's default 80 when not a terminal)

GUIDE = 4  # columns a Tree level indents by
GRID_MAX = 8  # k x k grids up to this k are printed as tables, larger ones are left to summary.json


def _break_priorities(words: List[str]) -> List[int]:
    """For the gap after each word: 3 after ";" or ":" outside parentheses, 2 after "," or
    before "+" outside parentheses, 1 the same inside parentheses or before "(", 0 mid-phrase."""
    prio, depth = [], 0
    for i, word in enumerate(words):
        depth = max(
            0, depth + word.count("(") + word.count("[") - word.count(")") - word.count("]")
        )
        nxt = words[i + 1] if i + 1 < len(words) else ""
        p = 0
        if word.endswith((";", ":")):
            p = 3 if depth == 0 else 1
        elif word.endswith(",") or nxt == "+":
            p = 2 if depth == 0 else 1
        elif nxt.startswith("("):
            p = 1
        prio.append(p)
    return prio


def phrase_lines(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` columns, breaking between phrases (after a semicolon or
    comma, before a "+" or a parenthesis) rather than inside one where a line stays at least
    half full; a phrase longer than a line still wraps at a space."""
    width = max(20, width)
    words = str(text).split()
    prio = _break_priorities(words)
    lines: List[str] = []
    start = 0
    while start < len(words):
        end, length = start, 0  # the longest run of words from start that fits
        while end < len(words) and (
            length + (end > start) + len(words[end]) <= width or end == start
        ):
            length += (end > start) + len(words[end])
            end += 1
        if end < len(words):  # pick the best gap in the second half of the line
            best, best_p, used = end, -1, 0
            for i in range(start, end):
                used += (i > start) + len(words[i])
                if used >= width // 2 and prio[i] >= best_p:
                    best, best_p = i + 1, prio[i]
            end = best
        lines.append(" ".join(words[start:end]))
        start = end
    return "\n".join(lines)


def _plural(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


def _is_grid(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(r, (list, tuple)) for r in value)
    )


def _grid_table(grid) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("from", justify="right", style="dim")
    for j in range(len(grid[0])):
        table.add_column(f"to {j}", justify="right")
    for i, row in enumerate(grid):
        table.add_row(str(i), *(fmt_value(x) for x in row))
    return table


def add_entry(node: Tree, key: Any, value: Any, depth: int, width: int) -> None:
    """One ``key: value`` line under ``node`` (a child at ``depth``), without any Python repr:
    dicts become child nodes, k x k grids small tables, lists are joined, None reads "auto",
    byte counts get units; a line that would not fit ``width`` puts its value on its own line."""
    key = str(key)
    if isinstance(value, dict):
        child = node.add(Text(key))
        for k, v in value.items():
            add_entry(child, k, v, depth + 1, width)
        return
    if _is_grid(value):
        k = len(value)
        if k <= GRID_MAX:
            node.add(Text(key)).add(_grid_table(value))
        else:
            node.add(Text(f"{key}: {k} x {len(value[0])} grid (in summary.json)"))
        return
    unit, text = "", None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    for suffix in (" ms", " s"):  # "T_load ms": 0.16  ->  "T_load: 0.16 ms"
        if key.endswith(suffix) and number:
            key, unit = key[: -len(suffix)], suffix
    if (
        key.endswith(" bytes") and number
    ):  # "disk bytes per rank"-style keys keep the word; a trailing one goes
        # "host budget bytes": 1024 -> "host budget: 1.00 KiB"
        text, key = (
            fmt_value(value, key),
            key[: -len(" bytes")],
        )
    text = (fmt_value(value, key) if text is None else text) + unit
    if GUIDE * depth + len(key) + 2 + len(text) <= width:
        node.add(Text(f"{key}: {text}"))
    else:  # a long note: its own line, wrapped between phrases if it must be
        node.add(Text(key)).add(Text(phrase_lines(text, width - GUIDE * (depth + 1))))


def print_plan(plan, brief: bool = False, out: Console = None) -> None:
    out = out or console
    width = out.width
    tree = Tree(
        Text.assemble(
            ("run plan", "bold"),
            f" {plan.mode} · {plan.model} on {plan.dataset}  ",
            (f"({plan.plan_hash})", "dim"),
        )
    )
    launch = tree.add(Text("launch"))
    launch.add(
        Text(
            f"world size {plan.world_size} = {_plural(plan.nodes, 'node')} × "
            f"{_plural(plan.ranks_per_node, 'rank')}"
        )
    )
    devices = sorted(set(plan.rank_devices))
    threads = (
        f"threads per rank {', '.join(map(str, plan.rank_threads))}"
        if plan.rank_threads
        else f"{_plural(plan.threads_per_rank, 'thread')} per rank"
    )
    launch.add(
        Text(
            f"backend {plan.backend}, device "
            f"{', '.join(devices) if len(devices) > 1 else plan.device}, "
            f"{threads}"
        )
    )
    launch.add(
        Text(
            f"dtype {plan.dtype}, {_plural(plan.epochs, 'epoch')}, "
            + (
                "the whole graph, unpartitioned"
                if plan.num_parts == 1
                else f"{plan.num_parts} parts ({plan.partitioner})"
            )
        )
    )
    if plan.reader:
        launch.add(Text(f"dataset reader: {plan.reader}"))
    kernel = launch.add(Text(f"sparse kernel: {plan.kernel}"))
    if plan.kernel_note:
        kernel.add(Text(phrase_lines(plan.kernel_note, width - 3 * GUIDE), style="dim"))

    mem = plan.memory_per_rank
    m = tree.add(Text(f"estimated memory per rank: {format_bytes(mem.total_bytes)}"))
    if not brief:
        for name, value in (
            ("graph", mem.graph_bytes),
            ("features", mem.feature_bytes),
            ("activations", mem.activation_bytes),
            ("process", mem.process_bytes),
        ):
            m.add(Text(f"{name}: {format_bytes(value)}"))

    if plan.comm_per_epoch is not None:
        c = plan.comm_per_epoch
        total, by_kind = c.get("per_epoch_bytes"), dict(c.get("by_kind") or {})
        head = format_bytes(total) if total is not None else "depends on the graph"
        node = tree.add(Text(f"estimated communication per epoch: {head}"))
        if total is None and brief:
            node.add(Text("measured per epoch in the summary at the end", style="dim"))
        if not brief:
            # with a total, by kind it adds up to it; without, these are the terms known now (per
            # the formula)
            terms = (
                node
                if total is not None or not by_kind
                else node.add(Text("terms known before loading"))
            )
            for kind, value in by_kind.items():
                terms.add(Text(f"{kind}: {fmt_value(value, 'bytes')}"))
            if c.get("formula"):
                node.add(Text("formula")).add(
                    Text(phrase_lines(c["formula"], width - 3 * GUIDE), style="dim")
                )

    if plan.mode_details and not brief:
        d = tree.add(Text(f"mode {plan.mode}"))
        for k, v in plan.mode_details.items():
            add_entry(d, k, v, 2, width)
    for w in plan.warnings:
        tree.add(
            Text.assemble(
                ("warning: ", "yellow"), phrase_lines(w, width - GUIDE - len("warning: "))
            )
        )
    out.print(tree)


def print_partition(data, pcfg, part, hit: bool, out: Console = None) -> None:
    out = out or console
    m = part.metrics
    table = Table(
        title=f"{pcfg.name} partition of {data.name} into {m.num_parts} parts"
        f"{' (from cache)' if hit else ''}"
    )
    table.add_column("metric", ratio=3)
    table.add_column("value", ratio=2, overflow="fold")
    rows = [
        ("nodes / edges", f"{data.num_nodes} / {data.num_edges}"),
        ("edge cut (directed edges across parts)", m.edge_cut),
        ("total communication volume (rows)", m.total_volume),
        ("max send volume", m.max_send_volume),
        ("max receive volume", m.max_recv_volume),
        ("send-volume imbalance (max-avg)/avg", f"{m.send_imbalance:.3f}"),
        ("nnz balance max/avg", f"{m.nnz_balance:.3f}"),
        ("vertex balance max/avg", f"{m.vertex_balance:.3f}"),
        ("send volume per part", list(m.send_volume)),
    ]
    if part.bandwidth is not None:
        rows.append(("bandwidth after RCM", part.bandwidth))
    for k, v in rows:
        table.add_row(k, fmt_value(v))
    out.print(table)
    out.print(
        "[dim]partition cache hit: reused the cached partitioning[/dim]"
        if hit
        else "[dim]partition built and cached[/dim]"
    )


def print_graph_report(plan, report: Dict[str, Any], out: Console = None) -> None:
    """A mode's graph-dependent plan figures: scalars, and one table per k×k grid (rows =
    sender)."""
    out = out or console
    parts = _plural(plan.num_parts, "part")
    tree = Tree(Text.assemble((plan.mode, "bold"), f" figures on {plan.dataset} with {parts}"))
    for name, block in report.items():
        if isinstance(block, dict):
            node = tree.add(Text(str(name), style="bold"))
            for key, value in block.items():
                add_entry(node, key, value, 2, out.width)
        else:
            add_entry(tree, name, block, 1, out.width)
    out.print(tree)


def _fmt_count(n: Any) -> str:
    """2708, 19.7k, 61.9M: a size in a narrow column."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return str(n) if n is not None else ""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.1f}M"


def _fits(table: Table, out: Console) -> bool:
    """Whether ``table`` fits the console with wrapping columns broken at words only and
    ``no_wrap`` columns whole (rich would otherwise crop them with an ellipsis)."""
    from rich.measure import Measurement

    need = 1 + 3 * len(table.columns)  # vertical lines and one space of padding each side
    for column in table.columns:
        sizes = [Measurement.get(out, out.options, cell) for cell in (column.header, *column.cells)]
        need += (
            max(m.maximum for m in sizes)
            if column.no_wrap
            else max([column.min_width or 0] + [m.minimum for m in sizes])
        )
    return need <= out.width


def print_datasets(dataset_dir: Path, out: Console = None) -> None:
    """One row per dataset; on a terminal too narrow for the columns, sizes and
    description move into one wrapping cell under each name."""
    import yaml

    out = out or console
    entries = []
    for path in sorted(dataset_dir.glob("*.yaml")):
        d = yaml.safe_load(path.read_text()) or {}
        entries.append(
            (
                path.stem,
                str(d.get("source", "")),
                _fmt_count(d.get("num_nodes")),
                _fmt_count(d.get("num_edges")),
                _fmt_count(d.get("feat_dim")),
                _fmt_count(d.get("num_classes")),
                str(d.get("description", "")),
            )
        )
    title = "datasets (configs/dataset)"
    table = Table(title=title)
    table.add_column("name", no_wrap=True)
    table.add_column("source", no_wrap=True)
    for col in ("nodes", "edges", "features", "classes"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("where it comes from", min_width=24, ratio=1)  # the one column that wraps
    for entry in entries:
        table.add_row(*(escape(x) for x in entry))
    if not _fits(table, out):
        table = Table(title=title)
        table.add_column("name", no_wrap=True)
        table.add_column("source, sizes and origin", ratio=1)
        for name, source, nodes, edges, feats, classes, description in entries:
            table.add_row(
                escape(name),
                Text.assemble(
                    f"{source}: {nodes} nodes, {edges} edges, {feats} features, {classes} "
                    "classes\n",
                    (description, "dim"),
                ),
            )
    out.print(table)


def print_ingested(data_dir: Optional[Path], out: Console = None, depth: int = 3) -> None:
    """The graphs ``gnntrain ingest`` wrote under ``data_dir`` (folders with a gnntrain meta.json,
    up to
    ``depth`` levels down), with the override that trains each."""
    from gnntrain.data.ondisk import META, is_graph_dir

    out = out or console
    if data_dir is None:
        out.print(
            "[dim]ingested graphs: give data_dir=DIR (or GNNTRAIN_DATA_DIR) to list those under "
            "it[/dim]"
        )
        return
    found = []
    if data_dir.is_dir():
        for level in range(depth + 1):
            for meta in sorted(data_dir.glob("/".join(["*"] * level + [META]))):
                if is_graph_dir(meta.parent) and not meta.parent.name.startswith("."):
                    found.append((meta.parent, json.loads(meta.read_text())))
    if not found:
        out.print(
            f"[dim]no ingested graphs under {escape(str(data_dir))} (gnntrain ingest --out DIR "
            "writes one)[/dim]"
        )
        return
    table = Table(title=f"ingested graphs under {data_dir}")
    table.add_column("dataset.path", no_wrap=True)
    for col in ("nodes", "edges", "features", "classes"):
        table.add_column(col, justify="right", no_wrap=True)
    for path, meta in found:
        table.add_row(
            escape(str(path.relative_to(data_dir))),
            _fmt_count(meta.get("num_nodes")),
            _fmt_count(meta.get("num_edges")),
            _fmt_count(meta.get("feat_dim")),
            _fmt_count(meta.get("num_classes")),
        )
    out.print(table)
    out.print(
        f"[dim]train one: gnntrain run dataset=files data_dir={escape(str(data_dir))} "
        "dataset.path=NAME[/dim]"
    )


# ------------------------------------------------------------------ report
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

    err = Console(stderr=True, soft_wrap=True)
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
        # to
        # target shares one column with its epochs); each run's name, what it was and how it ended
        # follow
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
