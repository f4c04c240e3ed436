"""The ranks' fork server: started early, preloaded once (gnntrain.launch.preload), forked per rank."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

# Ranks start from a fork server that has torch and gnntrain's modules imported already (each spawned
# interpreter used to import them again: seconds per rank on a small machine; gnntrain.launch.preload
# says which). The server is a fresh interpreter with no threads running, so forking it is safe where
# forking the launcher would not be.
PRELOAD = ["gnntrain.launch.preload"]


def start_method() -> str:
    """``forkserver`` (preloaded), or ``GNNTRAIN_START_METHOD=spawn`` for a fresh interpreter per rank."""
    return os.environ.get("GNNTRAIN_START_METHOD", "forkserver")


@contextmanager
def rank_threads(threads: str) -> Iterator[None]:
    """OMP_NUM_THREADS for what starts inside (a spawned rank, the fork server); the launcher's own
    environment is left as it was."""
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = threads
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def start_fork_server(omp_threads: str) -> None:
    """Start the ranks' fork server now (it imports PRELOAD while this process loads and partitions the
    graph: the two overlap); a no-op when it runs already or ranks are spawned fresh."""
    if start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    import torch.multiprocessing as mp

    mp.set_forkserver_preload(PRELOAD)  # read when the server starts: the first run of this process
    with rank_threads(omp_threads):
        forkserver.ensure_running()
