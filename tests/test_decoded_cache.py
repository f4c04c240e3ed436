"""The decoded-dataset cache (gnntrain/data/decoded_cache.py): a named dataset read through PyG once
is read back by later processes without importing PyG, as the same graph; a damaged cache file is
decoded again with a warning, never used and never an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED_DGL, compose, requires_shared

from gnntrain.data import load_dataset

# a fresh process plans and loads, then says whether PyG was imported and what it loaded
_PLAN_AND_LOAD = """
import json, sys
from gnntrain.api import plan
from gnntrain.data import load_dataset
from gnntrain.launch.compose import compose
overrides = sys.argv[1:]
plan(overrides)
graph = load_dataset(compose(overrides))
print(json.dumps({"pyg": "torch_geometric" in sys.modules, "hash": graph.content_hash}))
"""


def _overrides(cache: Path):
    return ["dataset=cora", f"data_dir={SHARED_DGL}", f"cache_dir={cache}", "dataset.reader=pyg"]


def _plan_and_load_in_a_new_process(cache: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _PLAN_AND_LOAD, *_overrides(cache)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _saved_files(cache: Path):
    return sorted((cache / "pyg").glob("*/Cora/gnntrain-decoded-*"))


@requires_shared
def test_a_dataset_decoded_once_plans_and_loads_again_without_importing_pyg(tmp_path):
    """The first load decodes with PyG and saves the arrays; a new process then plans and loads
    without importing torch_geometric (about 0.6 s of every rank's start) and gets the same graph,
    content hash included."""
    cache = tmp_path / "cache"
    decoded = load_dataset(compose(_overrides(cache)))
    assert [p.suffix for p in _saved_files(cache)] == [".json", ".pt"]
    again = _plan_and_load_in_a_new_process(cache)
    assert again == {"pyg": False, "hash": decoded.content_hash}


@requires_shared
@pytest.mark.parametrize("damage", ["truncated", "flipped", "meta removed"])
def test_a_damaged_decoded_file_is_decoded_again_with_a_warning(tmp_path, damage):
    cache = tmp_path / "cache"
    cfg = compose(_overrides(cache))
    decoded = load_dataset(cfg)
    meta, data = _saved_files(cache)
    blob = data.read_bytes()
    if damage == "truncated":
        data.write_bytes(blob[: len(blob) // 2])
    elif damage == "flipped":
        middle = len(blob) // 2
        data.write_bytes(blob[:middle] + bytes([blob[middle] ^ 1]) + blob[middle + 1 :])
    else:
        meta.unlink()
    if damage == "meta removed":  # incomplete, as a crash between the two writes leaves it
        again = load_dataset(cfg)
    else:
        with pytest.warns(UserWarning, match="decoded dataset cache .* decoding it again"):
            again = load_dataset(cfg)
    assert again.content_hash == decoded.content_hash
    assert again.features.equal(decoded.features) and again.src.equal(decoded.src)
    assert data.read_bytes() == blob  # written again whole


@requires_shared
def test_a_full_disk_while_saving_the_decoded_dataset_is_one_error_naming_the_cache(
    tmp_path, monkeypatch
):
    import errno

    from gnntrain.data import decoded_cache
    from gnntrain.errors import DiskFullError

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(decoded_cache, "atomic_write_bytes", full)
    with pytest.raises(DiskFullError, match="decoded dataset gnntrain-decoded-.*cache_dir"):
        load_dataset(compose(_overrides(tmp_path / "cache")))
