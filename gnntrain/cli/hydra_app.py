"""Running a command as a Hydra app over ``configs/`` (overrides, ``-m`` sweeps,
``hydra/launcher=...``, ``--cfg job``), and the one way a command fails: :func:`fail`.

A config that does not compose becomes one line (:func:`gnntrain.launch.compose.config_error`); a
job of a sweep that does not complete is recorded, and the sweep ends with one line naming each such
job and a non-zero exit code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional, Set

from gnntrain.launch.compose import config_dir

SCHEMA_GROUPS = ("dataset", "model", "mode", "partitioner", "hardware", "logger")
SWEEP_FAILURES: List[str] = []  # the overrides of each failed job of a sweep run in this process
SWEPT_KEYS: Set[str] = set()  # that sweep's axes (key=a,b,... on its command line)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def path_line(text: str) -> None:
    """A line naming a file or folder (``outputs: DIR``): dim, never wrapped at the terminal's
    width (a path broken over two lines cannot be copied), and never read as rich markup."""
    from rich.markup import escape

    console().print(f"[dim]{escape(text)}[/dim]", soft_wrap=True)


def error(message: str) -> None:
    """Every user-facing error: on stderr, as one unbroken message (the exit code says it
    failed); a control character or line separator in it (echoed from an argument) is written as
    its escape (:func:`gnntrain.errors.one_line`), so the message stays one line."""
    from rich.markup import escape

    from gnntrain.errors import one_line

    text = one_line(message)
    console(stderr=True).print(f"[bold red]error:[/bold red] {escape(text)}", soft_wrap=True)


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:
        return False


def output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _record_sweep_failure(status: str) -> None:
    """A multirun job that did not complete: remembered for the sweep's closing line and exit
    code."""
    from hydra.core.hydra_config import HydraConfig

    try:
        task = list(HydraConfig.get().overrides.task)
        overrides = " ".join(o for o in task if o.split("=", 1)[0] in SWEPT_KEYS) or " ".join(task)
    except Exception:
        overrides = "?"
    SWEEP_FAILURES.append(f"{overrides} ({status})")


def fail(message: Optional[str], status: str, job_result: Any = None, code: int = 1) -> Any:
    """A command's failure, said once: ``message`` on stderr (None: said already), then in a sweep
    the job is recorded as ``status`` and ``job_result`` is the job's return value (the sweep goes
    on to its next job); in a single run the process exits with ``code``."""
    if message is not None:
        error(message)
    if is_multirun():
        _record_sweep_failure(status)
        return job_result
    sys.exit(code)


def schema_as_option(args: List[str]) -> Optional[str]:
    """``mode=partition_schema``: a schema stored in Hydra's ConfigStore as
    ``<group>/<name>_schema`` (what ``configs/<group>/<name>.yaml`` extends) is, to Hydra, an option
    of the group, and it composes (the schema's defaults, silently); refused here. Any other name
    (``mode=nosuch_schema``) is left to Hydra's "Could not find" (:func:`config_error`)."""
    import re

    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for arg in args:
        hit = re.fullmatch(r"\+?(\w+)=\[?([\w,-]*_schema[\w,-]*)\]?", arg)
        if not hit or hit.group(1) not in SCHEMA_GROUPS:
            continue
        group = hit.group(1)
        try:
            stored = {Path(name).stem for name in store.list(group)}
        except OSError:  # a group with no schema stored (logger)
            stored = set()
        schema = next((o for o in hit.group(2).split(",") if o in stored), None)
        if schema is not None:
            options = sorted(p.stem for p in (Path(config_dir()) / group).glob("*.yaml"))
            return (
                f"{arg}: {schema} is the schema of the {group} group, not a {group}. "
                f"Use one of: {', '.join(options)}."
            )
    return None


def _config_errors_in_one_line(task: Callable[[Any], Any], full_error: bool):
    """``task`` failing through :func:`fail` where it raised an OmegaConf error that
    :func:`gnntrain.launch.compose.config_error` says in one line (an interpolation that does not
    resolve is read, and fails, only inside the task); Hydra would print its own line first."""
    import functools

    from omegaconf.errors import OmegaConfBaseException

    from gnntrain.launch.compose import config_error

    @functools.wraps(task)
    def guarded(cfg):
        try:
            return task(cfg)
        except OmegaConfBaseException as exc:
            message = config_error(exc)
            if message is None or full_error:
                raise
            return fail(message, "invalid config")

    return guarded


def _hydra(task: Callable[[Any], Any], ns: Any):
    """The Hydra instance ``hydra.main`` makes for ``task`` over ``configs/`` (or ``--config-path``,
    plus ``--config-dir``)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
    )
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.utils import validate_config_path
    from hydra.errors import SearchPathException

    version.setbase("1.3")
    config_path = ns.config_path or config_dir()
    validate_config_path(config_path)
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, config_path)
    if ns.config_dir is not None:
        extra = os.path.abspath(ns.config_dir)
        if not os.path.isdir(extra):
            raise SearchPathException(f"Additional config directory '{extra}' not found")
        search_path.prepend(
            provider="command-line",
            path=f"file://{extra}",
            anchor=SearchPathQuery(provider="schema"),
        )
    task_name = detect_task_name(calling_file, calling_module)
    return Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)


def _run_or_multirun(hydra: Any, task: Callable[[Any], Any], ns: Any, config_name: str) -> None:
    """``hydra.run`` or ``hydra.multirun`` (``-m``, or ``hydra.mode=MULTIRUN``), as Hydra's
    ``_run_app`` picks."""
    import warnings

    from hydra.types import RunMode

    # Hydra composes the whole config once just to read hydra.mode; gnntrain's configs never set
    # it, so that composition (a fifth of a plan's time) is needed only where an override or a
    # config directory of the user's may
    named = any(o.lstrip("+~").split("=", 1)[0] == "hydra.mode" for o in ns.overrides)
    own_configs = ns.config_path is None and ns.config_dir is None
    mode = (
        hydra.get_mode(config_name=config_name, overrides=ns.overrides)
        if named or not own_configs
        else None
    )
    if mode is None:
        mode = RunMode.MULTIRUN if ns.multirun else RunMode.RUN
        ns.overrides.append(f"hydra.mode={mode.name}")
    elif ns.multirun and mode == RunMode.RUN:
        warnings.warn(
            "\n\tRunning Hydra app with --multirun, overriding with `hydra.mode=MULTIRUN`.",
            UserWarning,
            stacklevel=2,
        )
        mode = RunMode.MULTIRUN
        ns.overrides.append("hydra.mode=MULTIRUN")
    launch = hydra.multirun if mode == RunMode.MULTIRUN else hydra.run
    launch(config_name=config_name, task_function=task, overrides=ns.overrides)


def _hydra_main(task: Callable[[Any], Any], args: List[str], prog: str) -> None:
    """What ``@hydra.main`` does with a command line (Hydra 1.3's ``_run_hydra``), with ``args`` as
    the command line (not ``sys.argv``) and without Hydra's ``run_and_report`` around each step, so
    that a failure raises here for :func:`run_hydra_app` to say in one line (``run_and_report``
    prints Hydra's own lines instead unless ``HYDRA_FULL_ERROR=1`` is in the environment). Hydra's
    arguments, its help template (``--help``), ``--cfg``, ``--info``, ``-m`` and its launchers are
    Hydra's own."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import _flush_loggers
    from hydra.main import _get_rerun_conf

    parser = get_args_parser()
    parser.prog = prog  # its usage line and errors name the command
    ns = parser.parse_args(args)
    if ns.experimental_rerun is not None:
        task(_get_rerun_conf(ns.experimental_rerun, ns.overrides))
        _flush_loggers()
        return
    config_name = ns.config_name or "config"
    hydra = _hydra(task, ns)
    try:
        commands = ns.run + ns.multirun + (ns.cfg is not None) + ns.shell_completion
        if ns.help:
            hydra.app_help(config_name=config_name, args_parser=parser, args=ns)
        elif ns.resolve and ns.cfg is None:
            raise ValueError(
                "The --resolve flag can only be used in conjunction with --cfg or --help"
            )
        elif ns.hydra_help:
            hydra.hydra_help(config_name=config_name, args_parser=parser, args=ns)
        elif commands + (ns.info is not None) > 1:
            raise ValueError(
                "Only one of --run, --multirun, --cfg, --info and --shell_completion can be "
                "specified"
            )
        elif ns.cfg is not None:
            hydra.show_cfg(
                config_name=config_name,
                overrides=ns.overrides,
                cfg_type=ns.cfg,
                package=ns.package,
                resolve=ns.resolve,
            )
        elif ns.shell_completion:
            hydra.shell_completion(config_name=config_name, overrides=ns.overrides)
        elif ns.info is not None:
            hydra.show_info(ns.info, config_name=config_name, overrides=ns.overrides)
        else:
            _run_or_multirun(hydra, task, ns, config_name)
    finally:
        GlobalHydra.instance().clear()


def swept_keys(args: List[str]) -> Set[str]:
    """The sweep's axes on a command line: the keys of ``key=a,b,...``."""
    return {
        a.split("=", 1)[0]
        for a in args
        if "=" in a and "," in a.split("=", 1)[1] and not a.split("=", 1)[1].startswith("[")
    }


def run_hydra_app(
    task: Callable[[Any], Any], args: List[str], prog: str, forkserver: bool = False
) -> int:
    """Run ``task(cfg)`` as the Hydra app ``prog`` over ``args``; 0 on success. ``forkserver``:
    start the ranks' fork server first (``gnntrain run``), so its imports overlap the modes' schema
    imports. Neither ``sys.argv`` nor the environment is changed."""
    if forkserver:
        from gnntrain.launch.forkserver import start_for_command_line

        start_for_command_line(args)
    from gnntrain.launch.compose import config_error, register_schemas, with_profile_search_path

    register_schemas()
    schema = schema_as_option(args)
    if schema is not None:
        error(schema)
        return 2
    args = with_profile_search_path(args)  # profiles written by gnntrain calibrate
    if not any(a.startswith(("hydra/hydra_logging=", "+hydra/hydra_logging=")) for a in args):
        # Hydra's own lines (sweep launches) go through the same handler as ours, not its stdout
        # format
        args.append("hydra/hydra_logging=none")
    SWEEP_FAILURES.clear()
    SWEPT_KEYS.clear()
    SWEPT_KEYS.update(swept_keys(args))
    # as Hydra's run_and_report: the user's HYDRA_FULL_ERROR=1 keeps every traceback
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        _hydra_main(_config_errors_in_one_line(task, full_error), args, prog)
    except BrokenPipeError:  # the output's reader left (gnntrain run --help | head): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        message = config_error(exc)
        if message is None or full_error:
            raise
        error(message)
        return 1
    if SWEEP_FAILURES:  # a sweep whose jobs did not all complete: say which, and fail
        error(f"sweep: {len(SWEEP_FAILURES)} job(s) did not complete: " + "; ".join(SWEEP_FAILURES))
        return 1
    return 0
