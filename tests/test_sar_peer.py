"""The scaleout suite's SAR peer (benchmarks/suites/sar_worker.py, run as a process as the suite
runs it): its one-line skip where SAR does not import, and the edges it hands DGL's partitioning
from gnntrain's on-disk graph (CSR by destination, self-loops appended)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

WORKER = [sys.executable, str(ROOT / "benchmarks" / "suites" / "sar_worker.py")]


@pytest.mark.skipif(importlib.util.find_spec("sar") is not None, reason="SAR imports here")
def test_without_sar_the_peer_is_skipped_with_one_line_naming_the_make_target():
    done = subprocess.run(WORKER + ["probe"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("SAR: not run (sar does not import in ")
    assert "make sar-venv SAR_DIR=" in lines[0]


def test_the_edges_are_the_csr_by_destination_plus_a_self_loop_per_node(tmp_path):
    # 0 -> 1, 2 -> 1, 0 -> 2: row v of the CSR lists v's in-neighbours (gnntrain/data/ondisk.py)
    np.save(tmp_path / "indptr.npy", np.array([0, 0, 2, 3], dtype=np.int64))
    np.save(tmp_path / "indices.npy", np.array([0, 2, 0], dtype=np.int32))
    done = subprocess.run(
        WORKER + ["edges", str(tmp_path)], capture_output=True, text=True, timeout=60, check=True
    )
    edges = json.loads(done.stdout.splitlines()[-1][len("RESULT ") :])
    pairs = list(zip(edges["src"], edges["dst"]))
    assert pairs == [(0, 1), (2, 1), (0, 2), (0, 0), (1, 1), (2, 2)]
