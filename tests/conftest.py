"""Shared fixtures: scenes and compiled functions are built once per session (JIT is the cost)."""

from __future__ import annotations

import functools

import pytest

from mjharness.adapters import MjScene, configure

# The suite runs as users' programs do once mjharness has configured the process (float64, the XLA:CPU flag, the
# caches): test modules make JAX arrays at import, before any rollout() or MjScene would configure it.
configure()


@functools.cache
def cached_scene(name: str, quaternion_update: str = "quaternion") -> MjScene:
    """One MjScene per (bundled scene, policy) for the whole session. Do not add states to it."""
    return MjScene(name, quaternion_update=quaternion_update)


@pytest.fixture(scope="session")
def scene_cache():
    return cached_scene
