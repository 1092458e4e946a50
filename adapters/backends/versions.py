"""The MuJoCo and MJX releases mjharness is tested with, and the check that refuses others.

The backends read MJX internals (``mujoco.mjx._src``, the ``_impl`` halves of MJX's Model and Data:
``backends/mjx_private.py``), which change between releases without notice. ``TESTED_VERSIONS`` is the one
table of the tested ranges; pyproject.toml's dependencies carry the same bounds (tests/test_private_api.py
checks both). ``require_tested_versions`` runs when the MJX backend is first used (``MjxBackend.put_model``)
and raises one ``BackendError`` naming the package, its installed version and the tested range; with the
environment variable ``MJHARNESS_UNTESTED_VERSIONS=1`` it warns instead.
"""

from __future__ import annotations

import os
import re
import warnings
from importlib import metadata

from .base import BackendError

# distribution -> (lower bound, upper bound): the next minor release is the first untested one.
TESTED_VERSIONS: dict[str, tuple[str, str]] = {
    "mujoco": (">=4.0.0", "<4.1"),
    "mujoco-mjx": (">=3.17.0", "<3.18"),
}
ALLOW_ENV = "MJHARNESS_UNTESTED_VERSIONS"

_checked = False


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "3.17.0" -> (3, 17, 0); "3.18.0rc1" -> (3, 18, 0)."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def _pad(a: tuple[int, ...], n: int) -> tuple[int, ...]:
    return a + (0,) * (n - len(a))


def satisfies(version: str, bound: str) -> bool:
    """Whether ``version`` meets one bound ``">=X.Y.Z"`` or ``"<X.Y"`` (release numbers only)."""
    op, ref = (bound[:2], bound[2:]) if bound.startswith(">=") else (bound[:1], bound[1:])
    n = max(len(_release(version)), len(_release(ref)))
    v, r = _pad(_release(version), n), _pad(_release(ref), n)
    if op == ">=":
        return v >= r
    if op == "<":
        return v < r
    raise ValueError(f"unsupported version bound {bound!r} (use '>=X.Y.Z' or '<X.Y')")


def tested_range(name: str) -> str:
    """``">=3.17.0,<3.18"``: the tested range of distribution ``name`` as pip writes it."""
    return ",".join(TESTED_VERSIONS[name])


def installed_versions() -> dict[str, str | None]:
    """{distribution: installed version, or None when it is not installed as a distribution}."""
    out: dict[str, str | None] = {}
    for name in TESTED_VERSIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def untested(installed: dict[str, str | None] | None = None) -> list[str]:
    """One line per distribution whose installed version is outside ``TESTED_VERSIONS`` (none: all tested)."""
    installed = installed_versions() if installed is None else installed
    out = []
    for name, bounds in TESTED_VERSIONS.items():
        version = installed.get(name)
        if version is None:
            out.append(f"{name} (no installed version found; tested: {tested_range(name)})")
        elif not all(satisfies(version, b) for b in bounds):
            out.append(f"{name} {version} is installed; mjharness is tested with {name}{tested_range(name)}")
    return out


def check_tested_versions(installed: dict[str, str | None] | None = None) -> None:
    """Raise ``BackendError`` (warn with ``MJHARNESS_UNTESTED_VERSIONS=1``) when MuJoCo or MJX is untested."""
    bad = untested(installed)
    if not bad:
        return
    pins = " ".join(f"'{name}{tested_range(name)}'" for name in TESTED_VERSIONS)
    msg = (f"untested MuJoCo/MJX version: {'; '.join(bad)}. The MJX backend reads MJX internals "
           f"(mujoco.mjx._src, Data._impl) that change between releases: install the tested versions "
           f"(pip install {pins}), or set {ALLOW_ENV}=1 to run anyway")
    if os.environ.get(ALLOW_ENV, "") not in ("", "0"):
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        return
    raise BackendError(msg)


def require_tested_versions() -> None:
    """``check_tested_versions`` once per process (the MJX backend calls it when first used)."""
    global _checked
    if not _checked:
        check_tested_versions()
        _checked = True
