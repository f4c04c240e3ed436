"""User edge weights end to end (issue #56, docs/design.md#edge-weights): ``gnntrain ingest
--weight-column`` stores them with the CSR (a bad weight is one error naming its row), GCN
aggregates with D_w^-1/2 (A_w + I) D_w^-1/2 on every kernel, forward and backward, and every exact
mode trains edge-weighted GCN and SAGE as ``mode=single`` does, on an ingested Cora and a generated
graph; the plan refuses in one line what cannot use the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import EXACT, assert_exact, compose, requires_shared, single_losses

from gnntrain.errors import DatasetError, PlanError

CSBM_W = ["dataset=csbm", "dataset.num_nodes=600", "dataset.edge_weights=true"]
SMALL = ["model.hidden=8", "train.epochs=2"]


# ------------------------------------------------------------------ ingest
def _nodes(tmp_path, n=4):
    from gnntrain.data.ingest import NodeOptions

    np.save(tmp_path / "x.npy", np.arange(n * 3, dtype=np.float32).reshape(n, 3))
    np.save(tmp_path / "y.npy", np.arange(n) % 2)
    return NodeOptions(features=tmp_path / "x.npy", labels=tmp_path / "y.npy")


def _write_edges(tmp_path, kind: str, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"edges.{kind}"
    src, dst, w = zip(*rows)
    if kind == "csv":
        path.write_text("src,dst,w\n" + "".join(f"{s},{d},{x}\n" for s, d, x in rows))
    else:
        pq.write_table(pa.table({"src": list(src), "dst": list(dst), "w": list(w)}), path)
    return path


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_ingest_stores_weights_with_the_csr(tmp_path, kind):
    """Each CSR entry holds its edge's weight (the reverse edge symmetrising adds weighs the same; a
    repeated edge keeps its largest weight), float32, in meta.json and in the digest."""
    from gnntrain.data.ingest import IngestOptions, ingest
    from gnntrain.data.ondisk import load_graph_dir, open_graph_dir

    rows = [(0, 1, 1.5), (1, 2, 2.0), (2, 3, 0.25), (1, 0, 3.0)]
    edges = _write_edges(tmp_path, kind, rows)
    opts = dict(edges=[edges], nodes=_nodes(tmp_path))
    summary = ingest(IngestOptions(out=tmp_path / "g", weight_column="w", **opts))
    assert summary["weights"] == "float32" and open_graph_dir(tmp_path / "g").weighted
    data = load_graph_dir(tmp_path / "g")
    assert data.csr_weights.dtype == np.float32
    got = {(int(s), int(d)): float(w) for s, d, w in zip(data.src, data.dst, data.edge_weight)}
    assert got == {(0, 1): 3.0, (1, 0): 3.0, (1, 2): 2.0, (2, 1): 2.0, (2, 3): 0.25, (3, 2): 0.25}
    plain = ingest(IngestOptions(out=tmp_path / "plain", **opts))
    assert plain["weights"] is None and plain["digest"] != summary["digest"]
    rows[2] = (2, 3, 0.5)
    other = ingest(
        IngestOptions(
            out=tmp_path / "g2",
            weight_column="w",
            edges=[_write_edges(tmp_path, kind, rows)],
            nodes=opts["nodes"],
        )
    )
    assert other["digest"] != summary["digest"]  # the digest covers the weights


@pytest.mark.parametrize("kind", ["csv", "parquet"])
@pytest.mark.parametrize(
    "bad,what", [("nan", "missing or NaN"), ("-1.5", "negative"), ("inf", "infinite")]
)
def test_a_bad_weight_is_one_error_naming_its_row(tmp_path, kind, bad, what):
    from gnntrain.data.ingest import IngestOptions, ingest

    rows = [(0, 1, 1.0), (1, 2, 2.0), (2, 3, float(bad))]
    edges = _write_edges(tmp_path, kind, rows)
    with pytest.raises(DatasetError) as info:
        ingest(
            IngestOptions(
                out=tmp_path / "g", edges=[edges], weight_column="w", nodes=_nodes(tmp_path)
            )
        )
    message = str(info.value)
    # the CSV's file line (the header is line 1), the Parquet file's 1-based row
    where = "line 4" if kind == "csv" else "row 3"
    assert f"edges.{kind} {where}:" in message and what in message, message
    assert "\n" not in message and "Fix that row" in message
    assert not (tmp_path / "g").exists()


def test_weights_from_a_npy_beside_the_edges(tmp_path):
    from gnntrain.data.ingest import IngestOptions, ingest
    from gnntrain.data.ondisk import load_graph_dir

    np.save(tmp_path / "e.npy", np.array([[0, 1, 2], [1, 2, 3]]))
    np.save(tmp_path / "w.npy", np.array([0.5, 2.0, 4.0]))
    ingest(
        IngestOptions(
            out=tmp_path / "g",
            edges=[tmp_path / "e.npy"],
            weights=tmp_path / "w.npy",
            nodes=_nodes(tmp_path),
            symmetrize=False,
        )
    )
    data = load_graph_dir(tmp_path / "g")
    assert data.edge_weight.tolist() == [0.5, 2.0, 4.0]
    np.save(tmp_path / "w.npy", np.array([0.5, -2.0, 4.0]))
    with pytest.raises(DatasetError, match=r"w\.npy row 2: the edge weight -2\.0 is negative"):
        ingest(
            IngestOptions(
                out=tmp_path / "g3",
                edges=[tmp_path / "e.npy"],
                weights=tmp_path / "w.npy",
                nodes=_nodes(tmp_path),
            )
        )
    np.save(tmp_path / "w.npy", np.array([0.5, 2.0]))
    with pytest.raises(DatasetError, match="one weight per edge"):
        ingest(
            IngestOptions(
                out=tmp_path / "g4",
                edges=[tmp_path / "e.npy"],
                weights=tmp_path / "w.npy",
                nodes=_nodes(tmp_path),
            )
        )


# ------------------------------------------------------------------ the formula
def _tiny():
    from gnntrain.data.graph import GraphData

    src = torch.tensor([0, 1, 1, 2, 2, 3, 0, 3])
    dst = torch.tensor([1, 0, 2, 1, 3, 2, 3, 0])
    w = torch.tensor([0.5, 0.5, 2.0, 2.0, 1.5, 1.5, 3.0, 3.0], dtype=torch.float32)
    n = 4
    return GraphData(
        name="tiny",
        num_nodes=n,
        src=src,
        dst=dst,
        features=torch.randn(n, 3),
        labels=torch.zeros(n, dtype=torch.int64),
        train_mask=torch.ones(n, dtype=torch.bool),
        val_mask=torch.ones(n, dtype=torch.bool),
        test_mask=torch.ones(n, dtype=torch.bool),
        num_classes=2,
        content_hash="tiny",
        edge_weight=w,
    )


def _dense_weighted(data, model: str, self_loop: bool) -> torch.Tensor:
    """Â of the weighted formulas, built densely: a[v, u] for the edge u→v."""
    n = data.num_nodes
    a = torch.zeros(n, n, dtype=torch.float64)
    a[data.dst, data.src] = data.edge_weight.double()
    if self_loop:
        a += torch.eye(n, dtype=torch.float64)
    if model == "gcn":  # D_w^-1/2 (A_w + I) D_w^-1/2 (in- and out-degrees)
        d_in, d_out = a.sum(1), a.sum(0)
        return d_in.rsqrt().unsqueeze(1) * a * d_out.rsqrt().unsqueeze(0)
    if model == "sage":  # Σ w_uv h_u / Σ w_uv
        return a / a.sum(1, keepdim=True)
    return a  # gin: Σ w_uv h_u


@pytest.mark.parametrize("kernel", ["torch", "native"])
@pytest.mark.parametrize("model,self_loop", [("gcn", True), ("sage", False), ("gin", False)])
def test_single_aggregates_with_the_weighted_formula(kernel, model, self_loop):
    """mode=single's adjacency (graph_tensors) with model.edge_weight is the dense weighted formula,
    forward and transposed backward (the native kernel takes per-edge values both ways)."""
    from gnntrain.models import SparseAdjacency, kernels
    from gnntrain.modes.row_edges import graph_tensors
    from gnntrain.plan_types import RunSettings

    data = _tiny()
    settings = RunSettings.of(
        compose(
            [
                f"model={model}",
                "model.edge_weight=true",
                f"model.self_loop={self_loop}",
                "train.dtype=float64",
            ]
        )
    )
    src, dst, w = graph_tensors(data, settings)
    assert w.dim() == 1  # one value per edge: the weighted kernel path
    adj = SparseAdjacency(dst, src, w, 4, 4, kernel=kernel)
    dense = _dense_weighted(data, model, self_loop)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, 2, dtype=torch.float64)
    kernels.SPMM_CALLS.clear()
    (adj.spmm(x) @ weight).pow(2).sum().backward()
    assert kernels.SPMM_CALLS == {"weighted": 1}
    x_ref = x.detach().clone().requires_grad_(True)
    (dense @ x_ref @ weight).pow(2).sum().backward()
    torch.testing.assert_close(adj.spmm(x.detach()), dense @ x.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-12, atol=1e-12)


def test_unit_weights_are_the_unweighted_model():
    """Weights of 1 give the unweighted normalisation's values."""
    from gnntrain.models.norm import edge_values, edge_weight_values, edge_weights

    data = _tiny()
    src, dst = data.edges(True)
    for norm in ("gcn", "mean", "sum"):
        torch.testing.assert_close(
            edge_values(norm, src, dst, 4, torch.ones(src.numel(), dtype=torch.float64)),
            edge_weight_values(edge_weights(norm, src, dst, 4)),
        )


# ------------------------------------------------------------------ every exact mode
@pytest.fixture(scope="module")
def weighted_cora(cora, tmp_path_factory):
    """Cora ingested with a weight per undirected edge (a seeded hash of the pair)."""
    from gnntrain.data.generators import pair_weights
    from gnntrain.data.ingest import ingest_arrays

    out = tmp_path_factory.mktemp("cora-weighted") / "cora"
    src, dst = cora.src.numpy(), cora.dst.numpy()
    ingest_arrays(
        out,
        np.stack([src, dst]),
        cora.features,
        cora.labels,
        masks=dict(cora.masks),
        edge_weight=pair_weights(7, src, dst),
    )
    return out


MODES = [
    ("partition", 2, []),
    ("partition", 3, []),
    ("partition", 4, ["mode.replication=2"]),
    ("supergcn", 2, ["mode.bits=32"]),
    ("supergcn", 3, ["mode.bits=32"]),
    ("mop", 2, []),
    ("mop", 3, []),
    ("hongtu", 2, ["mode.chunks=3"]),
    ("hongtu", 3, ["mode.chunks=2"]),
    ("hongtu", 1, ["mode.direct=true", "mode.chunks=3", "kernel=native"]),
]


def _graph(name: str, folder) -> list:
    return CSBM_W if name == "csbm" else ["dataset=files", f"dataset.path={folder}"]


@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize(
    "mode,p,extra", MODES, ids=[f"{m}-p{p}{'-' + e[0] if e else ''}" for m, p, e in MODES]
)
def test_every_exact_mode_equals_single_with_edge_weights(
    train, request, graph, model, mode, p, extra
):
    folder = request.getfixturevalue("weighted_cora") if graph == "cora" else None
    run = _graph(graph, folder) + EXACT + SMALL + [f"model={model}", "model.edge_weight=true"]
    ref = single_losses(train, run)
    unweighted = single_losses(train, [o for o in run if o != "model.edge_weight=true"])
    assert not np.allclose(ref, unweighted)  # the weights change the model
    s = train(run + [f"mode={mode}", f"hardware.ranks_per_node={p}"] + extra)
    assert s["status"] == "completed" and s["world_size"] == p
    assert_exact(s["losses"], ref)
    if "mode.direct=true" not in extra:  # the direct path calls the native loops itself
        assert s["spmm_calls"]["weighted"] > 0 and not s["spmm_calls"].get("unweighted")


def test_cagnet_equals_single_with_edge_weights(train):
    run = CSBM_W + EXACT + SMALL + ["model=sage", "model.edge_weight=true"]
    s = train(run + ["mode=partition", "mode.comm=cagnet", "hardware.ranks_per_node=2"])
    assert_exact(s["losses"], single_losses(train, run))


# ------------------------------------------------------------------ plan refusals
def _plan(overrides):
    from gnntrain.plan import build_plan

    return build_plan(compose(overrides))


@pytest.mark.parametrize(
    "overrides,says",
    [
        (["dataset=csbm", "model=gcn"], "dataset 'csbm' has no edge weights"),
        (CSBM_W + ["model=gat", "mode=single"], "model 'gat' cannot use edge weights"),
        (
            CSBM_W + ["model=gcn", "mode=hyscale", "hardware.ranks_per_node=2"],
            "mode 'hyscale' cannot aggregate with edge weights",
        ),
    ],
    ids=["no-weights", "gat", "hyscale"],
)
def test_the_plan_refuses_what_cannot_use_weights_in_one_line(cache_dir, overrides, says):
    with pytest.raises(PlanError) as info:
        _plan([f"cache_dir={cache_dir}", "model.edge_weight=true"] + overrides)
    assert info.value.option == "model.edge_weight" and says in str(info.value)
    assert "\n" not in str(info.value)


def test_an_ingested_graph_without_weights_is_refused(cache_dir, tmp_path):
    from gnntrain.data.ingest import IngestOptions, ingest

    rows = [(0, 1, 1.0), (1, 2, 2.0)]
    ingest(
        IngestOptions(
            out=tmp_path / "g", edges=[_write_edges(tmp_path, "csv", rows)], nodes=_nodes(tmp_path)
        )
    )
    with pytest.raises(PlanError, match="has no edge weights"):
        _plan(
            [f"cache_dir={cache_dir}", "dataset=files", f"dataset.path={tmp_path / 'g'}"]
            + ["model.edge_weight=true"]
        )


def test_generated_weights_are_the_same_in_memory_and_on_disk(tmp_path):
    """dataset.edge_weights: a seeded weight per undirected pair, the same in the in-memory graph
    and in the folder `gnntrain generate` writes (the same edges, the same order, the same
    float32 values); the option is in the content hash."""
    from gnntrain.data.generators import content_hash, get_generator
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.data.ondisk import load_graph_dir

    ds = compose(CSBM_W).dataset
    memory = get_generator("csbm").generate(ds)
    write_generated(ds, tmp_path / "g")
    disk = load_graph_dir(tmp_path / "g")
    assert torch.equal(memory.src, disk.src) and torch.equal(memory.dst, disk.dst)
    assert torch.equal(memory.edge_weight, disk.edge_weight)
    w = memory.edge_weight
    assert w.dtype == torch.float32 and float(w.min()) >= 0.5 and float(w.max()) < 2.0
    reverse = {(int(s), int(d)): float(x) for s, d, x in zip(memory.src, memory.dst, w)}
    assert all(reverse[(d, s)] == x for (s, d), x in reverse.items())
    assert content_hash("csbm", ds) != content_hash("csbm", compose(CSBM_W[:-1]).dataset)
