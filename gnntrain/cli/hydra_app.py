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
from typing import Any, Callable, List, Optional

from gnntrain.launch.compose import config_dir

SCHEMA_GROUPS = ("dataset", "model", "mode", "partitioner", "hardware", "logger")
SWEEP_FAILURES: List[str] = []  # the overrides of each failed job of a sweep run in this process


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


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

    # the sweep's axes (key=a,b,...)
    swept = {
        a.split("=", 1)[0]
        for a in sys.argv[1:]
        if "=" in a and "," in a.split("=", 1)[1] and not a.split("=", 1)[1].startswith("[")
    }
    try:
        task = list(HydraConfig.get().overrides.task)
        overrides = " ".join(o for o in task if o.split("=", 1)[0] in swept) or " ".join(task)
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
    """``dataset=dataset_schema``: the schema gnntrain registers for the group, not an option of
    it."""
    import re

    for arg in args:
        hit = re.fullmatch(r"\+?(\w+)=\[?([\w,-]*_schema[\w,-]*)\]?", arg)
        if hit and hit.group(1) in SCHEMA_GROUPS:
            group = hit.group(1)
            options = sorted(p.stem for p in (Path(config_dir()) / group).glob("*.yaml"))
            return (
                f"{arg}: {hit.group(2)} is the schema of the {group} group, not a {group}. "
                f"Use one of: {', '.join(options)}."
            )
    return None


def _config_errors_in_one_line(task: Callable[[Any], Any], full_error: Optional[str]):
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


def run_hydra_app(
    task: Callable[[Any], Any], args: List[str], prog: str, forkserver: bool = False
) -> int:
    """Run ``task(cfg)`` as the Hydra app ``prog`` over ``args``; 0 on success. ``forkserver``:
    start the ranks' fork server first (``gnntrain run``), so its imports overlap the modes' schema
    imports."""
    import hydra

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
    sys.argv = [prog] + args  # hydra.main reads the command line
    SWEEP_FAILURES.clear()
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    # Hydra raises instead of printing: config errors become one line here
    os.environ["HYDRA_FULL_ERROR"] = "1"
    app = hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(
        _config_errors_in_one_line(task, full_error)
    )
    try:
        app()
    except BrokenPipeError:  # the output's reader left (gnntrain run --help | head): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        message = config_error(exc)
        if message is None or full_error:
            raise
        error(message)
        return 1
    finally:
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    if SWEEP_FAILURES:  # a sweep whose jobs did not all complete: say which, and fail
        error(f"sweep: {len(SWEEP_FAILURES)} job(s) did not complete: " + "; ".join(SWEEP_FAILURES))
        return 1
    return 0
