"""Process-wide JAX/XLA settings, applied by ``configure()``: explicitly, or by the entry points that run
physics (``rollout``, ``simulate``, ``fit``, ``mjharness``, constructing an ``MjScene`` or a reference
model, ``load_scene``'s MJX trace), before they create any array. Importing mjharness changes none of
them: JAX's settings, ``XLA_FLAGS`` and file descriptor 2 stay as they were until ``configure()`` runs.

They live in the bottom layer so that the scene loader's MJX trace check can apply them without
importing upward; ``mjharness.scenes`` changes no JAX setting until a trace is asked for (it imports JAX
only through ``mjharness.integrators``, whose error base classes it uses).

- float64 by default (``MJHARNESS_X64=0`` for float32): MuJoCo C is float64, and the cross-checks
  against it are at 1e-12.
- XLA:CPU's fusion emitters off (``XLA_CPU_FLAG``), unless ``XLA_FLAGS`` already says otherwise or
  ``MJHARNESS_XLA_FLAGS=0``: they make MJX's kinematics exponential in the depth of the body tree.
- JAX's persistent compilation cache in a user cache dir (``MJHARNESS_CACHE_DIR`` moves it,
  ``MJHARNESS_CACHE_DIR=""`` turns it off), so a second process on the same scene skips most of its
  compile. Its keys hash each module as a call graph (``compile_key``; ``MJHARNESS_CANONICAL_CACHE_KEYS=0``: JAX's
  own hashing), so a program traced after other work in the same process finds what a fresh process cached: JAX's
  numbering and sharing of the module's private functions otherwise depend on the process's trace caches. Beside
  it, ``exported/`` holds the engine's traced chunk functions (``rollout/cache.py``;
  ``MJHARNESS_EXPORT_CACHE=0`` turns that part off), so a second process skips tracing as well.
- ``mujoco.mjx`` imported with its optional-backend notices dropped, and only where it is first used (``mjx``, a
  module that imports MJX on its first attribute read: a MuJoCo C run never imports it, ~0.8 s of a process's
  start): mujoco-mjx prints "Failed to import warp: No module named 'warp'" (and the same for mujoco_warp) on
  every import when its Warp backend is not installed; we never use that backend. Any other output of the
  import passes through unchanged.
- MuJoCo's stage timers off (``mujoco_timers``): the Python bindings switch on ``mjData.timer``'s two clock reads
  around every pipeline stage, up to 40 % of a small model's step (1.6x on 10,000 spheres' RK4 chunks), for
  numbers mjharness never reads; the physics is the same bits. ``MJHARNESS_MUJOCO_TIMERS=1`` keeps them (to read
  ``mjData.timer``); a timer the user installed with ``mujoco.set_mjcb_time`` is never touched.
- XLA's known-false log lines on loading a cached executable (``E... cpu_aot_loader.cc ... SIGILL`` on
  AVX-512 hosts, ``pjrt_executable.cc`` "Assume version compatibility") filtered from file descriptor 2
  (``xla_log``); every other line passes; ``MJHARNESS_XLA_LOG=all`` keeps them.

The model-independent layer (``mjharness.integrators``) changes no global setting: a user who only
uses it keeps JAX's own defaults.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import types
import warnings
from typing import TYPE_CHECKING

import jax

from . import xla_log

__all__ = ["XLA_CPU_FLAG", "cache_dir", "export_dir", "configure", "configured", "import_mjx", "mjx"]

# XLA:CPU's fusion emitters (the default in jaxlib 0.9) make MJX's kinematics exponential in the
# depth of the body tree: one mjx.kinematics of an 8-hinge chain takes 0.86 s instead of 0.9 ms, a
# 12-hinge chain's mjx.step 10-25 s. The older emitters have no such blow-up and, on the bundled
# scenes, compile faster and run as fast (data/bench/). A user's own XLA_FLAGS setting wins.
XLA_CPU_FLAG = "--xla_cpu_use_fusion_emitters=false"

# What mujoco/mjx/warp/__init__.py prints when the optional `warp` package is absent.
_ABSENT_WARP = re.compile(r"Failed to import (?:warp|mujoco_warp): No module named 'warp(?:\.[\w.]+)?'")


def _off(var: str, default: str = "1") -> bool:
    return os.environ.get(var, default).strip() in ("0", "false", "False", "no", "off")


def cache_dir() -> str:
    """JAX's persistent compilation cache directory ("" = off)."""
    if "MJHARNESS_CACHE_DIR" in os.environ:
        return os.environ["MJHARNESS_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mjharness", "jax")


def export_dir() -> str:
    """Where ``rollout/cache.py`` keeps traced chunk functions ("" = off)."""
    cache = cache_dir()
    return "" if _off("MJHARNESS_EXPORT_CACHE") or not cache else os.path.join(cache, "exported")


def _xla_flags() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags or _off("MJHARNESS_XLA_FLAGS"):
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        warnings.warn(f"mjharness was imported after JAX started its backend, so {XLA_CPU_FLAG} (which keeps "
                      f"deep MJX body trees from running exponentially slowly on CPU) is not in effect; import "
                      f"mjharness first or put it in XLA_FLAGS", RuntimeWarning, stacklevel=3)
        return
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAG}".strip()


def _compilation_cache() -> None:
    cache = cache_dir()
    if cache and not _off("MJHARNESS_CANONICAL_CACHE_KEYS"):
        from .compile_key import install

        install()  # keys that do not depend on what the process traced before (compile_key.py)
    # jax's Config stub does not list the options it reads as attributes
    if not cache or jax.config.jax_compilation_cache_dir is not None:  # type: ignore[attr-defined]
        return  # off, or the user's own setting wins
    try:
        os.makedirs(cache, exist_ok=True)
    except OSError:
        return  # an unwritable home is no reason to fail; compile without the cache
    jax.config.update("jax_compilation_cache_dir", cache)
    # Cache even quick compiles: on 2-core machines small functions still take seconds.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def import_mjx() -> None:
    """``import mujoco.mjx`` without its notices about an absent optional Warp backend (other output kept)."""
    if "mujoco.mjx" in sys.modules:
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            import mujoco.mjx  # noqa: F401
    finally:
        kept = [line for line in captured.getvalue().splitlines(keepends=True)
                if not _ABSENT_WARP.fullmatch(line.rstrip("\r\n"))]
        sys.stdout.write("".join(kept))


class _LazyMJX(types.ModuleType):
    """``mujoco.mjx``, imported quietly (``import_mjx``) on the first attribute read: a run on MuJoCo C never pays
    for it (~0.8 s of every process's start: MJX imports trimesh, networkx and scipy.spatial for its meshes)."""

    def __getattr__(self, name: str):
        import_mjx()
        real = sys.modules["mujoco.mjx"]
        self.__dict__.update(real.__dict__)  # later reads are plain attribute reads, the same objects as MJX's
        return getattr(real, name)


if TYPE_CHECKING:
    from mujoco import mjx as mjx
else:
    mjx = _LazyMJX("mujoco.mjx")  # what the adapters import as ``mjx``


_configured = False


def configure() -> None:
    """Apply the settings above: float64 (``MJHARNESS_X64=0``: float32), the XLA:CPU flag, the compile caches,
    MuJoCo's stage timers off (``MJHARNESS_MUJOCO_TIMERS=1``: on), XLA's known-false log lines filtered from stderr.
    (MJX is imported, without its optional-backend notices, where it is first used: ``mjx``.)
    Idempotent (the first call decides); ``rollout()``, ``simulate()``, ``fit()``, the CLI and the model
    constructors call it, so only code that makes its own JAX arrays first needs to call it itself."""
    global _configured
    if _configured:
        return
    _configured = True
    _xla_flags()
    jax.config.update("jax_enable_x64", not _off("MJHARNESS_X64"))
    _compilation_cache()
    if _off("MJHARNESS_MUJOCO_TIMERS", "0"):
        from .mujoco_timers import set_timers

        set_timers(False)
    # Library users get the CLI's stderr: without XLA's known-false lines on loading cached executables.
    xla_log.install()


def configured() -> bool:
    """Whether ``configure()`` has run in this process."""
    return _configured
