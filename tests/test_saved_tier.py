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
    # of the node's memory beside the process that started its ranks
    from gnntrain.modes.saved_tier import SPILL_TARGET
    from gnntrain.sizing import PROCESS_BYTES

    node = 12 * 2**30 - PROCESS_BYTES
    assert tight.memory_per_rank.total_bytes * 2 <= SPILL_TARGET * node * 1.001
    assert tight.memory_per_rank.total_bytes * 2 >= 0.99 * SPILL_TARGET * node
    # where even every saved tensor on disk is not enough, the plan refuses
    with pytest.raises(PlanError, match="does not fit"):
        build_plan(compose(big + ["hardware.host_memory_gb=8"]))


# a supergcn run from a graph on disk whose part builds outweigh its training: many edges, narrow
# rows (a part's build holds ~200 B per in-edge, its training ~48 B per in-edge plus the rows)
DENSE_ON_DISK = [
    "dataset=csbm",
    "dataset.num_nodes=1000000",
    "dataset.avg_degree=100",
    "dataset.feat_dim=8",
    "dataset.on_disk=true",
    "model.hidden=8",
    "model.layers=2",
    "mode=supergcn",
    "hardware.ranks_per_node=2",
]


def test_the_node_check_counts_a_part_build_and_the_launcher():
    """A rank that builds its part of the store from the CSR on disk peaks before training; a node
    builds as many parts at once as fit beside its other ranks and the launcher, at least one
    (gnntrain/launch/shards.py); the plan's node check takes the higher of that and training, and
    names the build where it is what does not fit."""
    from gnntrain.data import dataset_sizes
    from gnntrain.plan import build_plan
    from gnntrain.sizing import PART_LOAD_BYTES_PER_NODE, PROCESS_BYTES

    plan = build_plan(compose(DENSE_ON_DISK + ["hardware.host_memory_gb=64"]))
    memory = plan.memory_per_rank
    n, e, _, _ = dataset_sizes(compose(DENSE_ON_DISK).dataset)
    assert memory.part_build_bytes == int(PART_LOAD_BYTES_PER_NODE * n + 200 * (e + n) / 2)
    assert memory.total_bytes == memory.process_bytes + memory.part_build_bytes
    assert memory.total_bytes > memory.training_bytes
    assert memory.part_builds_at_once == 2  # both ranks' builds fit 64 GiB at once
    # the same graph in memory: the launcher prepares from the whole graph, no part is built
    in_memory = build_plan(compose(DENSE_ON_DISK[:-1] + ["dataset.on_disk=false"]))
    assert in_memory.memory_per_rank.part_build_bytes == 0
    # a node that trains both ranks but cannot build a part beside them is refused, by the build
    building = 2 * PROCESS_BYTES + memory.part_build_bytes + PROCESS_BYTES
    training = 2 * memory.training_bytes + PROCESS_BYTES
    between = (building + training) / 2 / 2**30
    with pytest.raises(PlanError, match="while a rank builds its part of the store"):
        build_plan(compose(DENSE_ON_DISK + [f"hardware.host_memory_gb={between:.3f}"]))
    # room for one build at a time: approved, and its ranks take turns (one build slot)
    enough = f"hardware.host_memory_gb={building / 2**30 + 0.01:.3f}"
    assert build_plan(compose(DENSE_ON_DISK + [enough])).memory_per_rank.part_builds_at_once == 1
