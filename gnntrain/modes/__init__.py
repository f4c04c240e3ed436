"""Parallelism modes. Each module here registers one mode; adding a mode is
one module plus one ``configs/mode/<name>.yaml``."""
from __future__ import annotations

import importlib
import pkgutil

from gnntrain.errors import PlanError
from gnntrain.modes.base import MODE_REGISTRY, CommEstimate, Mode, Prepared, RankShard, register_mode

_SKIP = {"base", "fullgraph"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SKIP and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def get_mode(name: str) -> type:
    if name not in MODE_REGISTRY:
        raise PlanError("mode", f"unknown mode '{name}'.", f"use one of {', '.join(sorted(MODE_REGISTRY))}")
    return MODE_REGISTRY[name]


__all__ = ["MODE_REGISTRY", "CommEstimate", "Mode", "Prepared", "RankShard", "get_mode", "register_mode"]
