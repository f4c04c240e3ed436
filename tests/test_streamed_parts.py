"""Multi-rank prepares from the CSR (#55, gnntrain/modes/row_edges.py): a part's in-edges,
self-loops and weight factors read from an ingested graph's memory-mapped CSR equal the whole-graph
COO path's edge for edge, and `mode=partition` (1D and 1.5D) builds its part store, a part at a
time, and trains exactly like `single` without the whole graph's edge lists ever being made."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import EXACT, assert_exact, compose, forbid_edge_lists, requires_shared, single_losses

DIRECTED = ["dataset=rmat", "dataset.num_nodes=256", "dataset.symmetrize=false"]
KAMINPAR = ["partitioner=kaminpar", "partitioner.threads=1"]


def _ingested_generated(tmp_path, generator):
    from gnntrain.data.ingest.generated import write_generated

    folder = tmp_path / "graph"
    write_generated(compose(generator).dataset, folder)
    return folder


@pytest.fixture(scope="module")
def cora_folder(cora, tmp_path_factory):
    """Cora ingested from .npy arrays, as `gnntrain ingest` writes it."""
    from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest

    raw = tmp_path_factory.mktemp("cora-npy")
    np.save(raw / "edge_index.npy", np.stack([cora.src.numpy(), cora.dst.numpy()]))
    np.save(raw / "x.npy", cora.features.numpy())
    np.save(raw / "y.npy", cora.labels.numpy())
    for split, mask in cora.masks.items():
        np.save(raw / f"{split}_mask.npy", mask.numpy())
    nodes = NodeOptions(
        features=raw / "x.npy",
        labels=raw / "y.npy",
        masks={m: raw / f"{m}.npy" for m in ("train_mask", "val_mask", "test_mask")},
    )
    out = tmp_path_factory.mktemp("cora-ingested") / "cora"
    ingest(IngestOptions(out=out, edges=[raw / "edge_index.npy"], nodes=nodes))
    return out


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("self_loop", [True, False])
def test_row_edges_equal_the_coo_path_edge_for_edge(tmp_path, model, self_loop):
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.modes.row_edges import graph_tensors, row_edges
    from gnntrain.plan_types import RunSettings

    data = load_graph_dir(_ingested_generated(tmp_path, DIRECTED))
    cfg = compose(
        DIRECTED + [f"model={model}", f"model.self_loop={self_loop}", "train.dtype=float64"]
    )
    settings = RunSettings.of(cfg)
    streamed = row_edges(data, settings)
    src, dst, w = graph_tensors(data, settings)
    rng = np.random.default_rng(0)
    rows = rng.permutation(data.num_nodes)[:90]  # any rows, in any order
    d, s, ww = streamed.rows(rows)
    # the COO path's edges of the same rows, in its order: by position in `rows`, stably
    position = torch.full((data.num_nodes,), -1, dtype=torch.int64)
    position[torch.from_numpy(rows)] = torch.arange(rows.size)
    held = position[dst] >= 0
    order = torch.argsort(position[dst][held], stable=True)
    assert torch.equal(d, position[dst][held][order]) and torch.equal(s, src[held][order])
    assert torch.equal(ww, w[held][order])


LAYOUTS = {
    "1D p=2": ["hardware.ranks_per_node=2"],
    "1D p=3": ["hardware.ranks_per_node=3"],
    "1.5D p=4 c=2": ["hardware.ranks_per_node=4", "mode.replication=2"],
}


SUPERGCN = ["mode=supergcn", "mode.bits=32"]
# every saved tensor above 64 KiB on the disk tier (gnntrain/modes/saved_tier.py)
DISK = "mode.host_budget=0"
# HongTu's gather engine with every vertex table on the disk tier
HONGTU_DISK = ["mode=hongtu", "mode.host_budget=0", "mode.chunks=2"]


@requires_shared
def test_multi_rank_modes_on_ingested_cora_never_build_edge_lists(cora_folder, train, monkeypatch):
    graph = ["dataset=files", f"dataset.path={cora_folder}"]
    reference = single_losses(train, graph + EXACT)
    forbid_edge_lists(monkeypatch, "a multi-rank prepare")
    runs = [["mode=partition", DISK] + layout for layout in LAYOUTS.values()]
    # CAGNET's transposed blocks: an ingested graph is symmetric, its out-edges are its in-edges
    runs += [["mode=partition", "mode.comm=cagnet", "hardware.ranks_per_node=3"]]
    runs += [
        SUPERGCN + [DISK, "hardware.ranks_per_node=2"],
        SUPERGCN + ["hardware.ranks_per_node=3"],
    ]
    runs += [
        HONGTU_DISK + ["hardware.ranks_per_node=2"],
        ["mode=hongtu", "hardware.ranks_per_node=3"],
    ]
    for run in runs:
        summary = train(graph + EXACT + KAMINPAR + run)
        assert summary["partition"]["partitioner"] == "kaminpar", run
        assert_exact(summary["losses"], reference)


def test_multi_rank_modes_on_a_directed_ingested_graph_never_build_edge_lists(
    train, tmp_path, monkeypatch
):
    graph = ["dataset=files", f"dataset.path={_ingested_generated(tmp_path, DIRECTED)}"]
    graph += ["model.self_loop=true", "model.layers=3"]
    reference = single_losses(train, graph + EXACT)
    forbid_edge_lists(monkeypatch, "a multi-rank prepare")
    for run in (
        ["mode=partition", DISK] + LAYOUTS["1D p=3"],
        ["mode=partition"] + LAYOUTS["1.5D p=4 c=2"],
        SUPERGCN + ["hardware.ranks_per_node=2", "mode.aggregation=pre"],
        SUPERGCN + [DISK, "hardware.ranks_per_node=3"],
        HONGTU_DISK + ["hardware.ranks_per_node=3"],
        ["mode=mop", "hardware.ranks_per_node=3"],
    ):
        assert_exact(train(graph + EXACT + KAMINPAR + run)["losses"], reference)
    # HyScale samples from the whole graph in every trainer (approximate): read from the CSR too
    hyscale = [
        "mode=hyscale",
        "mode.fanouts=[5,5,5]",
        "train.epochs=2",
        "hardware.ranks_per_node=2",
    ]
    sampled = train(graph + hyscale)
    assert sampled["status"] == "completed"


@pytest.mark.parametrize("aggregation", ["pre", "post", "hybrid"])
def test_supergcn_rows_per_pair_from_the_csr_equal_the_whole_graph_split(tmp_path, aggregation):
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.modes.supergcn.prepare import _streamed_grid
    from gnntrain.partition import partition_graph
    from gnntrain.partition.cover import pair_grid, split_cut_edges
    from gnntrain.plan_types import RunSettings

    data = load_graph_dir(_ingested_generated(tmp_path, DIRECTED))
    settings = RunSettings.of(compose(DIRECTED + ["model.self_loop=true"]))
    src, dst = data.edges(True)
    part, _ = partition_graph(
        src.numpy(), dst.numpy(), data.num_nodes, 3, settings.partitioner, "g"
    )
    inverse = part.inverse
    splits, _ = split_cut_edges(
        inverse[src.numpy()], inverse[dst.numpy()], part.offsets, aggregation
    )
    from gnntrain.modes.row_edges import row_edges

    assert _streamed_grid(row_edges(data, settings), part, aggregation) == pair_grid(splits, 3)


def test_the_store_is_written_a_part_at_a_time_and_equals_the_whole_prepare(
    tmp_path, cache_dir, monkeypatch
):
    """Each part is prepared alone (ranks=[r]) and written before the next is made; what the ranks
    open equals the parts of one whole-graph prepare."""
    from gnntrain.launch.shards import ensure_store, open_shard, prepare_in_memory
    from gnntrain.modes import mode_spec
    from gnntrain.plan import build_plan

    folder = _ingested_generated(tmp_path, DIRECTED)
    plan = build_plan(
        compose(
            ["dataset=files", f"dataset.path={folder}", f"cache_dir={cache_dir}", "mode=partition"]
            + KAMINPAR
            + ["hardware.ranks_per_node=3"]
        )
    )
    whole = prepare_in_memory(plan)
    spec = mode_spec("partition")
    calls = []

    def one_part_at_a_time(mode, data, part, ranks=None):
        calls.append(ranks)
        return prepare(mode, data, part, ranks)

    prepare = spec.prepare
    monkeypatch.setitem(spec.__dict__, "prepare", one_part_at_a_time)  # a frozen dataclass
    directory, meta, _ = ensure_store(plan)
    assert calls == [[0], [1], [2]]
    assert meta["partition"]["partitioner"] == "kaminpar" and meta["num_parts"] == 3
    for rank, expected in enumerate(whole.shards):
        shard, _ = open_shard(plan, directory, rank)
        for got, want in zip(shard.edges, expected.edges):
            assert torch.equal(got, want)
        assert torch.equal(shard.features, expected.features)
        assert torch.equal(shard.global_ids, expected.global_ids)


def test_metis_partitions_a_symmetric_ingested_graph_from_its_csr(tmp_path, cache_dir, monkeypatch):
    """The same input as from the edge lists, so the same parts, without them."""
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.partition import partition_graph
    from gnntrain.plan import build_plan, plan_mode

    folder = _ingested_generated(tmp_path, ["dataset=csbm", "dataset.num_nodes=500"])
    plan = build_plan(
        compose(
            ["dataset=files", f"dataset.path={folder}", f"cache_dir={cache_dir}", "mode=partition"]
            + ["partitioner=metis", "hardware.ranks_per_node=3"]
        )
    )
    lists = load_graph_dir(folder)
    cfg = plan.settings.partitioner
    expected, _ = partition_graph(lists.src.numpy(), lists.dst.numpy(), 500, 3, cfg, "lists")
    data = load_graph_dir(folder)
    assert data.symmetric
    forbid_edge_lists(monkeypatch, "a multi-rank prepare")
    part, hit = plan_mode(plan).partition(data, plan)
    assert not hit and np.array_equal(part.parts, expected.parts)
    assert part.metrics == expected.metrics


@pytest.mark.parametrize("self_loop", [True, False])
def test_hongtu_chunk_layout_from_the_csr_equals_the_edge_list_layout(tmp_path, self_loop):
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.modes.hongtu.chunking import graph_edges, streamed_chunk_layout
    from gnntrain.modes.row_edges import row_edges
    from gnntrain.partition import partition_graph
    from gnntrain.partition.chunks import chunk_layout
    from gnntrain.plan import build_plan, plan_mode

    data = load_graph_dir(_ingested_generated(tmp_path, DIRECTED))
    plan = build_plan(
        compose(
            ["dataset=files", f"dataset.path={tmp_path / 'graph'}", "mode=hongtu"]
            + [f"model.self_loop={self_loop}", "hardware.ranks_per_node=2"]
        )
    )
    mode = plan_mode(plan)
    src, dst = data.edges(self_loop)
    part, _ = partition_graph(
        src.numpy(), dst.numpy(), data.num_nodes, 2, mode.settings.partitioner, "g"
    )
    src_n, dst_n, _ = graph_edges(mode, data, part)
    expected = chunk_layout(src_n.numpy(), dst_n.numpy(), part.offsets, 3)
    got = streamed_chunk_layout(row_edges(data, mode.settings), part, 3)
    assert np.array_equal(got.offsets, expected.offsets)
    assert np.array_equal(got.edge_bounds, expected.edge_bounds)
    assert all(np.array_equal(a, b) for a, b in zip(got.neighbours, expected.neighbours))


MOONSHOT_LIKE = [
    "dataset=csbm",
    "dataset.num_nodes=1500000",
    "dataset.avg_degree=16",
    "dataset.feat_dim=64",
    "model.hidden=64",
    "hardware.ranks_per_node=1",
]
DIRECT_ON_DISK = ["mode=hongtu", "mode.direct=true", "mode.host_budget=0", "mode.chunks=0"]


def test_the_plan_generates_on_disk_what_would_not_fit_in_memory(cache_dir):
    from gnntrain.errors import PlanError
    from gnntrain.plan import build_plan

    base = MOONSHOT_LIKE + DIRECT_ON_DISK + [f"cache_dir={cache_dir}"]
    tight = build_plan(compose(base + ["hardware.host_memory_gb=1.5"]))
    assert tight.config["dataset"]["on_disk"] is True
    assert "generated on disk in" in tight.dataset_note and "would take about" in tight.dataset_note
    roomy = build_plan(compose(base + ["hardware.host_memory_gb=64"]))
    assert roomy.config["dataset"]["on_disk"] is False and roomy.dataset_note == ""
    # a plan that cannot fit names the disk tier before a smaller dataset
    with pytest.raises(PlanError, match=r"Fix: use mode=hongtu with mode\.host_budget=<bytes>"):
        build_plan(compose(MOONSHOT_LIKE + ["mode=single", "hardware.host_memory_gb=1.5"]))


def test_a_graph_generated_on_disk_trains_as_in_memory_without_edge_lists(
    train, cache_dir, monkeypatch
):
    from gnntrain.data.generated_store import generated_folder

    graph = ["dataset=csbm", "dataset.num_nodes=400", "dataset.feat_dim=16"]
    reference = single_losses(train, graph + EXACT)
    on_disk = graph + ["dataset.on_disk=true"]
    assert_exact(train(on_disk + EXACT + ["mode=single"])["losses"], reference, tol=1e-12)
    folder = generated_folder(compose(on_disk + [f"cache_dir={cache_dir}"]))
    written = (folder / "meta.json").stat().st_mtime_ns
    forbid_edge_lists(monkeypatch, "a multi-rank prepare")
    summary = train(on_disk + EXACT + KAMINPAR + ["mode=partition", "hardware.ranks_per_node=2"])
    assert_exact(summary["losses"], reference)
    assert (folder / "meta.json").stat().st_mtime_ns == written  # written once, then reused
