"""The import graph of every ``mjharness.*`` module: no cycles, and the layers of DESIGN.md §2.

What counts, precisely:
- Nodes: every ``.py`` file under the folders of the subpackages ``mjharness.<name>`` (DESIGN.md §2, where the
  import system finds them); a package is its ``__init__.py`` (``mjharness.scenes`` is ``scenes/__init__.py``).
- Edges: every ``import`` / ``from ... import`` statement anywhere in a module (top level, inside
  functions, under ``if``/``try``), relative imports resolved against the importing module's package, and
  ``importlib.import_module("<literal>")`` calls. A lazy import that goes back up is still a cycle: it only
  moves the failure from import time to call time and hides the dependency.
- ``import mjharness.a.b`` is an edge to ``mjharness.a.b``; ``from mjharness.a import b`` is an edge to the
  submodule ``mjharness.a.b`` when ``b`` is one, else to ``mjharness.a`` (its ``__init__``, which defines ``b``).
- Not edges: the initialisation of parent packages that Python runs before a submodule (importing
  ``mjharness.a.b`` runs ``mjharness/a/__init__.py`` first). That is the package mechanism, not a dependency
  of the importer; so a package ``__init__`` importing its own submodules is normal, while a submodule doing
  ``from . import name`` to get a name its parent re-exports from a sibling is an edge to the ``__init__``,
  and a cycle: import the sibling directly.
- Imports of other distributions (jax, mujoco, ...) are not nodes.

Layers (DESIGN.md §2): ``integrators`` imports nothing of ours but itself; ``scenes`` imports only ``scenes``
and ``mjharness.integrators.errors`` / ``.names`` (the one exception base and the string-enum base);
``adapters`` does not import ``rollout``; ``data`` (package data) imports nothing of ours.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections import deque

import pytest

# TEMPORARY (issue 27, owned by the lead, who will empty it): import edges that close a cycle and are
# being removed with the run specification / backend modules. Each entry names the back edge of one
# cycle; the graph without these edges must be acyclic, and every entry must still exist (remove it when
# its cycle is fixed). Nothing is to be added here.
TEMPORARY_ALLOWED_EDGES: dict[tuple[str, str], str] = {}  # empty: every cycle is fixed (keep it so)


# DESIGN.md §2; data: mjharness.data
SUBPACKAGES = ("scenes", "integrators", "adapters", "rollout", "data", "environment")


def package_dirs() -> dict[str, str]:
    """``mjharness.<name>`` -> its folder, where the import system finds it (nothing is executed)."""
    return {f"mjharness.{name}": importlib.util.find_spec(f"mjharness.{name}").submodule_search_locations[0]
            for name in SUBPACKAGES}


def module_files() -> dict[str, str]:
    """Every module of ours: dotted name -> file (a package's name -> its ``__init__.py``)."""
    out = {}
    for pkg, folder in package_dirs().items():
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            rel = os.path.relpath(dirpath, folder)
            prefix = pkg if rel == "." else pkg + "." + rel.replace(os.sep, ".")
            for name in filenames:
                if name.endswith(".py"):
                    out[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(dirpath, name)
    return out


def _base(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by ``from <level dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _is_import_module(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return (name == "import_module" and len(call.args) >= 1 and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str) and not call.args[0].value.startswith("."))


def imports_of(module: str, path: str, modules: dict[str, str]) -> dict[str, int]:
    """The modules of ours that ``module`` imports -> the first line that does."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = os.path.basename(path) == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        if target in modules and target != module:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in modules else base, node.lineno)
        elif isinstance(node, ast.Call) and _is_import_module(node):
            add(node.args[0].value, node.lineno)
    return found


def import_graph() -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}, modules


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def shortest_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    """One shortest cycle through ``comp[0]`` inside its component: ``[a, b, ..., a]``."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    raise AssertionError(f"{comp} is not a cycle")


def _where(files: dict[str, str], module: str) -> str:
    return os.path.relpath(files[module], os.path.dirname(os.path.dirname(files["mjharness.scenes"])))


def describe(graph: dict[str, dict[str, int]], files: dict[str, str], cycle: list[str]) -> str:
    steps = [f"{a} ({_where(files, a)}:{graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
    return "\n    ".join(steps)


def without(graph: dict[str, dict[str, int]], edges) -> dict[str, dict[str, int]]:
    return {a: {b: line for b, line in targets.items() if (a, b) not in edges} for a, targets in graph.items()}


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_graph_sees_every_package_and_lazy_imports(graph):
    # The checks below are only as good as the graph: it must hold every subpackage, resolve relative
    # imports, and see imports inside functions (mjx_trace imports the settings module at call time).
    g, files = graph
    assert {"mjharness.scenes", "mjharness.integrators", "mjharness.adapters", "mjharness.rollout",
            "mjharness.rollout.engine", "mjharness.data"} <= set(files)
    assert "mjharness.scenes.settings" in g["mjharness.scenes.mjx_trace"]
    assert "mjharness.scenes.errors" in g["mjharness.scenes.compat"]
    assert "mjharness.integrators.errors" in g["mjharness.integrators.state"]


def test_no_import_cycles(graph):
    g, files = graph
    comps = strongly_connected(without(g, TEMPORARY_ALLOWED_EDGES))
    report = [f"cycle among {', '.join(c)}:\n    {describe(g, files, shortest_cycle(g, c))}" for c in comps]
    assert not report, "import cycles (fix the structure; a lazy import is still a cycle):\n" + "\n".join(report)


def test_temporary_allowed_edges_still_exist(graph):
    # An entry whose import is gone must leave the list, so the list only shrinks.
    g, _ = graph
    stale = [f"{a} -> {b}" for a, b in TEMPORARY_ALLOWED_EDGES if b not in g.get(a, {})]
    assert not stale, f"remove from TEMPORARY_ALLOWED_EDGES (the import is gone): {stale}"


def _layer(module: str) -> str:
    return module.split(".")[1]


LAYER_RULES = {
    "integrators": lambda t: _layer(t) == "integrators",
    "scenes": lambda t: _layer(t) == "scenes" or t in ("mjharness.integrators.errors", "mjharness.integrators.names"),
    "adapters": lambda t: _layer(t) != "rollout",
    "data": lambda t: False,
}


@pytest.mark.parametrize("layer", sorted(LAYER_RULES))
def test_layers(graph, layer):
    g, files = graph
    allowed = LAYER_RULES[layer]
    bad = [f"{m} ({_where(files, m)}:{line}) imports {t}"
           for m, targets in sorted(g.items()) if _layer(m) == layer
           for t, line in sorted(targets.items()) if _layer(t) != layer and not allowed(t)]
    assert not bad, f"{layer} breaks the dependency direction of DESIGN.md §2:\n  " + "\n  ".join(bad)
