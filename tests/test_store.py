"""The partition store (gnntrain/partition/store.py, gnntrain/launch/shards.py): every part written
once, no pickle, each rank opening its own part, corrupt parts rebuilt, concurrent jobs sharing
one store (docs/design.md#partition-store)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose, read_summary, run_cli

from gnntrain import artifact
from gnntrain.launch.shards import (
    ShardSource,
    ensure_store,
    open_rank_shard,
    prepare_in_memory,
    store_dir,
)
from gnntrain.modes.base import RankShard
from gnntrain.partition import store
from gnntrain.plan import build_plan

SMALL = [
    "dataset=csbm",
    "dataset.num_nodes=400",
    "kernel=torch",
    "train.epochs=2",
    "train.progress=false",
]
MODES = {
    "partition": ["mode=partition"],
    "partition-1.5d": ["mode=partition", "mode.replication=2", "hardware.ranks_per_node=4"],
    "supergcn": ["mode=supergcn"],
    "mop": ["mode=mop"],
    "hongtu": ["mode=hongtu"],
}


def _assert_same(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor) or isinstance(a, np.ndarray):
        assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape, where
        assert bool((torch.as_tensor(np.asarray(a)) == torch.as_tensor(np.asarray(b))).all()), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("mode", list(MODES))
def test_every_part_reads_back_as_prepared(tmp_path, mode):
    """What a rank opens from the store is, field by field, what the mode's prepare made in
    memory."""
    plan = build_plan(compose(SMALL + MODES[mode] + [f"cache_dir={tmp_path}"]))
    directory, meta, _ = ensure_store(plan)
    prepared = prepare_in_memory(plan)
    assert meta["num_parts"] == plan.world_size == len(prepared.shards)
    for rank, shard in enumerate(prepared.shards):
        opened, _ = ShardSource(store=str(directory)).shard(plan, rank)
        assert isinstance(opened, RankShard)
        for f in dataclasses.fields(RankShard):
            _assert_same(
                getattr(shard, f.name), getattr(opened, f.name), f"{mode} rank {rank} {f.name}"
            )


def test_no_pickle_and_a_rank_reads_only_its_part(tmp_path):
    """Arrays are .npy (loadable with allow_pickle=False), the structure JSON; a part lists only its
    own files plus the shared ones, and the largest arrays (features) are per part."""
    plan = build_plan(compose(SMALL + MODES["partition-1.5d"] + [f"cache_dir={tmp_path}"]))
    directory, meta, _ = ensure_store(plan)
    for path in directory.rglob("*"):
        if path.is_file():
            assert path.suffix in (".npy", ".json"), path
            if path.suffix == ".npy":
                np.load(path, allow_pickle=False)
    for rank, files in enumerate(meta["parts"]):
        assert all(f.startswith((f"part{rank}/", "shared/")) for f in files)
        assert f"part{rank}/features.npy" in files
    from gnntrain.launch.shards import shard_source

    source, partition, _ = shard_source(plan)  # what the local launcher hands its spawned ranks
    assert source.shards is None and source.store == str(directory) == partition["store"]
    sizes = meta["bytes_per_part"]
    total = sum(p.stat().st_size for p in directory.rglob("*.npy"))
    assert max(sizes) < total / 2  # each of the 4 ranks opens well under half of what is stored


def test_a_corrupt_part_is_rebuilt_with_a_warning(tmp_path, caplog):
    plan = build_plan(compose(SMALL + MODES["partition"] + [f"cache_dir={tmp_path}"]))
    directory, meta, _ = ensure_store(plan)
    features = directory / "part1" / "features.npy"
    raw = bytearray(features.read_bytes())
    raw[-3] ^= 0xFF
    features.write_bytes(bytes(raw))
    with pytest.raises(store.StoreError, match="checksum"):
        store.open_part(directory, 1)
    shard, partition, _ = open_rank_shard(plan, 1)
    assert "does not match its checksum" in caplog.text and "rebuilding" in caplog.text
    assert store.read_meta(directory)["built_at"] != meta["built_at"]
    _assert_same(prepare_in_memory(plan).shards[1].features, shard.features, "rebuilt features")


def test_a_corrupt_meta_json_is_rebuilt_with_a_warning(tmp_path):
    plan = build_plan(compose(SMALL + MODES["partition"] + [f"cache_dir={tmp_path}"]))
    directory, meta, _ = ensure_store(plan)
    (directory / "meta.json").write_text('{"format_version": 1, "par')
    with pytest.warns(
        UserWarning, match=f"partition store {directory / 'meta.json'} is corrupt .*rebuilding"
    ):
        rebuilt, again, _ = ensure_store(plan)
    assert rebuilt == directory and again["built_at"] != meta["built_at"]


def test_the_key_follows_what_shapes_a_part(tmp_path):
    base = SMALL + MODES["partition"] + [f"cache_dir={tmp_path}"]
    here = store_dir(build_plan(compose(base)))
    assert store_dir(build_plan(compose(base + ["train.epochs=9", "train.lr=0.5"]))) == here
    for change in (
        ["partitioner=random"],
        ["dataset.num_nodes=500"],
        ["model=sage"],
        ["train.seed=4"],
        ["hardware.ranks_per_node=3"],
    ):
        assert store_dir(build_plan(compose(base + change))) != here, change


def test_runs_reuse_the_store_and_equal_in_memory_training(tmp_path):
    """Two runs of one plan: the first builds the store, the second opens it; both train the same
    losses as the in-memory shards of an earlier version did (partition = single in float64)."""
    from conftest import assert_exact

    from gnntrain.launch import run_training

    exact = SMALL + ["train.dtype=float64", "model.dropout=0", f"cache_dir={tmp_path}"]
    first = run_training(build_plan(compose(exact + MODES["partition"])), tmp_path / "a")
    built = store.read_meta(Path(first["partition"]["store"]))["built_at"]
    second = run_training(
        build_plan(compose(exact + MODES["partition"] + ["train.epochs=3"])), tmp_path / "b"
    )
    assert second["partition"]["store"] == first["partition"]["store"]
    assert store.read_meta(Path(second["partition"]["store"]))["built_at"] == built
    single = run_training(build_plan(compose(exact + ["mode=single"])), tmp_path / "s")
    assert_exact(first["losses"], single["losses"])
    assert "store" not in single["partition"]  # single holds the whole graph: no store


def test_two_jobs_started_at_once_share_one_store(tmp_path):
    """Two `gnntrain run` of the same plan on a new dataset, at the same moment: one builds the
    store, the other waits for its lock and opens it; both complete."""
    cache = tmp_path / "cache"
    args = ["run", *SMALL, "dataset.num_nodes=3000", "mode=partition", f"cache_dir={cache}"]
    exe = Path(sys.executable).parent / "gnntrain"
    procs = [
        subprocess.Popen(
            [str(exe), *args, f"hydra.run.dir={tmp_path / f'run{i}'}"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    summaries = [read_summary(tmp_path / f"run{i}") for i in range(2)]
    assert summaries[0]["partition"]["store"] == summaries[1]["partition"]["store"]
    # one store
    assert len([p for p in (cache / "parts").iterdir() if not p.name.startswith(".")]) == 1
    assert summaries[0]["losses"] == summaries[1]["losses"]


def test_gnntrain_partition_writes_the_store(tmp_path):
    proc = run_cli(
        [
            "partition",
            *SMALL,
            "mode=partition",
            f"cache_dir={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    stores = [p for p in (tmp_path / "cache" / "parts").iterdir() if not p.name.startswith(".")]
    assert len(stores) == 1 and (stores[0] / "meta.json").is_file()
    assert str(stores[0]) in proc.stdout
    meta = json.loads((stores[0] / "meta.json").read_text())
    assert meta["num_parts"] == 2 and meta["format_version"] == store.FORMAT_VERSION


def test_the_key_follows_raw_files_in_pyg_layout(tmp_path):
    """A dataset read from PyG's layout (``CiteSeer/raw``, not ``citeseer_<hash>``) is keyed by its
    raw files too: changing one makes a new store."""
    import shutil

    from conftest import SHARED_DGL

    if not SHARED_DGL.exists():
        pytest.skip(f"{SHARED_DGL} is not present")
    raw = tmp_path / "data" / "CiteSeer" / "raw"
    raw.mkdir(parents=True)
    for f in sorted((SHARED_DGL).glob("citeseer_*/ind.citeseer.*")):
        shutil.copy(f, raw / f.name)
    overrides = [
        "dataset=citeseer",
        f"data_dir={tmp_path / 'data'}",
        "dataset.reader=pyg",
        "mode=partition",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    here = store_dir(build_plan(compose(overrides)))
    (raw / "ind.citeseer.graph").write_bytes((raw / "ind.citeseer.graph").read_bytes() + b" ")
    assert store_dir(build_plan(compose(overrides))) != here


def test_opening_a_part_reads_no_file_the_build_left_untouched(tmp_path, monkeypatch):
    """The digests are taken when the store is built; a rank's start checks sizes and mtimes and
    reads (digests) only files written to since, so opening does not page the whole part in."""
    plan = build_plan(compose(SMALL + MODES["partition"] + [f"cache_dir={tmp_path}"]))
    directory, meta, _ = ensure_store(plan)
    read = []
    real_digest = artifact.file_digest
    monkeypatch.setattr(
        artifact, "file_digest", lambda path: (read.append(path), real_digest(path))[1]
    )
    store.open_part(directory, 1)
    assert read == []
    features = directory / "part1" / "features.npy"
    # touched, same bytes
    os.utime(features, ns=(features.stat().st_atime_ns, features.stat().st_mtime_ns + 10**9))
    store.open_part(directory, 1)
    assert read == [features]
    monkeypatch.setenv("GNNTRAIN_VERIFY_PARTS", "1")
    read.clear()
    store.open_part(directory, 1)
    assert len(read) == len(meta["parts"][1])
