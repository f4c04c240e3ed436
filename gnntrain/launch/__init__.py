"""Launch layer: local spawning, torchrun/SLURM rank identity, watchdog.

The names below load on first use, so ``gnntrain.launch.forkserver`` imports without torch (the CLI
starts the ranks' fork server before it imports torch)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["external_identity", "find_free_port", "preflight", "run_training"]
# where each name lives when not in gnntrain.launch.launcher
_HOMES = {"external_identity": "gnntrain.launch.rank_identity"}


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(_HOMES.get(name, "gnntrain.launch.launcher")), name)
    raise AttributeError(f"module 'gnntrain.launch' has no attribute {name!r}")
