"""Package attributes that import their submodule on first use (PEP 562), for ``__init__`` modules whose
submodules import JAX or MuJoCo: ``mjharness --help`` and the CLI's argument checks must not pay ~2 s for them.

A package lists its public names once, as ordinary imports under ``if TYPE_CHECKING:`` (so type checkers,
readers and the import-graph test see them), and ends with::

    __getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)

``attach`` reads that block's ``from .sub import name`` statements (no second list to keep in step).
"""

from __future__ import annotations

import ast
import importlib
import sys
import types

__all__ = ["attach"]


def _exports(path: str) -> dict[str, str]:
    """name -> relative submodule, from the ``if TYPE_CHECKING:`` block of the module at ``path``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    blocks = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    return {a.asname or a.name: "." * node.level + (node.module or "")
            for block in blocks for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}


class _Package(types.ModuleType):
    """A lazy package whose export shares its name with the submodule defining it (``engine.simulate``, the
    function, in ``engine/simulate.py``): importing that submodule makes the import system bind it on the
    package under the same name (an eager ``from .simulate import simulate`` used to rebind the function
    after it). Here the binding keeps the function."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}" \
                and name in getattr(self, "__all__", ()) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


def attach(package: str, path: str, names):
    """(``__getattr__``, ``__dir__``) for ``package`` (its ``__name__``, ``__file__``, ``__all__``)."""
    exports: dict[str, str] = {}
    sys.modules[package].__class__ = _Package

    def __getattr__(name: str):
        if not exports:
            exports.update(_exports(path))
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
