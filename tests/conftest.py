"""Shared fixtures: compose configs with Hydra's compose API and train in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")
SHARED_DGL = ROOT.parent / "shared" / "datasets" / "dgl"
CORA = ["dataset=cora", f"data_dir={SHARED_DGL}"]

os.environ.setdefault("GNNTRAIN_OFFLINE", "1")
os.environ.setdefault("OUTDATED_IGNORE", "1")
# kernel=auto measures each shape once per session (in-process runs and CLI runs alike), not once
# per test's fresh cache_dir; tests of the measurement itself pass their own folder to choose_kernel
os.environ.setdefault(
    "GNNTRAIN_KERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="gnntrain-test-kernels-")
)
from cli_zygote import Zygote, needs_fresh_process  # noqa: E402
from process_leftovers import end_leftovers, mark_session  # noqa: E402

from gnntrain.data.loaders import silence_ogb_version_check  # noqa: E402

LEFTOVER_TOKEN = pytest.StashKey[str]()

silence_ogb_version_check()  # OGB's import would otherwise ask PyPI for a newer version


def pytest_sessionstart(session):
    session.config.stash[LEFTOVER_TOKEN] = mark_session()


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if a process it started is still running (tests/process_leftovers.py)."""
    for zygote in _ZYGOTE:  # the session's own warm gnntrain ends first
        zygote.close()
    token = session.config.stash.get(LEFTOVER_TOKEN, None)
    found = end_leftovers(token) if token else {}
    if found:
        listing = "\n".join(f"  pid {pid}: {command[:200]}" for pid, command in found.items())
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = f"{len(found)} process(es) started by the tests outlived them (now killed):"
        if reporter is not None:
            reporter.write_sep("=", "leftover processes", red=True)
            reporter.write_line(f"{text}\n{listing}")
        else:
            print(f"{text}\n{listing}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# tests/file_seconds.json: each file's seconds in a full run (`make test-durations` writes it)
FILE_SECONDS = ROOT / "tests" / "file_seconds.json"
UNRECORDED_TEST_S = 1.3  # a file not in it yet: about the mean test's seconds, per test


def heaviest_files_first(items) -> None:
    """Order ``items`` by file, the files with the most recorded seconds first, each file's tests in
    their own order. pytest-xdist's ``--dist loadfile`` hands whole files to its workers in
    collection order (``--no-loadscope-reorder``; by default it orders them by their number of
    tests, so a file of a few long tests, the chaos trials or the SLURM cluster's, went out last
    and ran alone at the end). Heaviest first is the longest-processing-time rule: the short
    files fill in behind the long ones. Deterministic, so every worker collects the same order."""
    try:
        recorded = json.loads(FILE_SECONDS.read_text())
    except (OSError, ValueError):
        recorded = {}
    counts: Dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        counts[path] = counts.get(path, 0) + 1
    weight = {path: recorded.get(path, UNRECORDED_TEST_S * n) for path, n in counts.items()}
    order = {path: i for i, path in enumerate(sorted(counts, key=lambda p: (-weight[p], p)))}
    items.sort(key=lambda item: order[item.nodeid.split("::", 1)[0]])


def pytest_collection_modifyitems(config, items):
    """Files heaviest first (:func:`heaviest_files_first`). Tests marked ``dgl`` involve DGL itself
    (its kernel, sampler or readers): they skip on a stack where DGL does not import (the default
    one) and run on the DGL stack (make test-dgl)."""
    heaviest_files_first(items)
    if not any(item.get_closest_marker("dgl") for item in items):
        return
    from gnntrain.backends import dgl_problem

    problem = dgl_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(
        reason=f"involves DGL, which does not import here ({problem}); make test-dgl runs it"
    )
    for item in items:
        if item.get_closest_marker("dgl"):
            item.add_marker(skip)


def compose(overrides: List[str]):
    """The run config as users get it: the one composition function (search path included)."""
    from gnntrain.launch.compose import compose as compose_config

    return compose_config(overrides, CONFIG_DIR)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gnntrain-cache")
    return path


@pytest.fixture
def train(tmp_path, cache_dir):
    """train(overrides) -> summary dict, run in-process through the real launcher."""
    from gnntrain.launch import run_training
    from gnntrain.plan import build_plan

    counter = {"n": 0}

    def _train(overrides: List[str]) -> Dict:
        counter["n"] += 1
        cfg = compose([f"cache_dir={cache_dir}", "train.progress=false"] + list(overrides))
        plan = build_plan(cfg)
        return run_training(plan, tmp_path / f"run{counter['n']}")

    return _train


_ZYGOTE: List[Zygote] = []  # the session's warm gnntrain (tests/cli_zygote.py), once started
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> Optional[Zygote]:
    if os.environ.get("GNNTRAIN_TEST_ZYGOTE", "1") == "0":
        return None
    with _ZYGOTE_LOCK:
        if not _ZYGOTE:
            _ZYGOTE.append(Zygote(Path(tempfile.mkdtemp(prefix="gnntrain-test-zygote-"))))
        return _ZYGOTE[0]


def run_cli(
    args: List[str], cwd: Path, timeout: Optional[float] = 240, env_extra: Dict[str, str] = None
) -> subprocess.CompletedProcess:
    """``gnntrain args`` in ``cwd`` as a process of its own, with its output captured: forked from
    the session's warm gnntrain (tests/cli_zygote.py) unless ``env_extra`` sets a variable that a
    fresh interpreter reads at import."""
    env = dict(os.environ)
    env.update(env_extra or {})
    zygote = None if needs_fresh_process(env_extra) else _zygote()
    if zygote is not None:
        return zygote.run(args, cwd, env, timeout)
    exe = Path(sys.executable).parent / "gnntrain"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gnntrain"]
    return subprocess.run(
        cmd + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def read_summary(run_dir: Path) -> Dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


requires_shared = pytest.mark.skipif(
    not SHARED_DGL.exists(), reason=f"{SHARED_DGL} (../shared) is not present"
)


# dataset=cora, loaded once for the session (test_ingest, test_api)
@pytest.fixture(scope="session")
def cora(cache_dir):
    from gnntrain.data import load_dataset

    return load_dataset(compose(CORA + [f"cache_dir={cache_dir}"]))


# ------------------------------------------------------------- exactness
GRAPHS = {"csbm": ["dataset=csbm"], "cora": CORA}
EXACT = ["train.dtype=float64", "model.dropout=0", "train.epochs=3", "train.seed=3", "kernel=torch"]
_single_losses: Dict[tuple, "object"] = {}


def forbid_edge_lists(monkeypatch, who: str) -> None:
    """Make an ingested graph (CsrGraphData) refuse to build its COO edge lists for the rest of the
    test: a path that must stay on the CSR fails loudly, naming ``who``, where it does not."""
    from gnntrain.data.graph import CsrGraphData

    def refuse(_self):
        raise AssertionError(f"{who} built the whole graph's edge lists")

    for name in ("src", "dst"):
        monkeypatch.setattr(CsrGraphData, name, property(refuse, getattr(CsrGraphData, name).fset))


def single_losses(train, overrides: List[str]):
    """mode=single's losses for these overrides (cached for the session)."""
    import numpy as np

    key = tuple(overrides)
    if key not in _single_losses:
        _single_losses[key] = np.array(train(list(overrides) + ["mode=single"])["losses"])
    return _single_losses[key]


def assert_exact(losses, reference, tol: float = 1e-9) -> None:
    """float64 losses equal the reference within ``tol`` relative (docs/design.md#exactness)."""
    import numpy as np

    losses, reference = np.asarray(losses), np.asarray(reference)
    assert losses.shape == reference.shape
    rel = float(np.max(np.abs(losses - reference) / np.abs(reference)))
    assert rel < tol, f"max relative loss difference {rel:.3e}"


# ------------------------------------------------------- autograd-order fakes
class LoggedPending:
    """An exchange in flight (the shape of ``Communicator.all_to_all_start``'s result) whose
    ``wait`` is logged in ``events`` as "wait <label>": the autograd-order tests of the overlapped
    backwards."""

    def __init__(self, events: List[str], x, label: str):
        self.events, self.x, self.label = events, x, label

    def wait(self):
        self.events.append(f"wait {self.label}")
        return self.x.clone()


def logged_scale(events: List[str], label: str, factor: float):
    """``x -> factor * x`` as an autograd node whose backward is logged in ``events`` as
    ``label``."""
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return factor * x

        @staticmethod
        def backward(ctx, g):
            events.append(label)
            return factor * g

    return Scale.apply
