"""Ctrl-C and SIGTERM: finish the epoch in flight on every rank, then stop with a result.

The first SIGINT or SIGTERM only sets a flag. Ranks agree on it at the end of each epoch (it rides
on the epoch's metrics reduction, so every rank stops after the same epoch), rank 0 saves a
checkpoint of that epoch where checkpointing is on, and ``summary.json`` says ``interrupted`` with
the last completed epoch. A second SIGINT/SIGTERM exits at once. The local launcher, which the
terminal's Ctrl-C reaches together with its ranks, forwards a SIGTERM or a signal sent to it alone
as SIGUSR1 ("stop after this epoch"), which never counts as a second interrupt.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator, Optional

FORWARDED = signal.SIGUSR1
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopRequest:
    """The process's stop flag (one per process: :data:`STOP`)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.hard_exit = True  # ranks leave at once on a second signal; the launcher raises instead

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return "" if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 130)

    def handle(self, signum, frame) -> None:
        if signum == FORWARDED:  # the launcher passing a stop on: never a second interrupt
            if self.signum is None:
                self.signum = FORWARDED
            return
        if self.signum in (None, FORWARDED):
            self.signum = signum
            return
        if self.hard_exit:  # a second Ctrl-C or SIGTERM: leave now
            os._exit(EXIT_CODES.get(signum, 130))
        raise KeyboardInterrupt

    def reset(self) -> None:
        self.signum = None


STOP = StopRequest()


@contextmanager
def graceful_stop(hard_exit: bool = True, sigterm: bool = True) -> Iterator[StopRequest]:
    """Catch SIGINT, SIGTERM and the launcher's SIGUSR1 for the ``with`` block (main thread only;
    elsewhere a no-op), restoring the previous handlers afterwards. ``sigterm=False`` leaves SIGTERM
    deadly: a rank the local launcher spawned gets its stops as SIGUSR1, and SIGTERM from it means
    "end now" (torch's process context terminates the survivors of a failed rank with it, and waits
    for them)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield STOP
        return
    STOP.reset()
    STOP.hard_exit = hard_exit
    caught = (signal.SIGINT, signal.SIGTERM, FORWARDED) if sigterm else (signal.SIGINT, FORWARDED)
    previous = {s: signal.getsignal(s) for s in caught}
    for s in previous:
        signal.signal(s, STOP.handle)
    try:
        yield STOP
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
