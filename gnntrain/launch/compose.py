"""Composing the run config outside a Hydra app (the Python API, ``gnntrain predict``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence


def config_dir() -> str:
    """The packaged ``configs/`` (``GNNTRAIN_CONFIG_DIR`` overrides)."""
    env = os.environ.get("GNNTRAIN_CONFIG_DIR")
    if env:
        return str(Path(env).resolve())
    return str(Path(__file__).resolve().parents[2] / "configs")


def compose(overrides: Sequence[str] = (), directory: Optional[str] = None):
    """The composed, schema-checked run config for ``overrides``, as ``gnntrain run`` composes it
    (profiles written by ``gnntrain calibrate`` included)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import gnntrain.modes  # noqa: F401  (each mode registers its options schema on import)
    from gnntrain.config.schema import register_configs
    from gnntrain.launch.calibrate import user_config_dir

    register_configs()
    overrides = list(overrides)
    user_dir = user_config_dir()
    if user_dir.is_dir() and not any(o.startswith("hydra.searchpath") for o in overrides):
        overrides.append(f"hydra.searchpath=[file://{user_dir}]")
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=directory or config_dir(), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)
