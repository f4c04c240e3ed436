"""``mode=partition mode.comm=cagnet``: CAGNET's 1D algorithm (p broadcast stages forward and
backward, gnntrain/modes/cagnet.py; docs/design.md#partition) is exact, moves the closed-form bytes
the plan predicts, overlaps each stage's broadcast with the previous stage's SpMM, and is refused on
the 1.5D grid. ``oblivious`` is the deprecated name of ``dense-alltoall``."""

from __future__ import annotations

import pytest
import torch
from conftest import EXACT, assert_exact, compose, single_losses

from gnntrain.errors import PlanError
from gnntrain.plan import build_plan

N = 400
SMALL = ["dataset=csbm", f"dataset.num_nodes={N}"]


@pytest.mark.parametrize("model,p", [("gcn", 2), ("sage", 3), ("gcn", 4), ("sage", 4)])
def test_cagnet_equals_single(train, model, p):
    """SAGE's mean aggregation is not symmetric, so its backward exercises the transposed blocks."""
    common = SMALL + EXACT + [f"model={model}"]
    summary = train(common + ["mode=partition", "mode.comm=cagnet", f"hardware.ranks_per_node={p}"])
    assert summary["status"] == "completed" and summary["world_size"] == p
    assert_exact(summary["losses"], single_losses(train, common))
    kinds = summary["comm_bytes"]["by_kind"]
    assert "bcast_fwd" in kinds and "bcast_bwd" in kinds
    assert not {"allgather", "reduce_scatter", "halo_fwd", "halo_bwd"} & set(kinds)


def test_cagnet_directed_graph_is_exact(train):
    """A directed R-MAT graph: the backward multiplies by A^T's blocks (the out-edges), not A's."""
    graph = [
        "dataset=rmat",
        "dataset.symmetrize=false",
        "dataset.num_nodes=600",
        "dataset.num_edges=3000",
        "dataset.feat_dim=16",
    ]
    ref = single_losses(train, graph + EXACT + ["model=sage"])
    s = train(graph + EXACT + ["model=sage", "mode.comm=cagnet", "hardware.ranks_per_node=3"])
    assert_exact(s["losses"], ref)


@pytest.mark.parametrize("order", ["default", "aggregate-first"])
def test_cagnet_bytes_equal_closed_form_and_the_plan(train, order):
    """Per epoch, bcast_fwd = (p - 1) N sum_l f_l b, where l ranges over every layer's aggregation
    and f_l is the width that layer aggregates (GCN 128 -> 16 -> 7 transforms first when that
    narrows: 16 and 7; with aggregate_first=true: 128 and 16); bcast_bwd = (p - 1) N sum_l f_l b
    over the layers whose aggregated tensor has a gradient (every layer but a first one that
    aggregates the input features). Computed from the config here, compared with the plan's estimate
    (printed before the run) and the measured ledger."""
    p, b = 3, 8
    extra = ["mode.aggregate_first=true"] if order == "aggregate-first" else []
    overrides = (
        SMALL
        + [
            "train.dtype=float64",
            "model.dropout=0",
            "train.epochs=2",
            "model=gcn",
            "mode.comm=cagnet",
            f"hardware.ranks_per_node={p}",
        ]
        + extra
    )
    plan = build_plan(compose(overrides))
    ds, model = plan.config["dataset"], plan.config["model"]
    dims = [ds["feat_dim"]] + [model["hidden"]] * (model["layers"] - 1) + [ds["num_classes"]]
    if order == "default":
        widths = [min(d_in, d_out) for d_in, d_out in zip(dims, dims[1:])]
        grads = widths
    else:
        widths = dims[:-1]
        grads = widths[1:]  # the first layer aggregates the features, which need no gradient
    assert widths == ([16, 7] if order == "default" else [128, 16])
    fwd, bwd = (p - 1) * N * sum(widths) * b, (p - 1) * N * sum(grads) * b
    assert plan.comm_per_epoch["by_kind"]["bcast_fwd"] == fwd
    assert plan.comm_per_epoch["by_kind"]["bcast_bwd"] == bwd
    kinds = train(overrides)["comm_bytes"]["by_kind"]
    assert kinds["bcast_fwd"] == fwd and kinds["bcast_bwd"] == bwd
    assert plan.comm_per_epoch["per_epoch_bytes"] == fwd + bwd + kinds["allreduce"]


def test_cagnet_is_refused_on_the_15d_grid():
    with pytest.raises(PlanError) as info:
        build_plan(
            compose(SMALL + ["mode.comm=cagnet", "hardware.ranks_per_node=4", "mode.replication=2"])
        )
    assert info.value.option == "mode.comm" and "1D" in info.value.rule


def test_oblivious_is_a_deprecated_name_of_dense_alltoall():
    old = build_plan(compose(SMALL + ["mode.comm=oblivious", "hardware.ranks_per_node=3"]))
    new = build_plan(compose(SMALL + ["mode.comm=dense-alltoall", "hardware.ranks_per_node=3"]))
    assert any("deprecated" in w and "dense-alltoall" in w for w in old.warnings)
    assert not any("deprecated" in w for w in new.warnings)
    assert old.mode_details["comm"] == new.mode_details["comm"] == "dense-alltoall"
    assert old.comm_per_epoch == new.comm_per_epoch and "allgather" in new.comm_per_epoch["by_kind"]


def test_auto_considers_cagnet():
    from gnntrain.modes.partition import PARTITION

    assert {"comm": "cagnet"} in PARTITION.capabilities.auto_variants
    assert {"comm": "dense-alltoall"} in PARTITION.capabilities.auto_variants


class _LoggedComm:
    """A world of ``size`` ranks seen from ``rank``: broadcasts log their start and their wait, and
    deliver block s as a tensor filled with s + 1."""

    def __init__(self, rank, size, events):
        self.rank, self.world_size, self.events = rank, size, events

    def broadcast_start(self, tensor, src, kind):
        self.events.append(f"start {src}")
        comm = self

        class Pending:
            def wait(self):
                comm.events.append(f"wait {src}")
                return tensor if src == comm.rank else tensor.fill_(src + 1.0)

        return Pending()


class _LoggedBlock:
    def __init__(self, s, events):
        self.s, self.events = s, events

    def spmm(self, x):
        self.events.append(f"spmm {self.s}")
        return x[:2]


def test_next_broadcast_starts_before_this_stages_spmm():
    """Stage s+1's broadcast is in flight while stage s's SpMM runs; every stage's block is used
    once."""
    from gnntrain.modes.cagnet import BroadcastStages

    events = []
    blocks = [_LoggedBlock(s, events) for s in range(3)]
    stages = BroadcastStages(_LoggedComm(1, 3, events), [2, 2, 2], blocks, blocks)
    out = stages.run(torch.full((2, 1), 2.0), blocks, "bcast_fwd")
    assert events == [
        "start 0",
        "start 1",
        "wait 0",
        "spmm 0",
        "start 2",
        "wait 1",
        "spmm 1",
        "wait 2",
        "spmm 2",
    ]
    assert out.flatten().tolist() == [1.0 + 2.0 + 3.0] * 2
