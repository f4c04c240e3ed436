"""gnntrain.api with the user's own data and model: training from a PyG Data or numpy arrays
(ingested on the way, and the ingested graph reused), bad in-memory input named as the caller gave
it, ranks started from a plain script, and a layer class from the user's own package (exact in
partition against single, refused in one line where it cannot run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import EXACT, assert_exact, compose, requires_shared


# ------------------------------------------------------------------ Python API
@requires_shared
def test_api_trains_from_a_pyg_data_and_the_loaded_model_reproduces_test_accuracy(
    cora, cache_dir, tmp_path
):
    """gnntrain.api.train(Data) runs like dataset=cora; load_model in a fresh process gives the
    run's test accuracy on the PyG Data."""
    from torch_geometric.data import Data

    import gnntrain.api as gt

    data = Data(
        edge_index=torch.stack([cora.src, cora.dst]),
        x=cora.features,
        y=cora.labels,
        train_mask=cora.train_mask,
        val_mask=cora.val_mask,
        test_mask=cora.test_mask,
    )
    torch.save(data, tmp_path / "cora.pt")
    result = gt.train(
        data,
        [f"cache_dir={cache_dir}", "mode=partition", "train.epochs=20", "train.progress=false"],
        run_dir=tmp_path / "run",
    )
    assert result.status == "completed" and (tmp_path / "run" / "model.pt").exists()
    script = (
        f"import torch, gnntrain.api as gt; d = torch.load({str(tmp_path / 'cora.pt')!r}, "
        "weights_only=False); "
        f"m = gt.load_model({str(tmp_path / 'run')!r}); p = m(d).argmax(1); "
        f"print(float(((p == d.y) & d.test_mask).sum()) / int(d.test_mask.sum()))"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert fresh.returncode == 0, fresh.stderr
    assert float(fresh.stdout.strip()) == pytest.approx(result.accuracy["test"], abs=1e-9)
    hidden = result.model().embeddings(data, layer=1)
    assert hidden.shape == (cora.num_nodes, 16) and (hidden >= 0).all()


def test_api_trains_from_numpy_arrays_and_reuses_the_ingested_graph(cache_dir, tmp_path):
    import gnntrain.api as gt

    rng = np.random.default_rng(2)
    n = 80
    graph = {
        "edge_index": rng.integers(0, n, size=(2, 400)),
        "x": rng.standard_normal((n, 6)),
        "y": rng.integers(0, 3, size=n),
    }
    overrides = [f"cache_dir={cache_dir}", "mode=single", "train.epochs=3", "train.progress=false"]
    first = gt.train(graph, overrides, run_dir=tmp_path / "a")
    second = gt.train(graph, overrides, run_dir=tmp_path / "b")
    assert first.status == "completed" and first.losses == second.losses
    assert first.plan.config["dataset"]["path"] == second.plan.config["dataset"]["path"]
    assert first.plan.config["dataset"]["num_nodes"] == n


def test_api_takes_any_array_layout_and_negative_labels_as_unlabeled(cache_dir, tmp_path):
    """Issue 57: features straight from pandas (Fortran order), a transposed edge list and y = -1
    for unlabeled nodes train like plain arrays (written row-major a block at a time, not refused);
    the unlabeled nodes are in no mask."""
    import gnntrain.api as gt

    rng = np.random.default_rng(4)
    n = 90
    x = rng.standard_normal((n, 5))
    y = rng.integers(0, 3, size=n)
    y[::7] = -1
    edges = rng.integers(0, n, size=(400, 2))
    overrides = [f"cache_dir={cache_dir}", "mode=single", "train.epochs=2", "train.progress=false"]
    odd = gt.train(
        {"edge_index": edges.T, "x": np.asfortranarray(x), "y": y},
        overrides,
        run_dir=tmp_path / "a",
    )
    assert not edges.T.flags.c_contiguous and not np.asfortranarray(x).flags.c_contiguous
    plain = gt.train(
        {"edge_index": np.ascontiguousarray(edges.T), "x": x, "y": y},
        overrides,
        run_dir=tmp_path / "b",
    )
    assert odd.status == "completed" and odd.losses == plain.losses
    folder = Path(odd.plan.config["dataset"]["path"])
    labels = np.load(folder / "labels.npy")
    assert (labels[::7] == -1).all() and (labels >= 0).sum() == n - len(range(0, n, 7))
    for split in ("train", "val", "test"):
        assert not np.load(folder / f"{split}_mask.npy")[::7].any()


def test_api_errors_name_the_argument_not_an_internal_file(cache_dir):
    """Issue 57: bad in-memory input is named as the caller gave it (data.y, data.x, edge_index), in
    one line, never as the temporary .npy the API wrote."""
    import gnntrain.api as gt
    from gnntrain.errors import DatasetError

    rng = np.random.default_rng(4)
    n = 30
    good = {
        "edge_index": rng.integers(0, n, size=(2, 40)),
        "x": rng.standard_normal((n, 3)),
        "y": rng.integers(0, 2, n),
    }
    for bad, name in (
        (dict(good, y=rng.standard_normal(n)), "data.y"),
        (dict(good, x=good["x"].astype(object)), "data.x"),
        (dict(good, edge_index=good["edge_index"] + 5), "edge_index"),
    ):
        with pytest.raises(DatasetError) as caught:
            gt.ingest_graph(bad, cache_dir=cache_dir)
        message = str(caught.value)
        assert name in message and "gnntrain-arrays-" not in message and "\n" not in message, (
            message
        )


PLAIN_SCRIPT = """
import numpy as np
import gnntrain.api as gt

rng = np.random.default_rng(0)
n = 60
graph = {"edge_index": rng.integers(0, n, size=(2, 300)), "x": rng.standard_normal((n, 4)),
         "y": rng.integers(0, 3, size=n)}
result = gt.train(graph, ["mode=partition", "hardware.ranks_per_node=2", "train.epochs=2", "train.progress=false",
                          "cache_dir=CACHE"], run_dir="RUN")
print("STATUS", result.status)
"""  # noqa: E501  (a script run in its own process)


def test_api_runs_ranks_from_a_plain_script_without_a_main_guard(cache_dir, tmp_path):
    """Issue 57: a script with no ``if __name__ == "__main__":`` guard trains on two ranks (the
    ranks used to re-import it and die with exit code 1, reported as a memory problem); from stdin
    too."""
    script = tmp_path / "train_me.py"
    script.write_text(
        PLAIN_SCRIPT.replace("CACHE", str(cache_dir)).replace("RUN", str(tmp_path / "run"))
    )
    env = dict(os.environ, GNNTRAIN_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and "STATUS completed" in done.stdout, (
        done.stdout[-1500:] + done.stderr[-1500:]
    )
    piped = subprocess.run(
        [sys.executable, "-"],
        input=script.read_text().replace(str(tmp_path / "run"), str(tmp_path / "run2")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert piped.returncode == 0 and "STATUS completed" in piped.stdout, piped.stderr[-1500:]


# ------------------------------------------------------------------ your own model
LAYER_SOURCE = '''
import torch
from torch import nn


class MeanConv(nn.Module):
    """A GCN variant with row (mean) normalisation: h' = mean_{u in N(v)+v} h_u W + b."""

    normalization = "mean"

    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.weight)

    def comm_width(self):
        return self.weight.shape[1]

    def aggregate(self, h, agg, rows=None):
        return agg(h @ self.weight)

    def update(self, h, z):
        return z + self.bias
'''


@pytest.fixture
def own_package(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "mylayers"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(LAYER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(
        "PYTHONPATH", str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    return "mylayers.MeanConv"


def test_a_model_from_the_users_package_is_exact_in_partition_against_single(own_package, train):
    model = ["model=custom", f"model.target={own_package}", "dataset=csbm"]
    single = train(model + EXACT + ["mode=single"])
    partition = train(model + EXACT + ["mode=partition", "hardware.ranks_per_node=2"])
    assert_exact(partition["losses"], single["losses"])
    gcn = train(["dataset=csbm"] + EXACT + ["mode=single"])
    assert abs(gcn["losses"][-1] - single["losses"][-1]) > 1e-6  # really another model


def test_a_custom_model_is_refused_in_one_line_where_it_cannot_run(own_package):
    from gnntrain.errors import GnnTrainError
    from gnntrain.plan import build_plan

    with pytest.raises(GnnTrainError, match="mode 'mop' does not support model 'custom'"):
        build_plan(compose(["model=custom", f"model.target={own_package}", "mode=mop"]))
    with pytest.raises(GnnTrainError, match="model.target: cannot import 'nowhere'"):
        build_plan(compose(["model=custom", "model.target=nowhere.Layer", "mode=single"]))
    with pytest.raises(GnnTrainError, match="model=custom needs the layer class"):
        build_plan(compose(["model=custom", "mode=single"]))
