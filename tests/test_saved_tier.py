"""The saved-tensor disk tier of single, partition, SuperGCN and MoP (gnntrain/modes/saved_tier.py):
what autograd saves beyond `mode.host_budget` goes to files and comes back bit for bit, its bytes
equal the plan's prediction, nothing is left behind, and the plan sets a budget where the estimate
would not fit the host. (Exactness against `single` with the tier forced and the edge lists
forbidden: tests/test_streamed_parts.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EXACT, compose

from gnntrain.errors import PlanError

GRAPH = [
    "dataset=csbm",
    "dataset.num_nodes=3000",
    "dataset.feat_dim=64",
    "model.layers=3",
    "model.hidden=64",
]


@pytest.mark.parametrize(
    "mode",
    [
        ["mode=single"],
        ["mode=partition", "hardware.ranks_per_node=2"],
        ["mode=supergcn", "mode.bits=32", "hardware.ranks_per_node=2"],
    ],
    ids=["single", "partition", "supergcn"],
)
def test_the_tier_is_bit_exact_and_moves_the_bytes_the_plan_predicts(train, tmp_path, mode):
    from gnntrain.plan import build_plan

    disk_dir = tmp_path / "tier"
    tier = ["mode.host_budget=0", f"mode.disk_dir={disk_dir}"]
    plain = train(GRAPH + EXACT + mode)
    spilled = train(GRAPH + EXACT + mode + tier)
    assert np.array_equal(spilled["losses"], plain["losses"])  # raw bytes back: bit for bit
    measured = spilled["comm_bytes"]["by_kind"]
    plan = build_plan(compose(GRAPH + EXACT + mode + tier))
    predicted = plan.comm_per_epoch["by_kind"]
    for kind in ("disk_write", "disk_read"):  # both per epoch
        assert measured[kind] > 0 and "disk_write" not in plain["comm_bytes"]["by_kind"]
        assert measured[kind] == pytest.approx(predicted[kind], rel=0.02), kind
    assert plan.mode_details["disk tier"]["in memory at most"] == "0 B"
    assert not disk_dir.exists() or not any(disk_dir.iterdir())  # every file and folder removed


def test_a_budget_keeps_that_much_in_memory(train, tmp_path):
    mode = ["mode=partition", "hardware.ranks_per_node=2", f"mode.disk_dir={tmp_path}"]
    everything = train(GRAPH + mode + ["mode.host_budget=0"])["comm_bytes"]["by_kind"]
    some = train(GRAPH + mode + ["mode.host_budget=1MiB"])["comm_bytes"]["by_kind"]
    assert 0 < some["disk_write"] < everything["disk_write"]


def test_the_plan_sets_a_budget_where_the_estimate_would_not_fit():
    from gnntrain.plan import build_plan

    big = [
        "dataset=csbm",
        "dataset.num_nodes=2000000",
        "dataset.avg_degree=4",
        "dataset.feat_dim=128",
        "model.hidden=256",
        "model.layers=3",
        "mode=partition",
        "hardware.ranks_per_node=2",
    ]
    roomy = build_plan(compose(big + ["hardware.host_memory_gb=64"]))
    assert "disk tier" not in roomy.mode_details and not roomy.config["mode"]["host_budget"]
    tight = build_plan(compose(big + ["hardware.host_memory_gb=12"]))
    budget = tight.config["mode"]["host_budget"]
    assert budget.endswith("B") and 0 < int(budget[:-1]) < 4 * 2**30
    assert tight.comm_per_epoch["by_kind"]["disk_write"] > 0
    # it spills down to SPILL_TARGET of the host, not to all of it: headroom for the estimate's
    # error and what else the node holds (exactly the excess got SuperGCN killed at 2M nodes)
    from gnntrain.modes.saved_tier import SPILL_TARGET

    assert tight.memory_per_rank.total_bytes * 2 <= SPILL_TARGET * 12 * 2**30 * 1.001
    assert tight.memory_per_rank.total_bytes * 2 >= 0.99 * SPILL_TARGET * 12 * 2**30
    # where even every saved tensor on disk is not enough, the plan refuses
    with pytest.raises(PlanError, match="does not fit"):
        build_plan(compose(big + ["hardware.host_memory_gb=8"]))
