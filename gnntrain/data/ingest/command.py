"""The ``gnntrain ingest`` command line: options, progress (a bar on a terminal, a line every few
seconds otherwise) and the closing summary."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from gnntrain.data.ingest import CsvOptions, IngestOptions, NodeOptions, ingest
from gnntrain.errors import GnnTrainError

LINE_EVERY_S = 5.0

EPILOG = """examples:
  gnntrain ingest --edges edges.csv --features nodes.parquet --out graphs/mine
      (nodes.parquet: an 'id' column, feature columns, a 'label' column; masks drawn with --split)
  gnntrain ingest --edges edges.tsv --no-header --src-column 0 --dst-column 1 --features x.npy --labels y.npy --out g
  gnntrain ingest --edges edges.csv --weight-column w --features nodes.parquet --out graphs/mine
      (then model.edge_weight=true trains on the weights)
  gnntrain ingest --edges src.npy dst.npy --features x.npy --labels y.npy --train-mask train.npy --out g
  gnntrain ingest --graph data.pt --out g          (a PyG Data saved with torch.save; .bin: a DGL graph)
  gnntrain ingest --edges edges.csv --features nodes.csv --target-columns price,volume --out g
      (regression targets, no labels needed; then task=node_regression)
then: gnntrain run dataset=files dataset.path=graphs/mine
"""  # noqa: E501  (command lines, as users type them)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gnntrain ingest",
        epilog=EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
        description="Convert your own graph into the on-disk format that "
        "dataset=files dataset.path=DIR trains on (bounded memory).",
    )
    p.add_argument(
        "--out", required=True, type=Path, help="the folder to write (refused if it exists)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--name", default="", help="the graph's name (default: the folder name)")
    e = p.add_argument_group("edges")
    e.add_argument(
        "--edges",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="CSV/TSV (.gz too), Parquet, .npy (2xE or Ex2, or two 1-D files: sources "
        "destinations), "
        "or a scipy sparse .npz (row = source)",
    )
    e.add_argument(
        "--edges-format",
        default="auto",
        choices=["auto", "csv", "tsv", "parquet", "npy", "npz", "pyg", "dgl"],
    )
    e.add_argument(
        "--src-column",
        help="source column: a header name, or a 0-based index with --no-header "
        "(default: 'src', else the first column)",
    )
    e.add_argument(
        "--dst-column", help="destination column (default: 'dst', else the second column)"
    )
    e.add_argument(
        "--weight-column",
        help="the edge table's weight column (a name, or a 0-based index with --no-header): "
        "weights >= 0, stored as float32 beside the CSR (model.edge_weight=true trains on them)",
    )
    e.add_argument(
        "--weights",
        type=Path,
        help="edge weights as a .npy of one number per edge, in the order the edges are read "
        "(for .npy/.npz/--graph edges)",
    )
    e.add_argument("--no-header", action="store_true", help="the CSV/TSV files have no header line")
    e.add_argument("--delimiter", help="CSV field separator (default ',' for .csv, tab for .tsv)")
    e.add_argument(
        "--comment",
        default="#",
        help="lines starting with this are skipped (default '#'; '' for none)",
    )
    e.add_argument(
        "--graph",
        type=Path,
        help="a whole graph: a PyG Data saved with torch.save (.pt), or a DGL "
        "graph saved with dgl.save_graphs (.bin); its x/y/masks are used "
        "unless given separately",
    )
    e.add_argument(
        "--directed", action="store_true", help="keep edges as given (default: add reverse edges)"
    )
    e.add_argument("--self-loops", default="drop", choices=["drop", "error"])
    e.add_argument("--duplicates", default="drop", choices=["drop", "error"])
    n = p.add_argument_group("nodes")
    n.add_argument(
        "--features",
        type=Path,
        help=".npy (node i = row i), or a Parquet/CSV table keyed by node ID "
        "whose row order becomes the node order",
    )
    n.add_argument(
        "--features-format", default="auto", choices=["auto", "csv", "tsv", "parquet", "npy"]
    )
    n.add_argument(
        "--id-column", help="node ID column of the node tables (default 'id', else the first)"
    )
    n.add_argument(
        "--feature-columns",
        help="comma-separated names or patterns (f_*) of feature columns "
        "(default: every numeric column but ID, label and masks)",
    )
    n.add_argument(
        "--id-type",
        default="auto",
        choices=["auto", "int", "string"],
        help="read node IDs as integers or as text (auto: integers when they all are)",
    )
    n.add_argument(
        "--labels",
        type=Path,
        help=".npy in node order, or a Parquet/CSV table of ID and label "
        "(nodes left out stay unlabeled)",
    )
    n.add_argument(
        "--label-column", help="label column (default 'label', 'y' or 'class' where present)"
    )
    n.add_argument("--num-classes", type=int, default=0, help="default: the largest label + 1")
    n.add_argument(
        "--targets",
        type=Path,
        help="regression targets (task=node_regression): a .npy of shape (N,) or (N, T) in node "
        "order, or a Parquet/CSV table keyed by node ID (nodes left out, and empty cells, have no "
        "target); stored as float32",
    )
    n.add_argument(
        "--target-columns",
        help="comma-separated numeric columns holding the targets: of the --targets table, or, "
        "without --targets, of the node table (--features); with a .npy, the targets' names",
    )
    for split in ("train", "val", "test"):
        n.add_argument(f"--{split}-mask", type=Path, help=f"{split} mask, .npy of N bools (or 0/1)")
    n.add_argument(
        "--split",
        default="0.6,0.2,0.2",
        help="train,val,test fractions of the labeled nodes, drawn "
        "when no masks are given (default 0.6,0.2,0.2)",
    )
    n.add_argument("--seed", type=int, default=0, help="seed of --split")
    lp = p.add_argument_group("link prediction")
    lp.add_argument(
        "--edge-split",
        help="train,val,test fractions of the edges, e.g. 0.85,0.05,0.1: the val and test edges "
        "are drawn (seeded by --seed, as task.edge_split draws them at load), left out of the "
        "graph and stored beside it",
    )
    for split, name in (("val", "validation"), ("test", "test")):
        lp.add_argument(
            f"--{split}-edges",
            type=Path,
            help=f"the held-out {name} edges, read as --edges is (same format, columns and IDs): "
            "left out of the graph and scored by task=link_prediction (default: task.edge_split "
            "draws them)",
        )
    return p


def _fractions(text: str, option: str):
    """Three comma-separated fractions >= 0 summing to 1 (one DatasetError otherwise)."""
    from gnntrain.errors import DatasetError

    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1) > 1e-6:
        raise DatasetError(
            f"ingest: {option} {text!r}: three comma-separated fractions >= 0 summing to 1, e.g. "
            "0.85,0.05,0.1."
        )
    return values


def options_from(args: argparse.Namespace) -> IngestOptions:
    from gnntrain.errors import DatasetError

    try:
        split = tuple(float(x) for x in args.split.split(","))
    except ValueError:
        raise DatasetError(
            f"ingest: --split {args.split!r}: three comma-separated fractions, e.g. 0.6,0.2,0.2."
        ) from None
    if len(split) != 3:
        raise DatasetError(
            f"ingest: --split {args.split!r}: three comma-separated fractions, e.g. 0.6,0.2,0.2."
        )
    csv = CsvOptions(
        delimiter=args.delimiter, header=not args.no_header, comment=args.comment or ""
    )
    nodes = NodeOptions(
        features=args.features,
        features_format=args.features_format,
        id_column=args.id_column,
        feature_columns=[c.strip() for c in args.feature_columns.split(",") if c.strip()]
        if args.feature_columns
        else None,
        labels=args.labels,
        label_column=args.label_column,
        num_classes=args.num_classes,
        targets=args.targets,
        target_columns=[c.strip() for c in args.target_columns.split(",") if c.strip()]
        if args.target_columns
        else None,
        masks={f"{s}_mask": getattr(args, f"{s}_mask") for s in ("train", "val", "test")},
        id_type=args.id_type,
        csv=CsvOptions(delimiter=None, header=True, comment=args.comment or ""),
    )
    return IngestOptions(
        out=args.out,
        edges=list(args.edges),
        edges_format=args.edges_format,
        src_column=args.src_column,
        dst_column=args.dst_column,
        weight_column=args.weight_column,
        weights=args.weights,
        graph=args.graph,
        nodes=nodes,
        symmetrize=not args.directed,
        self_loops=args.self_loops,
        duplicates=args.duplicates,
        split=split,
        held_out={"val": args.val_edges, "test": args.test_edges},
        edge_split=_fractions(args.edge_split, "--edge-split") if args.edge_split else None,
        seed=args.seed,
        name=args.name,
        overwrite=args.overwrite,
        edges_csv=csv,
    )


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's cancel, ``kill``) raised as KeyboardInterrupt while the block runs, so
    the partial folder is removed as it is on Ctrl-C."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGTERM, stop)
        if threading.current_thread() is threading.main_thread()
        else None
    )
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class ProgressReport:
    """A rich bar per stage on a terminal; elsewhere one plain line per stage and every few
    seconds."""

    def __init__(self, console, command: str = "ingest"):
        self.console, self.command = console, command
        self.stage: Optional[str] = None
        self.last = 0.0
        self.started = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            if self.bar is None:
                self.bar = Progress(
                    TextColumn("{task.description:<20}"),
                    BarColumn(),
                    TextColumn("{task.percentage:>3.0f}%"),
                    TimeElapsedColumn(),
                    console=self.console,
                    transient=True,
                )
                self.bar.start()
            if stage != self.stage:
                self.task = self.bar.add_task(stage, total=max(total, 1))
            self.bar.update(self.task, completed=done, total=max(total, 1))
        elif stage != self.stage or now - self.last >= LINE_EVERY_S:
            share = f" {100.0 * done / total:5.1f}%" if total > 0 else ""
            self.console.print(
                f"{self.command}: {stage}{share} ({now - self.started:.0f} s)", highlight=False
            )
            self.last = now
        self.stage = stage

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def print_summary(summary: Dict[str, Any], out: Path, console) -> None:
    from rich.table import Table

    from gnntrain.sizing import format_bytes

    deg = summary.get("degree", {})
    split = summary.get("split", {})
    table = Table(
        title=f"{'generated' if 'generated' in summary else 'ingested'} {summary['name']}",
        show_header=False,
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    rows = [
        ("nodes", f"{summary['num_nodes']:,} ({summary['id_type']} IDs)"),
        (
            "edges (directed, stored)",
            f"{summary['num_edges']:,} from {summary['edges_read']:,} read"
            + (", reverse edges added" if summary["symmetrized"] else "")
            + (", weighted (float32)" if summary.get("weights") else ""),
        ),
        (
            "dropped",
            f"{summary['self_loops_dropped']:,} self-loops, {summary['duplicates_dropped']:,} "
            "duplicates",
        ),
        ("isolated nodes", f"{deg.get('isolated', 0):,}"),
        (
            "in-degree p50/p90/p99/max",
            f"{deg.get('p50', 0):g} / {deg.get('p90', 0):g} / {deg.get('p99', 0):g} / "
            f"{deg.get('max', 0):,} (mean {deg.get('mean', 0):.2f})",
        ),
        ("features", f"{summary['feat_dim']}"),
        (
            ("classes", f"{summary['num_classes']} ({summary['unlabeled']:,} nodes unlabeled)")
            if summary["num_classes"]
            else (
                "classes",
                "none (no labels: a graph for "
                + ("task=node_regression or " if summary.get("targets") else "")
                + "task=link_prediction)",
            )
        ),
        *(
            [("regression targets", f"{', '.join(summary['targets'])} (float32)")]
            if summary.get("targets")
            else []
        ),
        (
            "train / val / test",
            " / ".join(f"{split.get(m, 0):,}" for m in ("train_mask", "val_mask", "test_mask")),
        ),
        ("digest", summary["digest"]),
        ("size on disk", format_bytes(sum(f.stat().st_size for f in out.iterdir() if f.is_file()))),
        ("time", f"{summary['ingest_seconds']:.1f} s"),
    ]
    for note in summary.get("notes", []):
        rows.append(("note", note))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"written to {out}\ntrain on it: gnntrain run dataset=files dataset.path={out}",
        soft_wrap=True,
        highlight=False,
    )


def ingest_command(argv: List[str]) -> int:
    from rich.console import Console

    args = parser().parse_args(argv)
    console = Console()
    report = ProgressReport(Console(stderr=True))
    try:
        options = options_from(args)
        with terminate_as_interrupt():
            summary = ingest(options, progress=report)
    except GnnTrainError as exc:
        report.close()
        from rich.markup import escape

        Console(stderr=True).print(
            f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True
        )
        return 1
    except KeyboardInterrupt:
        report.close()
        Console(stderr=True).print(
            "ingest interrupted: nothing was written (the partial folder was removed)."
        )
        return 130
    report.close()
    print_summary(summary, Path(options.out).expanduser(), console)
    return 0


GENERATE_EPILOG = """examples:
  gnntrain generate --out graphs/csbm-10m dataset=csbm dataset.num_nodes=10000000 dataset.avg_degree=20
  gnntrain generate --out graphs/rmat dataset=rmat dataset.num_nodes=1000000 dataset.num_edges=20000000
then: gnntrain run dataset=files dataset.path=graphs/csbm-10m
The folder holds the same graph as dataset=csbm (or rmat) with the same options, written block by block:
memory stays a few arrays of N plus one block, whatever the number of edges."""  # noqa: E501  (command lines)


def generate_command(argv: List[str], compose: Callable[[List[str]], Any]) -> int:
    """``gnntrain generate --out DIR [--overwrite] [--name N] dataset=csbm|rmat dataset.KEY=VALUE
    ...``;
    ``compose`` turns the overrides into the run config (the CLI's, gnntrain.api.compose)."""
    from rich.console import Console
    from rich.markup import escape

    p = argparse.ArgumentParser(
        prog="gnntrain generate",
        epilog=GENERATE_EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
        description="Write a generated graph (dataset=csbm or rmat and its dataset.* options) "
        "into the on-disk format that dataset=files trains on, in bounded memory.",
    )
    p.add_argument(
        "--out", required=True, type=Path, help="the folder to write (refused if it exists)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--name", default="", help="the graph's name (default: the folder name)")
    p.add_argument(
        "overrides",
        nargs="*",
        help="dataset=csbm|rmat and dataset.KEY=VALUE options, as gnntrain run takes them",
    )
    args = p.parse_args(argv)
    console, errors = Console(), Console(stderr=True)
    report = ProgressReport(errors, "generate")
    try:
        bad = [o for o in args.overrides if not o.startswith(("dataset=", "dataset."))]
        if bad:
            from gnntrain.errors import DatasetError

            raise DatasetError(
                f"generate: {bad[0]!r}: only dataset=NAME and dataset.KEY=VALUE options shape a "
                "generated graph."
            )
        from gnntrain.data import check_dataset_config
        from gnntrain.data.ingest.generated import write_generated

        cfg = compose(args.overrides)
        check_dataset_config(cfg.dataset)
        with terminate_as_interrupt():
            summary = write_generated(
                cfg.dataset, args.out, args.overwrite, args.name, progress=report
            )
    except (GnnTrainError, OSError, MemoryError) as exc:
        report.close()
        what = (
            escape(str(exc))
            if isinstance(exc, GnnTrainError)
            else f"generate: writing {escape(str(args.out))} failed ({type(exc).__name__}: "
            f"{escape(str(exc))})"
        )
        errors.print(f"[bold red]error:[/bold red] {what}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        report.close()
        errors.print("generate interrupted: nothing was written (the partial folder was removed).")
        return 130
    report.close()
    print_summary(summary, Path(args.out).expanduser(), console)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(ingest_command(sys.argv[1:]))
