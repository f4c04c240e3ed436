"""The Hydra tasks behind ``gnntrain run``, ``plan``, ``partition`` and ``calibrate``: each takes
the composed config and fails through :func:`gnntrain.cli.hydra_app.fail`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional

from gnntrain.cli.hydra_app import console, error, fail, output_dir, path_line


def _setup_logging() -> None:
    from gnntrain.logs import setup_logging

    setup_logging()  # again: Hydra's job logging put its own console handler back


def _is_rank_zero() -> bool:
    from gnntrain.logs import process_rank  # the rank the logging setup uses; imports no torch

    return process_rank() == 0


def _plan_or_fail(cfg, run_dir: Path, training: bool = True):
    """The resolved plan, or None after :func:`fail` (an invalid plan's summary.json written, unless
    an earlier run's summary is in the folder: that is never replaced); ``training=False`` for a
    command that trains nothing (``gnntrain partition``)."""
    from gnntrain.auto import resolve_plan
    from gnntrain.errors import GnnTrainError
    from gnntrain.metrics import failed_summary, write_json_atomic

    try:
        return resolve_plan(cfg, training)
    except GnnTrainError as exc:
        if not (run_dir / "summary.json").exists():
            write_json_atomic(
                run_dir / "summary.json", failed_summary(None, f"invalid plan: {exc}")
            )
        return fail(f"invalid plan: {exc}", "invalid plan")


# ------------------------------------------------------------------------ run
def run_task(cfg) -> Optional[dict]:
    _setup_logging()
    from gnntrain.errors import GnnTrainError, Interrupted
    from gnntrain.launch import external_identity, preflight, run_training
    from gnntrain.metrics.report import print_plan

    run_dir = output_dir()
    plan = _plan_or_fail(cfg, run_dir)
    if plan is None:
        return None
    if _is_rank_zero():  # under torchrun/srun every rank runs this task: one plan on the console
        from gnntrain.metrics.prediction import print_predictions

        print_plan(plan, brief=True)
        print_predictions(plan, brief=True)
    try:
        preflight(plan, run_dir, external_identity())
    except GnnTrainError as exc:  # nothing written: an earlier run in this folder keeps its files
        return fail(str(exc), "refused", {"status": "failed", "error": str(exc)})
    plan.write_yaml(run_dir / "plan.yaml")
    try:
        summary = run_training(plan, run_dir, preflighted=True)
    except Interrupted as exc:
        return _interrupted(run_dir, exc.signal, exc.exit_code)
    except GnnTrainError as exc:
        error(str(exc))
        path_line(f"summary: {run_dir / 'summary.json'}")
        return fail(None, "failed", {"status": "failed", "error": str(exc)})
    if summary.get("status") == "interrupted":
        signal_name = (summary.get("interrupted") or {}).get("signal", "SIGINT")
        return _interrupted(run_dir, signal_name, 143 if signal_name == "SIGTERM" else 130)
    if _is_rank_zero():  # under torchrun/srun every rank returns here: one line
        path_line(f"outputs: {run_dir}")
    return summary


def resume_command(run_dir: Path, argv: Optional[List[str]] = None) -> str:
    """The command that continues this run: the same overrides (``argv``; by default the run's
    own, as Hydra recorded them: in a sweep, the job's), its run directory, train.resume=true."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    dropped = (
        "hydra.run.dir=",
        "train.resume=",
        "hydra/hydra_logging=",
        "hydra.searchpath=",
        "-m",
        "--multirun",
    )
    if argv is None:
        argv = list(HydraConfig.get().overrides.task)
    args = [a for a in argv if not a.startswith(dropped)]
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
    console(stderr=True).print(
        f"interrupted by {signal_name} {how}; summary.json says so. Resume with: "
        f"{resume_command(run_dir)}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    return fail(None, "interrupted", {"status": "interrupted"}, code=code)


# ------------------------------------------------------------- plan, partition
def plan_task(cfg) -> None:
    _setup_logging()
    from gnntrain.metrics.report import print_plan
    from gnntrain.modes import ModePlanner, mode_spec

    run_dir = output_dir()
    plan = _plan_or_fail(cfg, run_dir)
    if plan is None:
        return None
    report = None
    if mode_spec(plan.mode).planner.graph_report is not ModePlanner.graph_report:
        # figures that need the graph (loaded, partition from the cache)
        report = _graph_report(cfg, plan)
    known = dict((report or {}).get("bytes per epoch") or {})
    # the partition's own volumes: the bytes the run will move, in place of "depends on the graph"
    if known:
        import dataclasses

        total = known.pop("total")
        # the task's own kinds (link prediction's endpoint exchange) stay the plan's estimate
        planned = dict((plan.comm_per_epoch or {}).get("by_kind") or {})
        task_kinds = {k: v for k, v in planned.items() if k.startswith("endpoint_")}
        plan = dataclasses.replace(
            plan,
            comm_per_epoch={
                "per_epoch_bytes": total + sum(task_kinds.values()),
                "by_kind": {**known, **task_kinds},
                "formula": "this partition's measured volumes: exchanged rows x widths x bytes per "
                "element" + ("; the endpoint exchange estimated from sizes" if task_kinds else ""),
            },
        )
    path = plan.write_yaml(run_dir / "plan.yaml")
    print_plan(plan)
    from gnntrain.metrics.prediction import print_predictions

    print_predictions(plan)
    if report:
        from gnntrain.metrics.report import print_graph_report

        print_graph_report(plan, report)
    path_line(f"plan written to {path}")
    return None


def _load_and_partition(cfg, plan):
    """The graph and the mode's own partitioning of it (the plan's parts with the configured
    partitioner where the mode partitions nothing itself)."""
    from gnntrain.launch.shards import load_and_partition

    data, _, part, hit = load_and_partition(plan, printing=True)
    return data, part, hit


def _graph_report(cfg, plan, data=None, part=None) -> Optional[dict]:
    """The mode's figures that need the graph (:meth:`ModePlanner.graph_report`), or None."""
    from gnntrain.errors import GnnTrainError
    from gnntrain.plan import plan_mode

    try:
        if data is None:
            data, part, _ = _load_and_partition(cfg, plan)
        return plan_mode(plan).graph_report(data, part, plan)
    except GnnTrainError as exc:
        return fail(str(exc), "failed")


def partition_task(cfg) -> None:
    _setup_logging()
    from gnntrain.errors import GnnTrainError
    from gnntrain.metrics.report import print_partition

    run_dir = output_dir()
    plan = _plan_or_fail(cfg, run_dir, training=False)  # builds parts, trains nothing
    if plan is None:
        return None
    try:
        data, part, hit = _load_and_partition(cfg, plan)
    except GnnTrainError as exc:
        return fail(str(exc), "failed")
    print_partition(data, plan.settings.partitioner, part, hit)
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
        console().print(
            f"partition store ({how}): {directory}\n  per part: {sizes}", soft_wrap=True
        )
    return None


# ------------------------------------------------------------------- calibrate
def calibrate_task(name: Optional[str], quick: bool) -> Callable[[Any], None]:
    """``gnntrain calibrate``'s task: measure this host and write the profile ``name`` (default
    ``<hardware>-calibrated``; gnntrain/launch/calibrate.py). ``quick``: rougher factors, shorter
    probes."""

    def calibrate_task(cfg) -> None:
        _setup_logging()
        from gnntrain.data import resolve_cache_dir
        from gnntrain.errors import GnnTrainError
        from gnntrain.launch.calibrate import calibrate, user_config_dir, write_profile

        profile = name or f"{cfg.hardware.name}-calibrated"
        out = console()
        out.print(f"calibrating hardware profile '{cfg.hardware.name}' on this host ...")
        try:
            measured = calibrate(
                cfg,
                resolve_cache_dir(cfg),
                output_dir(),
                say=lambda line: out.print(line, soft_wrap=True),
                quick=quick,
            )
        except GnnTrainError as exc:
            return fail(f"calibration failed: {exc}", "failed")
        path = write_profile(cfg.hardware, measured, profile, user_config_dir())
        out.print(
            f"wrote {path}\nuse it with: hardware={profile}  (e.g. gnntrain plan mode=auto "
            f"hardware={profile})",
            soft_wrap=True,
        )
        return None

    return calibrate_task
