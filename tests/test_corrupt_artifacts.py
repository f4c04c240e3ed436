"""Corrupt artifacts (#57): every file gnntrain writes and reads back, truncated, bit-flipped or
deleted. Each is either found by its checksum, with one line naming the file and what to do, or,
where it is a cache, rebuilt with a one-line warning; never silently used.

| artifact                         | read back by                  | outcome                       |
|----------------------------------|-------------------------------|-------------------------------|
| checkpoints/epoch_N.pt, its .sha1| a resume                      | skipped with a warning; none  |
|                                  |                               | valid: the resume is refused  |
| partition store: meta.json, part | each rank (its own part)      | rebuilt with a warning        |
| files, tree.json                 |                               |                               |
| part-wise store: part.json       | the builder of each part      | the part rebuilt, a warning   |
| partition cache .npz, .metrics   | the partitioner, the plan     | rebuilt with a warning        |
| ingested graph: meta.json,       | dataset=files                 | refused: ingest it again      |
| arrays, node_ids.parquet         |                               |                               |
| generated graph on disk          | dataset.on_disk               | generated again, a warning    |
| kernels.json                     | kernel=auto                   | measured again, a warning     |
| plan.yaml                        | gnntrain predict              | refused: gnntrain plan again  |
| model.pt, model.yaml             | predict, api.load_model       | refused: train/resume again   |
| the native kernel's spmm-*.so    | kernel=native                 | compiled again, a warning     |

A deleted file is what it says: a missing cache is built (no warning: nothing was damaged), a
missing run file is named by its reader.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path
from typing import List

import pytest
import torch
from conftest import compose

from gnntrain.errors import GnnTrainError
from gnntrain.launch import run_training
from gnntrain.plan import build_plan

HOW = ["truncate", "bitflip", "delete"]
TEXT = (".json", ".yaml", ".sha1")
GRAPH = ["dataset=csbm", "dataset.num_nodes=300", "kernel=torch", "train.progress=false"]


def corrupt(path: Path, how: str) -> None:
    """Truncate ``path`` to half, flip one bit in its middle, or delete it. A text file's flipped
    bit is in the first digit from its middle (a digit stays a digit: the file still parses, only
    its checksum can tell)."""
    if how == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
        return
    at = len(data) // 2
    if path.suffix in TEXT:
        at = next(i for i in range(at, len(data)) if chr(data[i]).isdigit())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def said(recwarn, caplog) -> List[str]:
    """Every warning a call gave, as Python warnings or log records."""
    return [str(w.message) for w in recwarn] + [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
    ]


def copy(source: Path, tmp_path: Path) -> Path:
    """A copy keeping modification times (an untouched file reads as untouched)."""
    return Path(shutil.copytree(source, tmp_path / source.name))


# ---------------------------------------------------------------- a finished run's own files
RUN = GRAPH + ["mode=single", "train.epochs=2", "train.checkpoint_every=1"]
RUN += ["train.keep_checkpoints=0"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    plan = build_plan(compose(RUN + [f"cache_dir={root / 'cache'}"]))
    (root / "run").mkdir()
    plan.write_yaml(root / "run" / "plan.yaml")  # as gnntrain run writes it
    run_training(plan, root / "run")
    return root / "run"


@pytest.fixture
def run(finished, tmp_path) -> Path:
    return copy(finished, tmp_path)


CHECKPOINT_WARNINGS = {
    ("epoch_000002.pt", "truncate"): "checksum mismatch (truncated or corrupt)",
    ("epoch_000002.pt", "bitflip"): "checksum mismatch (truncated or corrupt)",
    ("epoch_000002.pt", "delete"): None,  # the newest is epoch 1 now: nothing damaged
    ("epoch_000002.pt.sha1", "truncate"): "checksum mismatch (truncated or corrupt)",
    ("epoch_000002.pt.sha1", "bitflip"): "checksum mismatch (truncated or corrupt)",
    ("epoch_000002.pt.sha1", "delete"): (
        "its checksum file epoch_000002.pt.sha1 is missing or unreadable"
    ),
}


@pytest.mark.parametrize(
    "name,how", list(CHECKPOINT_WARNINGS), ids=[f"{n}-{h}" for n, h in CHECKPOINT_WARNINGS]
)
def test_a_corrupt_checkpoint_is_skipped_for_the_one_before(run, tmp_path, name, how):
    from gnntrain.checkpoint import make_checkpointer
    from gnntrain.launch.launcher import check_resume

    corrupt(run / "checkpoints" / name, how)
    plan = build_plan(compose(RUN + [f"cache_dir={tmp_path}", "train.resume=true"]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check_resume(plan, run)
    why = CHECKPOINT_WARNINGS[(name, how)]
    newest = run / "checkpoints" / "epoch_000002.pt"
    assert [str(w.message) for w in seen] == (
        [f"skipping checkpoint {newest}: {why}"] if why else []
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpointer = make_checkpointer(plan.config_obj, run / "checkpoints", plan.plan_hash)
        assert checkpointer.load_latest()["epoch"] == 1


@pytest.mark.parametrize("option", ["train.resume=true", "resume"])
def test_a_resume_whose_every_checkpoint_is_corrupt_is_refused(run, tmp_path, option):
    """Before: train.resume=true said "no checkpoint yet" and trained from epoch 1."""
    from gnntrain.checkpoint import CheckpointError
    from gnntrain.launch.launcher import check_resume

    for epoch in (1, 2):
        corrupt(run / "checkpoints" / f"epoch_00000{epoch}.pt", "bitflip")
    option = option if "=" in option else f"resume={run}"
    plan = build_plan(compose(RUN + [f"cache_dir={tmp_path}", option]))
    with pytest.raises(CheckpointError) as refused, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_resume(plan, run)
    assert str(refused.value) == (
        f"{option}: none of the 2 checkpoint(s) in {run / 'checkpoints'} is valid (each failed "
        "its checksum or its load). Fix: restore a checkpoint there, or train from epoch 1 in a "
        "new run directory."
    )


MODEL_FIX = (
    "Fix: train the run again, or resume it (its overrides, hydra.run.dir={run} "
    "train.resume=true) to write model.pt and model.yaml from its newest checkpoint."
)
MODEL_ERRORS = {
    ("model.pt", "truncate"): "{run}/model.pt does not match its checksum in model.yaml. "
    + MODEL_FIX,
    ("model.pt", "bitflip"): "{run}/model.pt does not match its checksum in model.yaml. "
    + MODEL_FIX,
    ("model.yaml", "truncate"): (
        "{run}/model.yaml has no checksum line (truncated, or written by an older gnntrain). "
        + MODEL_FIX
    ),
    ("model.yaml", "bitflip"): "{run}/model.yaml does not match its checksum. " + MODEL_FIX,
}
MODEL_MISSING = (
    "{run}: no model.pt/model.yaml here. A run writes them when it completes; give the run's own "
    "directory (the one with summary.json)."
)


@pytest.mark.parametrize("name", ["model.pt", "model.yaml"])
@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_model_is_refused_by_load_model_and_predict(run, name, how):
    """Before: a bit flipped in model.pt's weights loaded silently (torch.load does not check)."""
    from gnntrain.api import load_model
    from gnntrain.launch.predict import check_weights

    corrupt(run / name, how)
    expected = MODEL_ERRORS.get((name, how), MODEL_MISSING).format(run=run)
    for read in (lambda: load_model(run), lambda: check_weights(run, run / "model.pt")):
        with pytest.raises(GnnTrainError) as refused:
            read()
        assert str(refused.value) == expected


def test_a_corrupt_checkpoint_given_to_predict_is_refused(run):
    from gnntrain.launch.predict import check_weights

    checkpoint = run / "checkpoints" / "epoch_000001.pt"
    corrupt(checkpoint, "bitflip")
    with pytest.raises(GnnTrainError) as refused:
        check_weights(run, checkpoint)
    assert str(refused.value) == (
        f"predict: --checkpoint {checkpoint} does not match its checksum in epoch_000001.pt.sha1 "
        "(truncated or corrupt). Fix: give another checkpoint of the run, or its model.pt."
    )


PLAN_FIX = "Fix: write it again with gnntrain plan, the run's overrides and hydra.run.dir={run}."
PLAN_ERRORS = {
    "truncate": (
        "predict: {run}/plan.yaml has no checksum line (truncated, or written by an older "
        "gnntrain). " + PLAN_FIX
    ),
    "bitflip": "predict: {run}/plan.yaml does not match its checksum. " + PLAN_FIX,
    "delete": (
        "predict: {run} has no plan.yaml; give the directory of a finished run (it holds "
        "plan.yaml, summary.json and model.pt)."
    ),
}


@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_plan_yaml_is_refused_by_predict(run, how):
    """Before: a truncated plan.yaml parsed as far as it went, and the missing settings took their
    defaults."""
    from gnntrain.launch.predict import predict_config

    corrupt(run / "plan.yaml", how)
    with pytest.raises(GnnTrainError) as refused:
        predict_config(run, [])
    assert str(refused.value) == PLAN_ERRORS[how].format(run=run)


# ---------------------------------------------------------------- the partition store and cache
STORE = GRAPH + ["mode=partition", "hardware.ranks_per_node=2"]


@pytest.fixture(scope="module")
def store_cache(tmp_path_factory) -> Path:
    from gnntrain.launch.shards import ensure_store

    cache = tmp_path_factory.mktemp("store") / "cache"
    ensure_store(build_plan(compose(STORE + [f"cache_dir={cache}"])))
    return cache


STORE_WARNINGS = {
    ("meta.json", "truncate"): "partition store {dir}/meta.json is corrupt (is not valid JSON); "
    "rebuilding the store",
    ("meta.json", "bitflip"): "partition store {dir}/meta.json is corrupt (does not match its "
    "checksum); rebuilding the store",
    ("meta.json", "delete"): "partition store {dir} has no meta.json (deleted?); rebuilding the "
    "store",
}
PART_FILE = {
    "truncate": "partition store {dir}: {dir}/{name} is missing or has the wrong size; "
    "rebuilding it",
    "bitflip": "partition store {dir}: {dir}/{name} does not match its checksum in meta.json; "
    "rebuilding it",
    "delete": "partition store {dir}: {dir}/{name} is missing or has the wrong size; rebuilding it",
}


@pytest.mark.parametrize("name", ["meta.json", "part1/features.npy", "part1/tree.json"])
@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_store_is_rebuilt_with_a_warning(
    store_cache, tmp_path, recwarn, caplog, name, how
):
    from gnntrain.launch.shards import open_rank_shard, store_dir
    from gnntrain.partition.store import open_part, read_meta

    plan = build_plan(compose(STORE + [f"cache_dir={copy(store_cache, tmp_path)}"]))
    directory = store_dir(plan)
    built = read_meta(directory)["built_at"]
    corrupt(directory / name, how)
    shard, _, _ = open_rank_shard(plan, 1)  # what rank 1 does
    expected = STORE_WARNINGS.get((name, how), PART_FILE[how])
    assert said(recwarn, caplog) == [expected.format(dir=directory, name=name)]
    assert read_meta(directory)["built_at"] != built  # rebuilt, and what it holds is right
    original = open_part(store_dir(build_plan(compose(STORE + [f"cache_dir={store_cache}"]))), 1)
    assert torch.equal(shard.features, original["features"])


@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_part_record_of_a_part_wise_store_is_rebuilt_with_a_warning(
    graph, tmp_path, recwarn, caplog, how
):
    """A part-wise store (a graph on disk) while its meta.json is not written yet (other hosts are
    still building): each part's part.json says what the part holds."""
    from gnntrain.launch.shards import open_rank_shard, part_wise, store_dir

    plan = build_plan(
        compose(
            ["dataset=files", f"dataset.path={graph}", f"cache_dir={tmp_path}", "kernel=torch"]
            + ["mode=partition", "hardware.ranks_per_node=2", "partitioner=kaminpar"]
            + ["partitioner.threads=1"]
        )
    )
    assert part_wise(plan)
    open_rank_shard(plan, 1)
    directory = store_dir(plan)
    (directory / "meta.json").unlink(missing_ok=True)  # not written while part 0 is missing
    record = directory / "part1" / "part.json"
    built = record.read_text()
    corrupt(record, how)
    caplog.clear()
    recwarn.clear()
    open_rank_shard(plan, 1)
    why = {"truncate": "is not valid JSON", "bitflip": "does not match its checksum"}
    why = why.get(how, "is missing")
    assert said(recwarn, caplog) == [
        f"partition store {directory}: {record} {why}; rebuilding part 1"
    ]
    assert record.read_text() != built  # published again


@pytest.mark.parametrize("suffix", [".npz", ".metrics.json"])
@pytest.mark.parametrize("how", ["truncate", "bitflip"])
def test_a_corrupt_partition_cache_entry_is_rebuilt_with_a_warning(
    store_cache, tmp_path, recwarn, suffix, how
):
    from gnntrain.partition.cache import PartitionCache

    cache = copy(store_cache, tmp_path)
    entry = next((cache / "partitions").glob(f"*{suffix}"))
    key = entry.name[: -len(suffix)]
    corrupt(entry, how)
    partitions = PartitionCache(cache)
    read = partitions.load if suffix == ".npz" else partitions.metrics
    assert read(key) is None
    why = {
        ".npz": "is unreadable (BadZipFile)",
        ".metrics.json": "is corrupt (is not valid JSON)"
        if how == "truncate"
        else "is corrupt (does not match its checksum)",
    }[suffix]
    assert [str(w.message) for w in recwarn] == [
        f"partition cache entry {entry} {why}; rebuilding it"
    ]


# ---------------------------------------------------------------- graphs on disk
@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    from gnntrain.data.ingest.generated import write_generated

    folder = tmp_path_factory.mktemp("ingested") / "graph"
    write_generated(compose(["dataset=csbm", "dataset.num_nodes=300"]).dataset, folder)
    return folder


INGEST_FIX = (
    "The folder is damaged: ingest the graph again (gnntrain ingest ... --out {g} --overwrite)."
)
GRAPH_ERRORS = {
    ("meta.json", "truncate"): "dataset.path={g}: {g}/meta.json is not valid JSON. " + INGEST_FIX,
    ("meta.json", "bitflip"): "dataset.path={g}: {g}/meta.json does not match its checksum. "
    + INGEST_FIX,
    ("meta.json", "delete"): "dataset.path={g}: no meta.json here, so this is not a finished "
    "ingested graph. Fix: run gnntrain ingest ... --out DIR first, then dataset=files "
    "dataset.path=DIR.",
}
GRAPH_FILE = {
    "truncate": "dataset.path={g}: {g}/{name} is missing or has the wrong size. " + INGEST_FIX,
    "bitflip": "dataset.path={g}: {g}/{name} does not match its checksum in meta.json. "
    + INGEST_FIX,
    "delete": "dataset.path={g}: {g}/{name} is missing or has the wrong size. " + INGEST_FIX,
}


@pytest.mark.parametrize("name", ["meta.json", "features.npy", "indices.npy", "node_ids.parquet"])
@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_ingested_graph_is_refused(graph, tmp_path, name, how):
    """Before: a bit flipped in an array (same size) was trained on, and one flipped in meta.json
    changed what the plan read."""
    from gnntrain.data.locations import fill_file_sizes
    from gnntrain.errors import DatasetError

    g = copy(graph, tmp_path)
    corrupt(g / name, how)
    with pytest.raises(DatasetError) as refused:
        fill_file_sizes(compose(["dataset=files", f"dataset.path={g}"]))  # what a plan reads first
    expected = GRAPH_ERRORS.get((name, how), GRAPH_FILE[how])
    assert str(refused.value) == expected.format(g=g, name=name)


def test_a_corrupt_generated_graph_on_disk_is_generated_again_with_a_warning(tmp_path, recwarn):
    from gnntrain.data.generated_store import generated_folder, load_generated_on_disk

    cfg = compose(["dataset=csbm", "dataset.num_nodes=300", "dataset.on_disk=true"])
    cfg.cache_dir = str(tmp_path)
    first = load_generated_on_disk(cfg).features.clone()
    features = generated_folder(cfg) / "features.npy"
    corrupt(features, "bitflip")
    again = load_generated_on_disk(cfg)
    assert [str(w.message) for w in recwarn] == [
        f"generated graph {features} does not match its checksum in meta.json; generating it again"
    ]
    assert torch.equal(first, again.features)


# ---------------------------------------------------------------- kernels.json
@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_kernel_cache_is_measured_again_with_a_warning(tmp_path, monkeypatch, how):
    from gnntrain.models import kernel_choice

    timed = []
    monkeypatch.setattr(
        kernel_choice, "time_kernel", lambda kernel, *a, **k: timed.append(kernel) or 0.001
    )
    choose = lambda: kernel_choice.choose_kernel("cpu", "float32", 1, 10.0, 16, tmp_path, 100)
    first = choose()
    measured = len(timed)
    corrupt(tmp_path / "kernels.json", how)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert choose() == first
    why = {"truncate": "is not valid JSON", "bitflip": "does not match its checksum"}.get(how)
    cache = tmp_path / "kernels.json"
    assert [str(w.message) for w in seen] == (
        [f"kernel cache {cache} is corrupt ({why}); re-measuring the kernels and rewriting it"]
        if why
        else []
    )
    assert len(timed) == 2 * measured  # measured again, and kept again
    assert kernel_choice._read_cache(cache) and choose() == first and len(timed) == 2 * measured


# ---------------------------------------------------------------- the native kernel's build
@pytest.fixture(scope="module")
def native_build(tmp_path_factory) -> Path:
    """The C kernel compiled once into a folder of its own (its .so and the BLAKE2b beside it)."""
    import os

    from gnntrain.models import _native_c

    folder = tmp_path_factory.mktemp("native")
    previous = os.environ.get("GNNTRAIN_NATIVE_CACHE_DIR")
    os.environ["GNNTRAIN_NATIVE_CACHE_DIR"] = str(folder)
    _native_c.load.cache_clear()
    try:
        _native_c.load()
    except _native_c.NativeBuildError as exc:
        pytest.skip(f"the C kernel does not build here: {exc}")
    finally:
        _native_c.load.cache_clear()
        if previous is None:
            os.environ.pop("GNNTRAIN_NATIVE_CACHE_DIR")
        else:
            os.environ["GNNTRAIN_NATIVE_CACHE_DIR"] = previous
    return folder


@pytest.mark.parametrize("how", HOW)
def test_a_corrupt_native_kernel_build_is_compiled_again_with_a_warning(
    native_build, tmp_path, monkeypatch, how
):
    """Before: a bit flipped in the cached shared object was loaded (it could compute wrong sums
    or crash). The compiler is stood in for by a copy of the sound build."""
    import subprocess

    from gnntrain.models import _native_c

    folder = copy(native_build, tmp_path)
    (library,) = folder.glob("spmm-*.so")
    sound = library.read_bytes()
    compiles = []

    def compile_(args, *a, **kw):
        compiles.append(args)
        Path(args[args.index("-o") + 1]).write_bytes(sound)
        return subprocess.CompletedProcess(args, 0, "", "")

    cc = _native_c.compiler()
    version = _native_c._compiler_version(cc)  # as load() asks, before it builds
    monkeypatch.setenv("GNNTRAIN_NATIVE_CACHE_DIR", str(folder))
    monkeypatch.setattr(_native_c.subprocess, "run", compile_)
    corrupt(library, how)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = _native_c._build(cc, version)  # what load() runs
    why = {"truncate": "does not match its checksum", "bitflip": "does not match its checksum"}
    expected = (
        [f"native kernel cache {library} {why[how]}; compiling it again"] if how in why else []
    )
    assert [str(w.message) for w in seen] == expected
    assert path == library and library.read_bytes() == sound and len(compiles) == 1
