"""Process-wide JAX settings applied on import, before any array exists.

float64 by default (set MJHARNESS_X64=0 for float32). The persistent compilation cache is on by
default in a user cache dir (MJHARNESS_CACHE_DIR to move it, MJHARNESS_CACHE_DIR="" to turn it off),
so a second process on the same scene skips most of its compile time. Beside it, ``exported/``
holds the rollout engine's traced chunk functions (``rollout/aot.py``), so a second process skips
tracing as well (MJHARNESS_EXPORT_CACHE=0 turns that part off).
"""

from __future__ import annotations

import os

import jax


def _cache_dir() -> str:
    if "MJHARNESS_CACHE_DIR" in os.environ:
        return os.environ["MJHARNESS_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mjharness", "jax")


def export_dir() -> str:
    """Where ``rollout/aot.py`` keeps traced chunk functions ("" = off)."""
    if os.environ.get("MJHARNESS_EXPORT_CACHE", "1") in ("0", "false", "False"):
        return ""
    cache = _cache_dir()
    return os.path.join(cache, "exported") if cache else ""


def configure() -> None:
    jax.config.update("jax_enable_x64", os.environ.get("MJHARNESS_X64", "1") not in ("0", "false", "False"))
    cache = _cache_dir()
    if cache and jax.config.jax_compilation_cache_dir is None:
        try:
            os.makedirs(cache, exist_ok=True)
        except OSError:
            return  # an unwritable home is no reason to fail; compile without the cache
        jax.config.update("jax_compilation_cache_dir", cache)
        # Cache even quick compiles: on 2-core machines small functions still take seconds.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


configure()
