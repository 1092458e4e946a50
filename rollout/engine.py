"""The batched rollout engine: many worlds, many steps, any of our integrators, streamed to HDF5.

One compiled function advances the whole batch by one *chunk* of steps: an outer ``lax.scan`` over
the samples of the chunk, an inner ``lax.scan`` over the ``record_every`` steps between samples and a
``vmap`` over worlds inside, so device memory is one chunk of samples whatever ``steps`` is. The host
loop calls it once per chunk and hands the samples to the HDF5 writer thread, which writes chunk k
while chunk k+1 computes. The batch is sharded over devices with ``jax.sharding`` (padded to a
multiple of the device count; pad worlds are dropped).

Every step knows its global index k (time ``t0 + k dt``), and the last chunk masks steps beyond
``steps``, so results do not depend on the chunk size, the device count or on resuming; stochastic
integrators draw ``prng.step_key(seed, world, k)`` with global world and step indices.

A world whose step produces a non-finite state (status 1) or whose adaptive step size underflows
(status 2) is frozen at its last good state; ``status_step`` is the global index of that step.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
import math
import os
import time as _time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.adapters import MjScene
from mjharness.integrators import StateLayout
from mjharness.integrators.prng import step_key
from mjharness.scenes import load_scene, scene_info

from . import aot, h5

__all__ = ["rollout", "RolloutResult", "RolloutError", "resolve_scene", "resolve_integrator", "initial_states"]

STATUS_OK, STATUS_NONFINITE, STATUS_UNDERFLOW = 0, 1, 2
STATUS_NAMES = {0: "ok", 1: "non-finite state", 2: "step-size underflow", 3: "max steps"}
try:  # adaptive integrators define the codes they return (0 ok, 2 underflow, 3 max steps, ...)
    from mjharness.integrators import STATUS_NAMES as _INTEG_STATUS

    STATUS_NAMES = {**STATUS_NAMES, **{k: v for k, v in _INTEG_STATUS.items() if k not in (0, 1)}}
except ImportError:  # pragma: no cover
    pass
DEFAULT_CHUNK_SAMPLES = 100   # samples per chunk when ``chunk`` is not given ...
DEFAULT_CHUNK_STEPS = 1000    # ... but at least this many steps


class RolloutError(ValueError):
    """Bad rollout input (raised before anything is compiled or written); names the offending value."""


# -- results --------------------------------------------------------------------------------------

class RolloutResult:
    """Outcome of ``rollout``: time-major arrays like the file.

    ``.time`` (T,), ``.x`` (T, B, n), ``.qpos`` (T, B, nq), ``.qvel`` (T, B, nv), ``.state(name)``,
    ``.status`` (B,) (0 ok, 1 non-finite, 2 step-size underflow), ``.status_step`` (B,) (-1 when ok),
    ``.x0`` (B, n), ``.layout``, ``.path`` (the HDF5 file or None), ``.stats`` (wall_s, compile_s,
    steps_per_s, world_steps_per_s, worlds_ok, worlds_failed, file_bytes). With ``keep=False`` the
    trajectory is not held in memory: ``.x`` reads it from the file on access.
    """

    def __init__(self, *, time, x, status, status_step, x0, layout, qpos_segment, qvel_segment, path, stats):
        self.time = time
        self._x = x
        self.status = status
        self.status_step = status_step
        self.x0 = x0
        self.layout = layout
        self.qpos_segment = qpos_segment
        self.qvel_segment = qvel_segment
        self.path = path
        self.stats = stats

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            with h5.open_rollout(self.path) as f:
                return f.x
        return self._x

    def _seg(self, seg, what):
        if seg is None:
            raise AttributeError(f"this rollout's model has no {what} segment (not a MuJoCo scene)")
        return self.x[..., seg]

    @property
    def qpos(self) -> np.ndarray:
        return self._seg(self.qpos_segment, "qpos")

    @property
    def qvel(self) -> np.ndarray:
        return self._seg(self.qvel_segment, "qvel")

    def state(self, name: str) -> np.ndarray:
        return self.layout.get(self.x, name)

    @property
    def ok(self) -> np.ndarray:
        return self.status == STATUS_OK

    def __repr__(self):
        T = len(self.time)
        B = len(self.status)
        return (f"RolloutResult(samples={T}, batch={B}, n={self.layout.size}, ok={int(self.ok.sum())}/{B}, "
                f"path={self.path!r})")


# -- resolving inputs -------------------------------------------------------------------------------

def resolve_scene(scene, *, mjx: str = "adapt", quaternion_update: str = "quaternion"):
    """An ``MjScene`` (or any model with ``.layout`` and ``.dynamics``) from a scene, MjModel, path or name."""
    if hasattr(scene, "layout") and hasattr(scene, "dynamics"):
        return scene
    if not isinstance(scene, mujoco.MjModel):
        scene = load_scene(scene, mjx=mjx)
    return MjScene(scene, quaternion_update=quaternion_update)


def _registry():
    try:
        from mjharness import integrators as mod
    except ImportError:  # pragma: no cover
        return None, {}
    return getattr(mod, "get_integrator", None), dict(getattr(mod, "INTEGRATORS", {}) or {})


def integrator_names() -> list[str]:
    return sorted(_registry()[1])


def resolve_integrator(integ):
    """An integrator object from an object or a registered name (``mjharness.integrators.INTEGRATORS``)."""
    if isinstance(integ, str):
        get, table = _registry()
        known = ", ".join(sorted(table)) or "none registered yet"
        if get is None:
            if integ in table:
                integ = table[integ]
            else:
                raise RolloutError(f"unknown integrator {integ!r}; known: {known}")
        else:
            try:
                integ = get(integ)
            except (KeyError, ValueError, LookupError) as e:
                raise RolloutError(f"unknown integrator {integ!r}; known: {known}") from e
        if inspect.isclass(integ):
            integ = integ()
    if inspect.isclass(integ):
        integ = integ()
    kind = integrator_kind(integ)
    if kind is None:
        raise RolloutError(f"{integ!r} is not an integrator: it needs step(scene, t, x, h, ...) or, when "
                           f"is_adaptive, advance(scene, t, x, t_end, ...)")
    return integ


def integrator_kind(integ) -> str | None:
    if getattr(integ, "is_adaptive", False) and callable(getattr(integ, "advance", None)):
        return "adaptive"
    if not callable(getattr(integ, "step", None)):
        return None
    return "stochastic" if getattr(integ, "is_stochastic", False) else "fixed"


def integrator_config(integ) -> dict:
    cfg = getattr(integ, "config", None)
    if callable(cfg):
        out = cfg()
        if isinstance(out, dict):
            return json.loads(json.dumps(out, default=str))
    return {"name": type(integ).__name__, "repr": repr(integ)}


def initial_states(scene, batch: int, seed: int = 0, perturb: float = 0.0) -> np.ndarray:
    """(batch, n) copies of the scene's default state, world i perturbed by ``perturb`` * N(0, 1).

    World i draws from its own generator seeded with (seed, i), so it is the same world whatever the
    batch size. Quaternion states are renormalised after the perturbation.
    """
    layout = scene.layout
    base = np.asarray(scene.x0() if hasattr(scene, "x0") else layout.default_values(), dtype=np.float64)
    x = np.broadcast_to(base, (batch, layout.size)).copy()
    if perturb:
        for i in range(batch):
            x[i] += perturb * np.random.default_rng([seed, i]).standard_normal(layout.size)
        for r in layout.special:
            q = x[:, r.value_slice]
            x[:, r.value_slice] = q / np.linalg.norm(q, axis=1, keepdims=True)
    return x


def _field(m, path: str):
    obj = m
    for part in path.split("."):
        if not hasattr(obj, part):
            raise RolloutError(f"model_params: the MJX model has no field {path!r} (at {part!r})")
        obj = getattr(obj, part)
    return obj


def _check_model_params(scene, params, B: int) -> dict:
    if not params:
        return {}
    if not (hasattr(scene, "mjx_model") and hasattr(scene, "with_model")):
        raise RolloutError("model_params needs an MjScene (a model with .mjx_model and .with_model)")
    out = {}
    for name, v in params.items():
        ref = _field(scene.mjx_model, name)
        ref_shape = tuple(np.shape(ref))
        v = np.asarray(v)
        if v.shape != (B,) + ref_shape:
            raise RolloutError(f"model_params[{name!r}] must have shape {(B,) + ref_shape} (batch {B} x the field's "
                               f"shape {ref_shape}), got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise RolloutError(f"model_params[{name!r}] holds non-finite values")
        out[name] = v.astype(np.asarray(ref).dtype)
    return out


def _nu(scene) -> int:
    return int(getattr(scene, "nu", 0))


def _check_ctrl(scene, ctrl, B: int, steps: int, n: int):
    """(mode, array or None, callable or None)."""
    if ctrl is None:
        return "none", None, None
    nu = _nu(scene)
    if callable(ctrl):
        if nu == 0:
            raise RolloutError("ctrl is a callable but the scene has no actuators (nu=0)")
        try:
            out = jax.eval_shape(ctrl, jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((n,), jnp.float64))
        except Exception as e:
            raise RolloutError(f"ctrl(t, x) could not be traced with t () and x ({n},): {e}") from e
        if tuple(out.shape) != (nu,):
            raise RolloutError(f"ctrl(t, x) must return shape ({nu},) (nu={nu}), returned {tuple(out.shape)}")
        return "callable", None, ctrl
    arr = np.asarray(ctrl, dtype=np.float64)
    if nu == 0:
        raise RolloutError(f"ctrl array of shape {arr.shape} given, but the scene has no actuators (nu=0)")
    if arr.shape != (B, steps, nu):
        raise RolloutError(f"ctrl array must have shape (batch, steps, nu) = {(B, steps, nu)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise RolloutError("ctrl array holds non-finite values")
    return "array", arr, None


def _check_out(out, overwrite: bool):
    if out is None:
        return None
    path = os.path.abspath(os.fspath(out))
    d = os.path.dirname(path)
    if os.path.isdir(path):
        raise RolloutError(f"out={out!r} is a directory, not a file path")
    if not os.path.isdir(d):
        what = "is not a directory" if os.path.exists(d) else "does not exist"
        raise RolloutError(f"out={out!r}: directory {d!r} {what}")
    if os.path.exists(path):
        if not overwrite:
            raise RolloutError(f"out={out!r} exists; pass overwrite=True (CLI: --overwrite) to replace it, "
                               f"or resume={out!r} to continue it")
        if not os.access(path, os.W_OK):
            raise RolloutError(f"out={out!r} exists and is not writable")
    elif not os.access(d, os.W_OK):
        raise RolloutError(f"out={out!r}: directory {d!r} is not writable")
    return path


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise RolloutError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def _devices(devices):
    if devices is None:
        return tuple(jax.devices())
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        avail = jax.devices()
        if not 1 <= devices <= len(avail):
            raise RolloutError(f"devices={devices}: {len(avail)} device(s) available")
        return tuple(avail[:devices])
    devices = tuple(devices)
    if not devices:
        raise RolloutError("devices is empty")
    return devices


# -- the compiled chunk function ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Static:
    """What a compiled chunk function depends on besides array shapes."""

    integ: object
    kind: str
    ctrl_mode: str
    ctrl_fn: object
    params: tuple            # ((field, shape), ...) batched model fields
    samples: int             # per chunk
    record_every: int
    batch: int               # padded batch
    n: int
    nu: int
    devices: tuple


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _chunk_fn(scene, st: _Static):
    """Python function: one chunk for the whole batch (traced once per ``_Static``)."""
    integ, kind, mode, ctrl_fn = st.integ, st.kind, st.ctrl_mode, st.ctrl_fn
    names = [p for p, _ in st.params]

    def world(x, status, status_step, k, t0, dt, steps, seed, wid, u, params):
        sc = scene.with_model(scene.mjx_model.tree_replace(dict(zip(names, params)))) if names else scene
        t = t0 + k * dt
        if mode == "callable":
            u = ctrl_fn(t, x)
        elif mode == "none":
            u = None
        if kind == "fixed":
            xn, code = integ.step(sc, t, x, dt, ctrl=u), jnp.int8(0)
        elif kind == "stochastic":
            xn, code = integ.step(sc, t, x, dt, step_key(seed, wid, k), ctrl=u), jnp.int8(0)
        else:
            xn, code = integ.advance(sc, t, x, t + dt, ctrl=u)
        xn = jnp.asarray(xn, x.dtype)
        code = jnp.asarray(code).astype(jnp.int8)
        code = jnp.where(code != 0, code, jnp.where(jnp.all(jnp.isfinite(xn)), 0, STATUS_NONFINITE).astype(jnp.int8))
        live = (k < steps) & (status == 0)
        fail = live & (code != 0)
        x = jnp.where(live & (code == 0), xn, x)
        return x, jnp.where(fail, code, status), jnp.where(fail, k, status_step)

    batched = jax.vmap(world, in_axes=(0, 0, 0, None, None, None, None, None, 0,
                                       0 if mode == "array" else None, 0))

    def chunk(x, status, status_step, k0, t0, dt, steps, seed, wids, us, params):
        ks = k0 + jnp.arange(st.samples * st.record_every, dtype=jnp.int64).reshape(st.samples, st.record_every)
        if mode == "array":
            us = us.reshape((st.samples, st.record_every) + us.shape[1:])
        else:
            us = jnp.zeros((st.samples, st.record_every))

        def inner(carry, inp):
            k, u = inp
            return batched(*carry, k, t0, dt, steps, seed, wids, u, params), None

        def outer(carry, inp):
            carry, _ = jax.lax.scan(inner, carry, inp)
            return carry, carry[0]

        (x, status, status_step), xs = jax.lax.scan(outer, (x, status, status_step), (ks, us))
        return x, status, status_step, xs

    return chunk


def _shardings(st: _Static):
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(st.devices), ("batch",))
    b0, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
    b1 = NamedSharding(mesh, P(None, "batch"))
    params = tuple(b0 for _ in st.params)
    ins = (b0, b0, b0, rep, rep, rep, rep, rep, b0, b1 if st.ctrl_mode == "array" else rep, params)
    outs = (b0, b0, b0, b1)
    return ins, outs


def _compiled(scene, st: _Static, args):
    """(compiled chunk function for ``st``, compile seconds, of which trace+lower, trace source).

    Cached per scene object in this process, and on disk across processes (``aot``: the traced
    function; JAX's persistent cache: the XLA executable). The carry (x, status, status_step) is
    donated: each chunk's output carry reuses the input's buffers.
    """
    try:
        per_scene = _CACHE.setdefault(scene, {})
        hash(st)
    except TypeError:  # an unhashable integrator or ctrl: compile without caching
        per_scene = None
    if per_scene is not None and st in per_scene:
        return per_scene[st], 0.0, 0.0, "in-process"
    ins, outs = _shardings(st)
    key = None
    if st.ctrl_mode != "callable":  # a ctrl callable's code cannot be keyed
        key = aot.chunk_key(scene, st.integ, (st.kind, st.ctrl_mode, st.params, st.samples, st.record_every,
                                              st.batch, st.n, st.nu), args)
    compiled, dt, t_lower, source = aot.compile_cached(_chunk_fn(scene, st), args, in_shardings=ins,
                                                       out_shardings=outs, donate_argnums=(0, 1, 2), key=key)
    if per_scene is not None:
        per_scene[st] = compiled
    return compiled, dt, t_lower, source


# -- the public entry point ------------------------------------------------------------------------------

@dataclass
class _Plan:
    scene: object
    integ: object
    kind: str
    dt: float
    steps: int
    record_every: int
    samples: int            # T
    chunk: int              # steps per chunk (a multiple of record_every)
    x0: np.ndarray
    seed: int
    ctrl_mode: str
    ctrl: np.ndarray | None
    ctrl_fn: object
    params: dict
    devices: tuple
    out: str | None
    t0: float
    start_step: int = 0
    attrs: dict = field(default_factory=dict)


@functools.cache
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _ctrl_attr(mode, arr, fn) -> str:
    if mode == "array":
        return "array sha256:" + __import__("hashlib").sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
    if mode == "callable":
        return f"callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return "none"


def _scene_xml(scene) -> tuple[str, list]:
    model = getattr(scene, "model", None)
    if isinstance(model, mujoco.MjModel):
        info = scene_info(model)
        return info.xml, list(info.compat_log)
    return "", []


def rollout(scene, integrator, *, dt: float, steps: int, batch: int | None = None, x0=None, ctrl=None,
            seed: int = 0, record_every: int = 1, out=None, progress: bool = True, chunk: int | None = None,
            overwrite: bool = False, resume=None, model_params: dict | None = None, compression=None,
            perturb: float = 0.01, devices=None, watchdog_s: float | None = None, keep: bool = True,
            t0: float = 0.0, mjx: str = "adapt", quaternion_update: str = "quaternion") -> RolloutResult:
    """Roll ``scene`` out for ``batch`` worlds and ``steps`` steps of ``dt`` with ``integrator``.

    scene: an ``MjScene`` (or any model with ``.layout``/``.dynamics``), an ``MjModel``, a path, an
        XML string or a bundled name (loaded with ``mjx`` mode and ``quaternion_update``).
    integrator: an integrator object or a registered name. Adaptive integrators take ``dt`` as the
        output interval; stochastic ones draw ``step_key(seed, world, step)``.
    batch / x0: ``batch`` perturbed copies of the default state (``perturb`` * N(0,1), seeded per
        world by (seed, i)), or explicit initial states ``x0`` (B, n) (or (n,) with ``batch``).
    ctrl: None, an array (B, steps, nu) (one control per step) or a jit-able ``ctrl(t, x) -> (nu,)``.
    model_params: per-world MJX model fields, e.g. ``{"opt.gravity": (B, 3), "body_mass": (B, nbody)}``.
    record_every: keep every k-th state; T = steps // record_every samples, at t0 + (j+1) k dt.
    chunk: steps per compiled call (rounded up to a multiple of record_every); device memory holds one
        chunk of samples. Default: max(1000 steps, 100 samples).
    out: HDF5 path streamed while the run goes (refuses an existing file unless ``overwrite``).
    resume: path of a partial (or complete) rollout file to continue to ``steps``; the scene,
        integrator, dt, record_every, batch and seed must match the file (x0 and model_params come
        from the file). Results equal an uninterrupted run.
    devices: None (all), a count, or a device list; the batch is sharded over them.
    keep: hold the trajectory in memory (default); ``keep=False`` with ``out`` reads it from the file.
    watchdog_s: per-chunk stall limit (``rollout.watchdog``); None = env/default, 0 = off.
    """
    plan = _plan(scene, integrator, dt=dt, steps=steps, batch=batch, x0=x0, ctrl=ctrl, seed=seed,
                 record_every=record_every, out=out, chunk=chunk, overwrite=overwrite, resume=resume,
                 model_params=model_params, devices=devices, keep=keep, t0=t0, mjx=mjx,
                 quaternion_update=quaternion_update, perturb=perturb)
    return _run(plan, progress=progress, compression=compression, watchdog_s=watchdog_s, keep=keep,
                resume=resume is not None, overwrite=overwrite)


def _plan(scene, integrator, *, dt, steps, batch, x0, ctrl, seed, record_every, out, chunk, overwrite, resume,
          model_params, devices, keep, t0, mjx, quaternion_update, perturb) -> _Plan:
    # Everything a user can get wrong is checked here, before any compile or file write.
    integ = resolve_integrator(integrator)
    kind = integrator_kind(integ)
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise RolloutError(f"dt must be a number > 0, got {dt!r}") from None
    if not (math.isfinite(dt) and dt > 0):
        raise RolloutError(f"dt must be a finite number > 0, got {dt!r}")
    steps = _check_int("steps", steps, 1)
    record_every = _check_int("record_every", record_every, 1)
    if record_every > steps:
        raise RolloutError(f"record_every={record_every} > steps={steps}: nothing would be recorded")
    seed = _check_int("seed", seed, 0)
    if not (isinstance(perturb, (int, float)) and math.isfinite(perturb) and perturb >= 0):
        raise RolloutError(f"perturb must be a finite number >= 0, got {perturb!r}")
    if chunk is None:
        chunk = max(DEFAULT_CHUNK_STEPS, DEFAULT_CHUNK_SAMPLES * record_every)
    chunk = _check_int("chunk", chunk, 1)
    chunk = -(-chunk // record_every) * record_every  # whole samples per chunk
    chunk = min(chunk, -(-steps // record_every) * record_every)
    if not keep and out is None and resume is None:
        raise RolloutError("keep=False needs out= (the trajectory would be kept nowhere)")
    if resume is not None:
        if out is not None and os.path.abspath(os.fspath(out)) != os.path.abspath(os.fspath(resume)):
            raise RolloutError(f"resume={resume!r} continues that file; out={out!r} must be None or the same path")
        path = os.path.abspath(os.fspath(resume))
        if not os.path.isfile(path):
            raise RolloutError(f"resume={resume!r}: no such file")
        if not os.access(path, os.W_OK):
            raise RolloutError(f"resume={resume!r}: file is not writable")
        out = path
    else:
        out = _check_out(out, overwrite)
    scene = resolve_scene(scene, mjx=mjx, quaternion_update=quaternion_update)
    layout: StateLayout = scene.layout
    n = layout.size
    devs = _devices(devices)

    if resume is not None:
        with h5.open_rollout(out) as f:
            x0_file, params_file = f.x0, f.model_params
        if x0 is not None or model_params:
            raise RolloutError("resume takes x0 and model_params from the file; do not pass them")
        x0, model_params = x0_file, params_file
        if batch is not None and batch != x0.shape[0]:
            raise RolloutError(f"resume={resume!r}: the file has batch {x0.shape[0]}, batch={batch} was asked")
        batch = None
    if x0 is not None:
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.ndim == 1 and batch is not None:
            x0 = np.broadcast_to(x0, (_check_int("batch", batch, 1), x0.size)).copy()
        if x0.ndim != 2 or x0.shape[1] != n:
            raise RolloutError(f"x0 must have shape (batch, n) with n={n} (the layout size), got {x0.shape}")
        if batch is not None and batch != x0.shape[0]:
            raise RolloutError(f"batch={batch} but x0 has {x0.shape[0]} rows (shape {x0.shape})")
        if x0.shape[0] < 1:
            raise RolloutError(f"x0 has no rows (shape {x0.shape})")
        if not np.all(np.isfinite(x0)):
            bad = sorted({layout.names[i] for i in range(len(layout)) if not np.all(
                np.isfinite(x0[:, layout.records[i].value_slice]))})
            raise RolloutError(f"x0 holds non-finite values in state(s) {bad}")
    else:
        x0 = initial_states(scene, _check_int("batch", 1 if batch is None else batch, 1), seed, perturb)
    B = x0.shape[0]
    ctrl_mode, ctrl_arr, ctrl_fn = _check_ctrl(scene, ctrl, B, steps, n)
    params = _check_model_params(scene, model_params, B)
    xml, compat = _scene_xml(scene)
    attrs = dict(
        format=h5.FORMAT, format_version=h5.FORMAT_VERSION, mujoco_version=mujoco.__version__,
        mjx_version=_version("mujoco-mjx"), jax_version=jax.__version__, mjharness_version=_version("mjharness"),
        model_sha256=h5.model_sha256(xml), integrator=json.dumps(integrator_config(integ)), dt=dt,
        record_every=record_every, steps=steps, batch=B, seed=seed,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), t0=float(t0), chunk=chunk,
        perturb=float(perturb), ctrl=_ctrl_attr(ctrl_mode, ctrl_arr, ctrl_fn), scene=scene_info(scene.model).source
        if isinstance(getattr(scene, "model", None), mujoco.MjModel) else type(scene).__name__,
        quaternion_update=str(getattr(scene, "quaternion_update", "")), x64=bool(jax.config.jax_enable_x64))
    plan = _Plan(scene=scene, integ=integ, kind=kind, dt=dt, steps=steps, record_every=record_every,
                 samples=steps // record_every, chunk=chunk, x0=x0, seed=seed, ctrl_mode=ctrl_mode, ctrl=ctrl_arr,
                 ctrl_fn=ctrl_fn, params=params, devices=devs, out=out, t0=float(t0), attrs=attrs)
    if resume is not None:
        _check_resume(plan, xml)
    return plan


_RESUME_MUST_MATCH = ("model_sha256", "integrator", "dt", "record_every", "batch", "seed", "t0", "ctrl",
                      "quaternion_update", "x64")


def _check_resume(plan: _Plan, xml: str) -> None:
    with h5.open_rollout(plan.out) as f:
        a = {k: h5._decode(v) for k, v in f.h5.attrs.items()}
        samples = f.samples
        n_file = f.h5["x"].shape[2]
    want = dict(plan.attrs)
    bad = []
    for k in _RESUME_MUST_MATCH:
        if k == "ctrl" and want["ctrl"].startswith("callable") and str(a.get(k, "")).startswith("callable"):
            continue  # a callable cannot be compared; the caller is trusted to pass the same one
        if k in a and a[k] != want[k]:
            bad.append(f"{k}: file {a[k]!r}, now {want[k]!r}")
    if n_file != plan.scene.layout.size:
        bad.append(f"state size: file {n_file}, now {plan.scene.layout.size}")
    if bad:
        raise RolloutError(f"resume={plan.out!r} does not match this run: " + "; ".join(bad))
    plan.start_step = samples * plan.record_every
    plan.attrs["created"] = a.get("created", plan.attrs["created"])
    plan.attrs["steps"] = max(plan.steps, int(a["steps"]))
    if plan.steps < int(a["steps"]) and samples * plan.record_every > plan.steps:
        raise RolloutError(f"resume={plan.out!r} already holds {samples} samples, more than steps={plan.steps} asks")


def _pad(a, Bp, axis=0):
    B = a.shape[axis]
    if B == Bp:
        return a
    idx = np.concatenate([np.arange(B), np.full(Bp - B, B - 1)])
    return np.take(a, idx, axis=axis)


def _run(plan: _Plan, *, progress, compression, watchdog_s, keep, resume, overwrite) -> RolloutResult:
    scene, layout = plan.scene, plan.scene.layout
    B, n = plan.x0.shape
    T, R = plan.samples, plan.record_every
    S = plan.chunk // R
    ndev = len(plan.devices)
    Bp = -(-B // ndev) * ndev
    st = _Static(integ=plan.integ, kind=plan.kind, ctrl_mode=plan.ctrl_mode, ctrl_fn=plan.ctrl_fn,
                 params=tuple((k, v.shape[1:]) for k, v in plan.params.items()), samples=S, record_every=R,
                 batch=Bp, n=n, nu=_nu(scene), devices=plan.devices)
    ins, _ = _shardings(st)
    k_start = plan.start_step
    j_start = k_start // R

    # Initial carry: x0, or the last flushed sample and statuses of the file being resumed.
    status = np.zeros(B, np.int8)
    status_step = np.full(B, -1, np.int64)
    x = plan.x0
    if resume and j_start > 0:
        with h5.open_rollout(plan.out) as f:
            x = f.h5["x"][j_start - 1]
            status, status_step = f.status.astype(np.int8), f.status_step.astype(np.int64)
        # A world that failed after the resumed sample (in unrecorded trailing steps) runs again.
        again = status_step >= k_start
        status[again], status_step[again] = 0, -1
    wids = np.arange(Bp, dtype=np.int64)
    wids[B:] = B - 1
    params = tuple(jax.device_put(_pad(v, Bp), ins[10][i]) for i, v in enumerate(plan.params.values()))

    def ctrl_chunk(k):
        if plan.ctrl_mode != "array":
            return jax.device_put(np.zeros((), np.float64), ins[9])
        u = plan.ctrl[:, k:k + plan.chunk]
        if u.shape[1] < plan.chunk:  # masked steps past the end: any finite value
            u = np.concatenate([u, np.zeros((B, plan.chunk - u.shape[1], u.shape[2]))], axis=1)
        return jax.device_put(np.ascontiguousarray(_pad(u, Bp).transpose(1, 0, 2)), ins[9])

    consts = (jax.device_put(np.float64(plan.t0), ins[4]), jax.device_put(np.float64(plan.dt), ins[5]),
              jax.device_put(np.int64(plan.steps), ins[6]), jax.device_put(np.int64(plan.seed), ins[7]))

    def scalars(k):
        return (jax.device_put(np.int64(k), ins[3]),) + consts

    # Copies: the carry is donated to the chunk function, and must not alias plan.x0 or a file's data.
    carry = (jax.device_put(_pad(np.array(x, np.float64), Bp), ins[0]),
             jax.device_put(_pad(np.array(status, np.int8), Bp), ins[1]),
             jax.device_put(_pad(np.array(status_step, np.int64), Bp), ins[2]))
    wids_d = jax.device_put(wids, ins[8])
    first_args = carry + scalars(k_start) + (wids_d, ctrl_chunk(k_start), params)
    t_wall = _time.perf_counter()
    compiled, compile_s, trace_s, trace_source = _compiled(scene, st, first_args)

    # Only now (inputs checked, function compiled) does anything touch the disk.
    writer = None
    if plan.out is not None:
        if resume:
            h5.extend_rollout_file(plan.out, T, {"steps": plan.attrs["steps"]})
        else:
            h5.create_rollout_file(plan.out, h5.FileSpec(
                attrs=plan.attrs, mjcf=_scene_xml(scene)[0], compat_log=_scene_xml(scene)[1],
                layout=h5.layout_table(layout, getattr(scene, "joint_of", None)), x0=plan.x0,
                model_params=plan.params, samples=T, qpos=getattr(scene, "qpos_segment", None),
                qvel=getattr(scene, "qvel_segment", None), time_chunk=S, compression=compression))
        writer = h5.RolloutWriter(plan.out)

    xs_mem = None
    if keep:
        xs_mem = np.empty((T, B, n))
        if resume and j_start > 0:
            with h5.open_rollout(plan.out) as f:
                xs_mem[:j_start] = f.h5["x"][:j_start]
    guard = _watchdog(watchdog_s, scene, B)
    bar = _progress(progress, plan.steps, k_start)
    t_run = _time.perf_counter()
    done = False
    st_h, sst_h = status, status_step  # a resumed run that is already complete runs no chunk
    try:
        k = k_start
        while k < plan.steps:
            args = carry + scalars(k) + (wids_d, ctrl_chunk(k), params)
            outs = guard(compiled, *args, step=k) if guard is not None else jax.block_until_ready(compiled(*args))
            carry = outs[:3]
            j0 = k // R
            nvalid = max(0, min(S, T - j0))
            xs, st_h, sst_h = jax.device_get((outs[3], carry[1], carry[2]))  # one transfer per chunk
            xs, st_h, sst_h = xs[:nvalid, :B], st_h[:B], sst_h[:B]
            times = plan.t0 + (np.arange(j0, j0 + nvalid) + 1) * R * plan.dt
            if xs_mem is not None:
                xs_mem[j0:j0 + nvalid] = xs
            if writer is not None and nvalid:
                writer.put(j0, times, xs, st_h, sst_h)
            k_next = min(k + plan.chunk, plan.steps)
            if bar is not None:
                bar.update(k_next - k)
                bar.set_postfix_str(f"{int((st_h != 0).sum())} failed", refresh=False)
            k = k_next
        status, status_step = np.array(st_h), np.array(sst_h)
        done = True
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close(complete=done)
    run_s = _time.perf_counter() - t_run
    steps_run = plan.steps - k_start
    stats = dict(wall_s=_time.perf_counter() - t_wall, compile_s=compile_s, trace_s=trace_s, run_s=run_s,
                 trace_cache=trace_source,
                 steps=steps_run,
                 steps_per_s=steps_run / run_s if run_s > 0 else float("inf"),
                 world_steps_per_s=steps_run * B / run_s if run_s > 0 else float("inf"),
                 worlds_ok=int((status == 0).sum()), worlds_failed=int((status != 0).sum()),
                 file_bytes=os.path.getsize(plan.out) if plan.out else 0, devices=ndev, chunk=plan.chunk)
    return RolloutResult(time=plan.t0 + (np.arange(T) + 1) * R * plan.dt, x=xs_mem, status=status,
                         status_step=status_step, x0=plan.x0, layout=layout,
                         qpos_segment=getattr(scene, "qpos_segment", None),
                         qvel_segment=getattr(scene, "qvel_segment", None), path=plan.out, stats=stats)


def _watchdog(watchdog_s, scene, B):
    try:
        from .watchdog import Watchdog, watchdog_timeout
    except ImportError:  # pragma: no cover - the guard is optional
        return None
    if watchdog_timeout(watchdog_s) == 0:
        return None
    name = getattr(scene, "name", type(scene).__name__)
    return Watchdog(watchdog_s, scene=name, batch=B)


def _progress(progress, total, initial):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="step", desc="rollout", dynamic_ncols=True)
