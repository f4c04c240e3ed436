"""mode=mop (MixGCN, docs/design.md#mop): exact against single, all-to-all bytes
equal the closed form with floor splits, aggregation FLOPs balanced, and its
limits refused by the plan."""

from __future__ import annotations

import pytest
from conftest import CORA, GRAPHS, assert_exact, compose, requires_shared, single_losses

from gnntrain.errors import PlanError
from gnntrain.modes.mop import exchanged_elements, floor_splits
from gnntrain.plan import build_plan

EXACT = ["train.dtype=float64", "model.dropout=0", "train.epochs=3", "train.seed=5", "kernel=torch"]


def _ref(train, graph, model):
    return single_losses(train, GRAPHS[graph] + EXACT + [f"model={model}"])


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("m", [2, 3, 4])
def test_mop_equals_single(train, graph, model, m):
    s = train(
        GRAPHS[graph] + EXACT + [f"model={model}", "mode=mop", f"hardware.ranks_per_node={m}"]
    )
    assert_exact(s["losses"], _ref(train, graph, model))


@pytest.mark.parametrize(
    "graph,model,m",
    [("csbm", model, m) for model in ("gcn", "sage", "gin") for m in (2, 3, 4)]
    + [pytest.param("cora", "gcn", 3, marks=requires_shared)],
)
def test_pipelined_mop_equals_single(train, graph, model, m):
    """pipeline_chunks=3: async chunk exchanges overlap aggregation and update; still exact, same
    bytes."""
    s = train(
        GRAPHS[graph]
        + EXACT
        + [f"model={model}", "mode=mop", f"hardware.ranks_per_node={m}", "mode.pipeline_chunks=3"]
    )
    assert_exact(s["losses"], _ref(train, graph, model))
    if graph == "csbm":
        fwd, bwd = _expected(2708, [128, 16, 7], m)
        assert s["comm_bytes"]["by_kind"]["all_to_all_fwd"] == fwd
        assert s["comm_bytes"]["by_kind"]["all_to_all_bwd"] == bwd


def _expected(n, dims, m):
    """MixGCN's volume for every model (GIN's ε is applied on the update side: no d_0 backward)."""
    e = lambda d: exchanged_elements(n, d, m)
    hidden = sum(e(d) for d in dims[1:-1])
    return (e(dims[0]) + 2 * hidden) * 8, 2 * hidden * 8


@pytest.mark.parametrize(
    "model,m,hidden",
    [("gcn", 2, 16), ("sage", 3, 16), ("gin", 3, 16), ("gin", 2, 16), ("gcn", 4, 3)],
)
def test_all_to_all_bytes_equal_closed_form(train, model, m, hidden):
    """Exact counts with floor splits; hidden=3 with m=4 leaves a rank without hidden columns."""
    s = train(
        EXACT
        + [f"model={model}", "mode=mop", f"hardware.ranks_per_node={m}", f"model.hidden={hidden}"]
    )
    n, dims = 2708, [128, hidden, 7]
    fwd, bwd = _expected(n, dims, m)
    kinds = s["comm_bytes"]["by_kind"]
    assert kinds["all_to_all_fwd"] == fwd and kinds["all_to_all_bwd"] == bwd
    if n % m == 0 and all(d % m == 0 for d in dims[:-1]):  # the paper's form holds exactly
        assert fwd + bwd == n * (m - 1) // m * (dims[0] + 4 * sum(dims[1:-1])) * 8
    plan = build_plan(
        compose(
            EXACT
            + [
                f"model={model}",
                "mode=mop",
                f"hardware.ranks_per_node={m}",
                f"model.hidden={hidden}",
            ]
        )
    )
    assert plan.comm_per_epoch["by_kind"]["all_to_all_fwd"] == fwd
    assert plan.comm_per_epoch["by_kind"]["all_to_all_bwd"] == bwd


def test_floor_splits_and_uneven_volume():
    assert floor_splits(10, 4) == [0, 2, 5, 7, 10]
    # even splits: N*d*(m-1)/m; uneven: N*d - sum n_i d_i
    assert exchanged_elements(8, 4, 2) == 8 * 4 // 2
    assert exchanged_elements(10, 3, 4) == 10 * 3 - (2 * 0 + 3 * 1 + 2 * 1 + 3 * 1)


def test_aggregation_flops_balanced_when_m_divides_d(train):
    s = train(["train.epochs=1", "mode=mop", "hardware.ranks_per_node=2", "kernel=torch"])
    report = s["mode_report"]
    assert report["aggregation_balance_max_over_mean"] == pytest.approx(1.0)
    assert len(report["aggregation_flops_per_rank"]) == 2


def test_volume_is_constant_in_m_while_partition_grows(train):
    vols, halos = {}, {}
    for m in (2, 4):
        common = [
            "train.epochs=1",
            f"hardware.ranks_per_node={m}",
            "kernel=torch",
            "dataset.num_nodes=1200",
            "dataset.feat_dim=32",
        ]
        k = train(common + ["mode=mop"])["comm_bytes"]["by_kind"]
        vols[m] = k["all_to_all_fwd"] + k["all_to_all_bwd"]
        halos[m] = sum(
            train(common + ["mode=partition"])["comm_bytes"]["by_kind"].get(x, 0)
            for x in ("halo_fwd", "halo_bwd")
        )
    # MoP: bytes scale only with (m-1)/m; partition halo grows with the number of parts
    assert vols[4] / vols[2] == pytest.approx((3 / 4) / (1 / 2), rel=0.01)
    assert halos[4] > halos[2]


@requires_shared
def test_cora_accuracy_matches_single(train):
    common = CORA + ["train.epochs=200", "train.eval_every=200"]
    single = train(common + ["mode=single"])["accuracy"]["test"]
    mop = train(common + ["mode=mop", "hardware.ranks_per_node=2"])["accuracy"]["test"]
    assert abs(single - mop) <= 0.005


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["mode=mop", "model=gat"], "element-wise"),
        (["mode=mop", "hardware.ranks_per_node=8", "dataset.num_nodes=5"], "nodes"),
    ],
)
def test_plan_refuses_mop_limits(overrides, needle):
    with pytest.raises(PlanError, match=needle):
        build_plan(compose(overrides))


def test_plan_states_replicated_adjacency():
    plan = build_plan(compose(["mode=mop", "hardware.ranks_per_node=2"]))
    replicated = plan.mode_details["adjacency replicated per rank (not divided by m)"]
    assert (
        replicated["edges"]
        == plan.config["dataset"]["num_edges"] + plan.config["dataset"]["num_nodes"]
    )


def test_plan_refuses_more_chunks_than_rows():
    with pytest.raises(PlanError, match="pipeline_chunks|chunks"):
        build_plan(
            compose(
                [
                    "mode=mop",
                    "hardware.ranks_per_node=2",
                    "dataset.num_nodes=10",
                    "mode.pipeline_chunks=6",
                ]
            )
        )


@pytest.mark.parametrize("s", [1, 3])
def test_time_splits_into_aggregation_all_to_all_and_update(train, s):
    """MixGCN Fig. 8's breakdown: aggregation and update stages (forward + backward) beside comm."""
    summary = train(
        [
            "train.epochs=2",
            "mode=mop",
            "hardware.ranks_per_node=2",
            "kernel=torch",
            f"mode.pipeline_chunks={s}",
        ]
    )
    stages = summary["time_breakdown_s"]
    assert stages["aggregation"] > 0 and stages["update"] > 0 and stages["comm"] > 0
    if s == 1:  # without the pipeline no other node runs inside a stage's backward span
        assert stages["aggregation"] + stages["update"] <= stages["compute"] + 1e-6


def test_stage_count_follows_proposition_3_5():
    from gnntrain.modes.mop import stage_count

    assert stage_count(100, 0) == 2 and stage_count(100, 50) == 4 and stage_count(100, 60) == 5
    assert stage_count(100, 100) == 1  # no bandwidth to exploit


def test_auto_pipeline_takes_its_stage_count_from_rcm(train):
    """pipeline_chunks=0 with RCM: s = ceil(2n/(n-b)) from the measured bandwidth; still exact."""
    from gnntrain.modes.mop import stage_count

    rcm = ["partitioner.reorder=rcm"]
    s = train(
        GRAPHS["csbm"]
        + EXACT
        + rcm
        + ["model=gcn", "mode=mop", "hardware.ranks_per_node=2", "mode.pipeline_chunks=0"]
    )
    part = s["partition"]
    assert part["pipeline_chunks"] == stage_count(2708, part["bandwidth"]) > 1
    assert_exact(s["losses"], _ref(train, "csbm", "gcn"))
    with pytest.raises(PlanError, match="partitioner.reorder=rcm"):
        build_plan(compose(EXACT + ["mode=mop", "mode.pipeline_chunks=0"]))


MOA = [("gcn", 3, 1), ("sage", 3, 2), ("gin", 4, 2)]


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("model,m,a", MOA, ids=[f"{model}-m{m}-a{a}" for model, m, a in MOA])
def test_mixture_of_accelerators_equals_single(train, graph, model, m, a):
    """MoA (MixGCN §3.2): ranks 0..a-1 only aggregate (feature columns), the others only update
    (node rows); exact against single, and since the groups are disjoint every element of each move
    crosses: N·d per move."""
    s = train(
        GRAPHS[graph]
        + EXACT
        + [
            f"model={model}",
            "mode=mop",
            f"hardware.ranks_per_node={m}",
            f"mode.aggregation_ranks={a}",
        ]
    )
    assert_exact(s["losses"], _ref(train, graph, model))
    if graph == "csbm":
        n, dims = 2708, [128, 16, 7]
        kinds = s["comm_bytes"]["by_kind"]
        assert kinds["all_to_all_fwd"] == n * (dims[0] + 2 * dims[1]) * 8
        assert kinds["all_to_all_bwd"] == n * 2 * dims[1] * 8
        flops = s["mode_report"]["update_flops_per_rank"]
        assert flops[:a] == [0.0] * a and all(f > 0 for f in flops[a:])


@pytest.mark.parametrize(
    "overrides,option",
    [
        (["mode.aggregation_ranks=2"], "mode.aggregation_ranks"),
        (["mode.aggregation_ranks=1", "mode.pipeline_chunks=2"], "mode.pipeline_chunks"),
    ],
)
def test_mixture_of_accelerators_refusals(overrides, option):
    with pytest.raises(PlanError) as err:
        build_plan(compose(EXACT + ["mode=mop", "hardware.ranks_per_node=2"] + overrides))
    assert err.value.option == option


def test_pipeline_overlaps_backward_exchange_with_the_previous_chunks_update():
    """The autograd order behind the backward pipeline: chunk c's gradient is set travelling by its
    finish node, chunk c-1's update backward runs, and only then does chunk c's start node wait."""
    import torch
    from conftest import LoggedPending, logged_scale

    from gnntrain.modes.mop import _FinishToRows, _StartToRows

    events = []

    class Layout:
        def start_cols_to_rows(self, z, width, sizes):
            return LoggedPending(events, z, f"fwd {sizes}")

        def finish_cols_to_rows(self, pending, width, sizes):
            return pending.wait()

        def start_rows_to_cols(self, grad, kind, sizes):
            events.append(f"start bwd {sizes}")
            return LoggedPending(events, grad, f"bwd {sizes}"), tuple(grad.shape)

    def update(c):
        return logged_scale(events, f"update backward {c}", 3)

    h = torch.ones(2, 2, requires_grad=True)
    outs, in_flight = [], None
    for c in range(2):  # the pipelined layer's order: aggregate c, start c, finish and update c-1
        box = {}
        token = _StartToRows.apply(2 * h, Layout(), 2, c, box)
        if in_flight is not None:
            outs.append(update(c - 1)(_FinishToRows.apply(*in_flight)))
        in_flight = (token, Layout(), 2, c, box)
    outs.append(update(1)(_FinishToRows.apply(*in_flight)))
    events.clear()
    torch.cat(outs).sum().backward()
    assert torch.equal(h.grad, torch.full((2, 2), 12.0))
    assert events == [
        "update backward 1",
        "start bwd 1",
        "update backward 0",
        "start bwd 0",
        "wait bwd 1",
        "wait bwd 0",
    ], events


def test_pipeline_returns_chunks_to_columns_while_the_next_chunk_updates():
    """The row→column move in chunks: chunk c's activated output starts back to columns as soon as
    it is updated (before chunk c+1's update), the next layer's columns are assembled from every
    chunk, and in backward every chunk's column gradient is set travelling (the last chunk's first)
    before any update backward, which then runs while the earlier chunks' gradients travel."""
    from types import SimpleNamespace

    import torch
    from conftest import LoggedPending, logged_scale

    from gnntrain.modes.mop import _FinishToCols, _StartToCols

    events = []

    class Layout:
        num_nodes, rank = 4, 0

        def cols(self, width):
            return [0, width]

        def start_rows_to_cols(self, h, kind, sizes):
            events.append(f"start fwd {sizes}")
            return LoggedPending(events, h, f"fwd {sizes}"), tuple(h.shape)

        def start_cols_to_rows(self, grad, width, sizes, kind):
            events.append(f"start bwd {sizes}")
            return LoggedPending(events, grad, f"bwd {sizes}")

        def finish_cols_to_rows(self, pending, width, sizes):
            return pending.wait()

    h = torch.ones(4, 2, requires_grad=True)
    tokens, returns = [], []
    for c in range(2):  # chunk c = rows (2c, 2c+1); the layer's order: update c, start its return
        out = logged_scale(events, f"update backward {c}", 3)(h[2 * c : 2 * c + 2])
        events.append(f"update {c}")
        box = {}
        tokens.append(_StartToCols.apply(out, Layout(), c, box))
        returns.append((SimpleNamespace(rows=torch.arange(2 * c, 2 * c + 2), sizes=c), box))
    h_cols = _FinishToCols.apply(Layout(), 2, returns, *tokens)
    assert events == [
        "update 0",
        "start fwd 0",
        "update 1",
        "start fwd 1",
        "wait fwd 0",
        "wait fwd 1",
    ], events
    assert torch.equal(h_cols, torch.full((4, 2), 3.0))
    events.clear()
    (torch.cat(tokens).sum() + 2 * h_cols.sum()).backward()  # rows side and columns side both used
    assert torch.equal(h.grad, torch.full((4, 2), 9.0))
    assert events == [
        "start bwd 1",
        "start bwd 0",
        "wait bwd 1",
        "update backward 1",
        "wait bwd 0",
        "update backward 0",
    ], events


def test_moa_aggregation_ranks_run_on_the_host_beside_gpu_update_ranks(monkeypatch):
    """MixGCN §3.2 with the host as the aggregation accelerator: on a CUDA profile,
    aggregation_device=cpu puts ranks 0..a-1 on the CPU with the node's cores (less one per GPU
    rank) and the update ranks on the GPUs in turn; gloo carries the mixed group. The plan alone (no
    GPU here): the run itself is in scripts/gpu-check.sh."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        "gnntrain.plan.resolve_kernel", lambda *args: ("torch", "no GPU here to probe")
    )
    gpu = [
        "hardware=gpu-cluster",
        "hardware.nodes=1",
        "hardware.ranks_per_node=3",
        "mode=mop",
        "kernel=torch",
        "mode.aggregation_ranks=1",
    ]
    plan = build_plan(compose(gpu + ["mode.aggregation_device=cpu"]))
    assert plan.rank_devices == ("cpu", "cuda:0", "cuda:1") and plan.backend == "gloo"
    cores = int(compose(gpu).hardware.cores_per_node)
    assert plan.rank_threads == (cores - 2, 1, 1)
    mixture = plan.mode_details["mixture of accelerators"]
    assert mixture == {
        "aggregation ranks": [0],
        "aggregation device": "cpu",
        "update ranks": [1, 2],
    }
    same = build_plan(compose(gpu))
    assert same.rank_devices == ("cuda:0", "cuda:1", "cuda:2") and same.backend == "nccl"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["mode.aggregation_device=cpu"], "aggregation_ranks=0"),
        (["mode.aggregation_ranks=1", "mode.aggregation_device=tpu"], "unknown device"),
    ],
)
def test_moa_aggregation_device_refusals(overrides, message):
    with pytest.raises(PlanError, match=message) as err:
        build_plan(compose(EXACT + ["mode=mop", "hardware.ranks_per_node=2"] + overrides))
    assert err.value.option == "mode.aggregation_device"


@pytest.mark.parametrize("pipelined", [False, True])
def test_mop_keeps_the_input_aggregation_like_single(train, monkeypatch, pipelined):
    """MoP aggregates the fixed input columns once per run where the first layer aggregates before
    its weights (train.cache_input_aggregation, as single does); false recomputes them every epoch;
    the losses agree."""
    from gnntrain.models import kernels

    widths = []
    spmm = kernels.SparseAdjacency.spmm

    def counted(self, h):
        widths.append(h.shape[1])
        return spmm(self, h)

    monkeypatch.setattr(kernels.SparseAdjacency, "spmm", counted)
    run = (
        GRAPHS["csbm"]
        + EXACT
        + [
            "model=sage",
            "model.hidden=16",
            "mode=mop",
            "hardware.ranks_per_node=1",
            "train.eval_every=3",
        ]
        + (["mode.pipeline_chunks=2"] if pipelined else [])
    )
    chunks = 2 if pipelined else 1
    kept = train(run)
    first = [w for w in widths if w > 16]  # the input columns (csbm: 128 features)
    assert len(first) == chunks, widths
    widths.clear()
    recomputed = train(run + ["train.cache_input_aggregation=false"])
    assert len([w for w in widths if w > 16]) == chunks * (3 + 1)  # every epoch and the evaluation
    assert_exact(kept["losses"], recomputed["losses"], tol=1e-12)
