"""One logging setup for every gnntrain process (the CLI, the launcher, spawned ranks).

Records go to stderr through a :class:`rich.logging.RichHandler`; rank 0
shows INFO and up, every other rank only warnings and errors, so a 16-rank
run does not print each line 16 times. Python warnings (``warnings.warn``,
e.g. a corrupt partition-cache entry or checkpoint) are routed through the
same handler (:func:`logging.captureWarnings`). Hydra's console handler (its
``[time][name][LEVEL] - msg`` format on stdout) is replaced; its job log file
in the run directory is kept.

Depends only on the standard library and rich.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Mapping, Optional

from rich.console import Console
from rich.logging import RichHandler

HANDLER_NAME = "gnntrain-console"
_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def process_rank(env: Optional[Mapping[str, str]] = None) -> int:
    """This process's rank when an external launcher (torchrun, srun) started several, else 0."""
    env = os.environ if env is None else env
    for rank_key, size_key in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        try:
            if int(env.get(size_key, "1")) > 1:
                return int(env.get(rank_key, "0"))
        except ValueError:
            continue
    return 0


class ConsoleHandler(RichHandler):
    """RichHandler on stderr. On a terminal: rich's level column and wrapped message.
    Piped or redirected: one unwrapped ``LEVEL    message`` line per record, so a long
    message (a path, an error) stays on one line for grep and for log files."""

    def __init__(self, level: int = logging.NOTSET, console: Optional[Console] = None):
        super().__init__(
            level=level,
            console=console or Console(stderr=True),
            show_time=False,
            show_path=False,
            markup=False,
            rich_tracebacks=False,
        )
        self.set_name(HANDLER_NAME)
        self.addFilter(_OncePerWarning())

    def emit(self, record: logging.LogRecord) -> None:
        if self.console.is_terminal:
            super().emit(record)
            return
        try:
            self.console.print(
                f"{record.levelname:<8} {self.format(record)}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


class _OncePerWarning(logging.Filter):
    """A Python warning shown once per process and text, as the "default" warnings action
    means to (filter changes elsewhere, e.g. a catch_warnings block, reset that registry)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "py.warnings":
            return True
        text = record.getMessage()
        if text in self.seen:
            return False
        self.seen.add(text)
        return True


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line: gnntrain's own by their message, others with their origin."""
    if str(Path(filename).resolve()).startswith(_PACKAGE_DIR):
        return str(message)
    return f"{category.__name__}: {message} ({filename}:{lineno})"


def setup_logging(rank: Optional[int] = None, level: int = logging.INFO) -> logging.Handler:
    """Install the one console handler on the root logger (idempotent) and return it.

    ``rank`` defaults to :func:`process_rank`. Plain stream handlers already on the
    root logger (Hydra's job/launcher console handler) are removed; file handlers stay.
    """
    rank = process_rank() if rank is None else int(rank)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == HANDLER_NAME or type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    handler = ConsoleHandler(level=level if rank == 0 else max(level, logging.WARNING))
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > level:
        root.setLevel(level)
    warnings.formatwarning = _format_warning
    logging.captureWarnings(True)
    return handler
