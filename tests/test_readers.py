"""The readers behind the file-backed loaders (gnntrain/data/loaders.py): DGL's dataset classes and
PyG's read the same raw files into the same graph, and a dataset whose raw files are not where
``data_dir`` says (none offline, one folder too high, a file missing, a file for a folder, no
network) is one error naming where they are."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import compose, requires_shared
from test_loaders import write_planetoid, write_reddit

from gnntrain.data import load_dataset
from gnntrain.data.loaders import DGL_DATASETS
from gnntrain.errors import DatasetError


# ------------------------------------------------- readers: DGL's classes and PyG's agree
def _assert_same_graph(a, b) -> None:
    for field in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert (a.num_nodes, a.num_classes, a.content_hash) == (
        b.num_nodes,
        b.num_classes,
        b.content_hash,
    )


def _load_with(name: str, data_dir: Path, cache_dir: Path, reader: str):
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


@pytest.mark.dgl
@requires_shared
@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_dgl_and_pyg_readers_give_identical_planetoid_graphs(tmp_path, name):
    """The same raw files in ../shared read by DGL's class and by PyG's Planetoid: the same edges,
    features (DGL's row normalisation, bit for bit), labels, splits and content hash."""
    from conftest import SHARED_DGL

    by_dgl = _load_with(name, SHARED_DGL, tmp_path / "cache", "dgl")
    by_pyg = _load_with(name, SHARED_DGL, tmp_path / "cache", "pyg")
    _assert_same_graph(by_dgl, by_pyg)
    assert by_pyg.origin == str(SHARED_DGL / DGL_DATASETS[name].folder())
    assert (tmp_path / "cache" / "pyg").is_dir()


@requires_shared
def test_pyg_reader_takes_pygs_own_layout_too(tmp_path):
    """<data_dir>/Cora/raw/ind.cora.* (what PyG downloads) is found as well as DGL's layout."""
    from conftest import SHARED_DGL

    raw = tmp_path / "pyg_data" / "Cora" / "raw"
    raw.mkdir(parents=True)
    dgl_folder = SHARED_DGL / DGL_DATASETS["cora"].folder()
    for path in dgl_folder.iterdir():
        (raw / path.name.replace("ind.cora_v2.", "ind.cora.")).symlink_to(path)
    from_pyg_layout = _load_with("cora", tmp_path / "pyg_data", tmp_path / "cache", "pyg")
    _assert_same_graph(from_pyg_layout, _load_with("cora", SHARED_DGL, tmp_path / "cache", "pyg"))
    assert from_pyg_layout.origin == str(raw)


@pytest.mark.dgl
@pytest.mark.parametrize("name", ["pubmed", "reddit"])
def test_dgl_and_pyg_readers_agree_on_generated_files(tmp_path, name):
    """PubMed-layout Planetoid files (float32, a self-loop, a duplicate edge) and Reddit files (DGL
    reorders Reddit's nodes by reverse Cuthill-McKee; the PyG path applies the same order)."""
    data_dir = tmp_path / "data"
    write_planetoid(data_dir, name) if name == "pubmed" else write_reddit(data_dir)
    _assert_same_graph(
        _load_with(name, data_dir, tmp_path / "cache", "dgl"),
        _load_with(name, data_dir, tmp_path / "cache", "pyg"),
    )


@pytest.mark.dgl
def test_dgl_folder_name_is_computed_as_dgl_does(monkeypatch):
    """The raw folder is found without importing DGL; its name must be the one DGL derives."""
    import hashlib

    from dgl.data.utils import _get_dgl_url

    for repo in (None, "https://mirror.example/dgl"):
        if repo:
            monkeypatch.setenv("DGL_REPO", repo)
        for source in DGL_DATASETS.values():
            want = (
                source.folder_name
                + "_"
                + hashlib.sha1(_get_dgl_url(source.url_path).encode()).hexdigest()[:8]
            )
            assert source.folder() == want


# ------------------------------------------------- where the files are not
def _cora_error(tmp_path, data_dir) -> str:
    with pytest.raises(DatasetError) as err:
        load_dataset(
            compose(["dataset=cora", f"data_dir={data_dir}", f"cache_dir={tmp_path / 'cache'}"])
        )
    return str(err.value)


@pytest.mark.parametrize(
    "name, layout",
    [
        ("citeseer", f"{DGL_DATASETS['citeseer'].folder()}/{{ind.citeseer.x"),
        ("ogbn-products", "ogbn_products/{RELEASE_v1.txt, raw/edge.csv.gz"),
    ],
    ids=["citeseer", "ogbn-products"],
)
def test_missing_files_offline(tmp_path, monkeypatch, name, layout):
    """Offline with no files: a prompt DatasetError naming the dataset, the searched folder and the
    layout."""
    monkeypatch.setenv("GNNTRAIN_OFFLINE", "1")
    with contextlib.suppress(ImportError):  # keep the reader's import cost out of the timing
        import dgl.data  # noqa: F401
    import ogb.nodeproppred  # noqa: F401

    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    cfg = compose([f"dataset={name}", f"data_dir={data_dir}", f"cache_dir={tmp_path / 'cache'}"])
    start = time.perf_counter()
    with pytest.raises(DatasetError) as err:
        load_dataset(cfg)
    assert time.perf_counter() - start < 5.0
    msg = str(err.value)
    assert f"'{name}'" in msg
    assert str(data_dir) in msg
    assert layout in msg
    assert "GNNTRAIN_OFFLINE" in msg


@requires_shared
def test_a_data_dir_one_level_too_high_names_the_right_one(tmp_path):
    """data_dir=../shared/datasets instead of ../shared/datasets/dgl: the folder that holds the
    files is named, and nothing is downloaded (it used to blame the network)."""
    from conftest import SHARED_DGL

    message = _cora_error(tmp_path, SHARED_DGL.parent)
    assert (
        f"data_dir={SHARED_DGL.parent} has no {DGL_DATASETS['cora'].folder()}/, but {SHARED_DGL} "
        "does: "
        f"set data_dir={SHARED_DGL}" in message
    )
    assert "download" not in message


@requires_shared
def test_a_missing_raw_file_is_named(tmp_path):
    from conftest import SHARED_DGL

    folder = DGL_DATASETS["cora"].folder()
    copy = tmp_path / "data" / folder
    shutil.copytree(SHARED_DGL / folder, copy)
    (copy / "ind.cora_v2.tx").unlink()
    message = _cora_error(tmp_path, tmp_path / "data")
    # DGL's or PyG's, by dataset.reader
    assert message.startswith(f"dataset 'cora': {copy} is missing 1 of ")
    assert "'s files: ind.cora_v2.tx. Restore them" in message
    assert "download" not in message


def test_a_data_dir_that_is_a_file_says_so(tmp_path):
    not_a_folder = tmp_path / "cora.zip"
    not_a_folder.write_bytes(b"PK")
    assert f"data_dir={not_a_folder} is a file, not a folder." in _cora_error(
        tmp_path, not_a_folder
    )


def test_without_a_network_no_download_is_tried(tmp_path, monkeypatch):
    """Downloads allowed but the server unreachable: the library's download is never started
    (its retries took minutes and ended in a ConnectionError blamed on DGL's cache folder)."""
    from gnntrain.data import farm

    monkeypatch.delenv("GNNTRAIN_OFFLINE", raising=False)
    monkeypatch.setattr(
        farm, "network_problem", lambda library: "data.dgl.ai cannot be reached (test)"
    )
    message = _cora_error(tmp_path, tmp_path)
    assert (
        f"raw files not found (data_dir={tmp_path} holds no {DGL_DATASETS['cora'].folder()}/), and "
        "no download "
        f"was tried: data.dgl.ai cannot be reached (test)." in message
    )
    assert not (tmp_path / "cache" / "dgl" / "downloaded").exists()


@requires_shared
def test_a_named_dataset_is_one_registration_and_an_unknown_one_is_named_by_the_plan(tmp_path):
    """Named datasets register like generators (``register_dgl_dataset``): a Planetoid dataset
    registered on the fly (Cora's files under another name) is read like cora; a name no source
    registered is refused by the plan, naming the registered ones; a different record under a taken
    name is refused."""
    import dataclasses

    from conftest import SHARED_DGL

    from gnntrain.data.loaders import OGB_DATASETS, register_dgl_dataset
    from gnntrain.plan import build_plan
    from gnntrain.registry import DuplicateNameError

    again = dataclasses.replace(DGL_DATASETS["cora"], name="cora-again")
    register_dgl_dataset(again)
    try:
        overrides = [f"data_dir={SHARED_DGL}", f"cache_dir={tmp_path}", "dataset.reader=pyg"]
        copy = load_dataset(compose(["dataset=cora", "dataset.name=cora-again", *overrides]))
        cora = load_dataset(compose(["dataset=cora", *overrides]))
        assert torch.equal(copy.features, cora.features) and torch.equal(copy.src, cora.src)
        assert copy.content_hash.startswith("cora-again-")
        with pytest.raises(DuplicateNameError, match="DGL dataset 'cora-again' is registered"):
            register_dgl_dataset(dataclasses.replace(again, pyg_name="CiteSeer"))
    finally:
        DGL_DATASETS.remove("cora-again")
    with pytest.raises(
        DatasetError, match=r"'nosuch': no DGL dataset of that name .* citeseer, cora, pubmed"
    ):
        build_plan(compose(["dataset=cora", "dataset.name=nosuch"]))
    with pytest.raises(
        DatasetError, match=r"no OGB dataset of that name .* ogbn-arxiv, ogbn-products"
    ):
        build_plan(compose(["dataset=ogbn-arxiv", "dataset.name=ogbn-nosuch"]))
    assert set(OGB_DATASETS) == {"ogbn-arxiv", "ogbn-products"}
