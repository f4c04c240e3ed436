"""scripts/gpu_check.py (issue #21) off a GPU: its flow runs on the CPU at small sizes, writes the
records and a table that `python -m benchmarks --render` renders, and refuses plainly where it
cannot run. The GPU run itself is `bash scripts/gpu-check.sh` on a CUDA machine (README: GPU
check)."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from conftest import ROOT

SCRIPT = [sys.executable, str(ROOT / "scripts" / "gpu_check.py")]


def test_gpu_check_flow_on_the_cpu_writes_records_that_render(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        SCRIPT + ["--device", "cpu", "--quick", "--out", str(out), "single_exact", "hongtu_exact"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["torch"] == torch.__version__
    records = result["records"]
    assert [r["name"] for r in records] == [
        "single_exact_csbm",
        "single_exact_dropout",
        "hongtu_exact_csbm",
        "hongtu_exact_dropout",
    ]
    assert all(
        r["status"] == "ok" and r["exact_vs_cpu_rel"] <= 1e-9 and r["epoch_time_s"] for r in records
    )
    # on the CPU the "device" side still differs from the reference: hongtu against single, and for
    # single torch's kernel against the native one, so a kernel or mode that drifts fails the dry
    # run
    single = records[0]
    assert single["kernel"] == "torch" and single["reference_kernel"] == "native"
    (tmp_path / "results").mkdir()
    out.rename(tmp_path / "results" / "gpu.json")
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--render",
            "--results",
            str(tmp_path / "results"),
            "--to",
            str(tmp_path / "BENCHMARKS.md"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert (
        "## gpu" in text
        and "| hongtu_exact_csbm | hongtu | ok |" in text
        and "bash scripts/gpu-check.sh" in text
    )


def test_gpu_check_refuses_plainly(tmp_path):
    unknown = subprocess.run(
        SCRIPT + ["--device", "cpu", "nvlink"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert unknown.returncode == 2 and "unknown check(s) nvlink" in unknown.stderr
    if not torch.cuda.is_available():
        no_gpu = subprocess.run(SCRIPT, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert no_gpu.returncode == 2 and "no CUDA device here" in no_gpu.stderr


def test_gpu_check_starts_no_check_past_its_deadline(tmp_path):
    """--deadline-s (a time-limited GPU machine): checks not started in time are named, and the
    records written so far (none here) still come back."""
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        SCRIPT
        + [
            "--device",
            "cpu",
            "--quick",
            "--deadline-s",
            "1e-9",
            "--out",
            str(out),
            "single_exact",
            "moa",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "single_exact not started: past --deadline-s" in done.stdout
        and "moa not started" in done.stdout
    )
    assert json.loads(out.read_text())["records"] == []
