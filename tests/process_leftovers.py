"""No process outlives the suite (issue 57: after a green CI run, ``munged`` and the
``slurmstepd`` steps of local SLURM jobs were still running, orphaned, minutes later).

The session marks its environment with a token of its own; every process the tests start (CLI
runs, ranks, torchrun agents in network namespaces, the local SLURM daemons and their job steps)
inherits it. At the end of the session any process still carrying the token is a leftover: it is
named, killed, and fails the session.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict

from gnntrain.launch.leftovers import process_command, process_environment
from gnntrain.launch.netem import kill_pids

MARK = "GNNTRAIN_TEST_SESSION"
# the suite's own multiprocessing helpers (the ranks' fork server, the resource tracker) are
# children of pytest and end with it
OWN_HELPERS = ("from multiprocessing.", "multiprocessing.forkserver", "resource_tracker")


# the local SLURM cluster's daemons (scripts/slurm-local.sh)
CLUSTER_DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")


def mark_session() -> str:
    token = f"{os.getpid()}-{time.time_ns()}"
    os.environ[MARK] = token
    return token


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile, a zombie, or a kernel thread
        return b""


def _started_at(entry: Path) -> float:
    """When a process started, in seconds since the epoch (0.0 if it is gone)."""
    stat = _read(entry / "stat").decode(errors="replace")
    if not stat:
        return 0.0
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command's parentheses
    boot = next(
        float(line.split()[1])
        for line in _read(Path("/proc/stat")).decode().splitlines()
        if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _session_start(token: str) -> float:
    """When the session began, in seconds since the epoch (the token carries it)."""
    return int(token.rsplit("-", 1)[1]) / 1e9


def leftovers(token: str) -> Dict[int, str]:
    """{pid: command line} of every live process but this one that carries ``token``, and of
    every local-cluster daemon started since the session began (slurmd hands its job steps a
    clean environment, so ``slurmstepd`` does not carry the token)."""
    since = _session_start(token)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        name = _read(entry / "comm").decode(errors="replace").strip()
        ours = process_environment(pid).get(MARK) == token
        if not ours and not (name in CLUSTER_DAEMONS and _started_at(entry) > since):
            continue
        command = process_command(pid)
        if command == "?" or any(helper in command for helper in OWN_HELPERS):
            continue  # gone meanwhile, a zombie, or the suite's own multiprocessing helper
        found[pid] = command
    return found


def end_leftovers(token: str, grace_s: float = 5.0) -> Dict[int, str]:
    """The leftovers, after a grace period for processes that are ending; each is then killed."""
    deadline = time.monotonic() + grace_s
    found = leftovers(token)
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found = leftovers(token)
    kill_pids(found)
    return found
