"""The ``gnntrain`` console script: one table of commands (:data:`COMMANDS`) gives the usage text,
the dispatch and the unknown-command message.

``run``, ``plan``, ``partition`` and ``calibrate`` are Hydra apps over ``configs/``
(:mod:`gnntrain.cli.hydra_app`: overrides, ``-m`` sweeps, ``hydra/launcher=...``, ``--cfg job``);
the others are plain commands. Heavy imports (torch, DGL) happen inside the commands, so ``gnntrain
--help`` starts fast.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from gnntrain.cli.hydra_app import config_dir, error, run_hydra_app


@dataclass(frozen=True)
class Command:
    name: str
    synopsis: str  # after the name, in the usage line
    summary: str  # what it does (the usage text's second column, wrapped as written)
    handler: Callable[[List[str]], int]  # the arguments after the command name -> exit code


# ------------------------------------------------------------------ handlers
def _run(args: List[str]) -> int:
    from gnntrain.cli.tasks import run_task

    return run_hydra_app(run_task, args, "gnntrain run", forkserver=True)


def _plan(args: List[str]) -> int:
    from gnntrain.cli.tasks import plan_task

    return run_hydra_app(plan_task, args, "gnntrain plan")


def _partition(args: List[str]) -> int:
    from gnntrain.cli.tasks import partition_task

    return run_hydra_app(partition_task, args, "gnntrain partition")


def _calibrate(args: List[str]) -> int:
    """``--name NEW`` and ``--quick`` are ours; the rest are Hydra overrides (hardware=NAME,
    ...)."""
    from gnntrain.cli.tasks import calibrate_task

    name, quick, rest, i = None, False, [], 0
    while i < len(args):
        if args[i] == "--name" and i + 1 < len(args):
            name, i = args[i + 1], i + 2
            continue
        if args[i] == "--quick":
            quick = True
        elif args[i].startswith("--name="):
            name = args[i].split("=", 1)[1]
        else:
            rest.append(args[i])
        i += 1
    if not any(a.startswith("hydra.run.dir=") for a in rest):
        rest.append("hydra.run.dir=outputs/calibrate/${now:%Y-%m-%d_%H-%M-%S}")
    return run_hydra_app(calibrate_task(name, quick), rest, "gnntrain calibrate")


def _report(args: List[str]) -> int:
    from gnntrain.metrics.runs_report import report_command

    return report_command(args)


def _datasets(args: List[str]) -> int:
    from gnntrain.metrics.dataset_listing import print_datasets, print_ingested

    print_datasets(Path(config_dir()) / "dataset")
    data_dir = next(
        (a.split("=", 1)[1] for a in args if a.startswith(("data_dir=", "--data-dir="))),
        os.environ.get("GNNTRAIN_DATA_DIR"),
    )
    print_ingested(Path(data_dir).expanduser() if data_dir else None)
    return 0


def _predict(args: List[str]) -> int:
    from gnntrain.launch.predict_cli import predict_command

    return predict_command(args)


def _ingest(args: List[str]) -> int:
    from gnntrain.data.ingest.command import ingest_command

    return ingest_command(args)


def _generate(args: List[str]) -> int:
    """The data layer's command; it composes ``dataset.*`` as ``run`` does."""
    from gnntrain.api import compose_or_error
    from gnntrain.data.ingest.command import generate_command

    return generate_command(args, compose_or_error)


def _netem(args: List[str]) -> int:
    from gnntrain.launch.netem_cli import netem_command

    return netem_command(args, Path(config_dir()))


COMMANDS = (
    Command(
        "run",
        "[overrides]",
        "compose the config, resolve the plan, launch the ranks and train\n"
        "(-m/--multirun sweeps; hydra/launcher=... picks local or SLURM; --cfg job prints the "
        "config)",
        _run,
    ),
    Command(
        "plan",
        "[overrides]",
        "resolve, validate and print the run plan; write plan.yaml; train nothing",
        _plan,
    ),
    Command(
        "partition",
        "[overrides]",
        "build (or reuse from the cache) the plan's partitioning and print its metrics",
        _partition,
    ),
    Command(
        "report", "DIR...", "gather every summary.json under DIR into a table and plots", _report
    ),
    Command(
        "datasets",
        "[data_dir=DIR]",
        "list the datasets with their sizes and sources, and the graphs ingested under DIR",
        _datasets,
    ),
    Command(
        "predict",
        "RUN_DIR [--what logits|probs|labels|embeddings] [--layer K] [--out FILE] "
        "[--format parquet|npy]\n[--checkpoint FILE] [overrides]",
        "every node's predictions or embeddings, with the run's own mode and world size",
        _predict,
    ),
    Command(
        "ingest",
        "--edges F --features F --out DIR ...",
        "convert your own graph (CSV/TSV, Parquet, NumPy, "
        "scipy .npz, PyG, DGL) for dataset=files\n(gnntrain ingest -h)",
        _ingest,
    ),
    Command(
        "generate",
        "--out DIR dataset=csbm|rmat [dataset.KEY=VALUE ...]",
        "write a generated graph into that format block by block (bounded memory, any size)",
        _generate,
    ),
    Command(
        "calibrate",
        "[hardware=NAME] [--name NEW] [--quick]",
        "measure this host (SpMM, GEMM, memory, collectives; < 2 min) and write the hardware\n"
        "profile NEW (default NAME-calibrated) that mode=auto and the plan's predictions use;\n"
        "--quick: rougher per-mode factors from shorter probes",
        _calibrate,
    ),
    Command(
        "netem",
        "up|run|show|down",
        "an emulated cluster network: hosts as network namespaces on tc-shaped "
        "links,\none torchrun agent per host (as root; gnntrain netem -h)",
        _netem,
    ),
)
BY_NAME = {command.name: command for command in COMMANDS}

EXAMPLES = """examples:
  gnntrain run                                   # GCN on the generated csbm graph, 2 local ranks
  gnntrain run dataset=cora data_dir=../shared/datasets/dgl mode=single
  gnntrain ingest --edges edges.csv --features nodes.parquet --out graphs/mine
  gnntrain run dataset=files dataset.path=graphs/mine mode=partition
  gnntrain run -m mode=single,partition dataset=csbm,rmat
  gnntrain plan hardware.ranks_per_node=4 mode.replication=2
  gnntrain calibrate && gnntrain plan mode=auto hardware=local-cpu-calibrated
  gnntrain netem up --hosts 4 --gbit 1 && gnntrain netem run -- mode=partition && gnntrain netem down
"""  # noqa: E501  (command lines, as users type them)


def usage(column: int = 25) -> str:
    """The usage text, from :data:`COMMANDS`: a command and its synopsis, then what it does, aligned
    at ``column`` (on the next line where the synopsis is longer)."""
    lines = ["usage: gnntrain COMMAND [overrides...]", "", "commands:"]
    pad = " " * column
    for command in COMMANDS:
        head = f"  {command.name} {command.synopsis}".split("\n")
        head = head[:1] + [pad + part for part in head[1:]]
        lines += head[:-1]
        summary = command.summary.split("\n")
        if len(head[-1]) < column:
            lines.append(head[-1].ljust(column) + summary[0])
        else:
            lines += [head[-1], pad + summary[0]]
        lines += [pad + part for part in summary[1:]]
    return "\n".join(lines + ["", EXAMPLES])


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    from gnntrain.logs import setup_logging

    setup_logging()
    command = BY_NAME.get(name)
    if command is None:
        import difflib

        close = difflib.get_close_matches(name, list(BY_NAME), n=1)
        hint = f"Did you mean '{close[0]}'? " if close else ""
        error(
            f"unknown command '{name}'. {hint}Use one of: {', '.join(BY_NAME)} (gnntrain --help)."
        )
        return 2
    return command.handler(rest)


def entry() -> None:
    """The console script (and ``python -m gnntrain``): :func:`main`, then, after a success, leave
    without interpreter teardown. Tearing torch down takes 0.5-1.5 s that nobody waits for (triton's
    and dynamo's modules); every output is written and closed by then, and logs and streams are
    flushed here. A failure leaves the usual way, so anything still open exits as it would."""
    code = main()
    if code == 0:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit(code)
