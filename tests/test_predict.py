"""gnntrain predict: every node's logits/embeddings with the run's own mode and world size, in node
order under the user's own IDs; the same numbers whichever exact mode trained and predicted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import EXACT, compose, run_cli

from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
from gnntrain.errors import GnnTrainError
from gnntrain.launch.predict import predict


@pytest.fixture(scope="module")
def string_id_graph(tmp_path_factory):
    """A 600-node csbm graph ingested from CSV with string IDs and a Parquet node table in shuffled
    order."""
    from gnntrain.data import load_dataset

    data = load_dataset(
        compose(
            [
                "dataset=csbm",
                "dataset.num_nodes=600",
                "dataset.feat_dim=12",
                "dataset.num_classes=4",
            ]
        )
    )
    root = tmp_path_factory.mktemp("predict-graph")
    rng = np.random.default_rng(3)
    order = rng.permutation(data.num_nodes)
    names = np.array([f"user/{i:04d}" for i in range(data.num_nodes)])
    src, dst = data.src.numpy(), data.dst.numpy()
    pq.write_table(pa.table({"src": names[src], "dst": names[dst]}), root / "edges.parquet")
    x = data.features.numpy()[order]
    table = {
        "id": names[order],
        **{f"x{j}": x[:, j] for j in range(x.shape[1])},
        "label": data.labels.numpy()[order],
    }
    pq.write_table(pa.table(table), root / "nodes.parquet")
    ingest(
        IngestOptions(
            out=root / "g",
            edges=[root / "edges.parquet"],
            nodes=NodeOptions(features=root / "nodes.parquet"),
        )
    )
    return root / "g", list(names[order])


def _run(cache_dir, run_dir: Path, overrides):
    import gnntrain.api as gt

    result = gt.run(
        [f"cache_dir={cache_dir}", "train.progress=false"] + list(overrides), run_dir=run_dir
    )
    assert result.status == "completed", result.summary.get("error")
    return run_dir


def _logits(path: Path):
    table = pq.read_table(path)
    values = np.stack([table.column(c).to_numpy() for c in table.column_names[1:]], axis=1)
    return table.column("id").to_pylist(), values


MODES = {
    "single": ["mode=single"],
    "partition p=4": ["mode=partition", "hardware.ranks_per_node=4"],
    "mop": ["mode=mop"],
    "hongtu": ["mode=hongtu"],
}


def test_predictions_agree_across_modes_in_the_users_id_order(string_id_graph, cache_dir, tmp_path):
    graph, ids = string_id_graph
    base = ["dataset=files", f"dataset.path={graph}"] + EXACT
    got = {}
    for name, mode in MODES.items():
        run_dir = _run(cache_dir, tmp_path / name.replace(" ", "_"), base + mode)
        out = predict(
            run_dir,
            "logits",
            out=tmp_path / f"{name}.parquet",
            overrides=[f"cache_dir={cache_dir}"],
        )
        assert out["predict"]["rows"] == len(ids) and out["world_size"] == (
            4 if "p=4" in name else 1 if name == "single" else 2
        )
        got[name] = _logits(tmp_path / f"{name}.parquet")
    reference_ids, reference = got["single"]
    assert reference_ids == ids  # the node table's order, the user's own IDs
    for name, (names, values) in got.items():
        assert names == ids
        np.testing.assert_allclose(values, reference, rtol=1e-9, atol=1e-12, err_msg=name)


def test_hyscale_layerwise_inference_equals_single_forward_and_load_model(
    string_id_graph, cache_dir, tmp_path
):
    import gnntrain.api as gt

    graph, _ = string_id_graph
    run_dir = _run(
        cache_dir,
        tmp_path / "hyscale",
        [
            "dataset=files",
            f"dataset.path={graph}",
            "mode=hyscale",
            "train.epochs=2",
            "train.dtype=float64",
        ],
    )
    mine = predict(
        run_dir,
        "embeddings",
        fmt="npy",
        out=tmp_path / "hyscale.npy",
        overrides=[f"cache_dir={cache_dir}"],
    )
    assert mine["mode"] == "hyscale"
    single = predict(
        run_dir,
        "embeddings",
        fmt="npy",
        out=tmp_path / "single.npy",
        overrides=[f"cache_dir={cache_dir}", "mode=single"],
    )
    assert single["mode"] == "single"
    a, b = np.load(tmp_path / "hyscale.npy"), np.load(tmp_path / "single.npy")
    assert a.shape == (600, 16)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    from gnntrain.data.ondisk import load_graph_dir

    data = load_graph_dir(graph)
    model = gt.load_model(run_dir)
    hidden = model.embeddings(data.features.double(), torch.stack([data.src, data.dst]))
    np.testing.assert_allclose(hidden.numpy(), a, rtol=1e-9, atol=1e-12)


def test_predict_cli_labels_and_refusals(string_id_graph, cache_dir, tmp_path):
    graph, ids = string_id_graph
    run_dir = _run(
        cache_dir,
        tmp_path / "single",
        ["dataset=files", f"dataset.path={graph}", "mode=single", "train.epochs=2"],
    )
    res = run_cli(
        ["predict", str(run_dir), "--what", "labels", f"cache_dir={cache_dir}"], cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    table = pq.read_table(run_dir / "predictions" / "labels.parquet")
    assert table.column_names == ["id", "label"] and table.column("id").to_pylist() == ids
    with pytest.raises(
        GnnTrainError, match="no weights at .*A run writes model.pt when it completes"
    ):
        predict(tmp_path, "logits")
    with pytest.raises(GnnTrainError, match="has no plan.yaml"):
        predict(tmp_path, "logits", checkpoint=run_dir / "model.pt")
    with pytest.raises(GnnTrainError, match="embeddings are the inputs of layers 1..1"):
        predict(run_dir, "embeddings", layer=2, overrides=[f"cache_dir={cache_dir}"])
    bad = run_cli(
        ["predict", str(run_dir), "model.hidden=32", f"cache_dir={cache_dir}"], cwd=tmp_path
    )
    assert (
        bad.returncode == 1
        and "do not fit this model" in bad.stderr
        and "Traceback" not in bad.stderr
    )
