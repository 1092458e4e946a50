"""mjharness: batched rollouts of MuJoCo scenes with our own integrators, streamed into HDF5.

The subpackages live in the repository's top-level folders (setuptools ``package-dir``): ``mjharness.scenes``,
``.adapters``, ``.integrators``, ``.rollout``, ``.environment``. This module only names the process-wide entry
point ``configure()``; importing it imports nothing else (no JAX, no setting changed: docs/diagnostics.md).
"""

from __future__ import annotations

__all__ = ["configure"]


def configure() -> None:
    """Apply mjharness's process-wide settings once (float64, the XLA:CPU flag, the compile caches, the XLA log
    filter); idempotent. The same as ``mjharness.adapters.configure()``; ``rollout()``, the CLI and the
    constructors call it themselves."""
    from mjharness.scenes.settings import configure as _configure

    _configure()
