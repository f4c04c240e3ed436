"""mode=hyscale's neighbour samplers (docs/design.md#hyscale): DGL's behind our Block and the
torch-native one draw seeded blocks of at most ``fanout`` in-edges per node whose weights sum to the
full neighbourhood's, keep each in-edge with probability fanout/degree, and with every neighbour
train alike."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_exact, compose
from test_hyscale import HS

from gnntrain.data import load_dataset
from gnntrain.models import edge_weight_values
from gnntrain.modes.hyscale import NeighborSampler
from gnntrain.modes.row_edges import graph_tensors
from gnntrain.plan_types import RunSettings


# --------------------------------------------------------------- sampler
@pytest.mark.dgl
def test_dgl_sampler_is_seeded_per_batch_capped_and_unbiased(monkeypatch):
    """DGL's NeighborSampler behind our Block: the same (seed, batch) draws the same blocks from
    any calling thread and any sampler instance, including the first draw of a fresh sampling
    thread in a process that called ``torch.set_num_threads`` (torch's first op on a thread then
    reset the shared OpenMP count to 2 and DGL switched to its fused kernel, so a run's first
    batch differed from later runs'); a different seed draws others; at most ``fanout`` in-edges
    per node; weights are w * deg / sampled-deg; fanout -1 is every edge."""
    from gnntrain.modes.hyscale import sampler as hyscale

    torch.set_num_threads(torch.get_num_threads())  # what every rank's launcher does
    monkeypatch.setattr(hyscale, "_SAMPLING_THREAD", None)  # a fresh sampling thread for this test
    try:
        _sampler_checks()
    finally:
        if hyscale._SAMPLING_THREAD is not None:
            hyscale._SAMPLING_THREAD.shutdown()


def _sampler_checks() -> None:
    import threading

    data = load_dataset(compose(["dataset=csbm", "dataset.num_nodes=400", "dataset.avg_degree=8"]))
    cfg = compose(["dataset=csbm", "model=sage"])
    src, dst, w = graph_tensors(data, RunSettings.of(cfg))
    seeds = torch.arange(0, 400, 5)

    def edges(sampler, seed):
        nodes, blocks = sampler.sample(seeds, seed)
        return nodes, [(b.dst, b.src, b.weight) for b in blocks], blocks

    a = NeighborSampler(dst, src, w, data.num_nodes, [4, 3])
    b = NeighborSampler(dst, src, w, data.num_nodes, [4, 3])
    nodes, first, blocks = edges(a, 11)  # the sampling thread's first draw
    from_thread = []
    t = threading.Thread(target=lambda: from_thread.append(edges(b, 11)))
    t.start()
    t.join()
    assert torch.equal(nodes, from_thread[0][0])
    assert all(torch.equal(x, y) for e, f in zip(first, from_thread[0][1]) for x, y in zip(e, f))
    again, again_edges, _ = edges(a, 11)
    assert torch.equal(nodes, again)
    assert all(torch.equal(x, y) for e, f in zip(first, again_edges) for x, y in zip(e, f))
    assert not all(torch.equal(e[1], f[1]) for e, f in zip(first, edges(a, 12)[1]))
    deg = torch.bincount(dst, minlength=data.num_nodes)
    for block, fanout in zip(blocks, [4, 3]):
        per_dst = torch.bincount(block.dst, minlength=block.num_dst)
        assert int(per_dst.max()) <= fanout
        assert block.num_src >= block.num_dst  # dst rows come first among the src rows
    last = blocks[-1]
    own = deg[seeds]
    assert torch.equal(torch.bincount(last.dst, minlength=last.num_dst), own.clamp(max=3))
    # SAGE's weight is 1/deg per in-edge, so w x deg/sampled sums to 1 over each seed's sampled
    # edges, which is the full neighbourhood's sum
    sampled_sum = torch.zeros(last.num_dst, dtype=last.weight.dtype).index_add_(
        0, last.dst, edge_weight_values(last.weight)
    )
    full_sum = torch.zeros(data.num_nodes, dtype=w.dtype).index_add_(0, dst, edge_weight_values(w))[
        seeds
    ]
    assert torch.allclose(sampled_sum, full_sum.to(sampled_sum.dtype))
    full = NeighborSampler(dst, src, w, data.num_nodes, [-1])
    _, (block,) = full.sample(seeds, 0)
    assert block.dst.numel() == int(own.sum())
    in_seeds = torch.isin(dst, seeds)
    assert torch.isclose(
        edge_weight_values(block.weight).sum(), edge_weight_values(w[in_seeds]).sum()
    )


# ------------------------------------------------------- torch-native sampler
def _csbm_graph(nodes=400, degree=8):
    data = load_dataset(
        compose(["dataset=csbm", f"dataset.num_nodes={nodes}", f"dataset.avg_degree={degree}"])
    )
    src, dst, w = graph_tensors(data, RunSettings.of(compose(["dataset=csbm", "model=sage"])))
    return data, src, dst, w


def test_torch_sampler_blocks_follow_the_rules():
    """The torch sampler keeps DGL's block conventions: at most ``fanout`` in-edges per dst, dst
    rows first among the src rows, w x deg/sampled summing to the full neighbourhood, fanout -1 =
    every edge; the same seed draws the same blocks (from any thread), another seed others."""
    import threading

    from gnntrain.modes.hyscale.sampler import TorchNeighborSampler

    data, src, dst, w = _csbm_graph()
    seeds = torch.arange(0, 400, 5)
    sampler = TorchNeighborSampler(dst, src, w, data.num_nodes, [4, 3])
    nodes, blocks = sampler.sample(seeds, 11)
    other = []
    thread = threading.Thread(target=lambda: other.append(sampler.sample(seeds, 11)))
    thread.start()
    thread.join()
    assert torch.equal(nodes, other[0][0])
    assert all(
        torch.equal(getattr(a, f), getattr(b, f))
        for a, b in zip(blocks, other[0][1])
        for f in ("dst", "src", "weight")
    )
    assert not all(torch.equal(a.src, b.src) for a, b in zip(blocks, sampler.sample(seeds, 12)[1]))
    deg = torch.bincount(dst, minlength=data.num_nodes)
    for block, fanout in zip(blocks, [4, 3]):
        assert int(torch.bincount(block.dst, minlength=block.num_dst).max()) <= fanout
        assert block.num_src >= block.num_dst and int(block.src.max()) < block.num_src
    last = blocks[-1]
    assert torch.equal(torch.bincount(last.dst, minlength=last.num_dst), deg[seeds].clamp(max=3))
    sampled_sum = torch.zeros(last.num_dst, dtype=last.weight.dtype).index_add_(
        0, last.dst, edge_weight_values(last.weight)
    )
    full_sum = torch.zeros(data.num_nodes, dtype=w.dtype).index_add_(0, dst, edge_weight_values(w))[
        seeds
    ]
    assert torch.allclose(sampled_sum, full_sum.to(sampled_sum.dtype))
    _, (block,) = TorchNeighborSampler(dst, src, w, data.num_nodes, [-1]).sample(seeds, 0)
    assert block.dst.numel() == int(deg[seeds].sum())


def _inclusion(sampler, seeds, draws, fanout_edges):
    """How often each (dst, src) in-edge of ``seeds`` is drawn, over ``draws`` seeds."""
    counts = {}
    for k in range(draws):
        nodes, (block,) = sampler.sample(seeds, 1000 + k)
        src_global = nodes[block.src]
        dst_global = seeds[block.dst]
        for d, s_ in zip(dst_global.tolist(), src_global.tolist()):
            counts[(d, s_)] = counts.get((d, s_), 0) + 1
    return {e: counts.get(e, 0) / draws for e in fanout_edges}


@pytest.mark.dgl
def test_torch_and_dgl_samplers_draw_each_neighbour_with_probability_fanout_over_degree(
    monkeypatch,
):
    """Uniform without replacement: a node of degree d keeps each in-edge with probability min(1,
    f/d). Both samplers, 600 draws each, every edge within 5 standard deviations of that."""
    from gnntrain.modes.hyscale import sampler as sampler_module
    from gnntrain.modes.hyscale.sampler import TorchNeighborSampler

    data, src, dst, w = _csbm_graph(nodes=200, degree=10)
    deg = torch.bincount(dst, minlength=data.num_nodes)
    seeds = torch.nonzero(deg >= 6).flatten()[:6]
    fanout, draws = 3, 600
    edges = [(d, s_) for d, s_ in zip(dst.tolist(), src.tolist()) if d in set(seeds.tolist())]
    monkeypatch.setattr(sampler_module, "_SAMPLING_THREAD", None)
    try:
        for sampler in (
            TorchNeighborSampler(dst, src, w, data.num_nodes, [fanout]),
            NeighborSampler(dst, src, w, data.num_nodes, [fanout]),
        ):
            freq = _inclusion(sampler, seeds, draws, edges)
            for (d, _), f in freq.items():
                p = min(1.0, fanout / int(deg[d]))
                sigma = (p * (1 - p) / draws) ** 0.5
                assert abs(f - p) <= 5 * sigma + 1e-12, (type(sampler).__name__, d, f, p)
    finally:
        if sampler_module._SAMPLING_THREAD is not None:
            sampler_module._SAMPLING_THREAD.shutdown()


@pytest.mark.dgl
def test_torch_sampler_with_every_neighbour_trains_as_dgls(train):
    """fanouts -1 (every in-edge, exact aggregation), no dropout: the two samplers give the same
    float64 losses; the blocks differ only in the order of their rows."""
    base = HS + [
        "dataset=csbm",
        "dataset.num_nodes=600",
        "mode.fanouts=[-1,-1]",
        "mode.batch_size=64",
        "mode.drm=false",
        "train.dtype=float64",
        "model.dropout=0",
        "train.epochs=2",
        "kernel=torch",
    ]
    runs = {kind: train(base + [f"mode.sampler={kind}"]) for kind in ("dgl", "torch")}
    assert all(r["status"] == "completed" for r in runs.values())
    assert_exact(runs["torch"]["losses"], runs["dgl"]["losses"])
