"""Spawned ranks' output in a Jupyter notebook (issue 57).

A rank's stdout is the launcher's file descriptor 1. In a terminal or a log file that is where it
belongs; in a Jupyter kernel it is the kernel's capture pipe, which a thread forwards to whichever
cell runs when it gets round to it: a rank's last lines (the summary table) could land in the next
cell, or nowhere, and they carried the kernel's FORCE_COLOR=1 as escape codes the notebook keeps
raw. Under a kernel the ranks therefore write plain text to files of their own, and the launcher
relays them through its own ``sys.stdout``/``sys.stderr``, which belong to the running cell, until
the last byte is out before ``gt.train`` returns.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict

# where a rank writes its output: set by the launcher in the ranks' environment
RANK_OUTPUT = "GNNTRAIN_RANK_OUTPUT"
# set by a Jupyter kernel for its own output (ipykernel: FORCE_COLOR=1, TERM=xterm-color), inherited
# by what it starts
FORCED_COLOUR = ("FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
STREAMS = (("stdout", 1), ("stderr", 2))


def in_notebook_kernel() -> bool:
    """True inside a Jupyter kernel (rich's own test: the IPython shell is the kernel's)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ in ("ZMQInteractiveShell", "Shell")


class DirectOutput:
    """Outside a notebook: the ranks keep the launcher's stdout and stderr; nothing to relay."""

    poll_s = 0.5  # how often the launcher looks at its ranks

    def environment(self, env: Dict[str, str]) -> Dict[str, str]:
        return env

    def pump(self) -> None:
        pass

    def close(self) -> None:
        pass


class OutputRelay(DirectOutput):
    """The launcher's side: a folder the ranks write to, read and passed on by :meth:`pump`."""

    poll_s = 0.2

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gnntrain-ranks-"))
        self._relayed: Dict[Path, int] = {}  # bytes of each rank's file passed on so far

    def environment(self, env: Dict[str, str]) -> Dict[str, str]:
        """The ranks' environment: plain text (no colour, cursor moves or bars) into the folder."""
        plain = {key: value for key, value in env.items() if key not in FORCED_COLOUR}
        plain.update(NO_COLOR="1", TERM="dumb")
        plain[RANK_OUTPUT] = str(self.folder)
        return plain

    def pump(self) -> None:
        """Pass on what the ranks wrote since the last call, rank by rank."""
        for path in sorted(self.folder.iterdir()):
            done = self._relayed.get(path, 0)
            with open(path, "rb") as handle:
                handle.seek(done)
                data = handle.read()
            if data:
                stream = sys.stderr if path.suffix == ".stderr" else sys.stdout
                stream.write(data.decode("utf-8", errors="replace"))
                stream.flush()
            self._relayed[path] = done + len(data)

    def close(self) -> None:
        """The rest of the ranks' output, then the folder is removed."""
        try:
            self.pump()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def rank_output() -> DirectOutput:
    """An :class:`OutputRelay` where the launcher runs in a Jupyter kernel, else
    :class:`DirectOutput`."""
    return OutputRelay() if in_notebook_kernel() else DirectOutput()


def redirect_rank_output(rank: int) -> None:
    """The rank's side: its stdout and stderr into the relay's folder where the launcher set one."""
    folder = os.environ.get(RANK_OUTPUT)
    if not folder:
        return
    for (name, fd), stream in zip(STREAMS, (sys.stdout, sys.stderr)):
        stream.flush()
        target = os.open(
            os.path.join(folder, f"rank{rank:05d}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        os.dup2(target, fd)
        os.close(target)
