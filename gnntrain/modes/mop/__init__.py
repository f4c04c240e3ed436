"""``mode=mop``: MixGCN's mixture of parallelism (MixGCN: Scalable GCN Training by Mixture of
Parallelism and Mixture of Accelerators, §3.1.2 and Algorithm 2; docs/design.md#mop).

Per layer, every one of the m ranks holds the whole normalised Â:

1. aggregation split by feature columns, Z[:, cols_i] = Â·H[:, cols_i], with
   no communication;
2. all-to-all #1 moves Z from column-split to row-split;
3. the update runs on the rank's node rows with replicated weights;
4. all-to-all #2 moves H' back to column-split for the next layer.

The last layer's logits stay row-split and the loss is computed locally with
the global normalisation. Each all-to-all is an autograd Function whose
backward is the inverse all-to-all; parameter gradients (W and GIN's ε, both
on the update side) are partial on every rank and summed by the one flat
all-reduce. The row-split copy of each layer's input is kept for the update's
self terms (SAGE's W_self·h, GIN's (1+ε)·h) and costs no exchange, so layer 0's
column-side output has no gradient and the volume is the paper's for GIN too.

Splits are floors, cols_i = [⌊d·i/m⌋, ⌊d·(i+1)/m⌋) and likewise for rows, so
a rank may own no columns when m > d. Per layer and direction an all-to-all
moves N·d − Σ_i n_i·d_i elements, which is N·d·(m−1)/m when m divides both N
and d. ``mode.pipeline_chunks = s`` splits the rows into s chunks and both moves into
s asynchronous ones: chunk c's column→row move is in flight while chunk c+1
aggregates, and its activated output travels back to columns while chunk c+1
updates; in backward each chunk's gradient travels while the neighbouring
chunk's update backward runs. Still exact: the same sums, in the same order.

Modules: :mod:`.config` (options and payload), :mod:`.cost` (the planner: its cost model, checks and
plan details), :mod:`.layout` (splits and the two moves), :mod:`.pipeline` (chunked, asynchronous
moves), :mod:`.prepare` (the ranks' rows and column slices), :mod:`.strategy` (a rank's layer loop)
and :mod:`.mode` (the registered spec).
"""

from gnntrain.modes.mop.config import MoPConfig, MoPPayload
from gnntrain.modes.mop.cost import MoPDetails, MoPPlanner
from gnntrain.modes.mop.layout import (
    MoPLayout,
    col_splits,
    exchanged_elements,
    floor_splits,
    row_splits,
    stage_count,
)
from gnntrain.modes.mop.mode import MOP
from gnntrain.modes.mop.pipeline import _FinishToCols, _FinishToRows, _StartToCols, _StartToRows

__all__ = [
    "MOP",
    "MoPConfig",
    "MoPDetails",
    "MoPLayout",
    "MoPPayload",
    "MoPPlanner",
    "_FinishToCols",
    "_FinishToRows",
    "_StartToCols",
    "_StartToRows",
    "col_splits",
    "exchanged_elements",
    "floor_splits",
    "row_splits",
    "stage_count",
]
