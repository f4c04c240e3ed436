"""``mode=supergcn``: quantized pre/post-aggregation halo exchange (SuperGCN, SC'24).

Modules: :mod:`.config` (options, payload, a quantized row's bytes, label propagation rows),
:mod:`.cost` (the planner: its cost model, checks and plan details), :mod:`.prepare` (the ranks'
rows, sends and receives on a partitioned graph), :mod:`.strategy` (a rank's exchange and products)
and :mod:`.mode` (the registered spec).
"""

from gnntrain.modes.supergcn.config import (
    BITS,
    Aggregation,
    ParamDType,
    SuperGCNConfig,
    SuperGCNPayload,
    label_propagation_rows,
    row_bytes,
)
from gnntrain.modes.supergcn.cost import SuperGCNDetails, SuperGCNPlanner
from gnntrain.modes.supergcn.mode import SUPERGCN

__all__ = [
    "BITS",
    "SUPERGCN",
    "Aggregation",
    "ParamDType",
    "SuperGCNConfig",
    "SuperGCNDetails",
    "SuperGCNPayload",
    "SuperGCNPlanner",
    "label_propagation_rows",
    "row_bytes",
]
