"""The ranks' fork server: started early, preloaded once (gnntrain.launch.preload), forked per
rank."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator, List, Mapping, Optional

# Ranks start from a fork server that has torch and gnntrain's modules imported already (each
# spawned interpreter used to import them again: seconds per rank on a small machine;
# gnntrain.launch.preload says which). The server is a fresh interpreter with no threads running, so
# forking it is safe where forking the launcher would not be.
PRELOAD = ["gnntrain.launch.preload"]


def start_method() -> str:
    """``forkserver`` (preloaded), or ``GNNTRAIN_START_METHOD=spawn`` for a fresh interpreter per
    rank."""
    return os.environ.get("GNNTRAIN_START_METHOD", "forkserver")


@contextmanager
def environment_variable(name: str, value: str) -> Iterator[None]:
    """``name=value`` in this process's environment inside (for what starts there), restored
    after."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def rank_threads(threads: str):
    """OMP_NUM_THREADS for what starts inside (a spawned rank, the fork server); the launcher's own
    environment is left as it was."""
    return environment_variable("OMP_NUM_THREADS", threads)


@contextmanager
def user_main_hidden() -> Iterator[None]:
    """Start ranks without re-running the user's script. multiprocessing (spawn and forkserver
    alike) imports the parent's ``__main__`` again in every child, by its path or module name: a
    plain script without an ``if __name__ == "__main__":`` guard would start training again inside
    each rank, which multiprocessing refuses (issue 57: it surfaced as a rank "died" with exit code
    1). Ranks need nothing from that module (their entry point is gnntrain's own), so its path and
    spec are hidden while they start."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def start_fork_server(omp_threads: str) -> None:
    """Start the ranks' fork server now (it imports PRELOAD while this process loads and partitions
    the graph: the two overlap); a no-op when it runs already or ranks are spawned fresh."""
    if start_method() != "forkserver":
        return
    # the stdlib's: torch.multiprocessing forks from the same server; no torch import
    import multiprocessing
    from multiprocessing import forkserver

    # read when the server starts: this process's first run
    multiprocessing.set_forkserver_preload(PRELOAD)
    with rank_threads(omp_threads):
        forkserver.ensure_running()


def launched_externally(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """ "torchrun" or "slurm" where that launcher started this process as one of several ranks, else
    None; from the environment alone (``rank_identity.external_identity`` reads the rest of it)."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        return "torchrun"
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    return None


def start_for_command_line(overrides: List[str]) -> None:
    """``gnntrain run``: start the server at once, before the CLI imports torch and composes the
    plan, so the server's imports overlap the CLI's (3-4 s sooner on two cores). The plan is not
    known yet, so this guesses from the overrides: no server where they name one process
    (mode=single, one rank per node), several nodes or a launcher other than the local one, nor
    where torchrun/srun started this process. A wrong guess leaves a spare process that exits with
    this one; ranks set their own thread counts, so the run is the same."""
    one_process = {"mode=single", "hardware.ranks_per_node=1"}
    elsewhere = ("hydra/launcher=", "hardware.nodes=")
    if (
        launched_externally()
        or one_process & set(overrides)
        or any(
            a.startswith(elsewhere) and a not in ("hydra/launcher=basic", "hardware.nodes=1")
            for a in overrides
        )
    ):
        return
    start_fork_server(str(max(1, (os.cpu_count() or 1) // 2)))
