"""``mode=partition``'s options, the comm kinds, what a rank holds beyond its rows (its payload)
and the (p/c)×c process grid."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List, Optional, Tuple

import torch

from gnntrain.modes.saved_tier import DiskTierConfig
from gnntrain.partition.store import store_record

# member names are what a config may say (OmegaConf matches enums by name), hence the functional
# form
CommKind = Enum(
    "CommKind",
    {
        "sparse": "sparse",
        "dense-alltoall": "dense-alltoall",
        "cagnet": "cagnet",
        "oblivious": "oblivious",
    },
    type=str,
)
CommKind.__doc__ = """How a layer's rows move: ``sparse`` (the NnzCols halo all-to-all),
``dense-alltoall`` (the same all-to-all asking for every row of each block: an all-gather forward,
a reduce-scatter backward), ``cagnet`` (CAGNET's 1D algorithm: p broadcast stages forward and
backward, overlapped with the local SpMMs) and ``oblivious``, the deprecated name of
dense-alltoall."""
SPARSE, DENSE, CAGNET, OBLIVIOUS = (
    CommKind[k] for k in ("sparse", "dense-alltoall", "cagnet", "oblivious")
)
DEPRECATED = {OBLIVIOUS: DENSE}


@dataclass
class PartitionConfig(DiskTierConfig):
    name: str = "partition"
    comm: CommKind = CommKind.sparse
    replication: int = 1  # c of the 1.5D grid; 1 = 1D
    # (A·H)·W if true, A·(H·W) if false; null = per layer by width
    aggregate_first: Optional[bool] = None


Edges = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (dst, src, weight)


@store_record
@dataclass
class PartitionPayload:
    """What a rank of the grid holds beyond its rows and edges."""

    offsets: torch.Tensor  # block row i is relabelled rows [offsets[i], offsets[i+1])
    replication: int  # c of the (p/c) x c grid
    # comm=cagnet: the edges leaving this block (dst global, src local, w)
    out_edges: Optional[Edges] = None


@dataclass(frozen=True)
class Grid:
    """The (p/c)×c process grid of 1.5D partitioning; c = 1 is 1D."""

    world_size: int
    c: int

    @property
    def rows(self) -> int:
        return self.world_size // self.c

    def position(self, rank: int):
        return divmod(rank, self.c)  # (block row i, column group k)

    def group_blocks(self, k: int) -> List[int]:
        width = self.rows // self.c
        return list(range(k * width, (k + 1) * width))

    def sender(self, block: int, k: int) -> int:
        """The rank that sends block ``block`` within column group k."""
        return block * self.c + k
