"""SuperGCN's options, its payload and the closed forms both sides read: a quantized row's bytes and
the label-propagation rows (SuperGCN §2-§4)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List, Tuple

import torch

from gnntrain.comm.quantize import packed_row_bytes, param_row_bytes
from gnntrain.modes.saved_tier import DiskTierConfig
from gnntrain.partition.store import store_record
from gnntrain.seeding import Stream, derive_seed

BITS = (2, 4, 8, 32)


class Aggregation(str, Enum):
    """Which side aggregates a cut edge (docs/design.md#supergcn)."""

    pre = "pre"
    post = "post"
    hybrid = "hybrid"


class ParamDType(str, Enum):
    """dtype of each quantized row's scale and zero point."""

    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


@dataclass
class SuperGCNConfig(DiskTierConfig):
    name: str = "supergcn"
    aggregation: Aggregation = Aggregation.hybrid
    bits: int = 2  # 32 | 8 | 4 | 2; 32 = unquantized (training dtype)
    quantize_backward: bool = True
    label_propagation: float = 0.0  # fraction of train nodes given a label embedding, in [0, 1)
    param_dtype: ParamDType = ParamDType.bfloat16  # scale/zero point dtype
    overlap: bool = True  # local aggregation runs while the halo exchange is in flight


def row_bytes(width: int, bits: int, dtype_bytes: int, param_dtype: str) -> int:
    """Wire bytes of one exchanged row (packed codes + scale/zero point, or the raw row)."""
    if bits >= 32:
        return width * dtype_bytes
    return packed_row_bytes(width, bits) + param_row_bytes(param_dtype)


def label_propagation_rows(train_mask: torch.Tensor, rate: float, seed: int) -> torch.Tensor:
    """The fixed random subset of *training* nodes whose labels become inputs (global mask)."""
    rows = train_mask.nonzero().flatten()
    take = int(round(rate * rows.numel()))
    gen = torch.Generator().manual_seed(derive_seed(seed, Stream.label_rows))
    mask = torch.zeros_like(train_mask)
    mask[rows[torch.randperm(rows.numel(), generator=gen)[:take]]] = True
    return mask


Edges = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (dst, src, weight)


@store_record
@dataclass
class SuperGCNPayload:
    """What a SuperGCN rank holds beyond its rows and local edges: the two sides of its
    exchanges."""

    recv_counts: List[int]  # rows arriving from each rank (post rows, then pre-aggregated sums)
    remote_edges: (
        Edges  # the arrived rows' edges into own rows (dst local, slot in the arrivals, weight)
    )
    send_slots: torch.Tensor  # S_rank's rows (the outgoing slots), ...
    send_cols: torch.Tensor  # ... its columns (own rows) ...
    send_weights: torch.Tensor  # ... and weights (source factor, destination factor)
    send_counts: List[int]  # rows leaving for each rank
