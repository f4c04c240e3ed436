"""HongTu's direct path (gnntrain/modes/hongtu/direct.py, mode.direct=true): one CPU rank whose SpMM
reads neighbour rows in place, chunk topology sliced from the CSR. It equals single in float64 with
every table in memory or on the disk tier, counts the disk bytes the plan predicts, never builds the
COO edge lists of an ingested graph, and refuses the plans it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    CORA,
    EXACT,
    assert_exact,
    compose,
    forbid_edge_lists,
    requires_shared,
    single_losses,
)

from gnntrain.errors import PlanError
from gnntrain.modes.hongtu.tiers import DISK
from gnntrain.plan import build_plan

SMALL = ["dataset=csbm", "dataset.num_nodes=400"]
DIRECT = ["mode=hongtu", "mode.direct=true", "kernel=native", "hardware.ranks_per_node=1"]


def run_direct(train, tmp_path: Path, graph, *extra, disk: bool = True):
    folder = tmp_path / "disk"
    tier = ["mode.host_budget=0", f"mode.disk_dir={folder}"] if disk else []
    summary = train(graph + EXACT + DIRECT + tier + list(extra))
    report = summary["mode_report"]
    assert report["direct"] is True
    tiers = report["tiers"]
    if disk:
        assert set(tiers["tables"].values()) == {DISK}, tiers
        measured, predicted = (
            tiers["measured_disk_bytes_per_epoch"],
            tiers["predicted_disk_bytes_per_epoch"],
        )
        assert measured == predicted and measured["disk_read"] > 0 and measured["disk_write"] > 0, (
            tiers
        )
        # scratch removed
        assert not folder.exists() or not any(folder.rglob("*")), list(folder.rglob("*"))
    return summary


@pytest.mark.parametrize(
    "graph,disk",
    [(SMALL, True), pytest.param(CORA, True, marks=requires_shared), (SMALL, False)],
    ids=["csbm-disk", "cora-disk", "csbm-host"],
)
def test_direct_equals_single(train, tmp_path, graph, disk):
    graph = graph + ["model.layers=3"]
    summary = run_direct(train, tmp_path, graph, "mode.chunks=3", disk=disk)
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


@pytest.mark.parametrize("model", ["sage", "gin"])
def test_direct_with_self_rows_and_sum(train, tmp_path, model):
    graph = SMALL + [f"model={model}"]
    summary = run_direct(train, tmp_path, graph, "mode.chunks=5")
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


@pytest.mark.parametrize(
    "generator",
    [
        ["dataset=csbm", "dataset.num_nodes=300"],
        ["dataset=rmat", "dataset.num_nodes=256", "dataset.symmetrize=false"],
    ],
    ids=["symmetric", "directed"],
)
def test_direct_on_an_ingested_graph_never_builds_edge_lists(
    train, tmp_path, monkeypatch, generator
):
    """dataset=files: the CSR is read where it lies (its transpose built where the graph is
    directed); the COO lists single needs are never made."""
    from gnntrain.data.ingest.generated import write_generated

    folder = tmp_path / "graph"
    write_generated(compose(generator).dataset, folder)
    graph = ["dataset=files", f"dataset.path={folder}", "model.layers=3", "model.self_loop=true"]
    reference = single_losses(train, graph + EXACT)

    forbid_edge_lists(monkeypatch, "the direct path")
    summary = run_direct(train, tmp_path, graph, "mode.chunks=4")
    assert_exact(summary["losses"], reference)


@pytest.mark.parametrize(
    "overrides,problem",
    [
        (["hardware.ranks_per_node=2"], "the plan has 2 ranks"),
        (
            ["hardware.ranks_per_node=1", "model=gat"],
            "model=gat is not a built-in elementwise aggregation",
        ),
    ],
)
def test_direct_refuses_what_it_cannot_run(cache_dir, overrides, problem):
    with pytest.raises(PlanError) as info:
        build_plan(
            compose(
                SMALL + [f"cache_dir={cache_dir}", "mode=hongtu", "mode.direct=true"] + overrides
            )
        )
    assert info.value.option == "mode.direct" and problem in str(info.value)


def test_direct_draws_single_dropout_masks_per_chunk(train, tmp_path):
    """Dropout on: each chunk draws its rows' masks from the row hash (no N x d mask), equal to
    single's."""
    graph = SMALL + ["model.layers=3"]
    dropout = ["model.dropout=0.5"]
    summary = run_direct(train, tmp_path, graph, "mode.chunks=3", *dropout, disk=False)
    assert_exact(summary["losses"], single_losses(train, graph + EXACT + dropout))


def test_the_direct_path_is_a_spec_of_its_own():
    """mode.direct=true selects the direct path's own spec (planner, prepare, strategy); the
    gathering engine's planner has no direct branch left."""
    from gnntrain.modes.hongtu.cost import DirectPlanner, HongTuPlanner
    from gnntrain.modes.hongtu.direct_mode import HONGTU_DIRECT
    from gnntrain.modes.hongtu.spec import HONGTU
    from gnntrain.plan import build_mode

    one_rank = ["mode=hongtu", "hardware.ranks_per_node=1"]
    direct = build_mode(compose(one_rank + ["mode.direct=true"]))
    gather = build_mode(compose(one_rank))
    assert direct.spec is HONGTU_DIRECT and type(direct) is DirectPlanner
    assert gather.spec is HONGTU and type(gather) is HongTuPlanner
    assert (
        HONGTU_DIRECT.prepare is not HONGTU.prepare
        and HONGTU_DIRECT.strategy is not HONGTU.strategy
    )
    assert not hasattr(HongTuPlanner, "direct")
