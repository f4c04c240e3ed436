"""gnntrain ingest and dataset=files: formats round-trip to dataset=cora's content digest, every
mode
trains on an ingested graph (the exact ones exactly), and every bad file is one line naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CORA, EXACT, assert_exact, compose, requires_shared, run_cli

from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
from gnntrain.data.ondisk import load_graph_dir, open_graph_dir
from gnntrain.errors import DatasetError


@pytest.fixture(scope="session")
def cora(cache_dir):
    from gnntrain.data import load_dataset

    return load_dataset(compose(CORA + [f"cache_dir={cache_dir}"]))


@pytest.fixture(scope="session")
def exported(cora, tmp_path_factory):
    """Cora written out as a user would keep it: string IDs in CSV + a Parquet node table; .npy
    arrays;
    a PyG Data; a DGL graph (where DGL imports)."""
    out = tmp_path_factory.mktemp("cora-export")
    src, dst = cora.src.numpy(), cora.dst.numpy()
    ids = np.array([f"paper-{i}" for i in range(cora.num_nodes)])
    pacsv.write_csv(pa.table({"src": ids[src], "dst": ids[dst]}), out / "edges.csv")
    feats = cora.features.numpy()
    cols = {
        "id": ids,
        **{f"f{j}": feats[:, j] for j in range(feats.shape[1])},
        "label": cora.labels.numpy(),
    }
    cols.update({f"{k}_mask": m.numpy() for k, m in cora.masks.items()})
    pq.write_table(pa.table(cols), out / "nodes.parquet")
    pq.write_table(pa.table({"src": src, "dst": dst}), out / "edges.parquet")
    np.save(out / "edge_index.npy", np.stack([src, dst]))
    import scipy.sparse as sp

    sp.save_npz(
        out / "adjacency.npz",
        sp.coo_matrix(
            (np.ones(src.shape[0]), (src, dst)), shape=(cora.num_nodes, cora.num_nodes)
        ).tocsr(),
    )
    np.save(out / "x.npy", feats)
    np.save(out / "y.npy", cora.labels.numpy())
    for k, m in cora.masks.items():
        np.save(out / f"{k}_mask.npy", m.numpy())
    from torch_geometric.data import Data

    torch.save(
        Data(
            edge_index=torch.stack([cora.src, cora.dst]),
            x=cora.features,
            y=cora.labels,
            train_mask=cora.train_mask,
            val_mask=cora.val_mask,
            test_mask=cora.test_mask,
        ),
        out / "cora.pt",
    )
    from gnntrain.backends import dgl_problem

    if dgl_problem() is None:
        import dgl

        dgl.save_graphs(str(out / "cora.bin"), [cora.graph()])
    return out


def _npy_nodes(d: Path) -> NodeOptions:
    return NodeOptions(
        features=d / "x.npy",
        labels=d / "y.npy",
        masks={m: d / f"{m}.npy" for m in ("train_mask", "val_mask", "test_mask")},
    )


FORMATS = {
    "csv+parquet": lambda d, out: IngestOptions(
        out=out, edges=[d / "edges.csv"], nodes=NodeOptions(features=d / "nodes.parquet")
    ),
    "parquet+npy": lambda d, out: IngestOptions(
        out=out, edges=[d / "edges.parquet"], nodes=_npy_nodes(d)
    ),
    "npy": lambda d, out: IngestOptions(out=out, edges=[d / "edge_index.npy"], nodes=_npy_nodes(d)),
    "scipy npz": lambda d, out: IngestOptions(
        out=out, edges=[d / "adjacency.npz"], nodes=_npy_nodes(d)
    ),
    "pyg": lambda d, out: IngestOptions(out=out, graph=d / "cora.pt"),
    "dgl": lambda d, out: IngestOptions(out=out, graph=d / "cora.bin"),
}


@pytest.fixture(scope="session")
def ingested(exported, tmp_path_factory):
    """Each format ingested once for the session: {format: folder}."""
    root = tmp_path_factory.mktemp("ingested")
    out = {}
    for name, make in FORMATS.items():
        if name == "dgl" and not (exported / "cora.bin").exists():
            continue
        folder = root / name.replace(" ", "-")
        ingest(make(exported, folder))
        out[name] = folder
    return out


@requires_shared
@pytest.mark.parametrize(
    "fmt", [pytest.param(f, marks=pytest.mark.dgl) if f == "dgl" else f for f in FORMATS]
)
def test_every_format_ingests_to_the_content_digest_of_dataset_cora(fmt, ingested, cora):
    if fmt not in ingested:
        pytest.skip("DGL does not import here (the DGL stack's suite checks this format)")
    graph = open_graph_dir(ingested[fmt])
    assert graph.digest == cora.content_hash.split("-", 1)[1]
    loaded = load_graph_dir(ingested[fmt])
    assert torch.equal(loaded.src, cora.src) and torch.equal(loaded.dst, cora.dst)
    assert torch.equal(loaded.features, cora.features) and torch.equal(loaded.labels, cora.labels)


@requires_shared
def test_string_ids_are_kept_in_node_order(ingested):
    ids = open_graph_dir(ingested["csv+parquet"]).node_ids()
    assert ids.to_pylist()[:3] == ["paper-0", "paper-1", "paper-2"] and len(ids) == 2708


@requires_shared
def test_files_dataset_trains_like_dataset_cora_and_every_exact_mode_matches_single(
    ingested, train
):
    files = ["dataset=files", f"dataset.path={ingested['csv+parquet']}"]
    reference = train(CORA + EXACT + ["mode=single"])["losses"]
    assert_exact(train(files + EXACT + ["mode=single"])["losses"], reference, tol=1e-12)
    for mode in (
        ["mode=partition"],
        ["mode=supergcn", "mode.bits=32"],
        ["mode=mop"],
        ["mode=hongtu"],
    ):
        assert_exact(train(files + EXACT + mode)["losses"], reference)
    approx = train(files + ["mode=hyscale", "train.epochs=2"])
    assert approx["status"] == "completed" and approx["dataset"] == "files"


@requires_shared
def test_plan_reads_the_sizes_of_the_ingested_graph(ingested):
    from gnntrain.plan import build_plan

    plan = build_plan(compose(["dataset=files", f"dataset.path={ingested['npy']}", "mode=single"]))
    ds = plan.config["dataset"]
    assert (ds["num_nodes"], ds["num_edges"], ds["feat_dim"], ds["num_classes"]) == (
        2708,
        10556,
        1433,
        7,
    )


def test_cli_ingest_then_plan_and_datasets_list(tmp_path):
    """The commands as a user types them: a TSV with comments and no header, a .npy node side."""
    rng = np.random.default_rng(0)
    n = 60
    lines = ["# my graph", ""] + [f"{u}\t{v}" for u, v in rng.integers(0, n, size=(300, 2))]
    (tmp_path / "g.tsv").write_text("\n".join(lines) + "\n")
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 8)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, size=n))
    data = tmp_path / "data"
    res = run_cli(
        [
            "ingest",
            "--edges",
            "g.tsv",
            "--no-header",
            "--features",
            "x.npy",
            "--labels",
            "y.npy",
            "--out",
            "data/mine",
        ],
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "nodes" in res.stdout and "dataset=files dataset.path=" in res.stdout
    assert "ingest: reading edges" in res.stderr  # not a terminal: progress as plain lines
    listed = run_cli(["datasets", f"data_dir={data}"], cwd=tmp_path)
    assert "mine" in listed.stdout and "ingested graphs" in listed.stdout
    plan = run_cli(
        [
            "plan",
            "dataset=files",
            f"data_dir={data}",
            "dataset.path=mine",
            "mode=single",
            "hydra.run.dir=plan",
        ],
        cwd=tmp_path,
    )
    assert plan.returncode == 0, plan.stderr
    missing = run_cli(
        ["plan", "dataset=files", "dataset.path=nowhere", "hydra.run.dir=plan2"], cwd=tmp_path
    )
    assert missing.returncode == 1
    assert "dataset.path=" in missing.stderr and "no such folder" in missing.stderr
    assert "Traceback" not in missing.stderr


# ------------------------------------------------------------------ bad files
def _graph_files(d: Path, n: int = 20):
    rng = np.random.default_rng(1)
    np.save(d / "x.npy", rng.standard_normal((n, 4)).astype(np.float32))
    np.save(d / "y.npy", rng.integers(0, 3, size=n))
    (d / "e.csv").write_text("src,dst\n" + "".join(f"{i},{(i + 1) % n}\n" for i in range(n)))


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


BAD_FILES = {
    "malformed CSV line": (
        lambda d: (d / "e.csv").write_text("src,dst\n0,1\n1,2,3\n"),
        {},
        "e.csv line 3: expected 2 column(s), found 3",
    ),
    "unknown node": (
        lambda d: (d / "e.csv").write_text("src,dst\n0,1\n\n1,99\n"),
        {},
        "e.csv line 4, column 'dst': node 99 is not a node of the graph (nodes are 0..19)",
    ),
    "feature rows != nodes": (
        lambda d: np.save(d / "y.npy", np.zeros(19, dtype=np.int64)),
        {},
        "--labels {d}/y.npy has 19 rows for 20 nodes",
    ),
    "NaN feature": (
        lambda d: np.save(d / "x.npy", np.where(np.eye(20, 4, -3) > 0, np.nan, 1.0)),
        {},
        "feature '0' of node 3 is nan (NaN or Inf)",
    ),
    "negative label": (
        lambda d: np.save(d / "y.npy", np.r_[np.zeros(5), -2, np.ones(14)].astype(np.int64)),
        {},
        "label -2 at row 5 is negative",
    ),
    "label >= classes": (
        lambda d: np.save(d / "y.npy", np.r_[np.zeros(19), 7].astype(np.int64)),
        {"num_classes": 3},
        "node 19 has label 7, but --num-classes is 3",
    ),
    "empty train mask": (
        lambda d: np.save(d / "tm.npy", np.zeros(20, dtype=bool)),
        {"train_mask": "tm.npy"},
        "the train mask is empty",
    ),
    "missing column": (
        lambda d: (d / "e.csv").write_text("from,to\n0,1\n"),
        {"src_column": "source"},
        "has no column 'source' (--src-column); its columns are from, to",
    ),
    "unreadable dtype": (
        lambda d: np.save(d / "x.npy", np.array([["a"] * 4] * 20)),
        {},
        "features of dtype <U1 cannot be read as numbers",
    ),
    "not a number ID": (
        lambda d: (d / "e.csv").write_text("src,dst\n0,1\n1,x2\n"),
        {"id_type": "int"},
        "e.csv line 3, column 'dst': 'x2' is not an integer",
    ),
    "self-loop refused": (
        lambda d: (d / "e.csv").write_text("src,dst\n0,1\n4,4\n"),
        {"self_loops": "error"},
        "line 3 is a self-loop (node 4)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_is_one_line_naming_the_file_and_the_place(case, tmp_path):
    breaks, extra, expected = BAD_FILES[case]
    _graph_files(tmp_path)
    breaks(tmp_path)
    masks = {"train_mask": tmp_path / extra.pop("train_mask")} if "train_mask" in extra else {}
    nodes = NodeOptions(
        features=tmp_path / "x.npy",
        labels=tmp_path / "y.npy",
        masks=masks,
        num_classes=extra.pop("num_classes", 0),
        id_type=extra.pop("id_type", "auto"),
    )
    options = IngestOptions(out=tmp_path / "out", edges=[tmp_path / "e.csv"], nodes=nodes, **extra)
    with pytest.raises(DatasetError) as exc:
        ingest(options)
    assert expected.format(d=tmp_path) in _one_line(exc)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.partial")]


def test_a_killed_ingest_leaves_nothing_that_loads(tmp_path):
    """SIGKILL mid-ingest: --out never appears; the half-written folder is refused by name."""
    n, e = 200_000, 3_000_000
    rng = np.random.default_rng(0)
    np.save(tmp_path / "edges.npy", rng.integers(0, n, size=(2, e)))
    np.save(tmp_path / "x.npy", rng.standard_normal((n, 64)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 4, size=n))
    cmd = [
        sys.executable,
        "-m",
        "gnntrain",
        "ingest",
        "--edges",
        "edges.npy",
        "--features",
        "x.npy",
        "--labels",
        "y.npy",
        "--out",
        "g",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    partial = []
    while time.time() < deadline and proc.poll() is None:
        partial = [
            p
            for p in tmp_path.iterdir()
            if p.name.startswith(".g.partial") and (p / "features.npy").exists()
        ]
        if partial:
            break
        time.sleep(0.02)
    assert partial, "the ingest finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "g").exists()
    with pytest.raises(DatasetError, match="no meta.json here .a half-written ingest"):
        open_graph_dir(partial[0])


def test_an_existing_output_is_kept_unless_overwrite(tmp_path):
    _graph_files(tmp_path)
    options = IngestOptions(
        out=tmp_path / "g",
        edges=[tmp_path / "e.csv"],
        nodes=NodeOptions(features=tmp_path / "x.npy", labels=tmp_path / "y.npy"),
    )
    first = ingest(options)
    with pytest.raises(DatasetError, match="already exists. Pass --overwrite"):
        ingest(options)
    options.overwrite, options.symmetrize = True, False
    second = ingest(options)
    assert (
        second["num_edges"] == first["num_edges"] // 2
        and open_graph_dir(tmp_path / "g").num_edges == 20
    )


def test_unlabeled_nodes_stay_out_of_every_mask_and_split_is_seeded(tmp_path):
    _graph_files(tmp_path)
    pq.write_table(
        pa.table({"id": np.arange(0, 20, 2), "label": np.arange(10) % 3}),
        tmp_path / "labels.parquet",
    )
    options = IngestOptions(
        out=tmp_path / "g",
        edges=[tmp_path / "e.csv"],
        split=(0.5, 0.3, 0.2),
        seed=4,
        nodes=NodeOptions(features=tmp_path / "x.npy", labels=tmp_path / "labels.parquet"),
    )
    summary = ingest(options)
    graph = load_graph_dir(tmp_path / "g")
    assert summary["unlabeled"] == 10 and (graph.labels[1::2] == -1).all()
    labeled = graph.labels >= 0
    for mask in (graph.train_mask, graph.val_mask, graph.test_mask):
        assert not (mask & ~labeled).any()
    assert [int(m.sum()) for m in (graph.train_mask, graph.val_mask, graph.test_mask)] == [5, 3, 2]


# ------------------------------------------------------------------ Python API
@requires_shared
def test_api_trains_from_a_pyg_data_and_the_loaded_model_reproduces_test_accuracy(
    cora, cache_dir, tmp_path
):
    """gnntrain.api.train(Data) runs like dataset=cora; load_model in a fresh process gives the
    run's test
    accuracy on the PyG Data."""
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
    for unlabeled
    nodes train like plain arrays (written row-major a block at a time, not refused); the unlabeled
    nodes are
    in no mask."""
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
    one line,
    never as the temporary .npy the API wrote."""
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
    ranks used to
    re-import it and die with exit code 1, reported as a memory problem); from stdin too."""
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
