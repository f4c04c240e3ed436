"""GPU check (issue #21): every mode that fits one GPU, run on CUDA; the exact ones against CPU
``single``; what HongTu (a device budget below the graph's vertex data) and HyScale (a CPU and a GPU
trainer, DRM) do on a real device; ``single`` against PyG's ``GCNConv`` on the same device; MoA with
CPU aggregation beside a GPU update rank; and ``gnntrain calibrate`` on the device.

Writes ``docs/bench/gpu.json``: the device, torch and CUDA versions, one record per check, and a
table that ``python -m benchmarks --render`` (benchmarks.harness.render) turns into the ``gpu``
section of docs/BENCHMARKS.md.

    bash scripts/gpu-check.sh [CHECK ...]
        # on the GPU machine: installs the carried wheels, runs
    python scripts/gpu_check.py --device cpu --quick
        # the same flow on a CPU at small sizes (smoke test)

Records of checks not run this time are kept from the previous file when it names the same device,
so the checks can be spread over several calls of a time-limited machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List

# the checks: the exact ones in gpu_check_exact.py, the timed ones in gpu_check_timed.py, what they
# share in gpu_check_base.py; a record's table row in gpu_check_rows.py
from gpu_check_base import Check
from gpu_check_exact import (
    check_hongtu_disk,
    check_hongtu_exact,
    check_moa,
    check_predict,
    check_single_exact,
)
from gpu_check_rows import row as _row
from gpu_check_timed import (
    check_calibrate,
    check_hongtu_budget,
    check_hongtu_disk_budget,
    check_hongtu_paper,
    check_hyscale,
    check_single_vs_pyg,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
OUT = ROOT / "docs" / "bench" / "gpu.json"


# in the order they run: the exactness checks first, then the timed ones, calibrate and the disk
# tier at scale last
CHECKS: Dict[str, Callable[[Check], List[dict]]] = {
    "single_exact": check_single_exact,
    "hongtu_exact": check_hongtu_exact,
    "hongtu_disk": check_hongtu_disk,
    "predict": check_predict,
    "moa": check_moa,
    "single_vs_pyg": check_single_vs_pyg,
    "hongtu_paper": check_hongtu_paper,
    "hongtu_budget": check_hongtu_budget,
    "hyscale": check_hyscale,
    "calibrate": check_calibrate,
    "hongtu_disk_budget": check_hongtu_disk_budget,
}


def _check_of(record: dict) -> int:
    """The index in CHECKS of the check that wrote ``record`` (its longest name prefix)."""
    names = [k for k in CHECKS if record["name"].startswith(k)] or ["calibrate"]
    return list(CHECKS).index(max(names, key=len))


def write(out: Path, info: dict, records: Dict[str, dict], command: str) -> List[dict]:
    """docs/bench/gpu.json (and a copy in $OUT, the device tool's return folder, where it is
    set)."""
    ordered = sorted(records.values(), key=_check_of)
    result = {
        **info,
        "title": f"GPU check on {info['device']} (torch {info['torch']}, CUDA {info['cuda']})",
        "columns": ["check", "mode", "status", "median epoch (ms)", "result"],
        "rows": [_row(r) for r in ordered],
        "records": ordered,
        "command": command,
        "machine": info["device"],
        "date": dt.date.today().isoformat(),
        "notes": "Exact checks: float64, dropout 0, 3 epochs, the largest relative gap between the "
        "values on "
        "the device and those of mode=single on the CPU. Epoch medians drop the first epoch. "
        "Records: docs/bench/gpu.json.",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, default=str)
    out.write_text(text)
    if os.environ.get("OUT") and Path(os.environ["OUT"]).is_dir():
        (Path(os.environ["OUT"]) / "gpu.json").write_text(text)
    return ordered


def describe_device(device: str) -> dict:
    import torch

    info = {"device": "cpu", "torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        info["device"] = torch.cuda.get_device_name()
    return info


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checks", nargs="*", metavar="CHECK", help=f"any of {', '.join(CHECKS)}; default: all"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (a smoke test of the flow)"
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("GNNTRAIN_GPU_CHECK_DATA", ""),
        help="folder holding cora_v2_d697a464/ (DGL's layout); Cora is skipped without it",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=0,
        help="start no check after this many seconds (a time-limited machine); 0 = no limit",
    )
    args = parser.parse_args()
    unknown = [name for name in args.checks if name not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}: use any of {', '.join(CHECKS)}")
    os.environ.setdefault("GNNTRAIN_OFFLINE", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device here; run it on the GPU machine (scripts/gpu-check.sh), or "
            "use "
            "--device cpu for a smoke test",
            file=sys.stderr,
        )
        return 2
    info = describe_device(args.device)
    records: Dict[str, dict] = {}
    if args.out.exists():
        old = json.loads(args.out.read_text())
        if old.get("device") == info["device"]:
            records = {r["name"]: r for r in old.get("records", [])}
    command = "bash scripts/gpu-check.sh" + (" --quick" if args.quick else "")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        check = Check(args.device, args.quick, args.data_dir, Path(tmp))
        for name in args.checks or list(CHECKS):
            if args.deadline_s and time.monotonic() - started > args.deadline_s:
                print(
                    f"gpu_check: {name} not started: past --deadline-s {args.deadline_s:.0f}",
                    flush=True,
                )
                continue
            print(f"gpu_check: {name} ...", flush=True)
            start = time.perf_counter()
            try:
                results = CHECKS[name](check)
            except Exception:  # one failed check is a record, the others still run
                results = [
                    {"name": name, "mode": "-", "status": "failed", "error": traceback.format_exc()}
                ]
            for r in results:
                r["wall_s"] = round(time.perf_counter() - start, 1)
                records[r["name"]] = r
                print("  " + " | ".join(_row(r)), flush=True)
            # after every check: a cut-off run keeps the rest
            ordered = write(args.out, info, records, command)
    ordered = write(args.out, info, records, command)
    print(f"gpu_check: wrote {args.out}")
    return 0 if all(r["status"] == "ok" for r in ordered) else 1


if __name__ == "__main__":
    sys.exit(main())
