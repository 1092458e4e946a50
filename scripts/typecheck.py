"""Type-check the mjharness package with mypy (CI: .ci/run), configured by pyproject.toml's [tool.mypy].

The package's subpackages live in top-level folders (scenes/ is mjharness.scenes, ...: pyproject's
[tool.setuptools] package-dir), which mypy cannot map by itself. This script builds a temporary tree
<tmp>/mjharness/<sub> of symlinks to those folders, runs
`mypy --namespace-packages --explicit-package-bases -p mjharness` there with the repository's configuration,
prints mypy's report with the paths as they are in the repository, and exits with mypy's code.

    python scripts/typecheck.py            # the whole package
    python scripts/typecheck.py -- ARGS    # extra mypy arguments (e.g. -- --check-untyped-defs)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mjharness"


def package_dirs(pyproject: Path) -> dict[str, str]:
    """The mjharness.<sub> -> folder mapping of pyproject's [tool.setuptools] package-dir ({"scenes": "scenes"});
    the top-level package itself (its ``__init__.py``: ``mjharness.configure``) under the key ""."""
    with pyproject.open("rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    out = {}
    for name, folder in mapping.items():
        top, _, sub = name.partition(".")
        if top != PACKAGE or "." in sub:
            raise SystemExit(f"typecheck: unexpected package-dir entry {name!r} in {pyproject}")
        out[sub] = folder
    return out


def main(argv: list[str]) -> int:
    extra = argv[1:] if argv[:1] == ["--"] else argv
    pyproject = ROOT / "pyproject.toml"
    dirs = package_dirs(pyproject)
    with tempfile.TemporaryDirectory(prefix="mjharness-typecheck-") as tmp:
        tree = Path(tmp) / PACKAGE
        tree.mkdir()
        for sub, folder in dirs.items():
            if sub:
                (tree / sub).symlink_to(ROOT / folder, target_is_directory=True)
            else:
                (tree / "__init__.py").symlink_to(ROOT / folder / "__init__.py")
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(pyproject),
               "--cache-dir", str(ROOT / ".mypy_cache"),
               "--namespace-packages", "--explicit-package-bases", "-p", PACKAGE, *extra]
        proc = subprocess.run(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # mjharness/rollout/fit.py:12: ... -> rollout/fit.py:12: ... (the file as it is in this checkout)
    prefixes = {f"{PACKAGE}/{sub}/": f"{folder}/" for sub, folder in dirs.items() if sub}
    for line in proc.stdout.splitlines():
        for prefix, folder in prefixes.items():
            if line.startswith(prefix):
                line = folder + line[len(prefix):]
                break
        print(line)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
