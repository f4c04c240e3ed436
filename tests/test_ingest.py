"""gnntrain ingest and dataset=files: formats round-trip to dataset=cora's content digest, every
mode trains on an ingested graph (the exact ones exactly), and every bad file is one line naming
it. The Python API and your own model: test_api.py."""

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
def exported(cora, tmp_path_factory):
    """Cora written out as a user would keep it: string IDs in CSV + a Parquet node table; .npy
    arrays; a PyG Data; a DGL graph (where DGL imports)."""
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
