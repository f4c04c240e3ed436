"""``gnntrain datasets``: the dataset configs (configs/dataset) and the graphs ``gnntrain ingest``
wrote under a data folder, as tables that follow the terminal's width."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gnntrain.metrics.report import _fits, terminal


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


def print_datasets(dataset_dir: Path, out: Console = None) -> None:
    """One row per dataset; on a terminal too narrow for the columns, sizes and
    description move into one wrapping cell under each name."""
    import yaml

    out = out or terminal()
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
    up to ``depth`` levels down), with the override that trains each."""
    from gnntrain.data.ondisk import META, is_graph_dir

    out = out or terminal()
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
