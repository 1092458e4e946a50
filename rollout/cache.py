"""A disk cache of *traced* chunk functions (``jax.export``), so a second process skips tracing too.

JAX's persistent compilation cache (on by default, ``scenes/settings.py``) skips the XLA compile
of a function it has seen, but every new process still traces and lowers it: for a rollout chunk
that is ``mjx.forward`` inside two scans and a vmap, seconds to tens of seconds on a small CPU, most
of what the cache leaves. Here the lowered chunk function is serialized with ``jax.export`` under a
key naming everything the trace depends on; a later process deserializes it, wraps it in a ``jit``
(a trace of one call) and compiles it, which the persistent cache answers.

The key is only formed when it can be complete: the scene must say what its trace depends on
(``MjScene.trace_key``: the model, its MJX model and data template, state layout and noise; ``None``
when user callables take part), the integrator must be one of ours (a frozen dataclass, whose repr
holds every field), and a ``ctrl(t, x)`` callable turns the cache off. The key also holds the
versions of jax, jaxlib, mujoco and mujoco-mjx, the sha256 of mjharness's own source files (an
edited checkout never reuses a stale trace), the x64 flag, the devices and every argument's shape,
dtype and sharding. Unreadable or stale entries are traced again and overwritten.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import importlib.metadata
import os
import pathlib
import sys
import tempfile
import time as _time

import jax
import numpy as np

from mjharness.scenes.settings import export_dir

__all__ = ["compile_cached", "chunk_key", "source_digest"]

_SUFFIX = ".jaxexport"

# Compiled chunk functions of this process by key: a repeat of a configuration whose scene is a new
# object (``rollout("humanoid", ...)`` builds an MjScene per call) reuses the executable instead of
# reloading the export and the XLA cache entry (~0.1 s and two log lines per call on CPU).
_IN_PROCESS: collections.OrderedDict = collections.OrderedDict()
_IN_PROCESS_MAX = 32


@functools.cache
def _versions() -> tuple:
    out = [sys.version.split()[0], jax.__version__]
    for dist in ("jaxlib", "mujoco", "mujoco-mjx"):
        try:
            out.append(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            out.append("-")
    return tuple(out)


@functools.cache
def source_digest() -> str:
    """sha256 of every .py file of the mjharness package (its folders), in path order."""
    import mjharness.integrators as integ

    root = pathlib.Path(integ.__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in ("adapters", "integrators", "rollout", "scenes", "data"):
        for p in sorted((root / sub).rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _integrator_key(integ) -> str | None:
    cls = type(integ)
    if not (cls.__module__.startswith("mjharness.") and dataclasses.is_dataclass(integ)):
        return None  # a user integrator's code is not in our source digest
    return f"{cls.__module__}.{cls.__qualname__}:{integ!r}"


def _aval(a) -> str:
    return f"{jax.typeof(a)}|{getattr(a, 'sharding', None)}"


def chunk_key(scene, integ, static: tuple, args) -> str | None:
    """The cache key of one chunk function, or None when it cannot name everything its trace depends on."""
    scene_key = getattr(scene, "trace_key", None)
    scene_key = scene_key() if callable(scene_key) else None
    integ_key = _integrator_key(integ)
    if scene_key is None or integ_key is None:
        return None
    devices = jax.tree.leaves(args)[0].sharding.device_set
    if {d.platform for d in devices} != {jax.default_backend()}:
        return None  # jax.export lowers for the default backend only
    h = hashlib.sha256()
    flags = jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]
    for part in (*_versions(), source_digest(), scene_key, integ_key, repr(static),
                 str(bool(flags[0])), str(flags[1]),
                 ",".join(sorted(f"{d.platform}:{d.device_kind}:{d.id}" for d in devices)),
                 *map(_aval, jax.tree.leaves(args)), str(jax.tree.structure(args))):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _load(path: str):
    try:
        with open(path, "rb") as f:
            return jax.export.deserialize(bytearray(f.read()))
    except FileNotFoundError:
        return None
    except Exception:  # truncated, or written by another jax: trace again and overwrite
        return None


def _store(path: str, exp) -> None:
    try:
        blob = exp.serialize()
    except Exception:  # not serializable here (e.g. flatbuffers missing): the next process traces again
        return
    d = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:  # a read-only or full cache is no reason to fail
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _init_lapack() -> None:
    """Load jaxlib's LAPACK kernels, as lowering a linalg op would.

    A deserialized module calls them without lowering anything, and jaxlib leaves their function
    pointers null until that first lowering: the call segfaults (jax-ml/jax#29610, still in 0.9.2).
    """
    try:
        from jaxlib import lapack

        lapack.prepare_lapack_call("potrf_ffi", np.float64)
    except Exception:  # another jaxlib layout: the lowering of exp.call below is then the only hope
        pass


def compile_cached(fn, args, *, in_shardings, out_shardings, donate_argnums=(), key: str | None = None):
    """Compile ``fn`` for ``args``; returns (compiled, seconds, of which trace+lower, source).

    ``source`` is ``"in-process"`` when this process already compiled ``key``, ``"exported"`` when
    the trace came from the disk cache, ``"traced"`` when it was traced here (and stored, given a
    ``key`` and a writable cache), ``"plain"`` without a key.
    """
    t = _time.perf_counter()
    if key is not None and key in _IN_PROCESS:
        _IN_PROCESS.move_to_end(key)
        return _IN_PROCESS[key], 0.0, 0.0, "in-process"
    jit = functools.partial(jax.jit, in_shardings=in_shardings, out_shardings=out_shardings,
                            donate_argnums=donate_argnums)
    d = export_dir()
    path = os.path.join(d, key + _SUFFIX) if (key and d) else None
    exp = _load(path) if path else None
    source = "exported"
    if exp is None and path:
        try:
            exp = jax.export.export(jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings))(*args)
        except Exception:  # a primitive jax.export cannot serialize: compile the plain way
            exp = None
        else:
            _store(path, exp)
            source = "traced"
    if exp is None:
        lowered = jit(fn).lower(*args)
        source = "plain"
    else:
        _init_lapack()
        # Compile through exp.call in both processes, so the module (and the XLA cache key) is the same.
        lowered = jit(exp.call).lower(*args)
    t_lower = _time.perf_counter() - t
    compiled = lowered.compile()
    if key is not None:
        _IN_PROCESS[key] = compiled
        while len(_IN_PROCESS) > _IN_PROCESS_MAX:
            _IN_PROCESS.popitem(last=False)
    return compiled, _time.perf_counter() - t, t_lower, source
