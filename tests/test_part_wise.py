"""Part-wise stores (gnntrain/partition/part_wise.py): on a graph on disk, each process builds only
the parts it opens, under each part's own lock, once; a part built elsewhere is verified, not
rebuilt; a corrupt part is rebuilt alone; the store's meta follows once every part is there."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from conftest import compose

OPEN_PARTS = """
import json, sys
from gnntrain.api import compose
from gnntrain.launch.shards import open_shard, store_dir
from gnntrain.plan import build_plan
plan = build_plan(compose(json.loads(sys.argv[1])))
for rank in json.loads(sys.argv[2]):
    shard, meta = open_shard(plan, store_dir(plan), rank)
    assert shard.rank == rank
print(store_dir(plan))
"""


def _host(overrides, ranks) -> subprocess.Popen:
    """A process standing for one host: it opens (and builds where needed) ``ranks``' parts."""
    return subprocess.Popen(
        [sys.executable, "-c", OPEN_PARTS, json.dumps(overrides), json.dumps(ranks)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(directory, parts):
    return [json.loads((directory / f"part{r}" / "part.json").read_text()) for r in range(parts)]


@pytest.fixture
def on_disk_plan(tmp_path, cache_dir):
    from gnntrain.data.ingest.generated import write_generated

    folder = tmp_path / "graph"
    write_generated(compose(["dataset=csbm", "dataset.num_nodes=600"]).dataset, folder)
    return [
        "dataset=files",
        f"dataset.path={folder}",
        f"cache_dir={tmp_path / 'shared-cache'}",  # the folder both "hosts" share
        "mode=partition",
        "partitioner=kaminpar",
        "partitioner.threads=1",
        "hardware.nodes=2",
        "hardware.ranks_per_node=2",
    ]


def test_each_host_builds_only_its_parts_and_another_verifies_them(on_disk_plan, caplog):
    from gnntrain.launch.shards import open_shard, part_wise, store_dir
    from gnntrain.plan import build_plan

    plan = build_plan(compose(on_disk_plan))
    assert part_wise(plan) and plan.world_size == 4
    hosts = [_host(on_disk_plan, [0, 1]), _host(on_disk_plan, [2, 3])]  # at the same time
    for host in hosts:
        _, err = host.communicate(timeout=300)
        assert host.returncode == 0, err
    directory = store_dir(plan)
    records = _records(directory, 4)
    builders = [r["built_by"] for r in records]
    # parts 0 and 1 by one process, 2 and 3 by the other: each host built only its own
    assert builders[0] == builders[1] != builders[2] == builders[3]
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["part_wise"] and meta["num_parts"] == 4 and len(meta["bytes_per_part"]) == 4
    # both hosts cut the same partitioning (the second waited for the first's, from the cache)
    owned = torch.cat([open_shard(plan, directory, r)[0].global_ids for r in range(4)])
    assert torch.equal(torch.sort(owned).values, torch.arange(600))
    # a third process opens part 1: verified, not rebuilt
    third = _host(on_disk_plan, [1])
    assert third.communicate(timeout=300)[1] is not None and third.returncode == 0
    assert _records(directory, 4)[1]["built_by"] == builders[1]
    # a corrupt file of part 2 is found and part 2 alone is rebuilt
    victim = next(p for p in (directory / "part2").glob("*.npy"))
    victim.write_bytes(victim.read_bytes()[:-8] + b"\0" * 8)
    shard, _ = open_shard(plan, directory, 2)
    after = _records(directory, 4)
    assert after[2]["built_by"] != builders[2] and "rebuilding part 2" in caplog.text
    assert [r["built_by"] for r in after[:2] + after[3:]] == builders[:2] + builders[3:]
    # the store's meta was made again with part 2's new digests: opening it checks out
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["files"]["part2/tree.json"] == after[2]["files"]["part2/tree.json"]
    caplog.clear()
    open_shard(plan, directory, 2)
    assert "rebuilding" not in caplog.text


def test_a_graph_in_memory_keeps_the_whole_store(cache_dir):
    from gnntrain.launch.shards import part_wise
    from gnntrain.plan import build_plan

    plan = build_plan(compose(["mode=partition", "hardware.ranks_per_node=2"]))
    assert not part_wise(plan)  # csbm generated in memory: no CSR, the whole-graph prepare


def test_a_nodes_ranks_build_in_turn_where_the_plan_has_room_for_one_build(
    on_disk_plan, tmp_path, monkeypatch
):
    """A part's build holds one of its node's build slots, as many as the plan found room for
    (``memory_per_rank.part_builds_at_once``, its node check: tests/test_saved_tier.py). With one
    slot, a rank whose slot another rank of its node holds waits, and builds once it is free; with
    two, the other slot is its own. Nodes apart (torchrun's GROUP_RANK) have slots of their own."""
    import dataclasses
    import tempfile
    import threading

    from gnntrain.atomic import file_lock
    from gnntrain.launch import shards
    from gnntrain.plan import build_plan

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("GROUP_RANK", "1")
    assert shards.host_build_lock(1).name == "gnntrain-part-build-node1-slot1.lock"
    monkeypatch.setenv("GROUP_RANK", "0")
    assert shards.host_build_lock(0) != shards.host_build_lock(1)
    roomy = build_plan(compose(on_disk_plan))
    assert roomy.memory_per_rank.part_builds_at_once == 2
    one_slot = dataclasses.replace(
        roomy, memory_per_rank=dataclasses.replace(roomy.memory_per_rank, part_builds_at_once=1)
    )
    directory = shards.store_dir(one_slot)

    def open_in_thread(plan, rank, opened):
        thread = threading.Thread(
            target=lambda: opened.append(shards.open_shard(plan, directory, rank)), daemon=True
        )
        thread.start()
        thread.join(timeout=3)
        return thread

    opened: list = []
    with file_lock(shards.host_build_lock(0)):  # rank 0 of this node is building its part
        rank = open_in_thread(one_slot, 1, opened)  # one slot: rank 1 waits for it
        assert rank.is_alive() and not (directory / "part1").exists()
    rank.join(timeout=240)
    assert opened and opened[0][0].rank == 1 and (directory / "part1" / "part.json").exists()
    opened.clear()
    with file_lock(shards.host_build_lock(1)):  # two slots: rank 0 builds in its own, slot 0
        rank = open_in_thread(roomy, 0, opened)
        rank.join(timeout=240)
    assert opened and (directory / "part0" / "part.json").exists()


def test_a_rank_returns_once_every_part_of_its_node_is_built(on_disk_plan, monkeypatch):
    """Its node's ranks build one at a time; a rank that built its own part waits for the rest of
    its node's (so that it does not wait for them at the process group's rendezvous, which has a
    time limit), and only for its node's: torchrun's LOCAL_RANK places it."""
    import threading

    from gnntrain.launch import shards
    from gnntrain.plan import build_plan

    plan = build_plan(compose(on_disk_plan))  # 2 nodes x 2 ranks
    monkeypatch.setenv("WORLD_SIZE", "4")  # started by torchrun: one rank per process
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert list(shards.node_ranks(plan, 3)) == [2, 3]
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert list(shards.node_ranks(plan, 0)) == [0, 1]
    directory = shards.store_dir(plan)
    opened = []
    rank = threading.Thread(
        target=lambda: opened.append(shards.open_shard(plan, directory, 0)), daemon=True
    )
    rank.start()
    built = directory / "part0" / "part.json"
    deadline = time.monotonic() + 30
    while not built.exists() and rank.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    rank.join(timeout=1.0)  # a rank that did not wait would return now
    # part 0 is built, and rank 0 waits for part 1, not for node 1's parts 2 and 3
    assert built.exists() and rank.is_alive() and not opened
    monkeypatch.setenv("LOCAL_RANK", "1")
    shards.open_shard(plan, directory, 1)
    rank.join(timeout=30)
    assert opened and not (directory / "part2").exists()


def test_a_store_built_first_leaves_no_build_in_the_run_plan(tmp_path):
    """A rank building its part (the whole graph's node arrays mapped, the part's edges gathered)
    can be a node's peak, above training's, even with one build at a time.
    Once `gnntrain partition` has built the whole store, no rank builds: the run's plan counts
    training alone (``part_build_bytes`` 0, :func:`gnntrain.plan_fit.store_builds`), so it fits a
    host where the builds did not, and its store folder is the one that was built."""
    import dataclasses

    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.errors import PlanError
    from gnntrain.launch.shards import ensure_store, store_dir
    from gnntrain.plan import build_plan
    from gnntrain.plan_fit import node_peak_bytes

    folder = tmp_path / "graph"
    graph = ["dataset=csbm", "dataset.num_nodes=40000", "dataset.feat_dim=8"]
    write_generated(compose(graph).dataset, folder)
    overrides = ["dataset=files", f"dataset.path={folder}", f"cache_dir={tmp_path / 'c'}"]
    overrides += ["mode=partition", "partitioner=kaminpar", "partitioner.threads=1"]
    overrides += ["hardware.ranks_per_node=2", "model.hidden=8"]
    memory = build_plan(compose(overrides)).memory_per_rank
    # the least a build can peak at: one rank of the node building at a time
    building, when = node_peak_bytes(dataclasses.replace(memory, part_builds_at_once=1), 2, 2)
    training, _ = node_peak_bytes(dataclasses.replace(memory, part_build_bytes=0), 2, 2)
    assert when == "while a rank builds its part of the store" and training < building
    host = overrides + [f"hardware.host_memory_gb={(building + training) / 2 / 2**30}"]
    with pytest.raises(PlanError, match="while a rank builds its part of the store"):
        build_plan(compose(host))
    directory, _, build_s = ensure_store(build_plan(compose(host), training=False))  # partition's
    assert build_s > 0
    plan = build_plan(compose(host))
    assert plan.memory_per_rank.part_build_bytes == 0 and store_dir(plan) == directory
    # a part found corrupt later is rebuilt in one of the slots the build was sized for
    assert plan.memory_per_rank.part_builds_at_once == 1
    # training peaks now; its halo measured from the partitioning the store was built from
    node, when = node_peak_bytes(plan.memory_per_rank, 2, 2)
    assert when == "training" and node <= training
