"""Byte accounting for collectives.

Conventions (one definition for every mode, documented in the README):

* **Point-to-point style collectives** (``all_to_all_single``, all-gather,
  broadcast): *sent* is the payload this rank hands over for other ranks, one
  count per destination; the chunk a rank keeps for itself is not counted.
  This is the closed form the papers use (e.g. f·Σ_{j≠i}|NnzCols(A_ij)|).
* **All-reduce**: *sent* and *received* are the size of the buffer handed to
  the collective on each rank of a group larger than one (the wire bytes of a
  ring all-reduce are 2(p−1)/p of that).
* Quantized payloads are counted packed, with their parameters under their
  own kind.

Counts are kept per (phase, kind). Only the ``train`` phase makes up
``comm_bytes.per_epoch``; ``setup`` (one-time preprocessing) and ``eval``
(evaluation forwards) are reported separately. ``reused`` bytes (traffic that
was avoided) are recorded but never added to a total.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Iterator, Tuple


class Phase(str, Enum):
    setup = "setup"
    train = "train"
    eval = "eval"


NOT_TRAFFIC = frozenset({"reused", "disk_read", "disk_write"})  # avoided, or local files


# Every kind a mode may record (docs/design.md#byte-accounting), in report order.
KINDS = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "halo_fwd",
    "halo_bwd",
    "quant_params",
    "row_allreduce",
    "bcast_fwd",
    "bcast_bwd",
    "all_to_all_fwd",
    "all_to_all_bwd",
    "endpoint_ids",
    "endpoint_fwd",
    "endpoint_bwd",
    "h2d",
    "d2h",
    "peer",
    "reused",
    "disk_read",
    "disk_write",
    "setup",
)


@dataclass
class Counter:
    sent: int = 0
    received: int = 0
    calls: int = 0
    seconds: float = 0.0


@dataclass
class CommLedger:
    """Bytes sent/received per (phase, kind) on one rank."""

    phase: Phase = Phase.setup
    counters: Dict[Tuple[Phase, str], Counter] = field(default_factory=lambda: defaultdict(Counter))

    @contextmanager
    def in_phase(self, phase: Phase) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    def record(self, kind: str, sent: int, received: int, seconds: float = 0.0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown communication kind {kind!r}; add it to accounting.KINDS")
        c = self.counters[(self.phase, kind)]
        c.sent += int(sent)
        c.received += int(received)
        c.calls += 1
        c.seconds += float(seconds)

    def absorb(self, other: "CommLedger") -> None:
        """Count ``other``'s traffic (whatever its phases) in this ledger's current phase: copies a
        prefetch made ahead, into the epoch that uses them."""
        for (_, kind), c in other.counters.items():
            mine = self.counters[(self.phase, kind)]
            mine.sent += c.sent
            mine.received += c.received
            mine.calls += c.calls
            mine.seconds += c.seconds

    def add_seconds(self, kind: str, seconds: float) -> None:
        """Blocked time of an asynchronous collective, counted when it is waited for."""
        self.counters[(self.phase, kind)].seconds += float(seconds)

    def seconds(self, phase: Phase) -> float:
        return sum(c.seconds for (p, _), c in self.counters.items() if p == phase)

    def sent_vector(self, phase: Phase) -> list:
        """Bytes sent per kind in :data:`KINDS` order (for cross-rank reduction)."""
        by_kind = self.sent_by_kind(phase)
        return [float(by_kind.get(k, 0)) for k in KINDS]

    def sent_by_kind(self, phase: Phase) -> Dict[str, int]:
        return {k: c.sent for (p, k), c in self.counters.items() if p == phase}

    def total_sent(self, phase: Phase) -> int:
        return sum(v for k, v in self.sent_by_kind(phase).items() if k not in NOT_TRAFFIC)

    def reset(self, phase: Phase) -> None:
        for key in [key for key in self.counters if key[0] == phase]:
            del self.counters[key]
