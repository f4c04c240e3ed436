"""Global batches and their split across trainers by share (HyScale §III-B)."""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import torch

from gnntrain.seeding import Stream, derive_seed


def initial_shares(options, trainers: int) -> Tuple[float, ...]:
    given = [float(s) for s in options.shares]
    if not given:
        return tuple([1.0 / trainers] * trainers)
    total = sum(given)
    return tuple(s / total for s in given)


def split_batch(total: int, shares: Sequence[float]) -> List[int]:
    """Integer batch sizes ∝ ``shares`` summing to ``total`` (largest remainder),
    at least one seed each whenever ``total`` allows."""
    n = len(shares)
    floor_each = 1 if total >= n else 0
    spare = total - floor_each * n
    exact = [spare * s / sum(shares) for s in shares]
    sizes = [int(math.floor(e)) for e in exact]
    order = sorted(range(n), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[: spare - sum(sizes)]:
        sizes[i] += 1
    return [floor_each + s for s in sizes]


def global_batches(
    train_ids: torch.Tensor, batch_size: int, seed: int, epoch: int
) -> List[torch.Tensor]:
    """The epoch's global batches: a permutation seeded by (seed, epoch), cut every
    ``batch_size``."""
    gen = torch.Generator().manual_seed(derive_seed(seed, Stream.batches, epoch))
    perm = train_ids[torch.randperm(train_ids.numel(), generator=gen)]
    return list(torch.split(perm, int(batch_size)))


def trainer_slice(
    batch: torch.Tensor, shares: Sequence[float], rank: int
) -> Tuple[torch.Tensor, List[int]]:
    sizes = split_batch(batch.numel(), shares)
    start = sum(sizes[:rank])
    return batch[start : start + sizes[rank]], sizes
