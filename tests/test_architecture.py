"""The package's shape: an acyclic import graph that follows the layer chain
config → sizing → data/partition, comm, models, metrics → runtime → modes → plan → auto →
launch → cli (docs/design.md, "Layers"), and modules small enough to hold in one's head.

Every import statement counts, deferred (inside functions) and ``TYPE_CHECKING`` ones too.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gnntrain"
MAX_MODULE_LINES = 500

# lower index = lower layer; a module may import its own layer or lower ones only
LAYERS: List[Set[str]] = [
    {"gnntrain", "gnntrain.errors", "gnntrain.atomic", "gnntrain.seeding", "gnntrain.logs", "gnntrain.config",
     "gnntrain.interrupts",
     "gnntrain.backends"},
    {"gnntrain.sizing"},
    {"gnntrain.data", "gnntrain.partition", "gnntrain.comm", "gnntrain.models", "gnntrain.metrics",
     "gnntrain.checkpoint"},
    {"gnntrain.runtime"},
    {"gnntrain.modes"},
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


def import_graph(root: Optional[Path] = None) -> Dict[str, Set[str]]:
    """Module → the gnntrain modules its import statements name (``from a import b`` names
    ``a.b`` when that is a module, else ``a``)."""
    root = root or PACKAGE
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == "gnntrain")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.split(".")[0] != "gnntrain":
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
                return path[path.index(nxt):] + [nxt]
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
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_imports_follow_the_layer_chain():
    upward = [f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
              for m, deps in sorted(import_graph().items()) for d in sorted(deps) if layer_of(d) > layer_of(m)]
    assert not upward, "imports against the layer chain:\n" + "\n".join(upward)


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("source, cycle", [
    ({"a.py": "from gnntrain.b import x\n", "b.py": "def f():\n    from gnntrain.a import y\n"}, True),
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gnntrain.b\n",
      "b.py": "import gnntrain.a\n"}, True),
    ({"a.py": "from gnntrain.b import x\n", "b.py": "x = 1\n"}, False),
])
def test_the_checker_sees_deferred_and_type_checking_imports(tmp_path, source, cycle):
    root = tmp_path / "gnntrain"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in source.items():
        (root / name).write_text(text)
    assert bool(find_cycle(import_graph(root))) is cycle


def _top_level_imports(path: Path) -> Set[str]:
    """Every module name an import statement in ``path`` names (deferred imports and code strings
    handed to a subprocess included: those are parsed too where they are literal Python)."""
    names: Set[str] = set()
    trees = [ast.parse(path.read_text(), filename=str(path))]
    for node in ast.walk(trees[0]):  # code run in a child interpreter (python -c "...") is Python too
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:
                trees.append(ast.parse(node.value.replace("{{", "{").replace("}}", "}")))
            except SyntaxError:
                pass
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_tests_and_benchmarks_do_not_import_each_other():
    """Benchmarks and scripts reach gnntrain through gnntrain.api (compose, cli), never through the tests'
    conftest; tests run a script as a process, never import it."""
    root = PACKAGE.parent
    script_modules = {p.stem for p in (root / "scripts").glob("*.py")}
    test_modules = {p.stem for p in (root / "tests").glob("*.py")}
    for path in (root / "scripts").rglob("*.py"):
        assert not _top_level_imports(path) & test_modules, f"{path} imports a test module"
    for path in (root / "tests").rglob("*.py"):
        assert not _top_level_imports(path) & script_modules, f"{path} imports a script"
