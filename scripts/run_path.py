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
import ast
import collections
import inspect
import json
import sys
import tempfile
from pathlib import Path


class FirstEpoch(Exception):
    """Raised from the profiler at the first ``train_epoch``: the path is complete."""


def layers(repo: Path):
    """tests/test_architecture.py's LAYERS (sets of module prefixes), read as a literal."""
    tree = ast.parse((repo / "tests" / "test_architecture.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "LAYERS":
            return ast.literal_eval(node.value)
    raise SystemExit("no LAYERS in tests/test_architecture.py")


def layer_of(module: str, table) -> int:
    for index, members in enumerate(table):
        for member in members:
            if module == member or (member != "gnntrain" and module.startswith(member + ".")):
                return index
    return 0


def trace(overrides, package: Path, table):
    calls: collections.Counter = collections.Counter()
    plan_calls: collections.Counter = collections.Counter()
    climbs: collections.Counter = collections.Counter()
    root = str(package)
    following = []

    def module_of(filename: str) -> str:
        rel = Path(filename).relative_to(package.parent).with_suffix("").as_posix()
        return rel.replace("/", ".").removesuffix(".__init__")

    def caller_module(frame):
        frame = frame.f_back
        while frame is not None and not frame.f_code.co_filename.startswith(root):
            frame = frame.f_back
        return module_of(frame.f_code.co_filename) if frame is not None else None

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(root) or code.co_name.startswith("<"):
            return
        if not code.co_flags & inspect.CO_OPTIMIZED:  # a class body or a module running at import
            return
        if code.co_name == "train_epoch" and "/modes/" in code.co_filename:
            raise FirstEpoch
        module = module_of(code.co_filename)
        calls[(module, code.co_qualname)] += 1
        if code.co_name == "run_training":
            following.append(True)
        arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if following and "plan" in arguments:
            plan_calls[(module, code.co_qualname)] += 1
            caller = caller_module(frame)
            if caller and layer_of(caller, table) < layer_of(module, table):
                climbs[f"{caller} -> {module}"] += 1

    from gnntrain.cli import main

    sys.setprofile(profile)
    try:
        main(["run", *overrides])
    except (FirstEpoch, SystemExit):
        pass
    finally:
        sys.setprofile(None)
    return calls, plan_calls, climbs


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
    table = layers(package.parent)
    run = [*overrides, "train.epochs=1", "train.progress=false", f"hydra.run.dir={run_dir}"]
    calls, plan_calls, climbs = trace(run, package, table)
    modules = sorted({module for module, _ in calls})
    plan_modules = sorted({module for module, _ in plan_calls})
    if args.json:
        listing = {
            "functions": {f"{m}:{f}": n for (m, f), n in sorted(calls.items())},
            "plan": {f"{m}:{f}": n for (m, f), n in sorted(plan_calls.items())},
            "climbs": dict(climbs),
        }
        print(json.dumps(listing, indent=1))
    print(
        f"{package}: {' '.join(overrides)}: {len(calls)} functions in {len(modules)} modules, "
        f"{sum(calls.values())} calls before the first epoch; the plan from run_training: "
        f"{sum(plan_calls.values())} calls to {len(plan_calls)} functions in "
        f"{len(plan_modules)} modules, {sum(climbs.values())} of them climbing a layer"
    )


if __name__ == "__main__":
    main()
