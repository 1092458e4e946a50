"""MkDocs hook: lets mkdocstrings (griffe) find the ``mjharness.*`` packages.

The distribution maps top-level folders onto ``mjharness.*`` (setuptools ``package-dir``: ``rollout/`` is
``mjharness.rollout``) and has no ``mjharness/`` folder, which griffe's static finder needs; its editable-install
support assumes a package's folder carries the package's name. So, before the first page is rendered, this hook
lays out ``<tmp>/mjharness/<sub> -> <repo>/<folder>`` symlinks (and an
``__init__.py``) and adds ``<tmp>`` to the handler's search paths.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from mkdocs.plugins import event_priority

# mjharness.<name> -> folder of this repository (as in pyproject.toml's package-dir)
PACKAGES = {"scenes": "scenes", "integrators": "integrators", "adapters": "adapters", "rollout": "rollout",
            "environment": "environment"}


def _namespace_tree(repo: str) -> str:
    root = tempfile.mkdtemp(prefix="mjharness-api-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    os.mkdir(os.path.join(root, "mjharness"))
    # A regular package (griffe prefers one over a namespace folder, and would otherwise take the `mjharness`
    # console script on sys.path for the package).
    with open(os.path.join(root, "mjharness", "__init__.py"), "w") as f:
        f.write('"""mjharness: batched MuJoCo/MJX rollouts (a namespace package; this file exists for the docs)."""\n')
    for name, folder in PACKAGES.items():
        os.symlink(os.path.join(repo, folder), os.path.join(root, "mjharness", name))
    return root


@event_priority(100)  # before mkdocstrings' own on_config, which creates the handler with its paths
def on_config(config):
    repo = os.path.dirname(os.path.abspath(config.config_file_path))
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    python.setdefault("paths", []).append(_namespace_tree(repo))
    return config
