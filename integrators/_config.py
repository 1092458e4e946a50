"""Process-wide JAX settings applied on import, before any array exists.

float64 by default (set MJHARNESS_X64=0 for float32). The persistent compilation cache is on by
default in a user cache dir (MJHARNESS_CACHE_DIR to move it, MJHARNESS_CACHE_DIR="" to turn it off),
so a second process on the same scene skips most of its compile time. Beside it, ``exported/``
holds the rollout engine's traced chunk functions (``rollout/aot.py``), so a second process skips
tracing as well (MJHARNESS_EXPORT_CACHE=0 turns that part off). On CPU, XLA's newer fusion
emitters are turned off (see ``XLA_CPU_FLAG``; MJHARNESS_XLA_FLAGS=0 leaves XLA_FLAGS alone).
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


# XLA:CPU's fusion emitters (the default in jaxlib 0.9) make MJX's kinematics exponential in the
# depth of the body tree: one mjx.kinematics of an 8-hinge chain takes 0.86 s instead of 0.9 ms, a
# 12-hinge chain's mjx.step 10-25 s. The older emitters have no such blow-up and, on the bundled
# scenes, compile faster and run as fast (README, "Benchmarks"). A user's own XLA_FLAGS setting wins.
XLA_CPU_FLAG = "--xla_cpu_use_fusion_emitters=false"


def _xla_flags() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags or os.environ.get("MJHARNESS_XLA_FLAGS", "1") in ("0", "false"):
        return
    try:
        from jax._src import xla_bridge

        started = xla_bridge.backends_are_initialized()
    except Exception:  # pragma: no cover - another jax layout: assume not started
        started = False
    if started:
        import warnings

        warnings.warn(f"mjharness was imported after JAX started its backend, so {XLA_CPU_FLAG} (which keeps "
                      f"deep MJX body trees from running exponentially slowly on CPU) is not in effect; import "
                      f"mjharness first or put it in XLA_FLAGS", RuntimeWarning, stacklevel=3)
        return
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAG}".strip()


def configure() -> None:
    _xla_flags()
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
