"""Count what ``gnntrain run`` passes through from the command line to its first training epoch.

    python scripts/run_path.py [--root DIR] [overrides ...]

Runs ``gnntrain run`` in this process (a one-rank plan, so the whole path is here: plan, load,
partition, prepare, strategy, first epoch) under ``sys.setprofile`` and records every Python
function of the ``gnntrain`` package that is called before the first ``train_epoch`` starts:
distinct functions, distinct modules, and calls. Comprehensions and lambdas are not counted as
functions. ``--root`` names another checkout whose ``gnntrain`` is imported instead (an older
commit, to compare: ``git worktree add``).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path


class FirstEpoch(Exception):
    """Raised from the profiler at the first ``train_epoch``: the path is complete."""


def trace(overrides, package: Path):
    calls: collections.Counter = collections.Counter()
    root = str(package)

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(root) or code.co_name.startswith("<"):
            return
        if code.co_name == "train_epoch" and "/modes/" in code.co_filename:
            raise FirstEpoch
        module = (
            Path(code.co_filename)
            .relative_to(package.parent)
            .with_suffix("")
            .as_posix()
            .replace("/", ".")
        )
        calls[(module.removesuffix(".__init__"), code.co_qualname)] += 1

    from gnntrain.cli import main

    sys.setprofile(profile)
    try:
        main(["run", *overrides])
    except (FirstEpoch, SystemExit):
        pass
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="a checkout whose gnntrain to trace (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the functions as JSON")
    args, overrides = parser.parse_known_args()
    if args.root:
        sys.path.insert(0, str(Path(args.root).resolve()))
    import gnntrain

    package = Path(gnntrain.__file__).resolve().parent
    run_dir = tempfile.mkdtemp(prefix="gnntrain-run-path-")
    overrides = overrides or ["mode=single"]
    calls = trace(
        [*overrides, "train.epochs=1", "train.progress=false", f"hydra.run.dir={run_dir}"], package
    )
    modules = sorted({module for module, _ in calls})
    if args.json:
        print(json.dumps({f"{m}:{f}": n for (m, f), n in sorted(calls.items())}, indent=1))
    print(
        f"{package}: {' '.join(overrides)}: {len(calls)} functions in {len(modules)} modules, "
        f"{sum(calls.values())} calls before the first epoch"
    )


if __name__ == "__main__":
    main()
