"""``mode=single``'s cost model: one process holds every row and edge."""

from __future__ import annotations

from dataclasses import dataclass

from gnntrain.modes.cost import Details, Work, local_work
from gnntrain.modes.saved_tier import SavedTierPlanner


@dataclass(frozen=True)
class SingleDetails(Details):
    note: str = "one process; hardware.ranks_per_node does not apply"


class SinglePlanner(SavedTierPlanner):
    def world_size(self, hardware_world_size: int) -> int:
        return 1  # the reference always runs in one process

    def work(self, ctx) -> Work:
        return local_work(ctx, ctx.num_nodes, ctx.num_edges + ctx.num_nodes)

    def details(self, ctx) -> SingleDetails:
        return SingleDetails()
