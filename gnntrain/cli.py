"""The ``gnntrain`` console script.

``run``, ``plan`` and ``partition`` are Hydra apps over ``configs/`` (so
overrides, ``-m`` sweeps, ``hydra/launcher=...`` and ``--cfg job`` work);
``datasets`` and ``report`` are plain commands. Heavy imports (torch, DGL)
happen inside the commands, so ``gnntrain --help`` starts fast.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

USAGE = """usage: gnntrain COMMAND [overrides...]

commands:
  run [overrides]        compose the config, resolve the plan, launch the ranks and train
                         (-m/--multirun sweeps; hydra/launcher=... picks local or SLURM; --cfg job prints the config)
  plan [overrides]       resolve, validate and print the run plan; write plan.yaml; train nothing
  partition [overrides]  build (or reuse from the cache) the plan's partitioning and print its metrics
  report DIR...          gather every summary.json under DIR into a table and plots
  datasets [data_dir=DIR] list the datasets with their sizes and sources, and the graphs ingested under DIR
  predict RUN_DIR [--what logits|probs|labels|embeddings] [--layer K] [--out FILE] [--format parquet|npy]
                         [--checkpoint FILE] [overrides]
                         every node's predictions or embeddings, with the run's own mode and world size
  ingest --edges F --features F --out DIR ...
                         convert your own graph (CSV/TSV, Parquet, NumPy, scipy .npz, PyG, DGL) for dataset=files
                         (gnntrain ingest -h)
  generate --out DIR dataset=csbm|rmat [dataset.KEY=VALUE ...]
                         write a generated graph into that format block by block (bounded memory, any size)
  calibrate [hardware=NAME] [--name NEW] [--quick]
                         measure this host (SpMM, GEMM, memory, collectives; < 2 min) and write the hardware
                         profile NEW (default NAME-calibrated) that mode=auto and the plan's predictions use;
                         --quick: rougher per-mode factors from shorter probes
  netem up|run|show|down an emulated cluster network: hosts as network namespaces on tc-shaped links,
                         one torchrun agent per host (as root; gnntrain netem -h)

examples:
  gnntrain run                                   # GCN on the generated csbm graph, 2 local ranks
  gnntrain run dataset=cora data_dir=../shared/datasets/dgl mode=single
  gnntrain ingest --edges edges.csv --features nodes.parquet --out graphs/mine
  gnntrain run dataset=files dataset.path=graphs/mine mode=partition
  gnntrain run -m mode=single,partition dataset=csbm,rmat
  gnntrain plan hardware.ranks_per_node=4 mode.replication=2
  gnntrain calibrate && gnntrain plan mode=auto hardware=local-cpu-calibrated
  gnntrain netem up --hosts 4 --gbit 1 && gnntrain netem run -- mode=partition && gnntrain netem down
"""


def config_dir() -> str:
    from gnntrain.launch.compose import config_dir as packaged

    return packaged()


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def _error(message: str) -> None:
    """Every user-facing error: on stderr, as one unbroken message (the exit code says it failed)."""
    from rich.markup import escape

    _console(stderr=True).print(f"[bold red]error:[/bold red] {escape(message)}", soft_wrap=True)


def _setup_logging() -> None:
    from gnntrain.logs import setup_logging

    setup_logging()


SWEEP_FAILURES: List[str] = []  # the overrides of each failed job of a sweep run in this process


def _sweep_failed(status: str) -> None:
    """A multirun job that did not complete: remembered for the sweep's closing line and exit code."""
    from hydra.core.hydra_config import HydraConfig

    swept = {a.split("=", 1)[0] for a in sys.argv[1:] if "=" in a and "," in a.split("=", 1)[1]
             and not a.split("=", 1)[1].startswith("[")}  # the sweep's axes (key=a,b,...)
    try:
        task = list(HydraConfig.get().overrides.task)
        overrides = " ".join(o for o in task if o.split("=", 1)[0] in swept) or " ".join(task)
    except Exception:
        overrides = "?"
    SWEEP_FAILURES.append(f"{overrides} ({status})")


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:
        return False


def _output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


# ----------------------------------------------------------- hydra tasks
def _plan_or_exit(cfg, run_dir: Path):
    from gnntrain.auto import resolve_plan
    from gnntrain.errors import GnnTrainError
    from gnntrain.metrics import failed_summary, write_json_atomic

    try:
        return resolve_plan(cfg)
    except GnnTrainError as exc:
        _error(f"invalid plan: {exc}")
        if not (run_dir / "summary.json").exists():  # an earlier run's summary in this folder is never replaced
            write_json_atomic(run_dir / "summary.json", failed_summary(None, f"invalid plan: {exc}"))
        if _is_multirun():
            _sweep_failed("invalid plan")
            return None
        sys.exit(1)


def _is_rank_zero() -> bool:
    from gnntrain.logs import process_rank  # the rank the logging setup uses; imports no torch

    return process_rank() == 0


def run_task(cfg) -> Optional[dict]:
    _setup_logging()  # again: Hydra's job logging put its own console handler back
    from gnntrain.errors import GnnTrainError, Interrupted
    from gnntrain.launch import external_identity, preflight, run_training
    from gnntrain.metrics.report import print_plan

    run_dir = _output_dir()
    plan = _plan_or_exit(cfg, run_dir)
    if plan is None:
        return None
    if _is_rank_zero():  # under torchrun/srun every rank runs this task: one plan on the console
        from gnntrain.metrics.prediction import print_predictions

        print_plan(plan, brief=True)
        print_predictions(plan, brief=True)
    try:
        preflight(plan, run_dir, external_identity())
    except GnnTrainError as exc:  # nothing written: an earlier run in this folder keeps its files
        _error(str(exc))
        if _is_multirun():
            _sweep_failed("refused")
            return {"status": "failed", "error": str(exc)}
        sys.exit(1)
    plan.write_yaml(run_dir / "plan.yaml")
    try:
        summary = run_training(plan, run_dir, preflighted=True)
    except Interrupted as exc:
        return _interrupted(run_dir, exc.signal, exc.exit_code)
    except GnnTrainError as exc:
        _error(str(exc))
        _console().print(f"[dim]summary: {run_dir / 'summary.json'}[/dim]")
        if _is_multirun():
            _sweep_failed("failed")
            return {"status": "failed", "error": str(exc)}
        sys.exit(1)
    if summary.get("status") == "interrupted":
        signal_name = (summary.get("interrupted") or {}).get("signal", "SIGINT")
        return _interrupted(run_dir, signal_name, 143 if signal_name == "SIGTERM" else 130)
    if _is_rank_zero():  # under torchrun/srun every rank returns here: one line
        _console().print(f"[dim]outputs: {run_dir}[/dim]")
    return summary


def resume_command(run_dir: Path, argv: Optional[List[str]] = None) -> str:
    """The command that continues this run: the same overrides, its run directory, train.resume=true."""
    import shlex

    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if not a.startswith(("hydra.run.dir=", "train.resume=", "hydra/hydra_logging=", "hydra.searchpath=", "-m",
                                 "--multirun"))]
    return shlex.join(["gnntrain", "run", *args, f"hydra.run.dir={run_dir}", "train.resume=true"])


def _interrupted(run_dir: Path, signal_name: str, code: int):
    """One line: where the run stopped and the exact command that continues it."""
    import json

    try:
        info = json.loads((run_dir / "summary.json").read_text()).get("interrupted") or {}
    except (OSError, ValueError):
        info = {}
    done, total = info.get("last_epoch", 0), info.get("epochs", "?")
    how = f"after epoch {done} of {total}" if done else "before the first epoch completed"
    _console(stderr=True).print(f"interrupted by {signal_name} {how}; summary.json says so. Resume with: "
                                f"{resume_command(run_dir)}", soft_wrap=True, highlight=False, markup=False)
    if _is_multirun():
        _sweep_failed("interrupted")
        return {"status": "interrupted"}
    sys.exit(code)


def plan_task(cfg) -> None:
    _setup_logging()
    from gnntrain.metrics.report import print_plan
    from gnntrain.modes import MODE_REGISTRY, Mode

    run_dir = _output_dir()
    plan = _plan_or_exit(cfg, run_dir)
    if plan is None:
        return None
    report = None
    if MODE_REGISTRY[plan.mode].graph_report is not Mode.graph_report:
        report = _graph_report(cfg, plan)  # figures that need the graph (loaded, partition from the cache)
    known = dict((report or {}).get("bytes per epoch") or {})
    if known:  # the partition's own volumes: the bytes the run will move, in place of "depends on the graph"
        import dataclasses

        total = known.pop("total")
        plan = dataclasses.replace(plan, comm_per_epoch={
            "per_epoch_bytes": total, "by_kind": known,
            "formula": "this partition's measured volumes: exchanged rows x widths x bytes per element"})
    path = plan.write_yaml(run_dir / "plan.yaml")
    print_plan(plan)
    from gnntrain.metrics.prediction import print_predictions

    print_predictions(plan)
    if report:
        from gnntrain.metrics.report import print_graph_report

        print_graph_report(plan, report)
    _console().print(f"[dim]plan written to {path}[/dim]")
    return None


def _load_and_partition(cfg, plan):
    """The graph and the mode's own partitioning of it (the plan's parts with the configured partitioner
    where the mode partitions nothing itself)."""
    from gnntrain.data import load_dataset
    from gnntrain.modes import Mode
    from gnntrain.plan import plan_mode

    data = load_dataset(cfg)
    mode = plan_mode(plan)
    part, hit = mode.partition(data, plan)
    if part is None:
        part, hit = Mode.partition(mode, data, plan)
    return data, part, hit


def _graph_report(cfg, plan, data=None, part=None) -> Optional[dict]:
    """The mode's figures that need the graph (:meth:`Mode.graph_report`), or None."""
    from gnntrain.errors import GnnTrainError
    from gnntrain.plan import plan_mode

    try:
        if data is None:
            data, part, _ = _load_and_partition(cfg, plan)
        return plan_mode(plan).graph_report(data, part, plan)
    except GnnTrainError as exc:
        _error(str(exc))
        sys.exit(1)


def partition_task(cfg) -> None:
    _setup_logging()
    from gnntrain.errors import GnnTrainError
    from gnntrain.metrics.report import print_partition

    run_dir = _output_dir()
    plan = _plan_or_exit(cfg, run_dir)
    if plan is None:
        return None
    try:
        data, part, hit = _load_and_partition(cfg, plan)
    except GnnTrainError as exc:
        _error(str(exc))
        sys.exit(1)
    print_partition(data, cfg.partitioner, part, hit)
    report = _graph_report(cfg, plan, data, part)
    if report:
        from gnntrain.metrics.report import print_graph_report

        print_graph_report(plan, report)
    from gnntrain.launch.shards import ensure_store, uses_store
    from gnntrain.sizing import format_bytes

    if uses_store(plan):  # what the ranks of `gnntrain run` will open, one part each
        del data
        directory, meta, build_s = ensure_store(plan)
        sizes = ", ".join(format_bytes(b) for b in meta["bytes_per_part"])
        how = f"built in {build_s:.1f} s" if build_s > 0.05 else "reused"
        _console().print(f"partition store ({how}): {directory}\n  per part: {sizes}", soft_wrap=True)
    return None


def calibrate_task(cfg) -> None:
    """``gnntrain calibrate``: measure this host and write the profile (gnntrain/launch/calibrate.py)."""
    _setup_logging()
    from gnntrain.data import resolve_cache_dir
    from gnntrain.errors import GnnTrainError
    from gnntrain.launch.calibrate import calibrate, user_config_dir, write_profile

    name = os.environ.get("GNNTRAIN_CALIBRATE_NAME") or f"{cfg.hardware.name}-calibrated"
    console = _console()
    console.print(f"calibrating hardware profile '{cfg.hardware.name}' on this host ...")
    try:
        measured = calibrate(cfg, resolve_cache_dir(cfg), _output_dir(),
                             say=lambda line: console.print(line, soft_wrap=True),
                             quick=os.environ.get("GNNTRAIN_CALIBRATE_QUICK") == "1")
    except GnnTrainError as exc:
        _error(f"calibration failed: {exc}")
        sys.exit(1)
    path = write_profile(cfg.hardware, measured, name, user_config_dir())
    console.print(f"wrote {path}\nuse it with: hardware={name}  (e.g. gnntrain plan mode=auto hardware={name})",
                  soft_wrap=True)


def _calibrate(args: List[str]) -> int:
    """``--name NEW`` is ours; the rest are Hydra overrides (hardware=NAME, ...)."""
    rest, i = [], 0
    while i < len(args):
        if args[i] == "--name" and i + 1 < len(args):
            os.environ["GNNTRAIN_CALIBRATE_NAME"] = args[i + 1]
            i += 2
            continue
        if args[i] == "--quick":
            os.environ["GNNTRAIN_CALIBRATE_QUICK"] = "1"
            i += 1
            continue
        if args[i].startswith("--name="):
            os.environ["GNNTRAIN_CALIBRATE_NAME"] = args[i].split("=", 1)[1]
        else:
            rest.append(args[i])
        i += 1
    if not any(a.startswith("hydra.run.dir=") for a in rest):
        rest.append("hydra.run.dir=outputs/calibrate/${now:%Y-%m-%d_%H-%M-%S}")
    return _hydra(calibrate_task, rest, "gnntrain calibrate")


SCHEMA_GROUPS = ("dataset", "model", "mode", "partitioner", "hardware", "logger")


def _schema_as_option(args: List[str]) -> Optional[str]:
    """``dataset=dataset_schema``: the schema gnntrain registers for the group, not an option of it."""
    import re

    for arg in args:
        hit = re.fullmatch(r"\+?(\w+)=\[?([\w,-]*_schema[\w,-]*)\]?", arg)
        if hit and hit.group(1) in SCHEMA_GROUPS:
            group = hit.group(1)
            options = sorted(p.stem for p in (Path(config_dir()) / group).glob("*.yaml"))
            return (f"{arg}: {hit.group(2)} is the schema of the {group} group, not a {group}. Use one of: "
                    f"{', '.join(options)}.")
    return None


def _help(show: Callable[[], None]) -> int:
    """Hydra's --help with the registered schemas (``dataset_schema`` ...) left out of the group
    lists: they are what a group's YAMLs build on, not options to pick."""
    import contextlib
    import io
    import re

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            show()
        except SystemExit:
            pass
    lines = []
    for line in text.getvalue().splitlines():
        group = re.fullmatch(r"(\w+): (.*)", line)
        if group and group.group(1) in SCHEMA_GROUPS:
            line = f"{group.group(1)}: " + ", ".join(o for o in group.group(2).split(", ") if not o.endswith("_schema"))
        lines.append(line)
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # gnntrain run --help | head
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _hydra(task, args: List[str], prog: str) -> int:
    import hydra

    if task is run_task:  # before the modes' schemas import torch: the server's imports overlap ours
        from gnntrain.launch.forkserver import start_for_command_line

        start_for_command_line(args)
    import gnntrain.modes  # noqa: F401  (each mode registers its options schema on import)
    from gnntrain.config.schema import register_configs

    register_configs()
    args = list(args)
    schema = _schema_as_option(args)
    if schema is not None:
        _error(schema)
        return 2
    if not any(a.startswith(("hydra/hydra_logging=", "+hydra/hydra_logging=")) for a in args):
        # Hydra's own lines (sweep launches) go through the same handler as ours, not its stdout format
        args.append("hydra/hydra_logging=none")
    from gnntrain.launch.calibrate import user_config_dir

    user_dir = user_config_dir()
    if user_dir.is_dir() and not any(a.startswith("hydra.searchpath") for a in args):
        args.append(f"hydra.searchpath=[file://{user_dir}]")  # profiles written by gnntrain calibrate
    sys.argv = [prog] + args
    SWEEP_FAILURES.clear()
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing: config errors become one line here
    app = hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(task)
    try:
        if "--help" in args or "-h" in args:
            return _help(app)
        app()
    except Exception as exc:
        from gnntrain.launch.compose import config_error

        message = config_error(exc)
        if message is None or full_error:
            raise
        _error(message)
        return 1
    finally:
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    if SWEEP_FAILURES:  # a sweep whose jobs did not all complete: say which, and fail
        _error(f"sweep: {len(SWEEP_FAILURES)} job(s) did not complete: " + "; ".join(SWEEP_FAILURES))
        return 1
    return 0


# ------------------------------------------------------------------ main
def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    _setup_logging()
    if command == "run":
        return _hydra(run_task, rest, "gnntrain run")
    if command == "plan":
        return _hydra(plan_task, rest, "gnntrain plan")
    if command == "partition":
        return _hydra(partition_task, rest, "gnntrain partition")
    if command == "calibrate":
        return _calibrate(rest)
    if command == "netem":
        from gnntrain.launch.netem import netem_command

        return netem_command(rest, Path(config_dir()))
    if command == "datasets":
        from gnntrain.metrics.report import print_datasets, print_ingested

        print_datasets(Path(config_dir()) / "dataset")
        data_dir = next((a.split("=", 1)[1] for a in rest if a.startswith(("data_dir=", "--data-dir="))),
                        os.environ.get("GNNTRAIN_DATA_DIR"))
        print_ingested(Path(data_dir).expanduser() if data_dir else None)
        return 0
    if command == "predict":
        from gnntrain.launch.predict import predict_command

        return predict_command(rest)
    if command in ("ingest", "generate"):  # the data layer's commands; generate composes dataset.* as run does
        from gnntrain.api import compose_or_error
        from gnntrain.data.ingest.command import generate_command, ingest_command

        return ingest_command(rest) if command == "ingest" else generate_command(rest, compose_or_error)
    if command == "report":
        from gnntrain.metrics.report import report_command

        return report_command(rest)
    _error(f"unknown command '{command}'. Use one of: run, plan, partition, report, datasets, ingest, generate, "
           "predict, calibrate, netem (gnntrain --help).")
    return 2


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


if __name__ == "__main__":
    entry()
