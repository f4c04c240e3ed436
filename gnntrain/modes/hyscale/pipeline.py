"""The two-stage prefetch pipeline (HyScale §IV-B): sample+load and transfer threads feeding training."""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.modes.hyscale.sampler import Block


@dataclass
class Batch:
    k: int  # global iteration
    seeds: torch.Tensor
    sizes: List[int]
    shares: Tuple[float, ...]
    input_nodes: torch.Tensor
    blocks: List[Block]
    x: Any = None  # the gathered rows (a StagedRows) after sample+load, the device tensor after transfer
    y: Optional[torch.Tensor] = None
    ready: Optional[Any] = None  # CUDA event the trainer waits on
    seconds: Dict[str, float] = field(default_factory=dict)


class BatchPipeline:
    """HyScale-GNN §IV-B: sample+gather (thread 1) → transfer (thread 2) → train (caller).

    The share gate keeps sampling at most two batches ahead of training; with
    ``prefetch=False`` the caller runs the three stages itself, in order.
    """

    def __init__(self, sample_load: Callable[[int], Batch], transfer: Callable[[Batch], Batch],
                 ks: Sequence[int], prefetch: bool):
        self.sample_load, self.transfer, self.ks, self.prefetch = sample_load, transfer, list(ks), prefetch
        self._out: "queue.Queue" = queue.Queue(maxsize=1)
        if prefetch:
            loaded: "queue.Queue" = queue.Queue(maxsize=1)
            threading.Thread(target=self._run, args=(lambda k: self.sample_load(k), None, loaded),
                             daemon=True, name="hyscale-load").start()
            threading.Thread(target=self._run, args=(lambda b: self.transfer(b), loaded, self._out),
                             daemon=True, name="hyscale-transfer").start()

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
            if self.prefetch:
                item = self._out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
            else:
                yield self.transfer(self.sample_load(k))


