"""Regression targets through ``gnntrain ingest`` (issue #56, task=node_regression): target columns
of a node table or a ``--targets`` file (a table keyed by node ID, or a .npy in node order) are
stored as float32 ``targets.npy`` with their names in meta.json and covered by the content digest; a
graph with targets and no labels ingests (0 classes, masks drawn among the nodes with a target),
trains node regression exactly in single and partition, and refuses node classification in one
line; a bad target (not numeric, infinite, a missing column) is one error naming it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch
from conftest import EXACT, assert_exact, compose, run_cli

from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
from gnntrain.data.ondisk import load_graph_dir, open_graph_dir
from gnntrain.errors import DatasetError, PlanError

N = 40


def _graph(tmp_path, n: int = N, seed: int = 0):
    """A small graph as a user keeps it: string IDs, edges in CSV, a node table with two feature
    columns and two target columns (some cells empty)."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"n{i}" for i in range(n)])
    src = rng.integers(0, n, 3 * n)
    dst = rng.integers(0, n, 3 * n)
    ring = np.arange(n)
    src, dst = np.concatenate([src, ring]), np.concatenate([dst, (ring + 1) % n])
    lines = ["src,dst"] + [f"{ids[s]},{ids[d]}" for s, d in zip(src, dst) if s != d]
    (tmp_path / "edges.csv").write_text("\n".join(lines) + "\n")
    feats = rng.standard_normal((n, 2))
    price = 3.0 * feats[:, 0] + rng.standard_normal(n)
    volume = 10.0 + feats[:, 1] ** 2
    rows = ["id,f1,f2,price,volume"]
    for i in range(n):
        p = "" if i % 7 == 3 else f"{price[i]:.6f}"  # a node without a price
        v = "" if i == 5 else f"{volume[i]:.6f}"
        rows.append(f"{ids[i]},{feats[i, 0]:.6f},{feats[i, 1]:.6f},{p},{v}")
    (tmp_path / "nodes.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "edges.csv", tmp_path / "nodes.csv"


def _ingest(tmp_path, out="g", **node_options):
    edges, nodes = _graph(tmp_path)
    node_options.setdefault("features", nodes)
    node_options.setdefault("feature_columns", ["f1", "f2"])
    return ingest(
        IngestOptions(out=tmp_path / out, edges=[edges], nodes=NodeOptions(**node_options))
    )


def test_node_table_targets_are_stored_and_loaded(tmp_path):
    summary = _ingest(tmp_path, target_columns=["price", "volume"])
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert meta["targets"] == ["price", "volume"] and meta["num_classes"] == 0
    stored = np.load(tmp_path / "g" / "targets.npy")
    assert stored.dtype == np.float32 and stored.shape == (N, 2)
    assert np.isnan(stored[3, 0]) and np.isnan(stored[5, 1]) and not np.isnan(stored[5, 0])
    assert int(np.isnan(stored[:, 0]).sum()) == len(range(3, N, 7))
    data = load_graph_dir(tmp_path / "g")
    assert torch.equal(torch.isnan(data.targets), torch.from_numpy(np.isnan(stored)))
    assert (data.labels == -1).all() and data.num_classes == 0
    assert data.feat_dim == 2  # the target columns are not features
    # no labels: the masks are drawn among the nodes with a target (every node has one here)
    assert summary["split"] == {"train_mask": 24, "val_mask": 8, "test_mask": 8}
    assert summary["unlabeled"] == N
    from gnntrain.data import dataset_targets

    ds = compose(["dataset=files", f"dataset.path={tmp_path / 'g'}"]).dataset
    assert dataset_targets(ds) == 2


def test_target_columns_are_neither_features_nor_labels(tmp_path):
    """Without --feature-columns every numeric column but the ID, labels, masks and the targets is
    a feature; a target column named like a label column ('y') is not taken for the labels."""
    edges, nodes = _graph(tmp_path)
    nodes.write_text(nodes.read_text().replace("id,f1,f2,price,volume", "id,f1,f2,y,volume", 1))
    opts = NodeOptions(features=nodes, target_columns=["y", "volume"])
    summary = ingest(IngestOptions(out=tmp_path / "g", edges=[edges], nodes=opts))
    assert summary["feat_dim"] == 2 and summary["num_classes"] == 0
    assert summary["targets"] == ["y", "volume"]


def test_regression_trains_exactly_on_an_ingested_graph(tmp_path, train):
    """task=node_regression on a graph ingested from CSV: partition over 2 ranks gives single's
    float64 losses within 1e-9."""
    _ingest(tmp_path, target_columns=["price", "volume"])
    base = ["dataset=files", f"dataset.path={tmp_path / 'g'}", "task=node_regression", *EXACT]
    single = train(base + ["mode=single"])
    assert single["status"] == "completed"
    assert {"rmse", "mae", "r2"} <= set(single["metrics"]["test"])
    parted = train(base + ["mode=partition", "hardware.ranks_per_node=2"])
    assert parted["status"] == "completed" and parted["world_size"] == 2
    assert np.isfinite(single["losses"]).all() and single["losses"][0] > 0
    assert_exact(parted["losses"], single["losses"])


def test_node_classification_is_refused_on_a_graph_without_labels(tmp_path):
    from gnntrain.plan import build_plan

    _ingest(tmp_path, target_columns=["price"])
    with pytest.raises(PlanError) as err:
        build_plan(compose(["dataset=files", f"dataset.path={tmp_path / 'g'}"]))
    message = str(err.value)
    assert "\n" not in message and "no class labels" in message
    assert "task=node_regression" in message and "price" in message


def test_labels_and_targets_together(tmp_path):
    """With labels too, the graph serves both tasks: classes from the labels, the split among the
    labeled nodes as before."""
    edges, nodes = _graph(tmp_path)
    np.save(tmp_path / "y.npy", np.arange(N) % 3)
    np.save(tmp_path / "t.npy", np.linspace(0.0, 1.0, N))
    opts = NodeOptions(features=nodes, feature_columns=["f1", "f2"], labels=tmp_path / "y.npy")
    plain = ingest(IngestOptions(out=tmp_path / "plain", edges=[edges], nodes=opts))
    opts.targets = tmp_path / "t.npy"
    both = ingest(IngestOptions(out=tmp_path / "both", edges=[edges], nodes=opts))
    assert both["num_classes"] == 3 and both["targets"] == ["target"]
    assert both["split"] == plain["split"] and both["digest"] != plain["digest"]
    for name in ("train_mask", "val_mask", "test_mask"):
        assert np.array_equal(
            np.load(tmp_path / "both" / f"{name}.npy"), np.load(tmp_path / "plain" / f"{name}.npy")
        )


def test_a_folder_without_targets_keeps_its_digest(tmp_path):
    """Without targets the digest is hash_tensors of the loaded graph, as it always was."""
    from gnntrain.data.graph import hash_tensors

    edges, nodes = _graph(tmp_path)
    np.save(tmp_path / "y.npy", np.arange(N) % 2)
    opts = NodeOptions(features=nodes, feature_columns=["f1", "f2"], labels=tmp_path / "y.npy")
    summary = ingest(IngestOptions(out=tmp_path / "g", edges=[edges], nodes=opts))
    assert summary["targets"] == [] and not (tmp_path / "g" / "targets.npy").exists()
    d = load_graph_dir(tmp_path / "g")
    assert d.targets is None
    assert summary["digest"] == hash_tensors(
        d.src, d.dst, d.features, d.labels, d.train_mask, d.val_mask, d.test_mask
    )


def test_the_digest_covers_the_targets(tmp_path):
    first = _ingest(tmp_path, out="a", target_columns=["price", "volume"])
    again = _ingest(tmp_path, out="b", target_columns=["price", "volume"])
    assert again["digest"] == first["digest"]
    nodes = tmp_path / "nodes.csv"
    lines = nodes.read_text().splitlines()
    cells = lines[2].split(",")
    cells[4] = "99.5"  # one node's volume
    lines[2] = ",".join(cells)
    nodes.write_text("\n".join(lines) + "\n")
    changed = ingest(
        IngestOptions(
            out=tmp_path / "c",
            edges=[tmp_path / "edges.csv"],
            nodes=NodeOptions(
                features=nodes, feature_columns=["f1", "f2"], target_columns=["price", "volume"]
            ),
        )
    )
    assert changed["digest"] != first["digest"]
    assert (
        open_graph_dir(tmp_path / "c").content_hash != open_graph_dir(tmp_path / "a").content_hash
    )


def test_targets_from_npy(tmp_path):
    edges, nodes = _graph(tmp_path)
    one = np.linspace(-1.0, 1.0, N)
    np.save(tmp_path / "one.npy", one)
    two = np.stack([one, np.where(np.arange(N) % 4 == 0, np.nan, 2 * one)], axis=1)
    np.save(tmp_path / "two.npy", two)
    base = dict(features=nodes, feature_columns=["f1", "f2"])
    s1 = ingest(
        IngestOptions(
            out=tmp_path / "one",
            edges=[edges],
            nodes=NodeOptions(targets=tmp_path / "one.npy", **base),
        )
    )
    assert s1["targets"] == ["target"]
    assert np.array_equal(np.load(tmp_path / "one" / "targets.npy")[:, 0], one.astype(np.float32))
    s2 = ingest(
        IngestOptions(
            out=tmp_path / "two",
            edges=[edges],
            nodes=NodeOptions(targets=tmp_path / "two.npy", target_columns=["a", "b"], **base),
        )
    )
    assert s2["targets"] == ["a", "b"]
    got = load_graph_dir(tmp_path / "two").targets.numpy()
    assert np.array_equal(np.isnan(got), np.isnan(two)) and got.dtype == np.float32
    np.save(tmp_path / "short.npy", one[:-1])
    with pytest.raises(DatasetError, match=r"short\.npy has shape \(39,\).*one row per node"):
        ingest(
            IngestOptions(
                out=tmp_path / "x",
                edges=[edges],
                nodes=NodeOptions(targets=tmp_path / "short.npy", **base),
            )
        )


def test_targets_from_a_table_keyed_by_id(tmp_path):
    """A Parquet table of some nodes' targets: the nodes left out have none (and join no split)."""
    edges, nodes = _graph(tmp_path)
    keep = np.arange(0, N, 2)
    pq.write_table(
        pa.table({"id": [f"n{i}" for i in keep], "score": (keep * 0.5).astype(np.int64)}),
        tmp_path / "t.parquet",
    )
    summary = ingest(
        IngestOptions(
            out=tmp_path / "g",
            edges=[edges],
            nodes=NodeOptions(
                features=nodes, feature_columns=["f1", "f2"], targets=tmp_path / "t.parquet"
            ),
        )
    )
    assert summary["targets"] == ["score"] and sum(summary["split"].values()) == len(keep)
    got = np.load(tmp_path / "g" / "targets.npy")[:, 0]
    assert np.array_equal(got[keep], (keep * 0.5).astype(np.int64).astype(np.float32))
    assert np.isnan(got[1::2]).all()
    train_mask = np.load(tmp_path / "g" / "train_mask.npy")
    assert not train_mask[1::2].any()


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_non_numeric_target_column_is_one_error_naming_it(tmp_path, kind):
    edges, nodes = _graph(tmp_path)
    if kind == "parquet":
        table = pacsv.read_csv(nodes)
        table = table.append_column("city", pa.array([f"c{i}" for i in range(N)]))
        nodes = tmp_path / "nodes.parquet"
        pq.write_table(table, nodes)
    else:
        lines = nodes.read_text().splitlines()
        lines = [lines[0] + ",city"] + [line + f",c{i}" for i, line in enumerate(lines[1:])]
        nodes.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as err:
        ingest(
            IngestOptions(
                out=tmp_path / "g",
                edges=[edges],
                nodes=NodeOptions(
                    features=nodes, feature_columns=["f1", "f2"], target_columns=["price", "city"]
                ),
            )
        )
    message = str(err.value)
    assert "\n" not in message and "'city'" in message and "not" in message
    assert "Fix:" in message and "--target-columns" in message
    assert not (tmp_path / "g").exists()


def test_an_infinite_target_is_refused_naming_its_row(tmp_path):
    edges, nodes = _graph(tmp_path)
    lines = nodes.read_text().splitlines()
    cells = lines[4].split(",")  # file line 5: node n3
    cells[4] = "inf"
    lines[4] = ",".join(cells)
    nodes.write_text("\n".join(lines) + "\n")
    opts = NodeOptions(features=nodes, feature_columns=["f1", "f2"], target_columns=["volume"])
    with pytest.raises(DatasetError, match=r"line 5 \(node 'n3'\), column 'volume'.*infinite"):
        ingest(IngestOptions(out=tmp_path / "g", edges=[edges], nodes=opts))
    values = np.zeros((N, 2))
    values[7, 1] = -np.inf
    np.save(tmp_path / "t.npy", values)
    opts = NodeOptions(features=nodes, feature_columns=["f1", "f2"], targets=tmp_path / "t.npy")
    with pytest.raises(DatasetError, match=r"t\.npy row 7, column 'target_1'.*infinite"):
        ingest(IngestOptions(out=tmp_path / "g", edges=[edges], nodes=opts))


def test_a_missing_target_column_names_the_columns_there_are(tmp_path):
    with pytest.raises(DatasetError) as err:
        _ingest(tmp_path, target_columns=["price", "prize"])
    assert "no column 'prize' (--target-columns)" in str(err.value)
    assert "id, f1, f2, price, volume" in str(err.value)


def test_target_columns_need_a_table(tmp_path):
    edges, _ = _graph(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((N, 2), dtype=np.float32))
    opts = NodeOptions(features=tmp_path / "x.npy", target_columns=["price"])
    with pytest.raises(DatasetError, match="no table; pass --targets FILE"):
        ingest(IngestOptions(out=tmp_path / "g", edges=[edges], nodes=opts))
    # no labels and no targets is a graph for link prediction
    # (test_link_prediction.py::test_a_graph_of_edges_without_labels_ingests_and_trains_...)


def test_the_cli_reads_target_flags_and_prints_one_line(tmp_path):
    edges, nodes = _graph(tmp_path)
    args = ["ingest", "--edges", edges, "--features", nodes, "--feature-columns", "f1,f2"]
    ok = run_cli(
        [str(a) for a in args + ["--target-columns", "price,volume", "--out", "g"]], tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert "price, volume (float32)" in ok.stdout
    assert open_graph_dir(tmp_path / "g").target_names == ["price", "volume"]
    np.save(tmp_path / "t.npy", np.ones(N))
    npy = run_cli(
        [str(a) for a in args + ["--targets", tmp_path / "t.npy", "--out", "t"]], tmp_path
    )
    assert npy.returncode == 0, npy.stderr
    assert open_graph_dir(tmp_path / "t").target_names == ["target"]
    bad = run_cli([str(a) for a in args + ["--target-columns", "id", "--out", "h"]], tmp_path)
    assert bad.returncode == 1
    lines = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "'id' holds the node IDs" in lines[0], bad.stderr


# ------------------------------------------------------------------ Python API
def test_the_api_takes_targets_or_y_when_asked(tmp_path):
    """``targets="y"`` (what ``train`` passes with task=node_regression) makes the graph's y the
    targets; an array ``targets=`` sits beside integer labels; a float y unasked stays labels."""
    from gnntrain.api import ingest_graph

    rng = np.random.default_rng(1)
    edge_index = torch.from_numpy(rng.integers(0, N, (2, 4 * N)))
    x = torch.randn(N, 3)
    y = torch.randn(N, 2, dtype=torch.float64)
    y[4, 0] = float("nan")
    folder = ingest_graph({"edge_index": edge_index, "x": x, "y": y}, tmp_path / "g", targets="y")
    g = open_graph_dir(folder)
    assert g.target_names == ["target_0", "target_1"] and g.num_classes == 0
    got = load_graph_dir(folder).targets
    assert torch.equal(torch.isnan(got), torch.isnan(y))
    folder = ingest_graph(
        {"edge_index": edge_index, "x": x, "y": torch.arange(N) % 2},
        out=tmp_path / "h",
        targets=y[:, 0],
    )
    h = open_graph_dir(folder)
    assert h.target_names == ["target"] and h.num_classes == 2
    with pytest.raises(DatasetError, match="not a whole number"):
        ingest_graph({"edge_index": edge_index, "x": x, "y": y[:, 1]}, tmp_path / "i")


def test_api_train_with_task_node_regression_takes_y(tmp_path, cache_dir):
    from torch_geometric.data import Data

    import gnntrain.api as gt

    rng = np.random.default_rng(2)
    x = torch.randn(N, 3)
    data = Data(
        edge_index=torch.from_numpy(rng.integers(0, N, (2, 4 * N))),
        x=x,
        y=(2 * x[:, 0] + 0.1 * torch.randn(N)).double(),
    )
    result = gt.train(
        data,
        [
            "task=node_regression",
            "train.epochs=2",
            "train.progress=false",
            f"cache_dir={cache_dir}",
        ],
        run_dir=tmp_path / "run",
    )
    assert result.status == "completed" and "rmse" in result.summary["metrics"]["test"]
