"""``mode=mop``'s registered spec."""

from __future__ import annotations

from gnntrain.modes.mop.config import MoPConfig
from gnntrain.modes.mop.cost import MoPPlanner
from gnntrain.modes.mop.prepare import prepare
from gnntrain.modes.mop.strategy import strategy
from gnntrain.modes.spec import Capabilities, Layout, ModeSpec, register_mode

MOP = register_mode(
    ModeSpec(
        name="mop",
        options=MoPConfig,
        planner=MoPPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            models_rule="MoP splits aggregation by feature columns, which only works for "
            "element-wise aggregation; "
            "attention (GAT) needs whole rows.",
            exact_layouts=(Layout(2), Layout(4, (("pipeline_chunks", 3),))),
        ),
    )
)
