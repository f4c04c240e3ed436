"""Every random stream of a run, derived from ``train.seed`` in one way.

Each purpose has its own :class:`Stream` id, and a stream's seed is numpy's
``SeedSequence`` of (seed, stream, keys...): independent streams, reproducible
from the config alone (a resumed run or another rank re-derives the same seed).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Tuple

import numpy as np


class Stream(IntEnum):
    dropout = 1  # full-graph dropout masks: (epoch, layer)
    label_rows = 2  # SuperGCN's label-propagation rows
    quantize = 3  # SuperGCN's stochastic rounding: (rank, epoch, exchange, direction, call)
    batches = 4  # HyScale's global batch permutation: (epoch,)
    sampling = 5  # HyScale's neighbour sampling: (trainer, global batch)
    batch_dropout = 6  # HyScale's dropout: (trainer, global batch)


def _entropy(seed: int, stream: Stream, keys: Tuple[int, ...]) -> list:
    return [int(seed) % 2**63, int(stream)] + [int(k) % 2**63 for k in keys]


def derive_seed(seed: int, stream: Stream, *keys: int) -> int:
    """A 31-bit seed (fits ``torch.manual_seed`` and DGL's int32) for one stream and key."""
    return int(
        np.random.SeedSequence(_entropy(seed, stream, keys)).generate_state(1, np.uint32)[0] >> 1
    )


def derive_words(seed: int, stream: Stream, *keys: int, count: int = 2) -> np.ndarray:
    """``count`` 64-bit words for counter-based generators (the dropout hash)."""
    return np.random.SeedSequence(_entropy(seed, stream, keys)).generate_state(count, np.uint64)
