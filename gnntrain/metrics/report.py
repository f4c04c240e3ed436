"""Terminal output: the plan, partition metrics, dataset list, and
``gnntrain report`` (table, report.md and PNG plots from summary.json files)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict, List

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from gnntrain.metrics.recorder import _fmt_bytes

console = Console()


def print_plan(plan, brief: bool = False) -> None:
    tree = Tree(f"[bold]run plan[/bold] {plan.mode} · {plan.model} on {plan.dataset}  [dim]({plan.plan_hash})[/dim]")
    launch = tree.add("launch")
    launch.add(f"world size {plan.world_size} = {plan.nodes} node(s) x {plan.ranks_per_node} rank(s); "
               f"backend {plan.backend}; device {plan.device}; {plan.threads_per_rank} thread(s)/rank")
    launch.add(f"dtype {plan.dtype}; epochs {plan.epochs}; parts {plan.num_parts} ({plan.partitioner})")
    kernel = launch.add(f"sparse kernel {plan.kernel}")
    kernel.add(plan.kernel_note)
    mem = plan.memory_per_rank
    m = tree.add(f"estimated memory per rank: {_fmt_bytes(mem.total_bytes)}")
    if not brief:
        m.add(f"graph {_fmt_bytes(mem.graph_bytes)}, features {_fmt_bytes(mem.feature_bytes)}, "
              f"activations {_fmt_bytes(mem.activation_bytes)}")
    if plan.comm_per_epoch is not None:
        c = plan.comm_per_epoch
        total = c["per_epoch_bytes"]
        node = tree.add(f"estimated communication per epoch: {_fmt_bytes(total) if total is not None else 'see formula'}")
        if not brief:
            for kind, value in c["by_kind"].items():
                node.add(f"{kind}: {_fmt_bytes(value)}")
            node.add(f"[dim]{c['formula']}[/dim]")
    if plan.mode_details and not brief:
        d = tree.add(f"mode {plan.mode}")
        for k, v in plan.mode_details.items():
            d.add(f"{k}: {v}")
    for w in plan.warnings:
        tree.add(f"[yellow]warning:[/yellow] {w}")
    console.print(tree)


def print_partition(data, pcfg, part, hit: bool) -> None:
    m = part.metrics
    table = Table(title=f"{pcfg.name} partition of {data.name} into {m.num_parts} parts"
                        f"{' (from cache)' if hit else ''}")
    for col in ("metric", "value"):
        table.add_column(col)
    rows = [("nodes / edges", f"{data.num_nodes} / {data.num_edges}"),
            ("edge cut (directed edges across parts)", m.edge_cut),
            ("total communication volume (rows)", m.total_volume),
            ("max send volume", m.max_send_volume), ("max receive volume", m.max_recv_volume),
            ("send-volume imbalance (max-avg)/avg", f"{m.send_imbalance:.3f}"),
            ("nnz balance max/avg", f"{m.nnz_balance:.3f}"), ("vertex balance max/avg", f"{m.vertex_balance:.3f}"),
            ("send volume per part", list(m.send_volume))]
    if part.bandwidth is not None:
        rows.append(("bandwidth after RCM", part.bandwidth))
    for k, v in rows:
        table.add_row(k, str(v))
    console.print(table)
    console.print("[dim]partition cache hit: reused the cached partitioning[/dim]" if hit
                  else "[dim]partition built and cached[/dim]")


def print_graph_report(plan, report: Dict[str, Any]) -> None:
    """A mode's graph-dependent plan figures: scalars, and one table per k×k grid (rows = sender)."""
    tree = Tree(f"[bold]{plan.mode}[/bold] figures on {plan.dataset} with {plan.num_parts} parts")
    for name, block in report.items():
        node = tree.add(f"[bold]{name}[/bold]")
        for key, value in (block.items() if isinstance(block, dict) else [("value", block)]):
            if isinstance(value, list) and value and isinstance(value[0], list):
                if len(value) <= 8:
                    node.add(f"{key} (row = sender, column = receiver):")
                    for j, row in enumerate(value):
                        node.add(f"  {j}: {row}")
                else:
                    node.add(f"{key}: {len(value)}x{len(value)} grid (in summary.json)")
            else:
                node.add(f"{key}: {_fmt_bytes(value) if key.endswith('bytes') or 'bytes_' in key else value}")
    console.print(tree)


def print_datasets(dataset_dir: Path) -> None:
    import yaml

    table = Table(title="datasets (configs/dataset)")
    for col in ("name", "source", "nodes", "edges", "features", "classes"):
        table.add_column(col, no_wrap=True)
    table.add_column("where it comes from", overflow="fold")
    for path in sorted(dataset_dir.glob("*.yaml")):
        d = yaml.safe_load(path.read_text()) or {}
        table.add_row(path.stem, str(d.get("source", "")), str(d.get("num_nodes", "")), str(d.get("num_edges", "")),
                      str(d.get("feat_dim", "")), str(d.get("num_classes", "")), str(d.get("description", "")))
    Console(width=max(console.width, 130)).print(table)


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
            s["_metrics"] = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] \
                if metrics.exists() else []
            runs.append(s)
    return runs


def _label(s: Dict[str, Any]) -> str:
    return f"{s.get('mode')}/{s.get('dataset')}/p{s.get('world_size')} ({Path(s['_dir']).name})"


def report_command(args: List[str]) -> int:
    if not args:
        console.print("[bold red]error:[/bold red] gnntrain report needs at least one directory (gnntrain report DIR...)")
        return 2
    missing = [a for a in args if not Path(a).is_dir()]
    if missing:
        console.print(f"[bold red]error:[/bold red] not a directory: {', '.join(missing)}")
        return 2
    runs = collect(args)
    if not runs:
        console.print(f"[bold red]error:[/bold red] no summary.json under {', '.join(args)}")
        return 1
    out = Path(args[0])
    headers = ["run", "mode", "dataset", "world size", "test acc", "median epoch (ms)", "comm/epoch", "peak mem",
               "status"]
    rows = []
    for s in runs:
        acc = (s.get("accuracy") or {}).get("test")
        med = s.get("epoch_time_median_s")
        comm = (s.get("comm_bytes") or {}).get("per_epoch")
        mem = (s.get("peak_memory_bytes") or {}).get("host_max_rank")
        rows.append([Path(s["_dir"]).name, str(s.get("mode")), str(s.get("dataset")), str(s.get("world_size")),
                     f"{acc:.4f}" if acc is not None else "-", f"{med * 1000:.2f}" if med else "-",
                     _fmt_bytes(comm) if comm is not None else "-", _fmt_bytes(mem) if mem else "-",
                     str(s.get("status"))])
    table = Table(title=f"gnntrain report: {len(runs)} run(s)")
    for h in headers:
        table.add_column(h)
    for r in rows:
        table.add_row(*r)
    Console(width=max(console.width, 150)).print(table)
    md = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    pngs = _plots(runs, out)
    md += ["", *[f"![{p.stem}]({p.name})" for p in pngs]]
    (out / "report.md").write_text("# gnntrain report\n\n" + "\n".join(md) + "\n")
    console.print(f"[dim]wrote {out / 'report.md'} and {len(pngs)} plot(s)[/dim]")
    return 0


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
    ax.set(title="Training loss per epoch", xlabel="epoch", ylabel="global train loss (cross-entropy)")
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
        by_mode.setdefault(str(s.get("mode")), []).append((s.get("comm_bytes") or {}).get("per_epoch") or 0)
    modes = sorted(by_mode)
    ax.bar(modes, [statistics.median(by_mode[m]) / 2**20 for m in modes])
    ax.set(title="Communication per epoch by mode (median over runs)", xlabel="mode",
           ylabel="bytes sent per epoch, all ranks (MiB)")
    paths.append(out / "report_comm.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
