"""Composing the run config outside a Hydra app (the Python API, ``gnntrain predict``), and the
one-line message for a config that does not compose (``config_error``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence


def config_dir() -> str:
    """The packaged ``configs/`` (``GNNTRAIN_CONFIG_DIR`` overrides)."""
    env = os.environ.get("GNNTRAIN_CONFIG_DIR")
    if env:
        return str(Path(env).resolve())
    return str(Path(__file__).resolve().parents[2] / "configs")


def register_schemas() -> None:
    """Store every schema Hydra composes against: the root and group schemas, and those the plug-ins
    register when imported (each mode's options, each model's layer options, each generator's
    parameters, each task's options)."""
    import gnntrain.data.generators
    import gnntrain.models
    import gnntrain.modes
    import gnntrain.tasks  # noqa: F401
    from gnntrain.config.schema import register_configs

    register_configs()


def with_profile_search_path(overrides: Sequence[str]) -> List[str]:
    """``overrides`` plus the search path of the hardware profiles ``gnntrain calibrate`` writes,
    where that folder exists and the overrides set no search path of their own: the one search path
    that ``gnntrain run`` (a Hydra app), :func:`compose` (API, predict) and the tests all use."""
    from gnntrain.launch.calibrate import user_config_dir

    overrides = list(overrides)
    user_dir = user_config_dir()
    if user_dir.is_dir() and not any(o.startswith("hydra.searchpath") for o in overrides):
        overrides.append(f"hydra.searchpath=[file://{user_dir}]")
    return overrides


def compose(overrides: Sequence[str] = (), directory: Optional[str] = None):
    """The composed, schema-checked run config for ``overrides``, as ``gnntrain run`` composes it
    (profiles written by ``gnntrain calibrate`` included)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_schemas()
    overrides = with_profile_search_path(overrides)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=directory or config_dir(), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def config_error(exc: BaseException) -> Optional[str]:
    """One line for what went wrong composing the config or making the run folder; None for
    anything else (a bug keeps its traceback)."""
    import dataclasses
    import difflib

    import yaml
    from hydra.errors import CompactHydraException
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        InterpolationResolutionError,
        ValidationError,
    )

    chain, cause = [], exc
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for cause in chain:
        mark = getattr(cause, "problem_mark", None)
        if isinstance(cause, yaml.YAMLError) and mark is not None:
            problem = getattr(cause, "problem", None) or "not valid YAML"
            return (
                f"{mark.name}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {problem}. Fix "
                "that line "
                "of the file (indentation, an unclosed bracket or quote, a ':' inside an unquoted "
                "value)."
            )
    for cause in chain:  # key=${...}: read where the run first uses the key
        if isinstance(cause, InterpolationResolutionError):
            why = " ".join(str(cause).splitlines()[0].split()).rstrip(".")
            return (
                f"{getattr(cause, 'full_key', None) or '?'}: {why}. Fix: an interpolation ${{...}} "
                "names a key of the config (or a set environment variable) and gives a value of "
                "the key's type."
            )
    missing = getattr(exc, "missing_cfg_file", None)
    if missing and "/" in missing:  # group=option that no YAML provides
        group, option = missing.rsplit("/", 1)
        options = [o for o in getattr(exc, "options", None) or [] if not o.endswith("_schema")]
        close = difflib.get_close_matches(option, options, n=1)
        return (
            f"{group}={option}: no such {group}."
            + (f" Did you mean {group}={close[0]}?" if close else "")
            + f" Use one of: {', '.join(options)}."
        )
    cause = exc.__cause__
    kind, key = getattr(cause, "object_type", None), getattr(cause, "full_key", None)
    # a value of wrong type
    if isinstance(exc, CompactHydraException) and isinstance(cause, ValidationError) and key:
        return f"{key}: {str(cause).splitlines()[0]}"
    # key=value, no such key
    if (
        isinstance(exc, CompactHydraException)
        and isinstance(cause, (ConfigAttributeError, ConfigKeyError))
        and key
        and dataclasses.is_dataclass(kind)
    ):
        valid = [f.name for f in dataclasses.fields(kind)]
        parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
        close = difflib.get_close_matches(key.rsplit(".", 1)[-1], valid, n=3)
        hint = (
            f"Did you mean {', '.join(parent + c for c in close)}?"
            if close
            else f"The keys there are: {', '.join(parent + v for v in valid)}."
        )
        return f"{key}: not an option. {hint}"
    if getattr(exc, "override", None):  # Hydra's override grammar
        return f"{exc.override}: {' '.join(str(exc).split())}"
    if isinstance(exc, CompactHydraException):
        text = str(exc) if exc.__cause__ is None else f"{exc} {str(exc.__cause__).splitlines()[0]}"
        return " ".join(line.strip() for line in text.splitlines() if line.strip())
    if isinstance(exc, OSError) and exc.filename:
        what = {
            FileExistsError: "it is a file, not a folder",
            NotADirectoryError: "a folder on its path is a file",
        }.get(type(exc), (exc.strerror or str(exc)).lower())
        return (
            f"cannot create the run folder {exc.filename}: {what}. Set hydra.run.dir=DIR "
            "(hydra.sweep.dir=DIR "
            f"with -m) to a writable folder, or run from one."
        )
    return None
