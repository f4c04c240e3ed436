"""``mode=hongtu``'s registered spec: the gathering engine (HongTu §4-§5), and, where
``mode.direct=true``, the direct path's spec in its place (:mod:`.direct_mode`)."""

from __future__ import annotations

from gnntrain.modes.hongtu.config import HongTuConfig
from gnntrain.modes.hongtu.cost import HongTuPlanner
from gnntrain.modes.hongtu.direct_mode import HONGTU_DIRECT
from gnntrain.modes.hongtu.mode import CAPABILITIES, prepare, strategy
from gnntrain.modes.spec import ModeSpec, register_mode

HONGTU = register_mode(
    ModeSpec(
        name="hongtu",
        options=HongTuConfig,
        planner=HongTuPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=CAPABILITIES,
        select=lambda options: HONGTU_DIRECT if bool(options.direct) else None,
    )
)
