"""``mode=single``: full-graph training in one process, the reference that every exact mode must
reproduce (docs/design.md#exactness).

Modules: :mod:`.cost` (the planner: its cost model and plan details) and :mod:`.mode` (options,
prepare, the rank's strategy and the registered spec). The whole graph's edges every mode starts
from are :func:`gnntrain.modes.row_edges.graph_tensors`.
"""

from gnntrain.modes.row_edges import graph_tensors, user_edge_values
from gnntrain.modes.single.cost import SingleDetails, SinglePlanner
from gnntrain.modes.single.mode import SINGLE, SingleConfig, SingleStrategy, prepare, strategy

__all__ = [
    "SINGLE",
    "SingleConfig",
    "SingleDetails",
    "SinglePlanner",
    "SingleStrategy",
    "graph_tensors",
    "prepare",
    "strategy",
    "user_edge_values",
]
