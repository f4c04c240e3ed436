"""The ``gnntrain predict`` command line: its options, then :func:`gnntrain.launch.predict.predict`
(per node) or :func:`gnntrain.launch.predict_links.predict_links` (link prediction's pairs and
top-k)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List

from gnntrain.errors import GnnTrainError
from gnntrain.launch.predict import EXTENSIONS, predict
from gnntrain.launch.predict_links import LINK_WHATS, predict_links
from gnntrain.training.predict import WHATS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gnntrain predict",
        description="Predictions or embeddings for every node "
        "from a trained run, with the run's own mode and world size.",
        epilog="overrides: key=value or group=option after the options, e.g. dataset=files "
        "dataset.path=other_graph (same feature width)",
    )
    p.add_argument("run_dir", type=Path, help="the run's directory (plan.yaml, model.pt)")
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="weights to use: a checkpoint file (default: RUN_DIR/model.pt)",
    )
    p.add_argument(
        "--what",
        default="logits",
        choices=WHATS + LINK_WHATS,
        help="per node: logits, probs, labels, embeddings, values (node regression, in the "
        "targets' units); link prediction: scores (of --pairs), topk (of --sources)",
    )
    p.add_argument("--pairs", type=Path, help="scores: a CSV/Parquet/.npy of (source, target) IDs")
    p.add_argument("--sources", type=Path, help="topk: a CSV/Parquet/.npy of source node IDs")
    p.add_argument("--k", type=int, default=20, help="topk: candidates per source")
    p.add_argument(
        "--layer",
        type=int,
        default=0,
        help="embeddings: the input of this layer (1..layers-1; default the last layer's input)",
    )
    p.add_argument(
        "--out", type=Path, help="output file (default RUN_DIR/predictions/<what>.<format>)"
    )
    p.add_argument("--format", default="parquet", choices=["parquet", "npy"])
    return p


def predict_command(argv: List[str]) -> int:
    from rich.console import Console
    from rich.markup import escape

    options, rest = [], []
    args_iter = iter(argv)
    for item in args_iter:  # options (and their values) for argparse, key=value overrides for Hydra
        # the run folder given as key=value, like the overrides beside it
        if item.startswith("run_dir="):
            options.append(item.split("=", 1)[1])
        elif "=" in item and not item.startswith("-"):
            rest.append(item)
        else:
            options.append(item)
    args = parser().parse_args(options)
    try:
        if args.what in LINK_WHATS:
            out = args.out or args.run_dir / "predictions" / f"{args.what}{EXTENSIONS[args.format]}"
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            predict_links(
                args.run_dir,
                args.what,
                Path(out).resolve(),
                args.format,
                args.pairs,
                args.sources,
                args.k,
                args.checkpoint,
                rest,
            )
            return 0
        predict(args.run_dir, args.what, args.layer, args.out, args.format, args.checkpoint, rest)
    except GnnTrainError as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True
        )
        return 1
    return 0
