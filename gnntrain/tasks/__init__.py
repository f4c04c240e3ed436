"""What a run learns (the ``task`` config group). Each module here registers one
:class:`~gnntrain.tasks.base.TaskSpec`; adding a task is one module plus one
``configs/task/<name>.yaml``."""

from __future__ import annotations

import importlib
import pkgutil

from gnntrain.plan_types import SPLITS
from gnntrain.tasks.base import (
    TASK_REGISTRY,
    RankRows,
    RankTask,
    TaskConfig,
    TaskPlan,
    TaskSizes,
    TaskSpec,
    configured_task,
    register_task,
    task_spec,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "SPLITS",
    "TASK_REGISTRY",
    "RankRows",
    "RankTask",
    "TaskConfig",
    "TaskPlan",
    "TaskSizes",
    "TaskSpec",
    "configured_task",
    "register_task",
    "task_spec",
]
