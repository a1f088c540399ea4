"""The house's layers (DESIGN.md): core <- designs <- partition <- flow <- host <- rlhls. Imports point
down only, and no module imports itself back through others (no cycle, counting the imports inside
functions too): computed from the sources."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"rlhls.core": ("core", 0), "rlhls.designs": ("designs", 1), "rlhls.partition": ("partition", 2),
          "rlhls.flow": ("flow", 3), "rlhls.host": ("host", 4), "rlhls": ("rlhls", 5)}


def _modules() -> dict:
    mods = {}
    for pkg, (folder, _) in LAYERS.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


def _imports(mods: dict) -> dict:
    """{module: {rlhls modules it imports, anywhere in it}} (what only a type checker reads is left out)."""
    graph = {}
    for name, f in mods.items():
        tree = ast.parse(f.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = name.split(".")[:len(name.split(".")) - node.level + (f.name == "__init__.py")]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


@pytest.fixture(scope="module")
def graph() -> dict:
    """The import graph of the sources, read once for the module's tests (they only read it)."""
    return _imports(_modules())


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best][1]


def test_imports_point_down_the_layers(graph):
    up = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps if _layer(b) > _layer(a))
    assert up == []


def test_no_import_cycle(graph):
    assert len(graph) > 100  # every module was read
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_the_bottom_layer_imports_nothing_of_rlhls_above_it(graph):
    core = {m: deps for m, deps in graph.items() if m.startswith("rlhls.core")}
    assert core and all(d.startswith("rlhls.core") for deps in core.values() for d in deps)
