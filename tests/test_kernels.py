"""Sparse aggregation: the native, DGL and torch paths agree with the dense product,
forward and backward, in float32 and float64; normalisations run as row scales around an unweighted
SpMM; kernel=auto is measured; bad kernel choices are plan errors; dropout masks are a
function of the global row."""

from __future__ import annotations

import pytest
import torch

from gnntrain.models import (
    GlobalDropout,
    SparseAdjacency,
    edge_weight_values,
    edge_weights,
    kernel_choice,
    kernels,
    transposed,
)
from gnntrain.models.gnn import row_hash_keep_mask

# every kernel path; DGL's runs on the DGL stack (make test-dgl)
KERNELS = [pytest.param("dgl", marks=pytest.mark.dgl), "native", "torch"]


def _graph(n=60, e=300, seed=0, bipartite_src=None):
    g = torch.Generator().manual_seed(seed)
    n_src = bipartite_src or n
    src = torch.randint(0, n_src, (e,), generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    return src, dst, n_src


def _dense(dst, src, w, n_dst, n_src):
    return torch.zeros(n_dst, n_src, dtype=torch.float64).index_put_(
        (dst, src), edge_weight_values(w), accumulate=True
    )


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_kernel_equals_the_dense_product(kernel, model, dtype):
    src, dst, n_src = _graph()
    w = edge_weights(model, src, dst, 60)
    dense = _dense(dst, src, w, 60, n_src).to(dtype)
    h = torch.randn(n_src, 5, dtype=dtype, requires_grad=True)
    probe = torch.arange(60 * 5, dtype=dtype).reshape(60, 5)
    expected_grad = dense.T @ probe
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    adj = SparseAdjacency(dst, src, w, 60, n_src, kernel=kernel)
    assert adj.kernel == kernel and adj.separable
    out = adj.spmm(h)
    assert out.dtype == dtype
    (out * probe).sum().backward()
    torch.testing.assert_close(out.detach(), dense @ h.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(h.grad, expected_grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("host_kernel", ["native", "torch"])
@pytest.mark.parametrize("weighting", ["gcn", "per-edge"])
def test_streamed_copy_holds_one_csr_and_equals_the_dense_product(host_kernel, weighting):
    """HongTu's device topology (SparseAdjacency.streamed_to): built on the host, one CSR moved; its
    product and its gradient (the transposed CSR, built on demand) equal the dense ones in
    float64."""
    src, dst, n_src = _graph(bipartite_src=40)
    w = (
        edge_weights("gcn", src, dst, 60)
        if weighting == "gcn"
        else torch.rand(300, dtype=torch.float64)
    )
    dense = _dense(dst, src, w, 60, n_src)
    host = SparseAdjacency(dst, src, w, 60, n_src, kernel=host_kernel)
    moved = host.streamed_to(torch.device("cpu"), torch.float64)
    assert moved.kernel == "torch" and moved.edge_index() == (None, None)  # no edge lists travel
    h = torch.randn(n_src, 5, dtype=torch.float64, requires_grad=True)
    probe = torch.randn(60, 5, dtype=torch.float64)
    out = moved.spmm(h)
    (out * probe).sum().backward()
    torch.testing.assert_close(out.detach(), dense @ h.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h.grad, dense.T @ probe, rtol=1e-12, atol=1e-12)
    # built once, reused
    assert host.streamed_to(torch.device("cpu"), torch.float64).spmm(h).allclose(out)


def test_native_adjacency_releases_its_edge_lists_and_single_drops_the_shards(train, monkeypatch):
    """The native kernel holds its own CSR pair, so mode=single drops the COO and the edge weights
    (~24 B/edge of its peak); the product is unchanged, and a later reader of edges gets one clear
    error. GAT keeps them."""
    src, dst, n_src = _graph()
    w = edge_weights("gcn", src, dst, 60)
    h = torch.randn(n_src, 5, dtype=torch.float64)
    native, plain = (SparseAdjacency(dst, src, w, 60, n_src, kernel=k) for k in ("native", "torch"))
    before = native.spmm(h)
    assert native.release_edge_lists() and not plain.release_edge_lists()
    assert torch.equal(native.spmm(h), before) and plain.edge_index()[0] is dst
    with pytest.raises(RuntimeError, match="released"):
        native.edge_index()
    import gnntrain.modes.single as single

    kept = {}
    original = single.SingleStrategy.__init__

    def spy(self, shard, ctx, settings, model, optimizer):
        original(self, shard, ctx, settings, model, optimizer)
        kept[settings.model.name] = shard.edges is not None

    monkeypatch.setattr(single.SingleStrategy, "__init__", spy)
    for model in ("gcn", "gat"):
        train(
            [
                "dataset=csbm",
                "dataset.num_nodes=300",
                "mode=single",
                "kernel=native",
                f"model={model}",
                "train.epochs=1",
            ]
        )
    assert kept == {"gcn": False, "gat": True}


def test_native_kernel_gives_the_same_bits_at_any_thread_count():
    """Each destination row is summed in CSR order by one thread: 1 and 2 threads agree bit for bit,
    forward and backward (the sum over rows of a parallel reduction would not)."""
    src, dst, n_src = _graph(n=3000, e=60000)
    adj = SparseAdjacency(
        dst, src, edge_weights("gcn", src, dst, 3000), 3000, n_src, kernel="native"
    )
    previous = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            h = torch.randn(
                n_src, 33, generator=torch.Generator().manual_seed(1), requires_grad=True
            )
            out = adj.spmm(h)
            out.backward(torch.ones_like(out))
            results.append((out.detach(), h.grad))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_native_kernel_skips_the_transpose_product_for_inputs_without_grad(monkeypatch):
    """The first layer's features need no gradient: the backward runs no SpMM over the transpose."""
    from gnntrain.models import _native

    src, dst, n_src = _graph()
    adj = SparseAdjacency(dst, src, edge_weights("gcn", src, dst, 60), 60, n_src, kernel="native")
    weight = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    products = []
    real = _native._product
    monkeypatch.setattr(_native, "_product", lambda *a: products.append(a[2]) or real(*a))
    (adj.spmm(torch.randn(n_src, 5, dtype=torch.float64)) @ weight).sum().backward()
    assert products == [60] and weight.grad is not None
    h = torch.randn(n_src, 5, dtype=torch.float64, requires_grad=True)
    adj.spmm(h).sum().backward()
    assert products == [60, 60, n_src]


@pytest.mark.parametrize("kernel", KERNELS)
def test_normalisations_run_unweighted_and_only_true_edge_weights_run_weighted(kernel):
    src, dst, n_src = _graph(n=20, e=120, bipartite_src=35)
    h = torch.randn(35, 3, dtype=torch.float64)
    kernels.SPMM_CALLS.clear()
    for model in ("gcn", "sage", "gin"):
        SparseAdjacency(dst, src, edge_weights(model, src, dst, 35), 20, 35, kernel=kernel).spmm(h)
    assert kernels.SPMM_CALLS == {"unweighted": 3}
    # factors that are not one value per row, and plain per-edge weights, take the weighted kernel
    factors = torch.rand(src.numel(), 2, dtype=torch.float64)
    plain = torch.rand(src.numel(), dtype=torch.float64)
    for w in (factors, plain):
        adj = SparseAdjacency(dst, src, w, 20, 35, kernel=kernel)
        assert not adj.separable
        torch.testing.assert_close(adj.spmm(h), _dense(dst, src, w, 20, 35) @ h)
    assert kernels.SPMM_CALLS["weighted"] == 2


def test_transposed_factors_give_the_transposed_matrix():
    src, dst, n_src = _graph(n=20, e=120, bipartite_src=35)
    w = edge_weights("gcn", src, dst, 35)
    fwd = _dense(dst, src, w, 20, 35)
    bwd = SparseAdjacency(src, dst, transposed(w), 35, 20, kernel="torch")
    assert bwd.separable
    g = torch.randn(20, 4, dtype=torch.float64)
    torch.testing.assert_close(bwd.spmm(g), fwd.T @ g)


def test_gcn_weights_are_symmetric_normalisation():
    src = torch.tensor([0, 1, 1, 2, 0, 1, 2])
    dst = torch.tensor([1, 0, 2, 1, 0, 1, 2])  # with self-loops
    w = edge_weights("gcn", src, dst, 3)
    deg = torch.tensor([2.0, 3.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(edge_weight_values(w), (deg[src] * deg[dst]).rsqrt())
    torch.testing.assert_close(edge_weight_values(edge_weights("sage", src, dst, 3)), 1 / deg[dst])


def test_kernel_problems_name_the_build_and_the_dtype(monkeypatch):
    assert kernels.kernel_problem("torch", "cpu", torch.float32) is None
    assert kernels.kernel_problem("native", "cpu", torch.float64) is None
    half = kernels.kernel_problem("torch", "cpu", torch.float16)
    assert half is not None and "float16" in half and "torch kernel" in half
    assert "float16" in kernels.kernel_problem("native", "cpu", torch.float16)
    assert "CPU-only" in kernels.kernel_problem("native", "cuda", torch.float32)
    assert "CPU-only" in kernels.kernel_problem("dgl", "cuda", torch.float32)
    monkeypatch.setattr(kernels, "dgl_available", lambda: False)
    assert "not installed" in kernels.kernel_problem("dgl", "cpu", torch.float32)


@pytest.mark.dgl
def test_dgl_kernel_runs_where_dgl_imports():
    assert kernels.kernel_problem("dgl", "cpu", torch.float64) is None


def test_kernel_dgl_without_dgl_is_a_plan_error(monkeypatch, tmp_path):
    from conftest import compose

    from gnntrain.errors import PlanError
    from gnntrain.plan import build_plan

    monkeypatch.setattr(kernels, "dgl_available", lambda: False)
    with pytest.raises(PlanError) as err:
        build_plan(compose(["kernel=dgl", f"cache_dir={tmp_path}"]))
    assert (
        "kernel" in str(err.value)
        and "not installed" in str(err.value)
        and "kernel=torch" in str(err.value)
    )
    # auto then measures the torch path alone
    plan = build_plan(compose([f"cache_dir={tmp_path}"]))
    assert (
        plan.kernel in ("native", "torch")
        and "measured" in plan.kernel_note
        and "dgl" not in plan.kernel_note
    )
    assert "native" in plan.kernel_note and "torch" in plan.kernel_note


def test_auto_measures_every_kernel_once_per_shape_and_caches(monkeypatch, tmp_path):
    timed = []
    fake = {"dgl": 0.002, "native": 0.003, "torch": 0.001}
    here = sorted(
        k for k in kernels.KERNELS if kernels.kernel_problem(k, "cpu", torch.float32) is None
    )
    assert "native" in here and "torch" in here

    def fake_time(kernel, *args, **kwargs):
        timed.append(kernel)
        return fake[kernel]

    monkeypatch.setattr(kernel_choice, "time_kernel", fake_time)
    choice = kernel_choice.choose_kernel("cpu", "float32", 1, 10.0, 16, tmp_path, probe_nodes=100)
    assert choice.kernel == "torch" and sorted(timed) == sorted(here * kernel_choice.PROBE_ROUNDS)
    assert timed[len(here) :] == timed[: len(here)][::-1]  # the second round in the reverse order
    assert "torch 1.0 ms" in choice.describe() and "native 3.0 ms" in choice.describe()
    # same degree bucket
    again = kernel_choice.choose_kernel("cpu", "float32", 1, 12.0, 16, tmp_path, probe_nodes=100)
    assert again == choice and len(timed) == len(here) * kernel_choice.PROBE_ROUNDS
    fake.update(native=0.0005)
    assert (
        kernel_choice.choose_kernel("cpu", "float64", 1, 10.0, 16, tmp_path, probe_nodes=100).kernel
        == "native"
    )
    (tmp_path / "kernels.json").write_text("{not json")
    with pytest.warns(
        UserWarning, match=f"kernel cache {tmp_path / 'kernels.json'} is corrupt .*re-measuring"
    ):
        assert (
            kernel_choice.choose_kernel(
                "cpu", "float32", 1, 10.0, 16, tmp_path, probe_nodes=100
            ).kernel
            == "native"
        )


def test_the_kernel_cache_follows_the_environment_over_cache_dir(monkeypatch, tmp_path):
    """GNNTRAIN_KERNEL_CACHE_DIR holds kernel=auto's measurements for runs whose cache_dir
    differs."""
    from conftest import compose

    from gnntrain.plan import resolve_kernel

    monkeypatch.setattr(
        kernel_choice,
        "time_kernel",
        lambda kernel, *args, **kwargs: {"native": 2e-3, "torch": 1e-3}.get(kernel, 1.0),
    )
    shared = tmp_path / "shared"
    monkeypatch.setenv("GNNTRAIN_KERNEL_CACHE_DIR", str(shared))
    for run in ("a", "b"):
        cfg = compose([f"cache_dir={tmp_path / run}"])
        assert resolve_kernel(cfg, "cpu", "float32", 1, 10.0, 16)[0] == "torch"
        assert not (tmp_path / run / "kernels.json").exists()
    assert (shared / "kernels.json").exists()
    monkeypatch.delenv("GNNTRAIN_KERNEL_CACHE_DIR")
    resolve_kernel(compose([f"cache_dir={tmp_path / 'c'}"]), "cpu", "float32", 1, 10.0, 16)
    assert (tmp_path / "c" / "kernels.json").exists()


@pytest.mark.parametrize("degree,width", [(100_000, 128), (4, 4_000_000), (2**20, 2**20)])
def test_the_kernel_probe_stays_within_its_budget(monkeypatch, degree, width):
    """However dense or wide the planned graph, the probe's graph and features fit a small fixed
    budget (num_nodes=100 avg_degree=100000 used to allocate 26 GB and fail)."""
    shapes = []

    def fake_graph(nodes, avg_degree):
        shapes.append((nodes, avg_degree))
        return torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)

    monkeypatch.setattr(kernel_choice, "probe_graph", fake_graph)
    monkeypatch.setattr(kernel_choice, "time_kernel", lambda *args, **kwargs: 0.001)
    kernel_choice.choose_kernel("cpu", "float32", 1, degree, width, None)
    ((nodes, avg_degree),) = shapes
    assert nodes * avg_degree <= kernel_choice.PROBE_MAX_EDGES
    assert (
        nodes * (avg_degree * kernel_choice.PROBE_BYTES_PER_EDGE + width * 4 * 4)
        <= kernel_choice.PROBE_BUDGET_BYTES
        or nodes == 16
    )
    # with the 16-node floor: a gigabyte at this extreme width
    assert nodes * width * 4 * 4 <= 2**30


@pytest.mark.parametrize("kernel", KERNELS)
def test_real_timing_of_every_kernel(kernel):
    src, dst = kernel_choice.probe_graph(2000, 8)
    assert (
        0
        < kernel_choice.time_kernel(
            kernel, dst, src, 2000, 16, torch.float32, torch.device("cpu"), reps=1
        )
        < 5
    )


def test_dropout_mask_is_a_function_of_the_global_row():
    full = GlobalDropout(0.3, seed=7, num_global_nodes=5000, global_ids=None)
    rows = torch.randperm(5000)[:1700]
    part = GlobalDropout(0.3, seed=7, num_global_nodes=5000, global_ids=rows)
    for epoch in (0, 3):
        full.epoch = part.epoch = epoch
        assert torch.equal(part.keep_mask(64, 1), full.keep_mask(64, 1)[rows])
    mask = full.keep_mask(64, 1).float()
    assert abs(mask.mean().item() - 0.7) < 0.005
    # neighbouring columns independent
    assert abs((mask[:, :-1] * mask[:, 1:]).mean().item() - 0.49) < 0.01
    assert abs((mask[:-1] * mask[1:]).mean().item() - 0.49) < 0.01  # neighbouring rows independent
    other_layer, full.epoch = full.keep_mask(64, 2).float(), 4
    other_epoch = full.keep_mask(64, 1).float()
    for other in (other_layer, other_epoch):
        assert abs((mask * other).mean().item() - 0.49) < 0.01
    assert (
        abs(row_hash_keep_mask(torch.arange(1000), 100, 1, 0.9).float().mean().item() - 0.1) < 0.005
    )


def test_a_slice_of_the_dropout_mask_is_drawn_alone():
    """A chunk's rows of the mask (HongTu on a GPU draws each chunk's where it uses them) equal
    those rows of the whole mask, for held rows given or all rows."""
    rows = torch.randperm(3000)[:900]
    for dropout in (
        GlobalDropout(0.4, seed=2, num_global_nodes=3000, global_ids=None),
        GlobalDropout(0.4, seed=2, num_global_nodes=3000, global_ids=rows),
    ):
        dropout.epoch = 5
        whole = dropout.keep_mask(48, 2)
        for part in (slice(0, 100), slice(250, 777), slice(899, 900)):
            assert torch.equal(dropout.keep_mask(48, 2, part, torch.device("cpu")), whole[part])


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            [
                "mode=partition",
                "mode.comm=sparse",
                "hardware.ranks_per_node=4",
                "mode.replication=2",
            ],
            id="partition-1.5d",
        ),
        pytest.param(
            ["mode=partition", "mode.comm=oblivious", "hardware.ranks_per_node=2"],
            id="partition-oblivious",
        ),
        pytest.param(
            [
                "mode=supergcn",
                "mode.aggregation=hybrid",
                "mode.bits=2",
                "hardware.ranks_per_node=2",
            ],
            id="supergcn",
        ),
        pytest.param(["mode=mop", "mode.pipeline_chunks=2", "hardware.ranks_per_node=2"], id="mop"),
        pytest.param(["mode=hongtu", "mode.chunks=2", "hardware.ranks_per_node=2"], id="hongtu"),
        pytest.param(
            ["mode=hyscale", "mode.cpu_trainers=1", "mode.accel_trainers=1", "mode.fanouts=[4,4]"],
            id="hyscale",
        ),
    ],
)
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_every_mode_aggregates_with_the_unweighted_kernel(train, mode, model):
    """The global-degree normalisation reaches every mode's blocks as row scales: no SpMM of the
    run takes the edge-weighted kernel (summary.json counts them over all ranks)."""
    s = train(
        [
            "dataset=csbm",
            "dataset.num_nodes=600",
            "train.epochs=1",
            f"model={model}",
            "kernel=torch",
        ]
        + mode
    )
    assert s["status"] == "completed"
    assert s["spmm_calls"]["weighted"] == 0 and s["spmm_calls"]["unweighted"] > 0
