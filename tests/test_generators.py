"""Generated datasets: deterministic, the right sizes, no dense N x N, and
learnable (a GCN clearly beats an MLP on csbm)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CORA, compose, requires_shared

from gnntrain.data import load_dataset
from gnntrain.errors import PlanError


def test_csbm_is_deterministic_and_sized():
    a = load_dataset(compose(["dataset=csbm", "dataset.num_nodes=500", "dataset.feat_dim=8"]))
    b = load_dataset(compose(["dataset=csbm", "dataset.num_nodes=500", "dataset.feat_dim=8"]))
    c = load_dataset(
        compose(["dataset=csbm", "dataset.num_nodes=500", "dataset.feat_dim=8", "dataset.seed=1"])
    )
    assert a.num_nodes == 500 and a.features.shape == (500, 8) and a.num_classes == 7
    assert (
        torch.equal(a.src, b.src)
        and torch.equal(a.features, b.features)
        and a.content_hash == b.content_hash
    )
    assert a.content_hash != c.content_hash and not torch.equal(a.src, c.src)
    # symmetric, no self-loops, no duplicates
    key = set(zip(a.src.tolist(), a.dst.tolist()))
    assert (
        len(key) == a.num_edges
        and all((v, u) in key for u, v in key)
        and all(u != v for u, v in key)
    )
    assert abs(a.num_edges / a.num_nodes - 4.0) < 0.5  # avg_degree 4
    assert (a.train_mask & a.test_mask).sum() == 0


def test_rmat_is_deterministic_power_law():
    cfg = [
        "dataset=rmat",
        "dataset.num_nodes=4096",
        "dataset.num_edges=40000",
        "dataset.feat_dim=8",
    ]
    a, b = load_dataset(compose(cfg)), load_dataset(compose(cfg))
    assert torch.equal(a.src, b.src) and torch.equal(a.labels, b.labels)
    deg = torch.bincount(a.dst, minlength=a.num_nodes).float()
    assert deg.max() > 8 * deg.mean()  # heavy tail
    assert a.labels.unique().numel() >= 4  # labels spread over the classes
    directed = load_dataset(compose(cfg + ["dataset.symmetrize=false"]))
    assert directed.num_edges < a.num_edges


def _accuracy(data, aggregate_hops: int) -> float:
    """Train a 2-layer model with or without neighbour aggregation (GCN vs MLP)."""
    from gnntrain.models import ModelSpec, SparseAdjacency, build_model, edge_weights

    src, dst = data.edges(True)
    adj = SparseAdjacency(
        dst,
        src,
        edge_weights("gcn", src, dst, data.num_nodes),
        data.num_nodes,
        data.num_nodes,
        kernel="torch",
    )
    agg = adj.spmm if aggregate_hops else (lambda h: h)
    model = build_model(
        ModelSpec("gcn", data.feat_dim, 16, data.num_classes, 2, 0.5), 0, torch.float32
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(100):
        model.train()
        loss = torch.nn.functional.cross_entropy(
            model(data.features, agg)[data.train_mask], data.labels[data.train_mask]
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    pred = model(data.features, agg).argmax(1)
    return float((pred[data.test_mask] == data.labels[data.test_mask]).float().mean())


COMMUNITIES = [
    "dataset=communities",
    "dataset.num_nodes=20000",
    "dataset.feat_dim=4",
    "dataset.leaf_size=40",
]


def _homophily_and_volume(overrides):
    from gnntrain.partition import compute_metrics
    from gnntrain.partition.partitioners import metis_parts

    data = load_dataset(compose(overrides))
    src, dst, y = data.src.numpy(), data.dst.numpy(), data.labels.numpy()
    parts = metis_parts(src, dst, data.num_nodes, 4, 0, "nnz")
    return data, float((y[src] == y[dst]).mean()), compute_metrics(src, dst, parts, 4)


def test_communities_are_power_law_local_and_as_homophilous_as_asked():
    data, homophily, metrics = _homophily_and_volume(COMMUNITIES)
    degree = np.bincount(data.dst.numpy(), minlength=data.num_nodes)
    # power law: hubs far above the median, most nodes below the mean
    assert degree.max() > 20 * np.median(degree) and np.median(degree) < degree.mean()
    assert 0.7 < homophily < 0.9  # ogbn-products: 0.81
    # locality: METIS's halo at p = 4 is a fraction of csbm's on a graph of the same size and degree
    csbm = ["dataset=csbm", "dataset.num_nodes=20000", "dataset.feat_dim=4"]
    avg = data.num_edges / data.num_nodes
    _, _, csbm_metrics = _homophily_and_volume(csbm + [f"dataset.avg_degree={avg:.1f}"])
    assert metrics.total_volume < 0.6 * csbm_metrics.total_volume, (metrics, csbm_metrics)
    # purity tunes homophily; without local edges METIS finds no structure to exploit
    _, mixed, _ = _homophily_and_volume(COMMUNITIES + ["dataset.label_purity=0.3"])
    _, _, flat = _homophily_and_volume(COMMUNITIES + ["dataset.locality=[0,0,0]"])
    assert mixed < homophily - 0.4 and flat.total_volume > 1.5 * metrics.total_volume


@pytest.mark.parametrize(
    "override,option",
    [
        ("dataset.locality=[0.6,0.5,0.1]", "dataset.locality"),
        ("dataset.locality=[0.5,0.2]", "dataset.locality"),
        ("dataset.degree_exponent=2", "dataset.degree_exponent"),
        ("dataset.label_purity=1.5", "dataset.label_purity"),
    ],
)
def test_communities_refuse_impossible_parameters(override, option):
    from gnntrain.plan import build_plan

    with pytest.raises(PlanError) as info:
        build_plan(compose(COMMUNITIES + [override]))
    assert info.value.option == option


def test_csbm_is_learnable_and_graph_matters():
    data = load_dataset(compose(["dataset=csbm"]))
    gcn, mlp = _accuracy(data, 1), _accuracy(data, 0)
    assert gcn > 0.7 and gcn > mlp + 0.15, (gcn, mlp)


def test_rmat_labels_need_the_graph():
    data = load_dataset(
        compose(["dataset=rmat", "dataset.num_nodes=4096", "dataset.num_edges=40000"])
    )
    gcn, mlp = _accuracy(data, 1), _accuracy(data, 0)
    assert gcn > mlp + 0.05, (gcn, mlp)


@requires_shared
def test_cora_has_dgl_standard_shape(cache_dir):
    data = load_dataset(compose(CORA + [f"cache_dir={cache_dir}"]))
    assert (data.num_nodes, data.num_edges, data.feat_dim, data.num_classes) == (
        2708,
        10556,
        1433,
        7,
    )
    assert [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)] == [
        140,
        500,
        1000,
    ]
    src, dst = data.edges(True)
    assert src.numel() == 10556 + 2708 and bool((src == dst).sum() == 2708)


@pytest.mark.dgl
@requires_shared
def test_cora_as_a_dgl_graph(cache_dir):
    g = load_dataset(compose(CORA + [f"cache_dir={cache_dir}"])).graph(self_loop=True)
    assert g.num_edges() == 10556 + 2708 and "feat" in g.ndata


@pytest.mark.slow
@pytest.mark.parametrize(
    "dataset,extra", [("rmat", "dataset.num_edges=10000000"), ("csbm", "dataset.avg_degree=20")]
)
def test_one_million_nodes_twenty_million_edges_under_a_minute(dataset, extra):
    """Scale check (slow; the small determinism/size tests above cover the same code)."""
    import time

    start = time.perf_counter()
    data = load_dataset(
        compose([f"dataset={dataset}", "dataset.num_nodes=1000000", extra, "dataset.feat_dim=16"])
    )
    assert time.perf_counter() - start < 60
    assert data.num_nodes == 1_000_000 and data.num_edges > 18_000_000


# ------------------------------------------------------------ gnntrain generate: the same graph, on
# disk
SMALL = {
    "csbm": [
        "dataset=csbm",
        "dataset.num_nodes=3000",
        "dataset.feat_dim=6",
        "dataset.avg_degree=6",
    ],
    "rmat": [
        "dataset=rmat",
        "dataset.num_nodes=2000",
        "dataset.num_edges=9000",
        "dataset.feat_dim=6",
    ],
    "communities": [
        "dataset=communities",
        "dataset.num_nodes=3000",
        "dataset.feat_dim=6",
        "dataset.avg_degree=8",
        "dataset.leaf_size=40",
    ],
    "rmat-directed": [
        "dataset=rmat",
        "dataset.num_nodes=2000",
        "dataset.num_edges=9000",
        "dataset.feat_dim=6",
        "dataset.symmetrize=false",
    ],
}


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 1000 edge draws and 512 rows, so a small graph takes every multi-block path (both
    sides patched alike: the block size shapes the graph)."""
    import gnntrain.data.generators as generators
    import gnntrain.data.generators.communities as communities
    import gnntrain.data.generators.csbm as csbm
    import gnntrain.data.generators.rmat as rmat
    import gnntrain.data.ingest.generated as generated

    for module in (csbm, rmat, communities):
        monkeypatch.setattr(module, "EDGE_BLOCK", 1000)
    for module in (generators, rmat, generated):  # csbm and communities read the package's
        monkeypatch.setattr(module, "ROW_BLOCK", 512)


@pytest.mark.parametrize("graph", list(SMALL))
def test_generate_writes_the_graph_of_the_dataset_block_by_block(graph, small_blocks, tmp_path):
    from gnntrain.data.graph import hash_tensors
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.data.ondisk import load_graph_dir, open_graph_dir

    cfg = compose(SMALL[graph])
    summary = write_generated(cfg.dataset, tmp_path / graph)
    on_disk, in_memory = load_graph_dir(tmp_path / graph), load_dataset(cfg)
    for name in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(on_disk, name), getattr(in_memory, name)), name
    assert (
        summary["digest"]
        == open_graph_dir(tmp_path / graph).digest
        == hash_tensors(
            in_memory.src,
            in_memory.dst,
            in_memory.features,
            in_memory.labels,
            *in_memory.masks.values(),
        )
    )
    assert summary["generated"]["content_hash"] == in_memory.content_hash
    assert summary["edges_read"] > 1000 and summary["num_edges"] == in_memory.num_edges


def test_cli_generate_then_plan_and_its_errors(tmp_path, monkeypatch, capsys):
    from conftest import run_cli

    from gnntrain.cli import main

    args = ["generate", "--out", "g"] + SMALL["csbm"]
    res = run_cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "generated g" in res.stdout and "dataset=files dataset.path=" in res.stdout
    assert "generate: drawing edges" in res.stderr
    plan = run_cli(
        ["plan", "dataset=files", "dataset.path=g", "mode=single", "hydra.run.dir=plan"],
        cwd=tmp_path,
    )
    assert plan.returncode == 0, plan.stderr
    monkeypatch.chdir(tmp_path)  # the refusals in this process: one line each, nothing left behind
    for argv, words in (
        (args, "already exists"),
        (["generate", "--out", "c", "dataset=cora"], "not a generated graph"),
        (["generate", "--out", "c", "dataset=csbm", "model=gat"], "only dataset=NAME"),
        (["generate", "--out", "c", "dataset=csbm", "dataset.avg_degree=-1"], "dataset.avg_degree"),
        (["generate", "--out", "c", "dataset=csbm", "dataset.num_nodse=5"], "num_nodse"),
        (["generate", "--out", "c", "dataset=nosuch"], "nosuch"),
    ):
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "c").exists() and not any(
        p.name.startswith(".c.partial") for p in tmp_path.iterdir()
    )


def test_generate_removes_the_partial_folders_of_dead_runs_and_stops_on_sigterm(tmp_path):
    import os
    import signal

    from gnntrain.data.ingest.command import terminate_as_interrupt
    from gnntrain.data.ingest.generated import write_generated

    dead, live = tmp_path / ".g.partial-999999999", tmp_path / f".g.partial-{os.getppid()}"
    for folder in (dead, live):
        folder.mkdir()
    write_generated(compose(SMALL["csbm"]).dataset, tmp_path / "g")
    assert not dead.exists() and live.exists()  # a killed run's leftovers go; a running one's stay
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_new_generators_parameters_are_its_config_and_all_enter_the_content_hash():
    """A new generated dataset is one module (a DatasetConfig subclass with its parameters, its
    blocks, one register_generator) plus one YAML (here a ConfigStore node). Its new parameter
    composes as dataset.<name>, is checked by type, and changes the content hash without being
    listed anywhere."""
    from dataclasses import dataclass

    import numpy as np
    from hydra.core.config_store import ConfigStore
    from hydra.errors import ConfigCompositionException

    from gnntrain.config.schema import DatasetConfig
    from gnntrain.data import load_dataset
    from gnntrain.data.generators import (
        GENERATORS,
        Generator,
        GraphBlocks,
        fractions,
        params_hash,
        register_generator,
    )

    @dataclass
    class RingConfig(DatasetConfig):
        hops: int = 1  # each node links to the next `hops` nodes around the ring

    def ring_blocks(cfg) -> GraphBlocks:
        n, hops = int(cfg.num_nodes), int(cfg.hops)
        src = np.repeat(np.arange(n), hops)
        dst = (src + np.tile(np.arange(1, hops + 1), n)) % n
        return GraphBlocks(
            name="ring",
            num_nodes=n,
            feat_dim=int(cfg.feat_dim),
            num_classes=2,
            symmetrize=True,
            seed=0,
            fractions=fractions(cfg),
            content_hash="ring-" + params_hash("ring", cfg),
            origin="generated (ring)",
            edge_blocks=lambda: iter([(src, dst)]),
            feature_rows=lambda lo, hi: np.ones((hi - lo, int(cfg.feat_dim)), np.float32),
            labels=lambda indptr, indices, features: np.arange(n) % 2,
        )

    register_generator(
        Generator(
            name="ring",
            config=RingConfig,
            blocks=ring_blocks,
            directed_edges=lambda ds: 2 * int(ds.num_nodes) * int(ds.hops),
        )
    )
    store = ConfigStore.instance()
    store.store(
        group="dataset",
        name="ring",
        node={
            "defaults": ["ring_schema"],
            "name": "ring",
            "source": "generated",
            "num_nodes": 60,
            "feat_dim": 4,
        },
    )
    try:
        hashes = {}
        for hops in (1, 2):
            cfg = compose(["dataset=ring", f"dataset.hops={hops}"])
            data = load_dataset(cfg)
            assert data.num_edges == 2 * 60 * hops
            hashes[hops] = data.content_hash
        assert hashes[1] != hashes[2]
        # a descriptive field leaves it alone
        assert (
            load_dataset(compose(["dataset=ring", "dataset.description=another"])).content_hash
            == hashes[1]
        )
        with pytest.raises(ConfigCompositionException):
            compose(["dataset=ring", "dataset.hops=many"])
        with pytest.raises(ConfigCompositionException):
            compose(["dataset=csbm", "dataset.hops=2"])  # not a csbm parameter
    finally:
        GENERATORS.remove("ring")
        for entry in ("ring.yaml", "ring_schema.yaml"):
            store.repo["dataset"].pop(entry, None)


def test_dataset_sources_are_registered_and_an_unknown_one_is_named(tmp_path):
    """dataset.source picks a registered DatasetSource (generated, files, dgl, ogb): the plan sizes
    and checks a dataset through it and the loader loads through it; a new source is one
    registration, an unknown one is one error naming the sources there are, a taken name is
    refused."""
    import dataclasses

    from gnntrain.data.sources import SOURCES, DatasetSource, register_source
    from gnntrain.errors import DatasetError
    from gnntrain.plan import build_plan
    from gnntrain.registry import DuplicateNameError

    assert {"generated", "files", "dgl", "ogb"} <= set(SOURCES)
    loaded = []

    def load(cfg):  # a source that serves the generated csbm graph under another name
        loaded.append(cfg.dataset.name)
        return SOURCES["generated"].load(cfg)

    register_source(DatasetSource("mirror", load=load, directed_edges=lambda ds: 1234))
    try:
        cfg = compose(["dataset=csbm", "dataset.source=mirror", "dataset.num_nodes=300"])
        assert build_plan(cfg).memory_per_rank.total_bytes > 0
        from gnntrain.data import dataset_sizes

        assert dataset_sizes(cfg.dataset)[1] == 1234
        assert load_dataset(cfg).num_nodes == 300 and loaded == ["csbm"]
        with pytest.raises(DuplicateNameError):
            register_source(dataclasses.replace(SOURCES["mirror"], load=lambda cfg: None))
    finally:
        SOURCES.remove("mirror")
    with pytest.raises(DatasetError, match="unknown source 'nowhere'; use one of dgl, files"):
        load_dataset(compose(["dataset=csbm", "dataset.source=nowhere"]))
