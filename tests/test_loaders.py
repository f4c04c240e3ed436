"""File-backed loaders (gnntrain/data/loaders.py) on small synthetic raw files.

Each test writes a tiny dataset in the exact on-disk layout DGL or OGB expects
under a temporary ``data_dir`` and loads it through the public entry point
``gnntrain.data.load_dataset``, so the real library parsers do the reading.
DGL's readers against PyG's, and raw files that are not where ``data_dir`` says:
test_readers.py.
"""

from __future__ import annotations

import gzip
import pickle
import stat
from collections import defaultdict
from pathlib import Path
from typing import Dict, Set, Tuple

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import compose

from gnntrain.data import load_dataset
from gnntrain.data.loaders import DGL_DATASETS
from gnntrain.errors import DatasetError

EdgeSet = Set[Tuple[int, int]]


# --------------------------------------------------------------------------- helpers


def _load(name: str, data_dir: Path, cache_dir: Path, reader: str = "auto"):
    return load_dataset(
        compose(
            [
                f"dataset={name}",
                f"data_dir={data_dir}",
                f"cache_dir={cache_dir}",
                f"dataset.reader={reader}",
            ]
        )
    )


# each reader builds its own link farm: (reader, the farm root under the cache, Reddit's farm
# folder)
FARMS = [
    pytest.param(("dgl", "dgl", DGL_DATASETS["reddit"].folder()), marks=pytest.mark.dgl, id="dgl"),
    pytest.param(("pyg", "pyg", "Reddit"), id="pyg"),
]


def _edge_set(data) -> EdgeSet:
    return set(zip(data.src.tolist(), data.dst.tolist()))


def _symmetric(pairs) -> EdgeSet:
    """Both directions of every pair, self-loops dropped (what clean_edges yields)."""
    return {e for u, v in pairs if u != v for e in ((u, v), (v, u))}


def _snapshot(root: Path) -> Dict[str, Tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture
def read_only():
    """read_only(dir): make ``dir`` read-only; on teardown check nothing in it changed, then
    restore.

    chmod does not stop root, so the snapshot comparison is what enforces "data_dir is never
    written".
    """
    held = []

    def _freeze(root: Path) -> Path:
        before = _snapshot(root)
        modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        held.append((root, before, modes))
        return root

    yield _freeze
    for root, before, modes in held:
        after = _snapshot(root)
        for p, mode in modes.items():
            p.chmod(mode)
        assert after == before, f"data_dir {root} was modified"


# --------------------------------------------------------------------------- raw-file writers

# DGL always takes 500 val nodes
PUBMED = dict(n_train=6, n_unlabelled=4, n_test=20, dim=8, classes=3)


def write_planetoid(data_dir: Path, name: str, seed: int = 0) -> Dict[str, object]:
    """Write ind.<name>.* in DGL's Planetoid layout; return what DGL should make of it.

    DGL takes train = the first len(y) nodes, val = the next 500 (so the graph needs more than
    len(y) + 500 nodes) and test = the nodes listed in test.index, which are the rows after allx.
    """
    rng = np.random.default_rng(seed)
    p = PUBMED
    n_allx = p["n_train"] + 500 + p["n_unlabelled"]
    n = n_allx + p["n_test"]
    feats = sp.csr_matrix(rng.integers(0, 2, size=(n, p["dim"])).astype(np.float32))
    onehot = np.eye(p["classes"], dtype=np.int64)[rng.integers(0, p["classes"], size=n)]
    test_index = rng.permutation(np.arange(n_allx, n))
    graph = defaultdict(list)
    pairs = [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 7) % n) for i in range(0, n, 5)]
    for u, v in pairs:
        graph[u].append(v)
    graph[3].append(3)  # a self-loop, which the loader must drop
    graph[4].append(5)  # a duplicate of 4 -> 5
    objects = {
        "x": feats[: p["n_train"]],
        "y": onehot[: p["n_train"]],
        "allx": feats[:n_allx],
        "ally": onehot[:n_allx],
        "tx": feats[n_allx:],
        "ty": onehot[n_allx:],
        "graph": graph,
    }
    folder = data_dir / DGL_DATASETS[name].folder()
    folder.mkdir(parents=True)
    for part, obj in objects.items():
        with open(folder / f"ind.{name}.{part}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return {
        "n": n,
        "train": p["n_train"],
        "val": 500,
        "test": p["n_test"],
        "dim": p["dim"],
        "classes": p["classes"],
        "edges": _symmetric(pairs),
        "test_nodes": set(test_index.tolist()),
        "train_labels": onehot[: p["n_train"]].argmax(1),
    }


REDDIT = dict(n=40, dim=5)


def write_reddit(data_dir: Path, feature_offset: float = 0.0) -> Dict[str, object]:
    """Write reddit_data.npz (feature, label, node_types) and reddit_graph.npz (scipy COO).

    Feature column 0 holds the node's own id, so the test can undo DGL's RCMK node reordering.
    """
    n, dim = REDDIT["n"], REDDIT["dim"]
    rng = np.random.default_rng(1)
    feature = rng.standard_normal((n, dim)).astype(np.float32) + feature_offset
    feature[:, 0] = np.arange(n)
    label = rng.integers(0, 41, size=n)
    node_types = np.array([1] * 24 + [2] * 6 + [3] * 10)
    pairs = (
        [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 3) % n) for i in range(0, n, 4)] + [(7, 7)]
    )
    row, col = np.array(pairs).T
    folder = data_dir / DGL_DATASETS["reddit"].folder()
    folder.mkdir(parents=True)
    np.savez(folder / "reddit_data.npz", feature=feature, label=label, node_types=node_types)
    sp.save_npz(
        folder / "reddit_graph.npz", sp.coo_matrix((np.ones(len(pairs)), (row, col)), shape=(n, n))
    )
    return {
        "n": n,
        "dim": dim,
        "train": 24,
        "val": 6,
        "test": 10,
        "edges": _symmetric(pairs),
        "label": label,
    }


ARXIV = dict(n=50, dim=4, train=30, valid=12, test=8)


def _write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(x) for x in np.atleast_1d(row)) + "\n")


def write_ogbn_arxiv(data_dir: Path) -> Dict[str, object]:
    """Write ogbn_arxiv/ in OGB's layout: headerless gzipped CSVs in raw/ and split/time/."""
    n, dim = ARXIV["n"], ARXIV["dim"]
    rng = np.random.default_rng(2)
    root = data_dir / "ogbn_arxiv"
    pairs = [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 11) % n) for i in range(0, n, 3)]
    label = rng.integers(0, 40, size=n)
    _write_csv_gz(root / "raw" / "edge.csv.gz", pairs)
    _write_csv_gz(root / "raw" / "num-node-list.csv.gz", [n])
    _write_csv_gz(root / "raw" / "num-edge-list.csv.gz", [len(pairs)])
    _write_csv_gz(root / "raw" / "node-feat.csv.gz", rng.standard_normal((n, dim)).round(4))
    _write_csv_gz(root / "raw" / "node-label.csv.gz", label)
    # arxiv's extra node file
    _write_csv_gz(root / "raw" / "node_year.csv.gz", rng.integers(2000, 2020, size=n))
    order = rng.permutation(n)
    cut = np.cumsum([ARXIV["train"], ARXIV["valid"]])
    for split, idx in zip(("train", "valid", "test"), np.split(order, cut)):
        _write_csv_gz(root / "split" / "time" / f"{split}.csv.gz", idx)
    (root / "RELEASE_v1.txt").write_text("synthetic ogbn-arxiv for tests\n")
    return {
        "n": n,
        "dim": dim,
        "edges": _symmetric(pairs),
        "label": label,
        "split": dict(zip(("train", "val", "test"), np.split(order, cut))),
    }


# --------------------------------------------------------------------------- tests


def test_pubmed_planetoid_layout(tmp_path, read_only):
    """Planetoid files for pubmed load with DGL's sizes and splits, clean symmetric edges, data_dir
    untouched."""
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    want = write_planetoid(data_dir, "pubmed")
    read_only(data_dir)
    data = _load("pubmed", data_dir, cache)

    assert data.num_nodes == want["n"]
    assert tuple(data.features.shape) == (want["n"], want["dim"])
    assert data.num_classes == want["classes"]
    sizes = {k: int(m.sum()) for k, m in data.masks.items()}
    assert sizes == {"train": want["train"], "val": want["val"], "test": want["test"]}
    assert set(torch.nonzero(data.test_mask).flatten().tolist()) == want["test_nodes"]
    assert data.labels[: want["train"]].tolist() == want["train_labels"].tolist()
    assert _edge_set(data) == want["edges"]
    assert data.num_edges == len(want["edges"])  # no duplicates
    assert bool((data.src != data.dst).all())
    assert data.origin == str(data_dir / DGL_DATASETS["pubmed"].folder())


def test_reddit_layout(tmp_path, read_only):
    """reddit_data.npz + reddit_graph.npz load with the node_types splits; edges survive DGL's
    reordering."""
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    want = write_reddit(data_dir)
    read_only(data_dir)
    data = _load("reddit", data_dir, cache)

    assert data.num_nodes == want["n"] and data.feat_dim == want["dim"]
    assert data.num_classes == 41
    assert {k: int(m.sum()) for k, m in data.masks.items()} == {
        "train": want["train"],
        "val": want["val"],
        "test": want["test"],
    }
    orig = data.features[:, 0].round().to(torch.int64)  # new id -> original id
    assert sorted(orig.tolist()) == list(range(want["n"]))
    assert data.labels.tolist() == want["label"][orig.numpy()].tolist()
    assert {(int(orig[u]), int(orig[v])) for u, v in _edge_set(data)} == want["edges"]
    assert bool((data.src != data.dst).all())


def test_ogbn_arxiv_layout(tmp_path, read_only):
    """OGB's ogbn_arxiv layout loads with its 40 classes, the split/time indices and symmetrised
    edges."""
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    want = write_ogbn_arxiv(data_dir)
    read_only(data_dir)
    data = _load("ogbn-arxiv", data_dir, cache)

    assert data.num_nodes == want["n"] and data.feat_dim == want["dim"]
    assert data.num_classes == 40
    assert data.labels.tolist() == want["label"].tolist()
    for split, idx in want["split"].items():
        assert sorted(torch.nonzero(data.masks[split]).flatten().tolist()) == sorted(idx.tolist())
    assert _edge_set(data) == want["edges"]
    assert data.num_edges == len(want["edges"])


def test_corrupt_reddit_file(tmp_path):
    """A truncated reddit_data.npz is reported as a DatasetError naming the dataset, not a raw
    traceback."""
    data_dir = tmp_path / "data"
    write_reddit(data_dir)
    npz = data_dir / DGL_DATASETS["reddit"].folder() / "reddit_data.npz"
    npz.write_bytes(npz.read_bytes()[:200])
    with pytest.raises(DatasetError) as err:
        _load("reddit", data_dir, tmp_path / "cache")
    assert "'reddit'" in str(err.value)
    assert str(data_dir / DGL_DATASETS["reddit"].folder()) in str(err.value)


def test_content_hash_tracks_content(tmp_path):
    """content_hash is the same on reload (cached or not) and differs when the features differ."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_reddit(a)
    write_reddit(b, feature_offset=1.0)
    first = _load("reddit", a, tmp_path / "cache1").content_hash
    # from DGL's processed cache
    assert _load("reddit", a, tmp_path / "cache1").content_hash == first
    assert _load("reddit", a, tmp_path / "cache2").content_hash == first  # processed afresh
    assert _load("reddit", b, tmp_path / "cache3").content_hash != first


def test_cache_follows_data_dir(tmp_path):
    """One cache_dir, then another data_dir or edited raw files: the new data is loaded, not the
    stale cache."""
    a, b, cache = tmp_path / "a", tmp_path / "b", tmp_path / "cache"
    write_reddit(a)
    write_reddit(b, feature_offset=1.0)
    from_a = _load("reddit", a, cache)
    from_b = _load("reddit", b, cache)
    assert from_b.content_hash != from_a.content_hash
    assert from_b.origin.startswith(str(b))
    assert from_b.features[:, 1:].sum() != pytest.approx(float(from_a.features[:, 1:].sum()))

    npz = a / DGL_DATASETS["reddit"].folder() / "reddit_data.npz"
    arrays = dict(np.load(npz))
    arrays["feature"][:, 1:] *= 2.0
    np.savez(npz, **arrays)
    edited = _load("reddit", a, cache)
    assert edited.content_hash not in (from_a.content_hash, from_b.content_hash)
    assert _load("reddit", a, tmp_path / "fresh").content_hash == edited.content_hash


# ------------------------------------------------- shared caches, many processes
def test_a_data_dir_that_does_not_exist_is_an_error_naming_it(tmp_path):
    """Never a silent substitute: with data_dir missing, no processed copy of an earlier run stands
    in."""
    data_dir = tmp_path / "a"
    write_reddit(data_dir)
    _load("reddit", data_dir, tmp_path / "cache")  # leaves a processed copy in the cache
    missing = tmp_path / "nonexistent"
    with pytest.raises(DatasetError) as err:
        load_dataset(
            compose(
                [
                    "dataset=reddit",
                    f"data_dir={missing}",
                    f"cache_dir={tmp_path / 'cache'}",
                    "allow_download=true",
                ]
            )
        )
    assert f"data_dir={missing} does not exist" in str(err.value)


@pytest.mark.parametrize("farm", FARMS)
def test_same_files_in_two_folders_share_one_processed_cache(tmp_path, farm):
    """The farm is keyed by the raw files' content: a copy elsewhere reuses it, other content does
    not."""
    reader, root, _ = farm
    a, b, c, cache = tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "cache"
    write_reddit(a)
    write_reddit(b)
    write_reddit(c, feature_offset=1.0)
    for folder in (a, b, c):
        _load("reddit", folder, cache, reader)
    roots = [p for p in (cache / root).iterdir() if p.is_dir()]
    assert len(roots) == 2


def test_concurrent_loads_of_one_new_dataset_share_one_farm(tmp_path):
    """Two processes load Cora into one empty cache at once (two ranks under torchrun, or two jobs):
    both succeed and see the same graph. Before the farm lock, one rank's rebuild removed the
    other's files (shutil.rmtree in the link farm)."""
    import subprocess
    import sys

    from conftest import SHARED_DGL

    if not SHARED_DGL.exists():
        pytest.skip(f"{SHARED_DGL} is not present")
    script = (
        "import sys; from conftest import compose; from gnntrain.data import load_dataset; "
        f"d = load_dataset(compose(['dataset=cora', 'data_dir={SHARED_DGL}', 'cache_dir=' + "
        "sys.argv[1]])); "
        "print(d.content_hash)"
    )
    tests_dir = Path(__file__).resolve().parent
    # one race per run (three took 24 s of CI): test_loading_waits_for_the_farm_lock checks the lock
    # itself
    for attempt in range(1):
        cache = tmp_path / f"cache{attempt}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(cache)],
                cwd=tests_dir,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=180) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
        assert outs[0][0] == outs[1][0]


@pytest.mark.parametrize("farm", FARMS)
def test_loading_waits_for_the_farm_lock(tmp_path, farm):
    """A load does not touch a farm another process is building: it waits for the farm's lock."""
    import threading

    from gnntrain.atomic import file_lock

    reader, root, folder = farm
    data_dir, cache = tmp_path / "a", tmp_path / "cache"
    write_reddit(data_dir)
    done = threading.Event()
    with file_lock(cache / root / f".{folder}.lock"):
        worker = threading.Thread(
            target=lambda: (_load("reddit", data_dir, cache, reader), done.set())
        )
        worker.start()
        assert not done.wait(timeout=2.0), "the load ran while another holder had the farm lock"
    worker.join(timeout=120)
    assert done.is_set()
