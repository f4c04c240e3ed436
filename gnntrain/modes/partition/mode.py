"""``mode=partition``'s registered spec."""

from __future__ import annotations

from gnntrain.modes.partition.config import PartitionConfig
from gnntrain.modes.partition.cost import PartitionPlanner
from gnntrain.modes.partition.prepare import prepare
from gnntrain.modes.partition.strategy import strategy
from gnntrain.modes.spec import Capabilities, Layout, ModeSpec, register_mode

PARTITION = register_mode(
    ModeSpec(
        name="partition",
        options=PartitionConfig,
        planner=PartitionPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            needs_restructurable=False,  # exchanges whatever a layer hands its aggregation
            parts_from_csr=True,
            auto_variants=(
                {"comm": "sparse"},
                {"comm": "dense-alltoall"},
                {"comm": "cagnet"},
                {"comm": "sparse", "replication": 2},
            ),
            exact_layouts=(Layout(2), Layout(4, (("replication", 2),))),
        ),
    )
)
