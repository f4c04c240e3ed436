"""Every mode trains where DGL cannot be imported (docs/design.md#kernels): DGL is a tested
backend, not a requirement. ``import dgl`` is made to fail in every process of the run (the
launcher and each spawned rank) by a ``sitecustomize`` on PYTHONPATH."""

from __future__ import annotations

import json
import os

import pytest
from conftest import SHARED_DGL, requires_shared, run_cli

BLOCK_DGL = (
    "import sys\nsys.modules['dgl'] = None  # `import dgl` now raises ImportError in this process\n"
)

SMALL = ["dataset=csbm", "dataset.num_nodes=300", "train.epochs=2", "train.progress=false"]


@pytest.fixture
def without_dgl(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_DGL)
    path = os.pathsep.join(p for p in [str(site), os.environ.get("PYTHONPATH", "")] if p)
    return {"PYTHONPATH": path}


def test_the_blocker_really_blocks(tmp_path, without_dgl):
    import subprocess
    import sys

    env = dict(os.environ, **without_dgl)
    probe = subprocess.run(
        [sys.executable, "-c", "import dgl"], env=env, capture_output=True, text=True
    )
    assert probe.returncode != 0 and "import of dgl halted" in probe.stderr


# On the default stack DGL is not installed at all, so every test there trains without it. The tests
# below block `import dgl` on the DGL stack (marked `dgl`, run by make test-dgl), where the blocked
# run can be held to a DGL-backed one.
@pytest.mark.dgl
def test_hyscale_trains_without_dgl(tmp_path, cache_dir, without_dgl):
    """HyScale's sampler falls back to the torch-native one where DGL does not import (the Cora runs
    below cover the full-graph modes)."""
    run_dir = tmp_path / "run"
    proc = run_cli(
        [
            "run",
            *SMALL,
            "mode=hyscale",
            "mode.fanouts=[5,5]",
            "mode.batch_size=32",
            f"cache_dir={cache_dir}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env_extra=without_dgl,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    plan = (run_dir / "plan.yaml").read_text()
    assert "sampler: torch (auto)" in plan
    assert "kernel: native" in plan or "kernel: torch" in plan  # kernel=auto without DGL


CORA_MODES = {
    "single": ["mode=single"],
    "partition": ["mode=partition"],
    "oblivious": ["mode=partition", "mode.comm=oblivious"],
    "partition-1.5d": ["mode=partition", "mode.replication=2", "hardware.ranks_per_node=4"],
    "supergcn": ["mode=supergcn"],
    "mop": ["mode=mop"],
    "hongtu": ["mode=hongtu"],
}
CORA_FLOAT64 = [
    "dataset=cora",
    "train.dtype=float64",
    "model.dropout=0",
    "train.epochs=2",
    "train.seed=3",
    "train.progress=false",
]


def _cora_losses(run_dir, cache_dir, mode_args, env_extra) -> tuple:
    proc = run_cli(
        [
            "run",
            *CORA_FLOAT64,
            f"data_dir={SHARED_DGL}",
            *mode_args,
            f"cache_dir={cache_dir}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=run_dir.parent,
        env_extra=env_extra,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())["losses"], (
        run_dir / "plan.yaml"
    ).read_text()


@pytest.fixture(scope="module")
def dgl_backed_cora(tmp_path_factory, cache_dir):
    """mode=single on Cora with DGL importable: DGL's reader and kernel=auto (which may pick
    DGL's)."""
    run_dir = tmp_path_factory.mktemp("with-dgl") / "run"
    losses, plan = _cora_losses(run_dir, cache_dir, CORA_MODES["single"], None)
    assert "reader: dgl (auto)" in plan
    return losses


@pytest.mark.dgl
@requires_shared
@pytest.mark.parametrize("mode", list(CORA_MODES))
def test_cora_without_dgl_equals_the_dgl_backed_run(
    tmp_path, cache_dir, without_dgl, dgl_backed_cora, mode
):
    """Without DGL, Cora is read by PyG and aggregated by the native or torch kernel; every exact
    mode's float64 losses equal the DGL-backed single run's to 1e-9 (docs/design.md#exactness), and
    SuperGCN (approximate) trains."""
    from conftest import assert_exact

    no_dgl, plan = _cora_losses(tmp_path / "run", cache_dir, CORA_MODES[mode], without_dgl)
    assert "reader: pyg (auto)" in plan
    assert "kernel: native" in plan or "kernel: torch" in plan  # kernel=auto without DGL
    if mode != "supergcn":
        assert_exact(no_dgl, dgl_backed_cora)


def test_reader_dgl_without_dgl_is_one_clear_error(tmp_path, cache_dir, without_dgl):
    """Asking for DGL's reader where DGL does not import ends with one message naming the extra and
    the alternative reader."""
    from conftest import SHARED_DGL

    proc = run_cli(
        [
            "run",
            "dataset=cora",
            f"data_dir={SHARED_DGL}",
            "dataset.reader=dgl",
            "mode=single",
            "train.epochs=1",
            f"cache_dir={cache_dir}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        env_extra=without_dgl,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "pip install 'gnntrain[dgl]'" in proc.stderr and "dataset.reader=pyg" in proc.stderr
    assert "Traceback" not in proc.stderr
