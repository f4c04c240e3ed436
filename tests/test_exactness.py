"""Every exact distributed layout reproduces mode=single (docs/design.md#exactness):
float64 losses within 1e-9 relative, dropout off, same seed."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EXACT, GRAPHS, assert_exact, requires_shared, single_losses

from gnntrain.modes import MODE_REGISTRY

# The layout matrix runs on the torch-native kernel (EXACT): each spawned rank then skips DGL's ~4 s
# import. test_kernels.py shows both kernels agree; test_default_dgl_kernel_is_exact covers DGL end
# to end. (comm, p, c) for every valid combination of comm in {oblivious, sparse}, p in {2,3,4}, c
# in {1,2}
LAYOUTS = [
    (comm, p, c)
    for comm in ("oblivious", "sparse")
    for p in (2, 3, 4)
    for c in (1, 2)
    if p % c == 0 and (p // c) % c == 0
]


def _reference(train, graph, model):
    return single_losses(train, GRAPHS[graph] + EXACT + [f"model={model}"])


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize("comm,p,c", LAYOUTS)
def test_partition_mode_equals_single(train, graph, model, comm, p, c):
    summary = train(
        GRAPHS[graph]
        + EXACT
        + [
            f"model={model}",
            "mode=partition",
            f"mode.comm={comm}",
            f"hardware.ranks_per_node={p}",
            f"mode.replication={c}",
        ]
    )
    assert summary["status"] == "completed" and summary["world_size"] == p
    assert_exact(summary["losses"], _reference(train, graph, model))
    kinds = summary["comm_bytes"]["by_kind"]
    assert ("halo_fwd" in kinds) == (comm == "sparse") and ("allgather" in kinds) == (
        comm == "oblivious"
    )
    assert ("row_allreduce" in kinds) == (c > 1)


@pytest.mark.dgl
@pytest.mark.parametrize("comm,p,c", [("sparse", 2, 1), ("oblivious", 4, 2)])
def test_dgl_kernel_is_exact(train, comm, p, c):
    ref = _reference(train, "csbm", "gcn")
    s = train(
        ["dataset=csbm"]
        + EXACT
        + [
            "kernel=dgl",
            "model=gcn",
            f"mode.comm={comm}",
            f"hardware.ranks_per_node={p}",
            f"mode.replication={c}",
        ]
    )
    assert s["kernel"] == "dgl"
    assert_exact(s["losses"], ref)


@pytest.mark.parametrize("aggregate_first", ["true", "false"])
def test_gin_and_both_aggregation_orders_are_exact(train, aggregate_first):
    ref = _reference(train, "csbm", "gcn")
    s = train(
        ["dataset=csbm"]
        + EXACT
        + ["model=gcn", "hardware.ranks_per_node=2", f"mode.aggregate_first={aggregate_first}"]
    )
    assert_exact(s["losses"], ref)
    gin = _reference(train, "csbm", "gin")
    s = train(["dataset=csbm"] + EXACT + ["model=gin", "hardware.ranks_per_node=3"])
    assert_exact(s["losses"], gin)


def test_directed_graph_is_exact(train):
    """A directed R-MAT graph: halo gradients go back along the same index lists."""
    graph = [
        "dataset=rmat",
        "dataset.symmetrize=false",
        "dataset.num_nodes=600",
        "dataset.num_edges=3000",
        "dataset.feat_dim=16",
    ]
    ref = np.array(train(graph + EXACT + ["model=sage", "mode=single"])["losses"])
    s = train(graph + EXACT + ["model=sage", "hardware.ranks_per_node=3"])
    assert_exact(s["losses"], ref)


def test_dropout_masks_match_across_layouts(train):
    """Dropout is drawn for the global tensor, so even with dropout on the
    distributed run follows the single-process one."""
    run = ["dataset=csbm", "train.dtype=float64", "model.dropout=0.5", "train.epochs=3"]
    ref = np.array(train(run + ["mode=single"])["losses"])
    s = train(run + ["hardware.ranks_per_node=2"])
    assert_exact(s["losses"], ref)


# every exact layout of every registered mode (Capabilities.exact_layouts), read from the registry
LAYER_NORM_RUNS = [
    (name, layout)
    for name, spec in sorted(MODE_REGISTRY.items())
    for layout in spec.capabilities.exact_layouts
]


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize(
    "mode,layout", LAYER_NORM_RUNS, ids=[f"{m}-p{layout.ranks}" for m, layout in LAYER_NORM_RUNS]
)
def test_layer_norm_is_exact_in_every_mode(train, graph, mode, layout):
    """model.norm=layer (SuperGCN's Table 3 model: SAGE with LayerNorm) normalises each row on its
    own, so every exact layout still gives single's losses; its parameters are in the gradient
    all-reduce."""
    norm = GRAPHS[graph] + EXACT + ["model=sage", "model.layers=3", "model.norm=layer"]
    ref = single_losses(train, norm)
    assert not np.allclose(
        ref, single_losses(train, GRAPHS[graph] + EXACT + ["model=sage", "model.layers=3"])
    )
    s = train(norm + [f"mode={mode}"] + layout.overrides())
    assert_exact(s["losses"], ref)


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
def test_a_registered_model_is_exact_in_partition(train, graph):
    """gcn_rw (gnntrain/models/gcn_rw.py + configs/model/gcn_rw.yaml, nothing else): a GCN with the
    random-walk normalisation D^-1 (A+I), a model the modes know only through its family, trains the
    same in partition (sparse halos, p=2 and 1.5D p=4) as in single; and it is not plain GCN."""
    ref = _reference(train, graph, "gcn_rw")
    assert not np.allclose(ref, _reference(train, graph, "gcn"))
    for p, c in ((2, 1), (4, 2)):
        s = train(
            GRAPHS[graph]
            + EXACT
            + [
                "model=gcn_rw",
                "mode=partition",
                "mode.comm=sparse",
                f"hardware.ranks_per_node={p}",
                f"mode.replication={c}",
            ]
        )
        assert_exact(s["losses"], ref)
