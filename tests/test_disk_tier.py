"""mode=hongtu's disk tier (gnntrain/modes/hongtu/tiers.py): with mode.host_budget=0 every vertex
table lives in a memory-mapped scratch file; the run stays exact against single, the disk bytes it
measures equal the plan's prediction, the files are gone at the end, and a disk too small is refused
at plan time."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import CORA, EXACT, assert_exact, compose, requires_shared, single_losses

from gnntrain.errors import PlanError
from gnntrain.modes.hongtu.tiers import DISK, HOST, VertexTables, assign_tiers, table_names
from gnntrain.plan import build_plan

SMALL = ["dataset=csbm", "dataset.num_nodes=400"]
DEDUPS = ["none", "p2p", "reuse", "p2p+reuse"]
THREE_LAYERS = ["model.layers=3"]


def on_disk(train, tmp_path: Path, graph, *extra):
    disk = tmp_path / "disk"
    summary = train(
        graph + EXACT + ["mode=hongtu", "mode.host_budget=0", f"mode.disk_dir={disk}"] + list(extra)
    )
    tiers = summary["mode_report"]["tiers"]
    assert set(tiers["tables"].values()) == {DISK}, tiers  # a budget of 0: every table on disk
    measured, predicted = (
        tiers["measured_disk_bytes_per_epoch"],
        tiers["predicted_disk_bytes_per_epoch"],
    )
    assert measured == predicted and measured["disk_read"] > 0 and measured["disk_write"] > 0, tiers
    kinds = summary["comm_bytes"]["by_kind"]
    assert (
        kinds["disk_read"] == predicted["disk_read"]
        and kinds["disk_write"] == predicted["disk_write"]
    )
    # files are not traffic
    assert summary["comm_bytes"]["per_epoch"] == sum(
        b for k, b in kinds.items() if k not in ("reused", "disk_read", "disk_write")
    )
    assert not disk.exists() or not any(disk.rglob("*")), list(disk.rglob("*"))  # scratch removed
    return summary


@pytest.mark.parametrize(
    "graph", [SMALL, pytest.param(CORA, marks=requires_shared)], ids=["csbm", "cora"]
)
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("dedup", DEDUPS)
def test_disk_tier_equals_single(train, tmp_path, graph, ranks, dedup):
    """Every dedup setting, m = 1 and 2, two graphs, a 3-layer GCN (tables act1, act2, grad1, grad2,
    cache0-2 all on disk)."""
    graph = graph + THREE_LAYERS
    summary = on_disk(
        train,
        tmp_path,
        graph,
        f"hardware.ranks_per_node={ranks}",
        f"mode.dedup={dedup}",
        "mode.chunks=4",
    )
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


@pytest.mark.parametrize("model,ranks", [("sage", 2), ("gat", 1), ("gat", 2)])
def test_disk_tier_with_self_rows_and_recompute(train, tmp_path, model, ranks):
    """SAGE reads its own input rows back in backward; GAT re-gathers whole neighbourhoods."""
    graph = SMALL + [f"model={model}"]
    summary = on_disk(train, tmp_path, graph, f"hardware.ranks_per_node={ranks}", "mode.dedup=none")
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


def test_budget_sends_caches_first_then_gradients_then_activations():
    dims, rows, b = [8, 4, 4, 2], 10, 8
    names = table_names(3, cached=True)
    assert names == ["cache0", "cache1", "cache2", "grad1", "grad2", "act1", "act2"]
    assert set(assign_tiers(rows, dims, True, b, None).values()) == {HOST}
    total = rows * b * (8 + 4 + 4 + 4 + 4 + 4 + 4)
    assert set(assign_tiers(rows, dims, True, b, total).values()) == {HOST}
    # 8 bytes short: only the first table (cache0) goes
    tiers = assign_tiers(rows, dims, True, b, total - 8)
    assert [n for n in names if tiers[n] == DISK] == ["cache0"]
    tiers = assign_tiers(rows, dims, True, b, rows * b * 4)  # room for one narrow table: act2 stays
    assert [n for n in names if tiers[n] == HOST] == ["act2"]


def test_tables_rebuild_a_killed_runs_folder_and_leave_nothing(tmp_path):
    scratch = tmp_path / "run-x" / "rank0"
    scratch.mkdir(parents=True)
    (scratch / "act1.bin").write_bytes(b"left by a killed run")
    tables = VertexTables({"act1": DISK, "grad1": HOST}, scratch)
    act = tables.allocate("act1", (5, 3), torch.float64)
    # rebuilt
    assert (
        sorted(p.name for p in scratch.iterdir()) == ["act1.bin", "owner"] and act.abs().sum() == 0
    )
    act[2] = 7.0
    assert tables.holds(act) and not tables.holds(tables.allocate("grad1", (5, 3), torch.float64))
    assert (scratch / "act1.bin").stat().st_size == 5 * 3 * 8
    tables.release_rows(0, 5, act)  # dropped from this process, kept by the file
    assert act[2].tolist() == [7.0] * 3
    tables.close()
    assert not (tmp_path / "run-x").exists()


def test_a_disk_too_small_is_refused_at_plan_time(tmp_path, cache_dir, monkeypatch):
    import shutil

    from gnntrain.modes.hongtu import tiers

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(tiers.shutil, "disk_usage", lambda path: usage._replace(free=1000))
    cfg = compose(
        SMALL
        + [
            "mode=hongtu",
            "mode.host_budget=0",
            f"mode.disk_dir={tmp_path}/disk",
            f"cache_dir={cache_dir}",
        ]
    )
    with pytest.raises(PlanError) as err:
        build_plan(cfg)
    message = str(err.value)
    assert "mode.disk_dir" in message and f"{tmp_path}/disk" in message and "1000 B" in message, (
        message
    )
    assert "\n" not in message
    monkeypatch.undo()
    build_plan(cfg)  # the same plan where the disk has room


def test_a_killed_runs_tables_are_removed_at_plan_time(tmp_path, cache_dir):
    """A resumed run's plan counts its killed predecessor's tables as free space: the plan removes
    the rank folders whose owner process on this host is gone, and keeps those of live processes and
    other hosts."""
    import os
    import socket
    import subprocess
    import sys

    gone = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        ).stdout
    )
    disk = tmp_path / "disk"
    owners = {
        "killed": f"{socket.gethostname()} {gone}",
        "live": f"{socket.gethostname()} {os.getpid()}",
        "elsewhere": f"another-host-{socket.gethostname()} {gone}",
    }
    for run, owner in owners.items():
        (disk / f"run-{run}" / "rank0").mkdir(parents=True)
        (disk / f"run-{run}" / "rank0" / "owner").write_text(owner)
        (disk / f"run-{run}" / "rank0" / "act1.bin").write_bytes(b"x" * 8192)
    build_plan(
        compose(
            SMALL
            + [
                "mode=hongtu",
                "mode.host_budget=0",
                f"mode.disk_dir={disk}",
                f"cache_dir={cache_dir}",
            ]
        )
    )
    assert sorted(p.name for p in disk.iterdir()) == ["run-elsewhere", "run-live"]


def test_tables_on_disk_come_off_the_memory_estimate(cache_dir):
    """The plan's memory check counts only the host tier: a budget of 0 takes every table's bytes
    off."""
    from gnntrain.modes.hongtu.tiers import disk_bytes_needed

    base = SMALL + THREE_LAYERS + ["mode=hongtu", f"cache_dir={cache_dir}"]
    in_memory, on_disk = (
        build_plan(compose(base + extra)) for extra in ([], ["mode.host_budget=0"])
    )
    dims = [128, 16, 16, 7]  # csbm features, hidden, hidden, classes
    tiers = dict.fromkeys(table_names(3, cached=True), DISK)
    saved = disk_bytes_needed(200, dims, tiers, 4)  # 400 rows over 2 ranks, float32
    assert (
        in_memory.memory_per_rank.activation_bytes - on_disk.memory_per_rank.activation_bytes
        == saved
    )
    tables = on_disk.mode_details["vertex tables"]
    assert tables["on disk"] == ["cache0", "cache1", "cache2", "grad1", "grad2", "act1", "act2"]
    assert tables["disk bytes per rank"] == saved


def test_unset_budget_comes_from_the_profiles_host_memory(train, cache_dir):
    """host_budget unset: a profile whose host memory cannot hold every table gets the budget it
    leaves (resolved into the plan's config); the run puts the rest on disk and stays exact."""
    base = (
        SMALL
        + THREE_LAYERS
        + EXACT
        + ["mode=hongtu", "hardware.ranks_per_node=1", f"cache_dir={cache_dir}"]
    )
    roomy, tight = (build_plan(compose(base + extra)) for extra in ([], ["mode.host_budget=0"]))
    assert roomy.config["mode"]["host_budget"] is None  # all fits: no disk tier
    gib = (roomy.memory_per_rank.total_bytes + tight.memory_per_rank.total_bytes) / 2 / 2**30
    plan = build_plan(compose(base + [f"hardware.host_memory_gb={gib}"]))
    budget = int(plan.config["mode"]["host_budget"])
    assert 0 < budget and plan.memory_per_rank.total_bytes <= gib * 2**30
    summary = train(base + [f"hardware.host_memory_gb={gib}"])
    tables = summary["mode_report"]["tiers"]["tables"]
    assert summary["mode_report"]["tiers"]["host_budget"] == budget
    assert DISK in tables.values() and HOST in tables.values(), tables
    assert_exact(summary["losses"], single_losses(train, SMALL + THREE_LAYERS + EXACT))
    with pytest.raises(PlanError, match="does not fit"):  # not even with every table on disk
        build_plan(
            compose(
                base
                + [f"hardware.host_memory_gb={tight.memory_per_rank.total_bytes / 2**30 * 0.9}"]
            )
        )
