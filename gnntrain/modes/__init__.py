"""Parallelism modes. Each mode is a package here whose planner (its cost model) is
``<name>/cost.py`` and one of whose modules registers its :class:`~gnntrain.modes.spec.ModeSpec`;
the other modules here are what the modes share (``base``, ``cost``, ``fullgraph``, ``halo``, ...).
Every module and package here is imported below, so importing ``gnntrain.modes`` registers every
mode; adding a mode is one package plus one ``configs/mode/<name>.yaml``."""

from __future__ import annotations

import importlib
import pkgutil

from gnntrain.modes.base import CommEstimate, ModePlanner, Prepared, RankShard
from gnntrain.modes.spec import MODE_REGISTRY, Capabilities, ModeSpec, mode_spec, register_mode

_SKIP = {"base", "fullgraph", "spec"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SKIP and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


__all__ = [
    "MODE_REGISTRY",
    "Capabilities",
    "CommEstimate",
    "ModePlanner",
    "ModeSpec",
    "Prepared",
    "RankShard",
    "mode_spec",
    "register_mode",
]
