"""The HyScale pipeline (§III-B, §IV-B): a pool of sampler threads drawing batches ahead of
training, the feature loader and the transfer thread feeding the trainer."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.comm.accounting import CommLedger
from gnntrain.modes.hyscale.sampler import Block
from gnntrain.modes.hyscale.threads import SPLIT_KEYS


@dataclass
class Batch:
    k: int  # global iteration
    seeds: torch.Tensor
    sizes: List[int]
    shares: Tuple[float, ...]
    input_nodes: torch.Tensor
    blocks: List[Block]
    x: Any = None  # the gathered rows (a StagedRows) after load, the device tensor after transfer
    y: Optional[torch.Tensor] = None
    ready: Optional[Any] = None  # CUDA event the trainer waits on
    # copies made ahead of the epoch that trains the batch (one producer), counted when it trains
    copies: Optional[CommLedger] = None
    seconds: Dict[str, float] = field(default_factory=dict)


def use_threads(n: int) -> None:
    """Intra-op threads of the *calling* thread. torch keeps the count per OS thread (OpenMP's
    nthreads-var); a thread's first parallel op resets it to the process-wide value, so that op
    is triggered first (``get_num_threads``) and the count set after it."""
    torch.get_num_threads()
    if torch.get_num_threads() != int(n):
        torch.set_num_threads(max(1, int(n)))


class SamplerPool:
    """HyScale's sampler threads (§III-B): ``workers`` threads draw the batches of iterations
    ``k, k+1, ...`` (in submission order, at most ``depth`` beyond the one being consumed) while
    earlier ones are loaded, transferred and trained; :meth:`get` hands them out in k order.

    Each draw is one unit with its own seed (``draw(k)`` depends only on k and the shares it
    waits for), so the batches are the same with any number of threads. ``resize`` (DRM's
    balance_thread) changes the threads the pool may use: ``min(workers, threads)`` draws at
    once, each with ``threads // active`` intra-op threads, from the next draw on.
    """

    def __init__(
        self,
        draw: Callable[[int], Any],
        workers: int,
        threads: int,
        depth: int,
        end: int,
        ready: Optional[Callable[[int], Any]] = None,
    ):
        self.draw, self.workers, self.depth, self.end = (
            draw,
            max(1, int(workers)),
            max(0, int(depth)),
            int(end),
        )
        # blocks until draw k may start (its shares are decided), before it takes a slot
        self.ready = ready
        # daemon threads (not a ThreadPoolExecutor, whose threads the interpreter joins at exit: a
        # draw waiting for shares that never come would then hang a failed rank's exit)
        self._tasks: "queue.Queue" = queue.Queue()
        for i in range(self.workers):
            threading.Thread(target=self._worker, daemon=True, name=f"hyscale-sampler-{i}").start()
        self._futures: Dict[int, Future] = {}
        self._next: Optional[int] = None
        self._cond = threading.Condition()
        self._running = 0
        self.resize(threads)

    def resize(self, threads: int) -> None:
        with self._cond:
            self.threads = max(1, int(threads))
            self.active = min(self.workers, self.threads)
            self.per_draw = max(1, self.threads // self.active)
            self._cond.notify_all()

    def _worker(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            k, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._run(k))
            except BaseException as exc:  # handed to get(), which raises it
                future.set_exception(exc)

    def _run(self, k: int):
        if self.ready is not None:
            self.ready(k)
        with self._cond:
            self._cond.wait_for(lambda: self._running < self.active)
            self._running += 1
            threads = self.per_draw
        try:
            use_threads(threads)
            return self.draw(k)
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def _fill(self, upto: int) -> None:
        while self._next is not None and self._next <= min(upto, self.end - 1):
            future: Future = Future()
            self._futures[self._next] = future
            self._tasks.put((self._next, future))
            self._next += 1

    def get(self, k: int):
        """The batch of iteration ``k`` (called in k order), submitting draws up to ``k +
        depth``."""
        if self._next is None:
            self._next = k
        self._fill(k + self.depth)
        result = self._futures.pop(k).result()
        self._fill(k + 1 + self.depth)
        return result

    def close(self) -> None:
        for f in self._futures.values():
            f.cancel()
        self._futures.clear()
        for _ in range(self.workers):
            self._tasks.put(None)


class BatchPipeline:
    """HyScale-GNN §IV-B over one epoch's iterations ``ks``: the sampler pool draws (``pool``,
    several batches at once) → the loader thread gathers features in k order (``load``) → the
    transfer thread copies (``transfer``) → the caller trains; each queue holds one batch. With
    ``prefetch=False`` the caller runs draw, load and transfer itself, in order. With
    ``whole_batches`` the pool's draws already load and transfer (see :func:`one_producer`): the
    caller takes them from the pool, and no loader or transfer thread runs."""

    def __init__(
        self,
        draw: Callable[[int], Batch],
        load: Callable[[Batch], Batch],
        transfer: Callable[[Batch], Batch],
        ks: Sequence[int],
        prefetch: bool,
        pool: Optional[SamplerPool] = None,
        whole_batches: bool = False,
    ):
        self.draw, self.load, self.transfer, self.ks, self.prefetch = (
            draw,
            load,
            transfer,
            list(ks),
            prefetch,
        )
        self._out: "queue.Queue" = queue.Queue(maxsize=1)
        self.pool = pool if prefetch and whole_batches else None
        if prefetch and self.pool is None:
            assert pool is not None
            loaded: "queue.Queue" = queue.Queue(maxsize=1)
            threading.Thread(
                target=self._run,
                args=(lambda k: self.load(pool.get(k)), None, loaded),
                daemon=True,
                name="hyscale-load",
            ).start()
            threading.Thread(
                target=self._run,
                args=(lambda b: self.transfer(b), loaded, self._out),
                daemon=True,
                name="hyscale-transfer",
            ).start()

    def _run(self, fn, inbox, outbox) -> None:
        for k in self.ks:
            try:
                item = inbox.get() if inbox is not None else k
                if isinstance(item, BaseException):
                    raise item
                outbox.put(fn(item))
            except BaseException as exc:  # hand it to the trainer, which raises it
                outbox.put(exc)
                return

    def __iter__(self):
        for k in self.ks:
            if self.pool is not None:
                yield self.pool.get(k)
            elif self.prefetch:
                item = self._out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
            else:
                yield self.transfer(self.load(self.draw(k)))


def one_producer(budget: int) -> bool:
    """Whether a rank's prefetch runs on one producer thread (each pool draw samples, loads and
    transfers its batch) instead of the pool, a loader and a transfer thread (§IV-B's stages).
    With fewer host threads than the stages (:func:`~gnntrain.modes.hyscale.threads.split_threads`
    then gives every task one, time-sharing the rank's cores), separate stage threads only take
    turns on the same cores and hand each batch over twice more."""
    return int(budget) < len(SPLIT_KEYS)
