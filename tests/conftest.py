"""Shared fixtures: scenes and compiled functions are built once per session (JIT is the cost)."""

from __future__ import annotations

import functools
import os

import pytest

from mjharness.adapters import MjScene, configure

# The suite runs as users' programs do once mjharness has configured the process (float64, the XLA:CPU flag, the
# caches): test modules make JAX arrays at import, before any rollout() or MjScene would configure it.
configure()


def pytest_collection_modifyitems(session, config, items):
    """Test files longest first, by the last recorded run's per-file times (``data/test_durations.json``; files it
    does not know first of all): with ``--dist loadfile`` and ``--no-loadscope-reorder`` (pyproject.toml) the
    workers take whole files in this order, so no long file starts last while the other worker idles (pytest-xdist's
    own order, by the number of tests per file, left a worker idle ~25 s of a cold run). Tests keep their order
    within a file."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "test_durations.json"
    try:
        seconds = json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return
    rank = {f: -s for f, s in seconds.items()}
    index = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.nodeid.split("::")[0], float("-inf")), index[id(item)]))


@functools.cache
def cached_scene(name: str, quaternion_update: str = "quaternion") -> MjScene:
    """One MjScene per (bundled scene, policy) for the whole session. Do not add states to it."""
    return MjScene(name, quaternion_update=quaternion_update)


@pytest.fixture(scope="session")
def scene_cache():
    return cached_scene


# Where the suite's time goes (scripts/record_test_durations.py --jax-events): with MJHARNESS_JAX_EVENTS=DIR each
# worker appends to DIR/<worker>.jsonl, per test, the seconds JAX spent tracing, lowering and compiling (the union of
# the event spans, so nested traces count once), the persistent-cache entries it wrote (misses) and the functions it
# traced longest; with MJHARNESS_JAX_KEYLOG=1 also DIR/<worker>.keys, JAX's log of every cache key's parts.
def pytest_configure(config):
    if os.environ.get("MJHARNESS_JAX_EVENTS"):
        from jax_events import plugin

        config.pluginmanager.register(plugin(os.environ["MJHARNESS_JAX_EVENTS"],
                                             bool(os.environ.get("MJHARNESS_JAX_KEYLOG"))), "mjharness-jax-events")
