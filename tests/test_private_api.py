"""MJX/MuJoCo private APIs: only the backends touch them, for tested versions only.

``adapters/backends/mjx_private.py`` is the door to ``mujoco.mjx._src`` and to the ``_impl`` halves of MJX's
Model and Data; ``adapters/backends/versions.py`` holds the tested ranges (``TESTED_VERSIONS``), which
pyproject.toml's dependencies repeat, and the check the MJX backend runs when first used.
"""

from __future__ import annotations

import ast
import os
import re
import sys

import mujoco
import pytest

from mjharness.adapters.backends import BackendError, versions
from mjharness.adapters.backends.mjx import MJX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIRS = ("scenes", "adapters", "integrators", "rollout", "data", "examples")
BACKENDS_DIR = os.path.join("adapters", "backends") + os.sep
# (file, function): the only private-API uses allowed outside adapters/backends, each with its reason.
ALLOWED = {
    # load_scene (scenes) traces mjx.forward with MJX's JAX-backend constructors, and scenes may not import
    # adapters (tests/test_imports.py); the public constructors pick a device and change a failure's report.
    (os.path.join("scenes", "mjx_trace.py"), "_constructors"),
}


def _pyproject_dependencies() -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def test_installed_versions_are_tested():
    assert versions.untested() == []
    versions.check_tested_versions()  # no error, no warning


def test_pyproject_bounds_equal_the_table():
    deps = {}
    for dep in _pyproject_dependencies():
        m = re.match(r"([A-Za-z0-9_.-]+)\s*([^;#]*)", dep)
        deps[m.group(1).lower()] = m.group(2).replace(" ", "")
    for name, bounds in versions.TESTED_VERSIONS.items():
        assert deps.get(name) == ",".join(bounds), f"pyproject.toml pins {name}{deps.get(name)}; the table {bounds}"


@pytest.mark.parametrize("bound,version,ok", [(">=3.17.0", "3.17.0", True), (">=3.17.0", "3.16.9", False),
                                              ("<3.18", "3.17.5", True), ("<3.18", "3.18.0", False),
                                              ("<3.18", "3.18.0rc1", False), ("<4.1", "4.0.1", True),
                                              (">=4.0.0", "4.0", True), ("<4.1", "4.10.0", False)])
def test_version_bounds(bound, version, ok):
    assert versions.satisfies(version, bound) is ok


def test_untested_version_fails_clearly(monkeypatch):
    monkeypatch.delenv(versions.ALLOW_ENV, raising=False)
    installed = dict(versions.installed_versions(), **{"mujoco-mjx": "3.18.0"})
    monkeypatch.setattr(versions, "installed_versions", lambda: installed)
    with pytest.raises(BackendError) as e:
        versions.check_tested_versions()
    msg = str(e.value)
    assert "mujoco-mjx 3.18.0 is installed" in msg and "mujoco-mjx>=3.17.0,<3.18" in msg
    assert versions.ALLOW_ENV in msg and f"mujoco {installed['mujoco']} is installed" not in msg  # mujoco is fine
    # The MJX backend runs the check when first used: a new process with this version stops at put_model.
    monkeypatch.setattr(versions, "_checked", False)
    model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><joint/><geom size='.1'/></body>"
                                           "</worldbody></mujoco>")
    with pytest.raises(BackendError, match=r"mujoco-mjx 3\.18\.0 is installed"):
        MJX.put_model(model, "test model", {})
    # Opting in turns the error into one warning.
    monkeypatch.setenv(versions.ALLOW_ENV, "1")
    with pytest.warns(RuntimeWarning, match=r"mujoco-mjx 3\.18\.0 is installed"):
        versions.check_tested_versions()


def test_missing_or_old_mujoco_is_named(monkeypatch):
    monkeypatch.delenv(versions.ALLOW_ENV, raising=False)
    with pytest.raises(BackendError, match=r"mujoco 3\.3\.0 is installed; mjharness is tested with mujoco>=4\.0\.0"):
        versions.check_tested_versions({"mujoco": "3.3.0", "mujoco-mjx": "3.17.0"})
    with pytest.raises(BackendError, match=r"mujoco-mjx \(no installed version found"):
        versions.check_tested_versions({"mujoco": "4.0.1", "mujoco-mjx": None})


# -- no private API outside adapters/backends ---------------------------------------------------------------

def _private_uses(tree: ast.AST):
    """(line, function, what) of every touch of MJX's private API: imports of ``mujoco.mjx._src``, ``._impl``
    and ``._src`` attributes, ``"_impl"`` names (getattr) and ``"_impl.<field>"`` keys (tree_replace)."""
    out = []

    def visit(node, func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        what = None
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("mujoco.mjx._src") or (
                    node.module == "mujoco.mjx" and any(a.name == "_src" for a in node.names)):
                what = f"from {node.module} import ..."
        elif isinstance(node, ast.Import):
            what = next((f"import {a.name}" for a in node.names if a.name.startswith("mujoco.mjx._src")), None)
        elif isinstance(node, ast.Attribute) and node.attr in ("_impl", "_src"):
            what = f".{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value == "_impl" or node.value.startswith("_impl.")):
            what = repr(node.value)
        if what:
            out.append((getattr(node, "lineno", 0), func, what))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, None)
    return out


def _package_files():
    for top in PACKAGE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, ROOT), path


def test_only_backends_touch_private_apis():
    found, allowed_seen = [], set()
    for rel, path in _package_files():
        if rel.startswith(BACKENDS_DIR):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for line, func, what in _private_uses(tree):
            if (rel, func) in ALLOWED:
                allowed_seen.add((rel, func))
            else:
                found.append(f"{rel}:{line} ({func or 'module'}): {what}")
    assert not found, "MJX private API outside adapters/backends (use adapters/backends/mjx_private.py):\n" + \
        "\n".join(found)
    assert allowed_seen == ALLOWED, f"allowed uses that no longer exist (remove them): {ALLOWED - allowed_seen}"


def test_the_scan_sees_private_uses():
    src = ("from mujoco.mjx._src import smooth\nimport mujoco.mjx._src.io\n"
           "def f(d):\n    return d._impl.M, getattr(d, '_impl'), d.tree_replace({'_impl.M': 1}), mjx._src\n")
    whats = [w for _, _, w in _private_uses(ast.parse(src))]
    assert whats == ["from mujoco.mjx._src import ...", "import mujoco.mjx._src.io", "._impl", "'_impl'", "'_impl.M'",
                     "._src"]


# -- backends own their per-scene state --------------------------------------------------------------------

def test_backend_hooks_read_no_mjscene_private_fields():
    """Backends keep what they need per scene in ``scene.backend_state`` (made by ``Backend.scene_state``) and
    read the scene's public attributes only: no ``scene._<name>`` in adapters/backends."""
    found = []
    for rel, path in _package_files():
        if not rel.startswith(BACKENDS_DIR):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in ("scene", "twin")):
                found.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "backend hooks read MjScene private fields:\n" + "\n".join(found)


def test_mujoco_state_is_per_scene_and_per_world_fields_share_its_pool():
    from mjharness.adapters import MjScene

    scene = MjScene("<mujoco><worldbody><body><joint/><geom size='.1' mass='1'/></body></worldbody></mujoco>",
                    backend="mujoco")
    state = scene.backend_state
    assert scene.backend_impl.data_template(state) is None  # no MJX data on MuJoCo C
    twin = scene.with_params({"body_mass": 2.0})
    assert twin.backend_state.world_fields == {"body_mass": 2.0} and scene.backend_state is state
    assert twin.backend_state.pool is state.pool and twin.backend_state.fns is state.fns  # one pool, one cache
    assert state.world_fields is None
    scene.recompile(scene.model)  # a new model: a new state
    assert scene.backend_state is not state
