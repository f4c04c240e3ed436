"""The package's shape: an acyclic import graph that follows the layer chain
config → sizing → data/partition, comm, models, metrics → runtime → modes → plan → auto →
launch → cli (docs/design.md, "Layers"), and modules small enough to hold in one's head. The
benchmarks package (``python -m benchmarks``) is held to the same: no cycle, no long module, and
it and the tests never import each other.

Every import statement counts, deferred (inside functions) and ``TYPE_CHECKING`` ones too.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "gnntrain"
BENCHMARKS = REPO / "benchmarks"
MAX_MODULE_LINES = 500

# lower index = lower layer; a module may import its own layer or lower ones only
LAYERS: List[Set[str]] = [
    {
        "gnntrain",
        "gnntrain.errors",
        "gnntrain.registry",
        "gnntrain.atomic",
        "gnntrain.artifact",
        "gnntrain.seeding",
        "gnntrain.logs",
        "gnntrain.config",
        "gnntrain.interrupts",
        "gnntrain.backends",
        "gnntrain.heap",
        "gnntrain.idsets",
    },
    {"gnntrain.plan_types"},
    {"gnntrain.sizing"},
    {
        "gnntrain.data",
        "gnntrain.partition",
        "gnntrain.comm",
        "gnntrain.models",
        "gnntrain.metrics",
        "gnntrain.checkpoint",
    },
    {"gnntrain.runtime"},
    {"gnntrain.tasks"},
    {"gnntrain.modes"},
    {"gnntrain.training"},
    {"gnntrain.plan_fit", "gnntrain.plan_checks"},
    {"gnntrain.plan"},
    {"gnntrain.auto"},
    {"gnntrain.launch"},
    {"gnntrain.cli", "gnntrain.__main__", "gnntrain.api"},
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(*roots: Path) -> Dict[str, Set[str]]:
    """Module → the modules of the packages ``roots`` (default: gnntrain) that its import statements
    name (``from a import b`` names ``a.b`` when that is a module, else ``a``)."""
    roots = roots or (PACKAGE,)
    tops = {root.name for root in roots}
    modules = {module_name(p, root): p for root in roots for p in root.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] in tops)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.split(".")[0] not in tops:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    deps.add(sub if sub in modules else base)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not state.get(nxt):
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if not state.get(start):
            found = visit(start)
            if found:
                return found
    return []


def layer_of(module: str) -> int:
    for index, members in enumerate(LAYERS):
        for member in members:
            if module == member or (member != "gnntrain" and module.startswith(member + ".")):
                return index
    raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: add it to LAYERS")


def test_import_graph_has_no_cycle():
    """Across gnntrain and the benchmarks together (a cycle could run through both)."""
    cycle = find_cycle(import_graph(PACKAGE, BENCHMARKS))
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_imports_follow_the_layer_chain():
    upward = [
        f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
        for m, deps in sorted(import_graph().items())
        for d in sorted(deps)
        if layer_of(d) > layer_of(m)
    ]
    assert not upward, "imports against the layer chain:\n" + "\n".join(upward)


def test_no_module_over_500_lines():
    long = {
        str(p.relative_to(REPO)): n
        for folder in (PACKAGE, BENCHMARKS, REPO / "scripts")
        for p in folder.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize(
    "source, cycle",
    [
        (
            {
                "gnntrain/a.py": "from gnntrain.b import x\n",
                "gnntrain/b.py": "def f():\n    from gnntrain.a import y\n",
            },
            True,
        ),
        (
            {
                "gnntrain/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import "
                "gnntrain.b\n",
                "gnntrain/b.py": "import gnntrain.a\n",
            },
            True,
        ),
        ({"gnntrain/a.py": "from gnntrain.b import x\n", "gnntrain/b.py": "x = 1\n"}, False),
        # through both packages, closed by a deferred import
        (
            {
                "benchmarks/h.py": "from gnntrain.a import x\n",
                "gnntrain/a.py": "def f():\n    import benchmarks.h\n",
            },
            True,
        ),
        (
            {
                "benchmarks/s/k.py": "from ..h import x\n",
                "benchmarks/h.py": "def f():\n    from benchmarks.s import k\n",
            },
            True,
        ),
        ({"benchmarks/h.py": "from gnntrain.a import x\n", "gnntrain/a.py": "x = 1\n"}, False),
    ],
)
def test_the_checker_sees_deferred_and_type_checking_imports(tmp_path, source, cycle):
    for package in ("gnntrain", "benchmarks", "benchmarks/s"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for name, text in source.items():
        (tmp_path / name).write_text(text)
    assert bool(find_cycle(import_graph(tmp_path / "gnntrain", tmp_path / "benchmarks"))) is cycle


def imported_modules(path: Path) -> Set[str]:
    """Every absolute module name that ``path`` imports: import statements anywhere (deferred ones
    included), ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name, and
    the same in code strings handed to a child interpreter (``python -c "..."``), parsed where they
    are literal Python."""
    names: Set[str] = set()
    trees = [ast.parse(path.read_text(), filename=str(path))]
    # code run in a child interpreter (python -c "...") is Python too
    for node in ast.walk(trees[0]):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "import" in node.value
        ):
            try:
                trees.append(ast.parse(node.value.replace("{{", "{").replace("}}", "}")))
            except SyntaxError:
                pass
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
            elif (
                isinstance(node, ast.Call)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and (
                    (
                        isinstance(node.func, ast.Name)
                        and node.func.id in ("__import__", "import_module")
                    )
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                )
            ):
                names.add(node.args[0].value)
    return names


def importable_names(tree: Path) -> Set[str]:
    """The top-level names under which code in ``tree`` can be imported: the tree itself, and, for
    an importer that put one of its folders on ``sys.path``, every module and package inside it."""
    names = {tree.name}
    for path in tree.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        if not path.stem.startswith("__"):
            names.add(path.stem)
        names.update(part for part in path.relative_to(tree).parts[:-1])
    return names


# importer -> the trees it must never import; tests reach benchmarks and scripts as processes only
NO_IMPORT = {
    "tests": ("benchmarks", "scripts"),
    "benchmarks": ("tests",),
    "scripts": ("tests",),
    "gnntrain": ("tests", "benchmarks", "scripts"),
}


def forbidden_imports(repo: Path) -> List[str]:
    """Each import in ``repo`` of a module that lives in a tree its own tree must not import."""
    found = []
    for importer, trees in NO_IMPORT.items():
        banned = {name: tree for tree in trees for name in importable_names(repo / tree)}
        for path in sorted((repo / importer).rglob("*.py")):
            # this checker: its fixtures are code strings
            if path.resolve() == Path(__file__).resolve():
                continue
            for module in sorted(imported_modules(path)):
                if module.split(".")[0] in banned:
                    found.append(
                        f"{path.relative_to(repo)} imports {module} (from "
                        f"{banned[module.split('.')[0]]}/)"
                    )
    return found


def test_tests_and_benchmarks_do_not_import_each_other():
    """Benchmarks and scripts reach gnntrain through gnntrain.api (compose, cli), never through the
    tests' conftest; tests run a benchmark or script as a process, never import it; gnntrain imports
    none of them."""
    found = forbidden_imports(REPO)
    assert not found, "imports across trees that must stay apart:\n" + "\n".join(found)


def _repo(tmp_path: Path, files: Dict[str, str]) -> Path:
    for name, text in {
        "tests/conftest.py": "ROOT = 1\n",
        "benchmarks/__init__.py": "",
        "benchmarks/harness.py": "def render():\n    pass\n",
        "benchmarks/suites/__init__.py": "",
        "benchmarks/suites/kernels.py": "",
        "scripts/gpu_check.py": "",
        "gnntrain/__init__.py": "",
        **files,
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "files, crossing",
    [
        ({"benchmarks/suites/kernels.py": "def f():\n    import tests.conftest\n"}, True),
        # tests/ put on sys.path
        ({"benchmarks/harness.py": "def f():\n    from conftest import ROOT\n"}, True),
        (
            {
                "scripts/gpu_check.py": "import "
                "importlib\nimportlib.import_module('tests.conftest')\n"
            },
            True,
        ),
        ({"tests/test_x.py": "from benchmarks.harness import render\n"}, True),
        (
            {
                "tests/test_x.py": "import sys\nsys.path.insert(0, 'benchmarks')\nfrom harness "
                "import render\n"
            },
            True,
        ),
        # benchmarks/suites on sys.path
        ({"tests/test_x.py": "def f():\n    import kernels\n"}, True),
        # run as python -c CODE
        ({"tests/test_x.py": "CODE = 'from gpu_check import main'\n"}, True),
        ({"gnntrain/x.py": "def f():\n    from benchmarks import harness\n"}, True),
        (
            {
                "tests/test_x.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-m', "
                "'benchmarks'])\n"
            },
            False,
        ),
        (
            {
                "benchmarks/harness.py": "from gnntrain.api import compose\n",
                "tests/test_x.py": "from conftest import ROOT\n",
            },
            False,
        ),
    ],
)
def test_the_tree_checker_sees_deferred_and_sys_path_imports(tmp_path, files, crossing):
    assert bool(forbidden_imports(_repo(tmp_path, files))) is crossing


def test_a_mode_is_a_small_spec_of_typed_parts():
    """A mode is a frozen spec (name, options, capabilities, planner, prepare, strategy), not a
    class of thirty members; what a mode hands its ranks is a typed payload, never a string-keyed
    dict."""
    import dataclasses

    from gnntrain.modes import MODE_REGISTRY, ModeSpec, RankShard

    public = {n for n in dir(ModeSpec) if not n.startswith("_")} | {
        f.name for f in dataclasses.fields(ModeSpec)
    }
    assert len(public) <= 10, sorted(public)
    assert ModeSpec.__dataclass_params__.frozen
    assert all(isinstance(spec, ModeSpec) for spec in MODE_REGISTRY.values())
    assert "info" not in {f.name for f in dataclasses.fields(RankShard)}
    for path in list((PACKAGE / "modes").rglob("*.py")) + list((PACKAGE / "launch").rglob("*.py")):
        assert ".info[" not in path.read_text(), path


def _mode_specs():
    """Every mode spec gnntrain has: the registry's, and the variants their options select (HongTu's
    direct path), found as specs the modes' modules hold."""
    import sys

    from gnntrain.modes import MODE_REGISTRY, ModeSpec

    specs = {id(spec): spec for spec in MODE_REGISTRY.values()}
    for name, module in list(sys.modules.items()):
        if name.startswith("gnntrain.modes."):
            specs.update({id(v): v for v in vars(module).values() if isinstance(v, ModeSpec)})
    return sorted(specs.values(), key=lambda spec: (spec.name, spec.planner.__name__))


def test_every_mode_keeps_its_cost_model_in_its_packages_cost_module():
    """A mode is a package whose cost model (its planner: validate, work, memory, bytes, details)
    lives in ``gnntrain/modes/<name>/cost.py``, apart from its prepare and rank strategy."""
    import re

    misplaced = [
        f"{spec.name}: {spec.planner.__qualname__} is defined in {spec.planner.__module__}"
        for spec in _mode_specs()
        if not re.fullmatch(r"gnntrain\.modes\.\w+\.cost", spec.planner.__module__)
    ]
    assert not misplaced, "planners outside gnntrain.modes.<package>.cost:\n" + "\n".join(misplaced)


def test_every_mode_plans_its_details_as_a_frozen_dataclass(monkeypatch, cache_dir):
    """``ModePlanner.details`` returns a frozen dataclass (:class:`gnntrain.modes.cost.Details`),
    which the plan alone turns into its mapping (``gnntrain.plan.details_mapping``): planned for
    every registered mode, and declared so by every variant's planner."""
    import dataclasses
    import typing

    from conftest import compose

    import gnntrain.plan
    from gnntrain.modes import MODE_REGISTRY
    from gnntrain.modes.cost import Details

    seen = {}
    mapping = gnntrain.plan.details_mapping

    def spy(details):
        seen["details"] = details
        return mapping(details) if dataclasses.is_dataclass(details) else {}

    monkeypatch.setattr(gnntrain.plan, "details_mapping", spy)
    for mode in sorted(MODE_REGISTRY):
        seen.clear()
        gnntrain.plan.build_plan(
            compose(
                [
                    "dataset=csbm",
                    "kernel=torch",
                    f"mode={mode}",
                    "hardware.ranks_per_node=2",
                    f"cache_dir={cache_dir}",
                ]
            )
        )
        details = seen["details"]
        assert dataclasses.is_dataclass(details) and isinstance(details, Details), (mode, details)
        assert type(details).__dataclass_params__.frozen, mode
    for spec in _mode_specs():
        declared = typing.get_type_hints(spec.planner.details)["return"]
        assert issubclass(declared, Details), (spec.name, spec.planner, declared)
