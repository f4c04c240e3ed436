"""Count what ``gnntrain run`` passes through from the command line to its first training epoch.

    python scripts/run_path.py [--root DIR] [--json] [overrides ...]

Runs ``gnntrain run`` in this process (a one-rank plan, so the whole path is here: plan, load,
partition, prepare, strategy, first epoch) under ``sys.setprofile`` and records every Python
function of the ``gnntrain`` package that is called before the first ``train_epoch`` starts.
Comprehensions and lambdas are not counted as functions. ``--root`` names another checkout whose
``gnntrain`` is imported instead (an older commit, to compare: ``git worktree add``). Point
``GNNTRAIN_CACHE_DIR`` at a folder of each checkout's own and run once to warm it, so that a
kernel measurement or a native build does not enter the count.

It prints:

* all: distinct functions, modules and calls, imports' registrations included;
* the run's own path, leaving out what a module's import runs (any call with a module body among
  its gnntrain callers): functions, modules, calls, *module entries* (calls from a function of one
  gnntrain module into another's: a path that bounces between modules enters them often) and
  *climbs* (such calls from a lower layer into a higher one, ``LAYERS`` of
  ``tests/test_architecture.py``: the import rules cannot see them, the callee arriving as an
  object);
* the plan from ``run_training`` on: calls to functions that take an argument named ``plan``;
* the call chain at the first epoch: the gnntrain frames from the command line to ``train_epoch``.
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
from typing import List, Optional, Tuple


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


class PathTracer:
    """The profiler's state: what it has seen until the first ``train_epoch``."""

    def __init__(self, package: Path, table) -> None:
        self.package, self.root, self.table = package, str(package), table
        self.calls: collections.Counter = collections.Counter()  # (module, function) -> calls
        self.path: collections.Counter = collections.Counter()  # the same, imports left out
        self.entries: collections.Counter = collections.Counter()  # module -> entries
        self.climbs: collections.Counter = collections.Counter()  # "caller -> callee" -> calls
        self.plan_calls: collections.Counter = collections.Counter()
        self.chain: List[Tuple[str, str]] = []
        self.following = False  # run_training has been entered

    def module_of(self, filename: str) -> str:
        rel = Path(filename).relative_to(self.package.parent).with_suffix("").as_posix()
        return rel.replace("/", ".").removesuffix(".__init__")

    def ours(self, frame) -> bool:
        return frame.f_code.co_filename.startswith(self.root)

    def caller_module(self, frame) -> Optional[str]:
        frame = frame.f_back
        while frame is not None and not self.ours(frame):
            frame = frame.f_back
        return self.module_of(frame.f_code.co_filename) if frame is not None else None

    def at_import(self, frame) -> bool:
        """A module body among the gnntrain callers of ``frame``: the call is an import's."""
        frame = frame.f_back
        while frame is not None:
            if self.ours(frame) and frame.f_code.co_name == "<module>":
                return True
            frame = frame.f_back
        return False

    def first_epoch(self, frame) -> None:
        while frame is not None:
            if self.ours(frame):
                self.chain.append(
                    (self.module_of(frame.f_code.co_filename), frame.f_code.co_qualname)
                )
            frame = frame.f_back
        self.chain.reverse()
        raise FirstEpoch

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event != "call" or not self.ours(frame) or code.co_name.startswith("<"):
            return
        if not code.co_flags & inspect.CO_OPTIMIZED:  # a class body or a module running at import
            return
        if code.co_name == "train_epoch" and "/modes/" in code.co_filename:
            self.first_epoch(frame)
        module, function = self.module_of(code.co_filename), code.co_qualname
        self.calls[(module, function)] += 1
        self.following = self.following or code.co_name == "run_training"
        arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if self.following and "plan" in arguments:
            self.plan_calls[(module, function)] += 1
        if self.at_import(frame):
            return
        self.path[(module, function)] += 1
        caller = self.caller_module(frame)
        if caller is not None and caller != module:
            self.entries[module] += 1
            if layer_of(caller, self.table) < layer_of(module, self.table):
                self.climbs[f"{caller} -> {module}"] += 1

    def run(self, overrides) -> None:
        from gnntrain.cli import main

        sys.setprofile(self)
        try:
            main(["run", *overrides])
        except (FirstEpoch, SystemExit):
            pass
        finally:
            sys.setprofile(None)

    def listing(self) -> dict:
        def named(counter):
            return {f"{m}:{f}": n for (m, f), n in sorted(counter.items())}

        return {
            "functions": named(self.calls),
            "path": named(self.path),
            "entries": dict(self.entries.most_common()),
            "climbs": dict(self.climbs),
            "plan": named(self.plan_calls),
            "chain": [f"{m}:{f}" for m, f in self.chain],
        }

    def report(self, overrides) -> List[str]:
        def modules(counter) -> int:
            return len({module for module, _ in counter})

        busiest = ", ".join(f"{m} {n}" for m, n in self.entries.most_common(3))
        hops = sum(1 for a, b in zip(self.chain, self.chain[1:]) if a[0] != b[0])
        chain = " > ".join(f"{m.removeprefix('gnntrain.')}:{f}" for m, f in self.chain)
        return [
            f"{self.package}: {' '.join(overrides)}",
            f"all: {len(self.calls)} functions in {modules(self.calls)} modules, "
            f"{sum(self.calls.values())} calls before the first epoch",
            f"the run's own path (imports' registrations left out): {len(self.path)} functions in "
            f"{modules(self.path)} modules, {sum(self.path.values())} calls, "
            f"{sum(self.entries.values())} module entries (most: {busiest}), "
            f"{sum(self.climbs.values())} climbing a layer",
            f"the plan from run_training: {sum(self.plan_calls.values())} calls to "
            f"{len(self.plan_calls)} functions in {modules(self.plan_calls)} modules",
            f"the call chain at the first epoch: {len(self.chain)} frames in "
            f"{len({m for m, _ in self.chain})} modules, {hops} module changes: {chain}",
        ]


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
    run = [*overrides, "train.epochs=1", "train.progress=false", f"hydra.run.dir={run_dir}"]
    tracer = PathTracer(package, layers(package.parent))
    tracer.run(run)
    if args.json:
        print(json.dumps(tracer.listing(), indent=1))
    print("\n".join(tracer.report(overrides)))


if __name__ == "__main__":
    main()
