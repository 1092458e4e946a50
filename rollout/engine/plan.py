"""Everything a user can get wrong about a rollout, checked before anything is compiled or written.

``make_plan`` turns ``rollout``'s arguments into a ``Plan``: the scene and integrator resolved (the
scene's own integrator and timestep by default), the initial states, controls and per-world model
parameters checked against the layout, the output path checked, and the file attributes prepared.
A resumed run takes x0, model parameters and carry from its file and must match it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.adapters import MjScene
from mjharness.adapters.backends import AUTO, check_name, get_backend, requested
from mjharness.adapters.backends import choose as choose_backend
from mjharness.adapters.outputs import has_callables
from mjharness.integrators import ContractError, Model, StateLayout, check_pair, resolve_integrator
from mjharness.integrators.contracts import accepts_carry, integrator_carry_spec, scene_carry_spec
from mjharness.scenes import scene_info

from .. import h5
from ..errors import RolloutError
from . import episodes as _ep
from . import memory as _memory
from .episodes import Controller, EpisodePlan
from .params import field_value, has_field
from .randomize import randomized_params
from .scene_view import BackendBound, Forward, PerWorldModel, SceneView
from .spec import RunSpec, check_int, check_spec

DEFAULT_CHUNK_SAMPLES = 100   # samples per chunk when ``chunk`` is not given ...
DEFAULT_CHUNK_STEPS = 1000    # ... but at least this many steps


@dataclass(frozen=True)
class Plan:
    """A resolved run: what ``engine.run.execute`` carries out (built by ``make_plan``, never edited)."""

    scene: object
    integ: object
    kind: str
    dt: float
    steps: int
    record_every: int
    samples: int            # T
    chunk: int              # steps per chunk (a multiple of record_every)
    x0: np.ndarray
    carry0: dict            # name -> (B, *shape) initial carry (cold, or the resumed file's)
    carry_spec: tuple       # ((name, shape), ...) scene's entries first, then the integrator's
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
    world_offset: int = 0    # global index of world 0 (a process's shard of a multi-process run)
    outputs: tuple = ()      # adapters.outputs.OutputSpec rows (recorded outputs)
    output_semantics: str = "live"
    view: SceneView | None = None   # the scene's features the engine reads (scene_view.py)
    episodes: EpisodePlan | None = None  # a controller with state / a termination rule (episodes.py)
    reset: tuple = ()       # (x (B, n) an episode restarts from, cold carry {name: (B, *shape)}) when resetting
    resume: h5.ResumeInfo | None = None  # the file a resumed run continues, read once (h5/resume.py)


# -- resolving the scene and the integrator ------------------------------------------------------

def resolve_scene(scene, *, mjx: str = "adapt", quaternion_update: str = "quaternion", backend: str = AUTO,
                  needs: dict | None = None, unsupported_contacts: str = "refuse", need_sensors: bool = False):
    """An ``MjScene`` (or any model with ``.layout`` and ``.dynamics``) from a scene, MjModel, path or name,
    on the backend ``choose_backend`` picks; see ``resolve_run_scene``."""
    return resolve_run_scene(scene, mjx=mjx, quaternion_update=quaternion_update, backend=backend, needs=needs,
                             unsupported_contacts=unsupported_contacts, need_sensors=need_sensors)[0]


def resolve_run_scene(scene, *, mjx="adapt", quaternion_update="quaternion", backend=AUTO, needs=None,
                      unsupported_contacts="refuse", need_sensors=False) -> tuple[object, str]:
    """(scene, why this backend). ``backend``: a name of ``adapters.backends.BACKEND_NAMES``; ``"auto"``
    defers to the scene's own choice, else MJX on an accelerator and MuJoCo C on CPU unless ``needs``
    ({capability: what asks}) names one only MJX has. An explicit backend lacking a need is refused here."""
    check_name(backend)
    needs = dict(needs or {})
    if isinstance(scene, Model):
        if not isinstance(scene, BackendBound):  # a System or a user's JAX model: it evaluates itself
            return scene, "the model's own dynamics (JAX)"
        asked = requested((scene.requested_backend, "the MjScene"), (backend, "the run"))
        name, why = choose_backend(asked, {**scene.needs(), **needs})
        return scene.on_backend(name), (scene.backend_note or why)
    if isinstance(scene, (str, os.PathLike)) and str(scene).endswith((".toml", ".json")):
        from mjharness.adapters.system import system_from_spec  # a System spec file (adapters/system.py)

        return system_from_spec(scene), "the system's members (JAX)"
    name, why = choose_backend(backend, needs)
    model = get_backend(name).load(scene, mjx=mjx, unsupported_contacts=unsupported_contacts,
                                   need_sensors=need_sensors)
    return MjScene(model, quaternion_update=quaternion_update, backend=name), why


def scene_integrator(scene, integrator):
    """``integrator``, or (None) the scene's own (``MjScene.default_integrator``), as an object."""
    if integrator is None:
        try:
            own = getattr(scene, "default_integrator", None)
        except ContractError as e:
            raise RolloutError(str(e)) from None
        if own is None:
            raise RolloutError(f"integrator=None means the scene's own integrator, but {type(scene).__name__} names "
                               f"none: pass an integrator (e.g. 'rk4')")
        integrator = own
    try:
        return resolve_integrator(integrator)
    except ContractError as e:
        raise RolloutError(str(e)) from None


def scene_timestep(scene, dt) -> float:
    if dt is None:
        model = SceneView.of(scene).model
        if model is None:
            raise RolloutError(f"dt=None means the scene's timestep, but {type(scene).__name__} has no MuJoCo "
                               f"model: pass dt")
        dt = float(model.opt.timestep)
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise RolloutError(f"dt must be a number > 0, got {dt!r}") from None
    if not (math.isfinite(dt) and dt > 0):
        raise RolloutError(f"dt must be a finite number > 0, got {dt!r}")
    return dt


def integrator_config(integ) -> dict:
    cfg = getattr(integ, "config", None)
    if callable(cfg):
        out = cfg()
        if isinstance(out, dict):
            return json.loads(json.dumps(out, default=str))
    return {"name": type(integ).__name__, "repr": repr(integ)}


# -- checks of single inputs ------------------------------------------------------------------------

def initial_states(scene, batch: int, seed: int = 0, perturb: float = 0.0, perturb_qpos: float = 0.0) -> np.ndarray:
    """(batch, n) copies of the scene's default state, world i's velocities moved by ``perturb`` * N(0, 1)
    and its positions by ``perturb_qpos`` * N(0, 1) (a resting contact scene stays on its support unless
    positions are asked for). A model without ``qpos_segment``/``qvel_segment`` has every state moved
    by ``perturb``.

    World i draws from its own generator seeded with (seed, i), so it is the same world whatever the
    batch size. Quaternion states are renormalised after the perturbation.
    """
    layout, view = scene.layout, SceneView.of(scene)
    base = np.asarray(view.x0() if view.x0 else layout.default_values(), dtype=np.float64)
    x = np.broadcast_to(base, (batch, layout.size)).copy()
    scale = _perturb_scale(view, layout.size, perturb, perturb_qpos)
    if np.any(scale):
        for i in range(batch):
            x[i] += scale * np.random.default_rng([seed, i]).standard_normal(layout.size)
        for r in layout.special:
            q = x[:, r.value_slice]
            x[:, r.value_slice] = q / np.linalg.norm(q, axis=1, keepdims=True)
    return x


def _perturb_scale(view: SceneView, n: int, perturb: float, perturb_qpos: float) -> np.ndarray:
    """Per-state std-dev of the initial perturbation."""
    qpos, qvel = view.qpos_segment, view.qvel_segment
    if qpos is None or qvel is None:
        if perturb_qpos:
            raise RolloutError(f"perturb_qpos needs a scene with qpos_segment ({view.name} has none); use perturb")
        return np.full(n, float(perturb))
    scale = np.zeros(n)
    scale[qvel] = perturb
    scale[qpos] = perturb_qpos
    return scale


def _field(m, path: str):
    return field_value(m, path, "model_params")


def backend_model(scene):
    """The model whose fields per-world parameters set: the MJX model, or (MuJoCo C) the MjModel."""
    return scene.mjx_model if scene.mjx_model is not None else scene.model


def check_model_params(scene, params, B: int, *, shared: bool = False) -> dict:
    """model_params as {path: (B, *field shape) float64 array}, checked before anything compiles.

    Keys are MJX field paths of floating fields. ``shared=False`` (``rollout``): numpy values of shape
    (B, *field shape). ``shared=True`` (``simulate``): the field's shape (broadcast over worlds) or
    (B, *shape), values may be tracers (shapes and dtypes checked; concrete ones also for finiteness).
    """
    if not params:
        return {}
    owner = getattr(scene, "param_owner", None)  # a System: "<member>.<field>" (adapters/system.py)
    if owner is None and not isinstance(scene, PerWorldModel):
        raise RolloutError("model_params needs an MjScene (a model with .mjx_model and .with_model) or a System "
                           "('<member>.<field>' keys)")
    if owner is None:
        scene.backend_impl.require("per_world_params",
                                   f"model_params {sorted(params)} (MJX model fields set per world)")
    out = {}
    for name, v in params.items():
        if not isinstance(name, str):
            raise RolloutError(f"model_params keys are MJX field paths like 'body_mass' or 'opt.gravity', got {name!r}")
        member, path = scene, name
        if owner is not None:
            from mjharness.adapters.system import SystemSpecError

            try:
                _, member, path = owner(name)
            except SystemSpecError as e:
                raise RolloutError(f"model_params: {e}") from None
            member.backend_impl.require("per_world_params", f"model_params[{name!r}] (model fields set per world)")
        ref = _field(backend_model(member), path)
        dtype = ref.dtype if isinstance(ref, jax.core.Tracer) else np.asarray(ref).dtype
        if not np.issubdtype(dtype, np.floating):
            raise RolloutError(f"model_params[{name!r}]: the field is {dtype}, not a floating field; "
                               f"only floating fields can be set and differentiated")
        shape = tuple(np.shape(ref))
        concrete = not isinstance(v, jax.core.Tracer)
        v = np.asarray(v) if concrete and not shared else v
        vs = tuple(jnp.shape(v))
        if shared and vs == shape:
            v = jnp.broadcast_to(jnp.asarray(v, jnp.float64), (B,) + shape)
        elif vs != (B,) + shape:
            raise RolloutError(
                f"model_params[{name!r}] must have the field's shape {shape} (shared by all worlds) or {(B,) + shape} "
                f"(per world, batch {B}), got {vs}" if shared else
                f"model_params[{name!r}] must have shape {(B,) + shape} (batch {B} x the field's shape {shape}), "
                f"got {vs}")
        if concrete and not np.all(np.isfinite(np.asarray(v))):
            raise RolloutError(f"model_params[{name!r}] holds non-finite values")
        out[name] = jnp.asarray(v, jnp.float64) if shared else np.asarray(v, np.float64)
    return out


def nu_of(scene) -> int:
    return SceneView.of(scene).nu


def check_ctrl(scene, ctrl, B: int, steps: int, n: int):
    """(mode, array or None, callable or None)."""
    if ctrl is None:
        return "none", None, None
    nu = nu_of(scene)
    if isinstance(ctrl, Controller):
        return "controller", None, ctrl  # checked with the initial states (check_episodes)
    if callable(ctrl):
        if nu == 0:
            raise RolloutError("ctrl is a callable but the scene has no actuators (nu=0)")
        world = (jax.ShapeDtypeStruct((), jnp.int64),) if _ep.takes_world(ctrl) else ()
        form = "ctrl(t, x, world)" if world else "ctrl(t, x)"
        try:
            out = jax.eval_shape(ctrl, jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((n,), jnp.float64),
                                 *world)
        except Exception as e:
            raise RolloutError(f"{form} could not be traced with t (), x ({n},){' and world ()' if world else ''}: "
                               f"{e}") from e
        if tuple(out.shape) != (nu,):
            raise RolloutError(f"{form} must return shape ({nu},) (nu={nu}), returned {tuple(out.shape)}")
        return "callable", None, ctrl
    arr = np.asarray(ctrl, dtype=np.float64)
    if nu == 0:
        raise RolloutError(f"ctrl array of shape {arr.shape} given, but the scene has no actuators (nu=0)")
    if arr.shape != (B, steps, nu):
        raise RolloutError(f"ctrl array must have shape (batch, steps, nu) = {(B, steps, nu)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise RolloutError("ctrl array holds non-finite values")
    return "array", arr, None


def check_out(out, overwrite: bool):
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


def check_devices(devices):
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


def check_x0(x0, batch, layout: StateLayout) -> np.ndarray:
    n = layout.size
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.ndim == 1 and batch is not None:
        x0 = np.broadcast_to(x0, (check_int("batch", batch, 1), x0.size)).copy()
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
    return x0


def carry_plan(scene, integ, dt: float, B: int) -> tuple[tuple, dict]:
    """((name, shape), ...) and the cold initial carry (B, *shape) of the scene and the integrator."""
    if not accepts_carry(integ):
        return (), {}
    spec = {**scene_carry_spec(scene), **integrator_carry_spec(integ, scene)}
    if not spec:
        return (), {}
    init = dict(scene.init_carry()) if scene_carry_spec(scene) else {}
    if integrator_carry_spec(integ, scene):
        init.update(integ.init_carry(scene, dt))
    carry0 = {}
    for name, shape in spec.items():
        v = np.asarray(init[name], np.float64)
        if v.shape != tuple(shape):
            raise RolloutError(f"carry {name!r}: init_carry gives shape {v.shape}, carry_spec says {tuple(shape)}")
        carry0[name] = np.broadcast_to(v, (B,) + v.shape).copy()
    return tuple((k, tuple(s)) for k, s in spec.items()), carry0


@functools.cache
def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _ctrl_attr(mode, arr, fn) -> str:
    if mode == "array":
        return "array sha256:" + hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
    if mode == "callable":
        return f"callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return "controller" if mode == "controller" else "none"


def mujoco_model(scene) -> mujoco.MjModel | None:
    return SceneView.of(scene).model


def _attrs(view: SceneView, integ, *, dt, steps, record_every, B, seed, t0, chunk, perturb, ctrl_attr,
           integ_source) -> dict:
    model = view.model
    return dict(
        format=h5.FORMAT, format_version=h5.FORMAT_VERSION, mujoco_version=mujoco.__version__,
        mjx_version=version("mujoco-mjx"), jax_version=jax.__version__, mjharness_version=version("mjharness"),
        model_sha256=h5.model_sha256(model) if model is not None else "",
        integrator=json.dumps(integrator_config(integ)),
        integrator_source=integ_source, dt=dt, record_every=record_every, steps=steps, batch=B, seed=seed,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), t0=float(t0), chunk=chunk,
        perturb=float(perturb), ctrl=ctrl_attr,
        scene=scene_info(model).source if model is not None else view.name,
        quaternion_update=view.quaternion_update, x64=bool(jax.config.jax_enable_x64),
        backend=view.backend, **_system_attrs(view))


def _system_attrs(view: SceneView) -> dict:
    """A ``System`` (adapters/system.py) records its members, order and couplings; /model is its first MjScene's."""
    if view.describe is None:
        return {}
    return {"system": json.dumps(view.describe()), "model_note": "/model is the first MjScene member of the system"}


def _chunk_steps(chunk, steps: int, record_every: int) -> int:
    if chunk is None:
        chunk = max(DEFAULT_CHUNK_STEPS, DEFAULT_CHUNK_SAMPLES * record_every)
    chunk = check_int("chunk", chunk, 1)
    chunk = -(-chunk // record_every) * record_every  # whole samples per chunk
    return min(chunk, -(-steps // record_every) * record_every)


def _resume_path(resume, out) -> str:
    if out is not None and os.path.abspath(os.fspath(out)) != os.path.abspath(os.fspath(resume)):
        raise RolloutError(f"resume={resume!r} continues that file; out={out!r} must be None or the same path")
    path = os.path.abspath(os.fspath(resume))
    if not os.path.isfile(path):
        raise RolloutError(f"resume={resume!r}: no such file")
    if not os.access(path, os.W_OK):
        raise RolloutError(f"resume={resume!r}: file is not writable")
    return path


def check_carry(carry, carry_spec, carry0: dict, defaults: tuple = ()) -> dict:
    """A user's initial carry (e.g. ``result.carry`` of a previous run) checked against the plan's; entries
    named in ``defaults`` (a closed loop's) may be left out and start as in ``carry0``."""
    if carry is None:
        return carry0
    names = [k for k, _ in carry_spec]
    carry = {**{k: carry0[k] for k in defaults if k not in carry}, **carry}
    if set(carry) != set(names):
        raise RolloutError(f"carry has entries {sorted(carry)}, this run carries {names}")
    out = {}
    for name, _ in carry_spec:
        v = np.asarray(carry[name], np.float64)
        if v.shape != carry0[name].shape:
            raise RolloutError(f"carry[{name!r}] must have shape {carry0[name].shape} (batch x carry_spec), "
                               f"got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise RolloutError(f"carry[{name!r}] holds non-finite values")
        out[name] = v.copy()
    return out


def check_outputs(scene, outputs, semantics) -> tuple:
    """The recorded outputs' table (adapters.outputs), checked against the model before any compile."""
    from mjharness.adapters.outputs import OutputError, parse_outputs

    if not outputs:
        return ()
    model = mujoco_model(scene)
    if model is None or not isinstance(scene, Forward):
        raise RolloutError(f"outputs={tuple(outputs)!r} need a MuJoCo scene (MjScene); got {type(scene).__name__}")
    try:
        return parse_outputs(model, outputs, scene)
    except OutputError as e:
        raise RolloutError(str(e)) from None


def run_needs(model_params, outputs, randomize=None) -> dict[str, str]:
    """The backend capabilities a run's own arguments need ({capability: what asks}); the scene adds its own."""
    needs = {}
    if model_params:
        needs["per_world_params"] = f"model_params {sorted(model_params)}"
    elif randomize:
        needs["per_world_params"] = f"randomize {sorted(randomize)}"
    if (model_params or randomize) and outputs:
        needs["per_world_outputs"] = "recorded outputs with per-world model fields (model_params, randomize)"
    if outputs:
        needs["outputs"] = "recorded outputs"
    if has_callables(outputs):
        needs["callable_outputs"] = "an output function"
    return needs


def needs_sensors(outputs, ctrl=None, terminate=None) -> bool:
    """Whether recorded outputs or a closed loop read sensors (then loading must keep them:
    ``load_scene(need_sensors=True)``)."""
    return any(isinstance(o, str) and (o == "sensordata" or o.startswith("sensor:")) for o in outputs or ()) or \
        _ep.wants_sensors(ctrl, terminate)


def check_episodes(scene, start, x0: np.ndarray, carry_spec: tuple, carry0: dict, world_offset: int):
    """(EpisodePlan or None, engine carry spec, engine carry0, reset inputs): a run's controller and termination
    rule checked by calling them on world 0 (``engine.episodes``), before anything compiles."""
    ctrl, term = start.ctrl, start.terminate
    record_ctrl = callable(ctrl) and not isinstance(ctrl, Controller)  # a ctrl(t, x) function's u: /ctrl too
    if not isinstance(ctrl, Controller) and term is None and not record_ctrl:
        return None, (), {}, ()
    view = SceneView.of(scene)
    sensor_specs = ()
    if _ep.wants_sensors(ctrl, term):
        sensor_specs = check_outputs(scene, ("sensordata",), "live")
    sdim = int(np.prod(sensor_specs[0].shape)) if sensor_specs else 0
    B = x0.shape[0]
    mode, init_world, treedef, leaves, c0 = "jax", False, None, (), {}
    if isinstance(ctrl, Controller):
        mode, init_world, treedef, leaves, c0 = _ep.check_controller(ctrl, x0, world_offset, view.nu, sdim)
    t_mode, t_sensors = ("jax", False) if term is None else _ep.check_termination(term, x0, sdim, world_offset)
    resets = term is not None and start.on_terminate == "reset"
    reset_to = _ep.check_reset_to(start.reset_to, scene) if resets else "x0"
    draw_scale, quats = (), ()
    if reset_to == "draw":
        draw_scale = tuple(float(v) for v in _perturb_scale(view, x0.shape[1], start.perturb, start.perturb_qpos))
        quats = tuple((r.value_slice.start, r.value_slice.stop) for r in scene.layout.special)
    ep = EpisodePlan(controller=ctrl if isinstance(ctrl, Controller) else None, mode=mode, init_world=init_world,
                     treedef=treedef, leaves=leaves, nu=view.nu, terminate=term, terminate_mode=t_mode,
                     terminate_sensors=t_sensors, on_terminate=start.on_terminate, reset_to=reset_to,
                     draw_scale=draw_scale, quaternions=quats, sensor_specs=sensor_specs, record_ctrl=record_ctrl)
    names = {name for name, _ in carry_spec}
    clash = sorted(names & {name for name, _ in ep.carry_spec()})
    if clash:
        raise RolloutError(f"the scene's or integrator's carry names {clash}, which a controller/termination rule "
                           f"carries too")
    init = {_ep.CTRL: np.zeros((B, view.nu)), _ep.EPISODE: np.zeros(B), _ep.EPISODE_START: np.zeros(B),
            _ep.PENDING: np.zeros(B), **c0}
    engine0 = {name: init[name] for name, _ in ep.carry_spec()}
    reset = ()
    if resets:
        if reset_to == "x0":
            xr = x0
        elif reset_to == "draw":
            base = np.asarray(view.x0() if view.x0 else scene.layout.default_values(), np.float64)
            xr = np.broadcast_to(base, x0.shape)
        else:
            xr = np.broadcast_to(scene.reset(keyframe=reset_to[4:]), x0.shape)
        reset = (np.array(xr, np.float64), {k: np.array(v) for k, v in carry0.items()})
    return ep, ep.carry_spec(), engine0, reset


def _resume_info(resume, out, *, keep: bool) -> h5.ResumeInfo | None:
    """The resumed file read once (None for a fresh run); ``resume`` may already be one (the CLI read it)."""
    if resume is None:
        return None
    if isinstance(resume, h5.ResumeInfo):
        if keep and resume.prefix is None:
            return h5.read_resume(resume.path, prefix=True)
        return resume
    return h5.read_resume(out, prefix=keep)


def draw_params(scene, randomize: dict, seed: int, world_offset: int, B: int, explicit: dict) -> dict:
    """Per-world fields of worlds ``world_offset .. world_offset + B`` drawn by ``randomize`` on top of the explicit
    ``model_params`` (``engine.randomize``), restricted to the fields the scene's backend model has. A System
    draws each key ``"<member>.<field>[:name]"`` on that MjScene member's model; its fields are
    ``"<member>.<field>"``."""
    worlds = world_offset + np.arange(B)

    def member_draws(sc, keys: dict, mine: dict, member: str) -> dict:
        sc.backend_impl.require("per_world_params", f"randomize {sorted(keys)} (model fields set per world)")
        target = backend_model(sc)

        def keep(field, shape):
            if not has_field(target, field):
                return False
            ref = np.asarray(field_value(target, field))
            return np.issubdtype(ref.dtype, np.floating) and ref.shape == tuple(shape)

        return randomized_params(sc.model, keys, seed, worlds, mine, keep, member=member)

    owner = getattr(scene, "param_owner", None)
    if owner is not None:  # a System (adapters/system.py)
        from mjharness.adapters.system import SystemSpecError

        groups = {}
        for key, dist in randomize.items():
            try:
                name, member, _ = owner(key if isinstance(key, str) else "")
            except SystemSpecError as e:
                raise RolloutError(f"randomize[{key!r}]: {e}") from None
            groups.setdefault(name, (member, {}))[1][key] = dist
        out = dict(explicit)
        for name, (member, keys) in groups.items():
            mine = {k.partition(".")[2]: v for k, v in explicit.items() if k.partition(".")[0] == name}
            out.update({f"{name}.{f}": v for f, v in member_draws(member, keys, mine, name).items()})
        return out
    view = SceneView.of(scene)
    if view.model is None or not isinstance(scene, PerWorldModel):
        raise RolloutError(f"randomize needs an MjScene (a MuJoCo model evaluated per world) or a System of them; "
                           f"got {type(scene).__name__}")
    return member_draws(scene, randomize, explicit, "")


def _check_resumed_randomize(asked, in_file, resume):
    """The randomization a run carries: the one asked for, or a resumed file's (which must equal a repeated ask)."""
    if resume is None:
        return asked
    if in_file is not None:
        in_file = json.loads(in_file)
    if asked and asked != in_file:
        raise RolloutError(f"resume={resume!r}: the file was randomized with {in_file}, randomize={asked} was asked "
                           f"(a resume reuses the file's drawn values; pass the same or none)")
    return in_file


def make_plan(scene, integrator, spec: RunSpec, *, world_offset: int = 0, extra_attrs: dict | None = None) -> Plan:
    """The ``Plan`` of ``spec`` (``engine/spec.py``) on ``scene`` with ``integrator``: every input checked,
    the backend, integrator and timestep resolved, before anything is compiled or written.
    ``world_offset``/``extra_attrs``: a process's share of a multi-process run (``engine.distributed``)."""
    spec = check_spec(spec)
    st, rec, ex, ld, start = spec.storage, spec.recording, spec.execution, spec.loading, spec.start
    steps, record_every = spec.steps, rec.record_every
    resume = getattr(st.resume, "path", st.resume)  # a path, or an h5.ResumeInfo the caller already read
    chunk = _chunk_steps(ex.chunk, steps, record_every)
    out = _resume_path(resume, st.out) if resume is not None else check_out(st.out, st.overwrite)
    if out is not None:
        h5.check_not_in_use(out)  # a live writer holds it: refused before anything changes (issue 28)
    info = _resume_info(st.resume, out, keep=rec.keep)
    # A resume continues on the backend that wrote the file (another one is refused).
    backend = requested(((info and info.setting("backend")) or AUTO, f"resume={resume!r}"), (ex.backend, "the run"))
    scene, backend_why = resolve_run_scene(
        scene, mjx=ld.mjx, quaternion_update=ld.quaternion_update, backend=backend,
        needs=run_needs(start.model_params or (info.model_params if info else {}), rec.outputs, start.randomize),
        unsupported_contacts=ld.unsupported_contacts, need_sensors=needs_sensors(rec.outputs, start.ctrl,
                                                                               start.terminate))
    integ = scene_integrator(scene, integrator)
    try:
        kind = check_pair(scene, integ)
    except ContractError as e:
        raise RolloutError(str(e)) from None
    dt = scene_timestep(scene, spec.dt)
    out_specs = check_outputs(scene, rec.outputs, rec.output_semantics)
    layout: StateLayout = scene.layout
    devs = check_devices(ex.devices)

    x0, batch, model_params = start.x0, start.batch, start.model_params
    file_randomize = None
    if info is not None:
        if x0 is not None or model_params:
            raise RolloutError("resume takes x0 and model_params from the file; do not pass them")
        if start.carry is not None:
            raise RolloutError("resume takes the carry from the file; do not pass carry")
        x0, model_params, file_randomize = info.x0, info.model_params, info.raw_attrs.get("randomize") or None
        # the file's initial perturbation: a resumed reset_to="draw" draws with it
        start = dataclasses.replace(start, perturb=float(info.raw_attrs.get("perturb") or 0.0),
                                    perturb_qpos=float(info.raw_attrs.get("perturb_qpos") or 0.0))
        if batch is not None and batch != x0.shape[0]:
            raise RolloutError(f"resume={resume!r}: the file has batch {x0.shape[0]}, batch={batch} was asked")
        batch = None
    _memory.check(scene=scene, layout_size=layout.size, batch=x0.shape[0] if x0 is not None and np.ndim(x0) == 2
                  else (batch or 1), samples=steps // record_every, chunk_samples=chunk // record_every,
                  outputs=out_specs, keep=rec.keep, devices=devs)  # before x0 is built: refuse what cannot fit
    if x0 is not None:
        x0 = check_x0(x0, batch, layout)
    else:
        x0 = initial_states(scene, 1 if batch is None else batch, start.seed, start.perturb, start.perturb_qpos)
    B = x0.shape[0]
    ctrl_mode, ctrl_arr, ctrl_fn = check_ctrl(scene, start.ctrl, B, steps, layout.size)
    params = check_model_params(scene, model_params, B)
    randomize = _check_resumed_randomize(start.randomize, file_randomize, resume)
    if start.randomize and resume is None:
        params = check_model_params(scene, draw_params(scene, start.randomize, start.seed, world_offset, B, params), B)
    carry_spec, carry0 = carry_plan(scene, integ, dt, B)
    episodes, ep_spec, ep_carry0, reset = check_episodes(scene, start, x0, carry_spec, carry0, world_offset)
    carry_spec, carry0 = carry_spec + ep_spec, {**carry0, **ep_carry0}
    carry0 = check_carry(start.carry, carry_spec, carry0, defaults=tuple(ep_carry0))
    view = SceneView.of(scene)  # the scene's features the engine uses, read once
    attrs = _attrs(view, integ, dt=dt, steps=steps, record_every=record_every, B=B, seed=start.seed, t0=start.t0,
                   chunk=chunk, perturb=start.perturb, ctrl_attr=_ctrl_attr(ctrl_mode, ctrl_arr, ctrl_fn),
                   integ_source="argument" if integrator is not None else "scene")
    attrs.update(backend_reason=backend_why, perturb_qpos=start.perturb_qpos, **(extra_attrs or {}))
    if randomize:
        attrs["randomize"] = json.dumps(randomize, sort_keys=True)
    if episodes is not None:
        attrs.update(episodes.describe())
    if out_specs:
        attrs.update(outputs=",".join(o.name for o in out_specs), output_semantics=rec.output_semantics)
    plan = Plan(scene=scene, integ=integ, kind=kind, dt=dt, steps=steps,
                record_every=record_every, samples=steps // record_every, chunk=chunk, x0=x0, carry0=carry0,
                carry_spec=carry_spec, seed=start.seed, ctrl_mode=ctrl_mode, ctrl=ctrl_arr, ctrl_fn=ctrl_fn,
                params=params, devices=devs, out=out, t0=start.t0, attrs=attrs, outputs=out_specs,
                output_semantics=rec.output_semantics, world_offset=world_offset, view=view, episodes=episodes,
                reset=reset, resume=info)
    plan = check_resume(plan) if info is not None else plan
    if out is not None:
        warn = _memory.check_space(out, _memory.planned_file_bytes(
            n=layout.size, nc=sum(int(np.prod(sh, dtype=np.int64)) for _, sh in carry_spec), batch=B,
            samples=plan.samples - plan.start_step // record_every, output_width=sum(int(np.prod(o.shape)) for o in
                                                                                     out_specs)),
            require=bool(getattr(st, "require_space", False)))
        if warn:
            import warnings

            warnings.warn(warn, RuntimeWarning, stacklevel=3)
    return plan


def _config_subset(file_cfg, now_cfg) -> bool:
    """A file written when the integrator attribute held fewer keys (format-v1 files: just the name) matches
    when every key it has is equal now (issue 28: the v1 fixture resumes)."""
    try:
        old, new = json.loads(file_cfg), json.loads(now_cfg)
    except (TypeError, ValueError):
        return False
    return isinstance(old, dict) and isinstance(new, dict) and all(new.get(k) == v for k, v in old.items())


RESUME_MUST_MATCH = ("model_sha256", "integrator", "dt", "record_every", "batch", "seed", "t0", "ctrl",
                     "quaternion_update", "x64", "backend")
# A closed loop's settings: present in files of runs with a controller / termination rule ("" when absent).
RESUME_EPISODES = ("controller", "terminate", "on_terminate", "reset_to")


def _integrator_difference(file_cfg, now_cfg) -> str:
    """The integrators of a file and of a run by name (and, for the same name, the settings that differ), not
    as two JSON documents with their Butcher tableaux."""
    def parse(v):
        try:
            return json.loads(v) if isinstance(v, str) else dict(v)
        except (ValueError, TypeError):
            return {"name": str(v)}

    f, n = parse(file_cfg), parse(now_cfg)
    if f.get("name") != n.get("name"):
        return f"integrator: file {f.get('name')!r}, now {n.get('name')!r}"
    keys = sorted(k for k in set(f) | set(n) if f.get(k) != n.get(k))
    return f"integrator {f.get('name')!r}: " + "; ".join(f"{k}: file {f.get(k)!r}, now {n.get(k)!r}" for k in keys)


def check_resume(plan: Plan) -> Plan:
    """``plan`` continuing its file: the file must match it; the plan starts after the file's last sample."""
    info = plan.resume
    assert info is not None
    a, samples, n_file = info.raw_attrs, info.samples, info.n
    carry_file = [(name, size) for name, size in info.carry_layout]
    old_style_sha = not info.has_mjb  # written before files kept the binary model: hashed the XML
    want = dict(plan.attrs)
    model = mujoco_model(plan.scene)
    if old_style_sha and model is not None:
        want["model_sha256"] = h5.model_sha256(scene_info(model).xml)
    bad = []
    for k in RESUME_MUST_MATCH:
        if k == "ctrl" and want["ctrl"].startswith("callable") and str(a.get(k, "")).startswith("callable"):
            continue  # a callable cannot be compared; the caller is trusted to pass the same one
        if k in a and a[k] != want[k] and not (k == "integrator" and _config_subset(a[k], want[k])):
            bad.append(_integrator_difference(a[k], want[k]) if k == "integrator" else f"{k}: file {a[k]!r}, now "
                       f"{want[k]!r}")
    for k in RESUME_EPISODES:
        if not _ep.same_function_config(a.get(k, ""), want.get(k, "")):
            bad.append(f"{k}: file {str(a.get(k, ''))!r}, now {str(want.get(k, ''))!r}")
    for k in ("outputs", "output_semantics"):  # absent when nothing is recorded: "" on both sides then
        if str(a.get(k, "")) != str(want.get(k, "")):
            bad.append(f"{k}: file {str(a.get(k, ''))!r}, now {str(want.get(k, ''))!r}")
    if n_file != plan.scene.layout.size:
        bad.append(f"state size: file {n_file}, now {plan.scene.layout.size}")
    carry_now = [(name, int(np.prod(shape, dtype=np.int64))) for name, shape in plan.carry_spec]
    if carry_file != carry_now and not (carry_file == [] and not info.has_carry):
        bad.append(f"carry: file {carry_file}, now {carry_now}")  # (a file from before /carry resumes cold)
    if bad:
        raise RolloutError(f"resume={plan.out!r} does not match this run: " + "; ".join(bad))
    if plan.steps < int(a["steps"]):  # the file would stay short of its plan and never be complete (issue 28)
        raise RolloutError(f"resume={plan.out!r} was planned for steps={int(a['steps'])} ({samples} samples held); "
                           f"steps={plan.steps} would leave it incomplete: resume with steps >= {int(a['steps'])}")
    attrs = dict(plan.attrs, created=a.get("created", plan.attrs["created"]), steps=max(plan.steps, int(a["steps"])))
    return dataclasses.replace(plan, start_step=samples * plan.record_every, attrs=attrs)
