"""The plan's communication figures equal the bytes the run moves, kind by kind: the closed-form
estimates, the graph figures a mode states once the graph is partitioned (partition, SuperGCN,
HongTu), and what ``gnntrain plan`` prints and writes to plan.yaml."""

from __future__ import annotations

import pytest
import yaml
from conftest import compose, run_cli

from gnntrain.plan import build_plan


def test_oblivious_comm_estimate_matches_closed_form(train):
    """Oblivious 1D all-gathers every layer's exchanged rows from the p - 1 other ranks: (p - 1) N
    sum_l w_l elements, where GCN transforms before it aggregates whenever that narrows the rows, so
    w_l = min(d_in, d_out) (128 -> 16 -> 7: 16 and 7). The widths come from the config here, not
    from the plan, and a run measures the same bytes."""
    overrides = [
        "mode.comm=oblivious",
        "hardware.ranks_per_node=3",
        "train.dtype=float64",
        "train.epochs=1",
    ]
    plan = build_plan(compose(overrides))
    ds, model = plan.config["dataset"], plan.config["model"]
    dims = [ds["feat_dim"]] + [model["hidden"]] * (model["layers"] - 1) + [ds["num_classes"]]
    widths = [min(d_in, d_out) for d_in, d_out in zip(dims, dims[1:])]
    assert widths == [16, 7]
    closed_form = (3 - 1) * ds["num_nodes"] * sum(widths) * 8
    assert plan.comm_per_epoch["by_kind"]["allgather"] == closed_form
    measured = train(overrides)["comm_bytes"]["by_kind"]["allgather"]
    assert (measured["per_epoch"] if isinstance(measured, dict) else measured) == closed_form


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize(
    "layout",
    [
        ["mode=partition", "mode.comm=oblivious", "hardware.ranks_per_node=2"],
        [
            "mode=partition",
            "mode.comm=oblivious",
            "hardware.ranks_per_node=4",
            "mode.replication=2",
        ],
        ["mode=mop", "hardware.ranks_per_node=3"],
    ],
    ids=["oblivious-p2", "oblivious-1.5d-p4c2", "mop-m3"],
)
def test_plan_comm_estimate_equals_measured_bytes(train, model, layout):
    """Every closed-form estimate equals what the run measures, kind by kind: backward traffic only
    for the layers whose communicated tensor has a gradient (not SAGE's or GIN's first layer, which
    aggregate the raw features), and no d_0-wide backward for MoP's GIN."""
    overrides = [
        "dataset=csbm",
        "train.epochs=1",
        "kernel=torch",
        f"model={model}",
        "model.layers=3",
    ] + layout
    plan = build_plan(compose(overrides))
    measured = train(overrides)["comm_bytes"]
    assert measured["by_kind"] == plan.comm_per_epoch["by_kind"]
    assert measured["per_epoch"] == plan.comm_per_epoch["per_epoch_bytes"]


GRAPH_FIGURES = [
    "dataset=rmat",
    "dataset.num_nodes=3000",
    "dataset.num_edges=24000",
    "kernel=torch",
    "model.layers=3",
]


def assert_graph_figures_equal_measured(train, cache_dir, overrides, epochs: int = 1):
    """The bytes per epoch a mode's ``graph_report`` states once the graph is partitioned (`gnntrain
    plan` / `partition` print them) equal what the run measures, in total and kind by kind.
    ``epochs`` 2 where the figures describe the steady epochs after a first that computes a kept A·x
    (HongTu)."""
    from gnntrain.data import load_dataset
    from gnntrain.partition import partition_graph
    from gnntrain.plan import build_mode

    overrides = [f"cache_dir={cache_dir}", f"train.epochs={epochs}"] + GRAPH_FIGURES + overrides
    cfg = compose(overrides)
    plan = build_plan(cfg)
    data = load_dataset(cfg)
    part, _ = partition_graph(
        data.src.numpy(),
        data.dst.numpy(),
        data.num_nodes,
        plan.num_parts,
        cfg.partitioner,
        data.content_hash,
        cache_dir,
    )
    report = dict(build_mode(cfg).graph_report(data, part, plan)["bytes per epoch"])
    measured = train(overrides)["comm_bytes"]
    assert measured["per_epoch"] == report.pop("total")
    assert {k: v for k, v in measured["by_kind"].items() if v} == report


@pytest.mark.parametrize("model,p", [("gcn", 2), ("sage", 3), ("gin", 4)])
def test_sparse_partition_graph_figures_equal_measured_bytes(train, cache_dir, model, p):
    """Sparse partition: total volume x the widths, backward only where a gradient exists."""
    assert_graph_figures_equal_measured(
        train, cache_dir, [f"model={model}", "mode=partition", f"hardware.ranks_per_node={p}"]
    )


SUPERGCN_BYTES = [
    ("gcn", "hybrid", 32, "true", 0.0),
    ("sage", "pre", 2, "true", 0.0),
    ("gin", "post", 4, "false", 0.0),
    ("sage", "hybrid", 32, "true", 0.25),
]


@pytest.mark.parametrize("model,aggregation,bits,quantize_backward,lp", SUPERGCN_BYTES)
def test_supergcn_graph_figures_equal_measured_bytes(
    train, cache_dir, model, aggregation, bits, quantize_backward, lp
):
    """SuperGCN: codes, scale/zero points, backward only where the sent partial sums have a gradient
    (all layers with label propagation)."""
    assert_graph_figures_equal_measured(
        train,
        cache_dir,
        [
            f"model={model}",
            "mode=supergcn",
            f"mode.aggregation={aggregation}",
            f"mode.bits={bits}",
            f"mode.quantize_backward={quantize_backward}",
            f"mode.label_propagation={lp}",
            "hardware.ranks_per_node=3",
        ],
    )


HONGTU_BYTES = [
    ("gcn", "p2p+reuse", 2),
    ("sage", "none", 3),
    ("gin", "p2p", 2),
    ("gat", "reuse", 3),
    ("gat", "p2p+reuse", 2),
    ("sage", "p2p+reuse", 1),
    ("sage", "p2p+reuse", 4),
]


@pytest.mark.parametrize(
    "model,dedup,p", HONGTU_BYTES, ids=[f"{m}-{d}-p{p}" for m, d, p in HONGTU_BYTES]
)
def test_hongtu_graph_figures_equal_measured_bytes(train, cache_dir, model, dedup, p):
    """HongTu, once chunked: h2d, d2h, peer and the avoided reused, read off every rank's sweeps
    (the forward arrivals, the outputs and cached aggregations written back, the backward's reloads
    or GAT's re-gather, and the gradient rows handed on and flushed)."""
    assert_graph_figures_equal_measured(
        train,
        cache_dir,
        [
            f"model={model}",
            "mode=hongtu",
            "mode.chunks=3",
            f"mode.dedup={dedup}",
            f"hardware.ranks_per_node={p}",
        ],
        epochs=2,
    )


@pytest.mark.parametrize(
    "mode",
    [
        ["mode=partition"],
        ["mode=supergcn", "mode.aggregation=hybrid"],
        ["mode=hongtu", "mode.chunks=3"],
    ],
    ids=["partition", "supergcn", "hongtu"],
)
def test_plan_prints_the_bytes_the_run_moves(train, cache_dir, tmp_path, mode):
    """`gnntrain plan` partitions the graph (or reads the partition cache) and states the bytes per
    epoch the run will move, kind by kind, in plan.yaml and on the console: no "depends on the
    graph" beside a byte count."""
    # two epochs: HongTu's figures are its steady epochs', after a first that computes the kept A·x
    overrides = [
        f"cache_dir={cache_dir}",
        "dataset=rmat",
        "dataset.num_nodes=2000",
        "dataset.num_edges=16000",
        f"train.epochs={2 if 'mode=hongtu' in mode else 1}",
        "kernel=torch",
        "hardware.ranks_per_node=2",
        *mode,
    ]
    proc = run_cli(
        ["plan", *overrides, f"hydra.run.dir={tmp_path}"],
        cwd=tmp_path,
        env_extra={"COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "depends on the graph" not in proc.stdout
    planned = yaml.safe_load((tmp_path / "plan.yaml").read_text())["comm_per_epoch"]
    measured = train(overrides)["comm_bytes"]
    assert planned["per_epoch_bytes"] == measured["per_epoch"]
    assert planned["by_kind"] == {k: v for k, v in measured["by_kind"].items() if v}
