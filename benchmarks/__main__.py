"""Side-by-side benchmarks. Each suite runs its candidates in one process
tree, interleaves repetitions, and reports medians, min-max and ratios to a
baseline measured in the same run. Results go to docs/bench/<suite>.json and
the tables in docs/BENCHMARKS.md (regenerated from every JSON present).

usage: python -m benchmarks [SUITE ...] [--quick]
                        (no SUITE: every suite; run from the repository root)
       make bench       reference, overhead and volume (the CI-sized set, < 15 min on 2 cores)
       make bench-all   every suite (the scale suite alone is the longest: see its wall time)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from benchmarks.harness import GENERATOR, OUT, PAGE, load_results, machine, render
from benchmarks.registry import SuiteFn


def load_suites() -> Dict[str, SuiteFn]:
    """Every registered suite: importing benchmarks.suites runs each module's ``@suite``."""
    import benchmarks.suites  # noqa: F401
    from benchmarks.registry import SUITES

    return SUITES


def main(argv: Optional[List[str]] = None) -> int:
    suites = load_suites()
    parser = argparse.ArgumentParser(
        prog=GENERATOR, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suites", nargs="*", default=None, choices=list(suites) + [[]])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    parser.add_argument(
        "--render",
        action="store_true",
        help="only regenerate docs/BENCHMARKS.md from docs/bench/*.json (e.g. after a GPU check)",
    )
    parser.add_argument(
        "--results", type=Path, default=OUT, help="the folder of suite results (*.json)"
    )
    parser.add_argument("--to", type=Path, default=PAGE, help="the page to write")
    args = parser.parse_args(argv)
    os.environ.setdefault("GNNTRAIN_OFFLINE", "1")
    out = args.results
    out.mkdir(parents=True, exist_ok=True)
    for name in [] if args.render else (args.suites or list(suites)):
        print(f"running suite {name} ...", flush=True)
        start = time.perf_counter()
        result = suites[name](args.quick)
        result.command = f"{GENERATOR} {name}" + (" --quick" if args.quick else "")
        result.machine = machine()
        result.date = dt.date.today().isoformat()
        result.wall_s = round(time.perf_counter() - start, 1)
        (out / f"{name}.json").write_text(json.dumps(result.to_json(), indent=2))
        print(render({name: result}))
    args.to.write_text(render(load_results(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
