"""Terminal output: the console (:func:`terminal`), the plan tree, partition metrics and a mode's
graph figures, wrapped to the terminal's width. ``gnntrain report`` is :mod:`.runs_report`,
``gnntrain datasets`` :mod:`.dataset_listing`; both print through :func:`terminal` and
:func:`_fits` here."""

from __future__ import annotations

from typing import Any, Dict, List

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from gnntrain.metrics.recorder import fmt_value
from gnntrain.sizing import format_bytes


def terminal() -> Console:
    """A console for this process's standard output, made when it prints: its width follows the
    terminal (``COLUMNS``, else rich's default 80 when not a terminal). One made at import would
    keep the width of whatever process imported the module first (a forked command inherits it)."""
    return Console()


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
    # "disk bytes per rank"-style keys keep the word; a trailing one goes
    if key.endswith(" bytes") and number:
        # "host budget bytes": 1024 -> "host budget: 1.00 KiB"
        text, key = (fmt_value(value, key), key[: -len(" bytes")])
    text = (fmt_value(value, key) if text is None else text) + unit
    if GUIDE * depth + len(key) + 2 + len(text) <= width:
        node.add(Text(f"{key}: {text}"))
    else:  # a long note: its own line, wrapped between phrases if it must be
        node.add(Text(key)).add(Text(phrase_lines(text, width - GUIDE * (depth + 1))))


def _memory_lines(tree: Tree, mem, brief: bool) -> None:
    """The estimate per rank, and (not ``brief``) its parts: training's, and where the rank builds
    its part of the store first, that build's peak."""
    m = tree.add(Text(f"estimated memory per rank: {format_bytes(mem.total_bytes)}"))
    if brief:
        return
    for name, value in (
        ("graph", mem.graph_bytes),
        ("features", mem.feature_bytes),
        ("activations", mem.activation_bytes),
        ("process", mem.process_bytes),
    ):
        m.add(Text(f"{name}: {format_bytes(value)}"))
    if mem.part_build_bytes:
        m.add(
            Text(
                "building its part of the store before training "
                f"({mem.part_builds_at_once} at a time per node): "
                f"{format_bytes(mem.process_bytes + mem.part_build_bytes)}"
            )
        )


def print_plan(plan, brief: bool = False, out: Console = None) -> None:
    out = out or terminal()
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
    if plan.partitioner_note and plan.num_parts > 1:
        launch.add(Text(phrase_lines(f"partitioner: {plan.partitioner_note}", width - 2 * GUIDE)))
    if plan.dataset_note:
        launch.add(Text(phrase_lines(f"dataset: {plan.dataset_note}", width - 2 * GUIDE)))
    if plan.reader:
        launch.add(Text(f"dataset reader: {plan.reader}"))
    kernel = launch.add(Text(f"sparse kernel: {plan.kernel}"))
    if plan.kernel_note:
        kernel.add(Text(phrase_lines(plan.kernel_note, width - 3 * GUIDE), style="dim"))

    _memory_lines(tree, plan.memory_per_rank, brief)

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
    out = out or terminal()
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
    out = out or terminal()
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
