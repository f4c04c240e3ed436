"""``mode=partition``: 1D / 1.5D partition parallelism with sparsity-aware
halo exchange (``comm=sparse``), the dense all-to-all of every row (``comm=dense-alltoall``;
``oblivious`` is its deprecated name) and CAGNET's 1D broadcast stages (``comm=cagnet``,
:mod:`gnntrain.modes.cagnet`) (Sparsity-Aware Communication for Distributed Graph Neural Network
Training, §4.1 (1D) and §4.2 (1.5D); docs/design.md#partition).

Layout. The graph is partitioned into q = p/c parts, relabelled so part i
is the contiguous block row i. Ranks form a q×c grid, rank = i·c + k; block
row i is replicated on the c ranks of grid row i, and rank (i, k) aggregates
only from the block columns of column group k, [k·q/c, (k+1)·q/c). Partial
sums are then all-reduced within grid row i. c = 1 is plain 1D: the same
code with one column group and no row all-reduce.

Gradients. Every replica computes the update on its own copy of block i,
whose consumers differ (its column group), so summing weight gradients over
all p ranks is exact as long as the loss is counted by one replica only
(k = 0). Edge weights come from global degrees, computed before splitting.

Modules: :mod:`.config` (options, payload and the grid), :mod:`.cost` (the planner: its cost model
and plan details), :mod:`.prepare` (the grid's rows and edges per rank), :mod:`.strategy` (a rank's
halo exchange and products) and :mod:`.mode` (the registered spec).
"""

from gnntrain.modes.partition.config import (
    CAGNET,
    DENSE,
    DEPRECATED,
    OBLIVIOUS,
    SPARSE,
    CommKind,
    Grid,
    PartitionConfig,
    PartitionPayload,
)
from gnntrain.modes.partition.cost import PartitionDetails, PartitionPlanner
from gnntrain.modes.partition.mode import PARTITION
from gnntrain.modes.partition.prepare import prepare
from gnntrain.modes.partition.strategy import PartitionStrategy, strategy

__all__ = [
    "CAGNET",
    "DENSE",
    "DEPRECATED",
    "OBLIVIOUS",
    "PARTITION",
    "SPARSE",
    "CommKind",
    "Grid",
    "PartitionConfig",
    "PartitionDetails",
    "PartitionPayload",
    "PartitionPlanner",
    "PartitionStrategy",
    "prepare",
    "strategy",
]
