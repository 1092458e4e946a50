"""Checks of a run's single inputs against the scene: initial states, controls, per-world model fields, the
carry, recorded outputs, the output path and the devices. ``rollout``, ``simulate`` and ``fit`` share them, so
an input means the same everywhere and is refused with the same words.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.adapters.backends import CtrlMode
from mjharness.integrators import Model, StateLayout
from mjharness.integrators.contracts import integrator_carry_spec, scene_carry_spec

from ..errors import RolloutError
from . import episodes as _ep
from .checks import RolloutTypeError
from .episodes import Controller
from .params import field_value
from .randomize import POSITIVE
from .scene_view import Forward, PerWorldModel, SceneView
from .spec import check_int


def backend_model(scene):
    """The model whose fields per-world parameters set: the MJX model, or (MuJoCo C) the MjModel."""
    return scene.mjx_model if scene.mjx_model is not None else scene.model


def mujoco_model(scene) -> mujoco.MjModel | None:
    return SceneView.of(scene).model


def initial_states(scene: Model, batch: int, seed: int = 0, perturb: float = 0.0,
                   perturb_qpos: float = 0.0) -> np.ndarray:
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


def _check_physical(name: str, path: str, v: np.ndarray, nominal: np.ndarray) -> None:
    """Per-world values of a model field within what MuJoCo can run (the rules ``randomize`` checks its draws
    by): >= 0 where a negative value is unphysical, and the world body's (body 0) mass and inertia left as they are
    (derived fields, e.g. ``body_subtreemass``, are the model's to set)."""
    field = path.rsplit(".", 1)[-1]
    if field in POSITIVE and field.startswith("body_") and nominal.ndim >= 1 and nominal.shape[0] > 0:
        moved = ~np.all(v[:, 0] == nominal[0], axis=tuple(range(1, v.ndim - 1)))
        if moved.any():
            raise RolloutError(f"model_params[{name!r}]: world {int(np.argmax(moved))} changes the world body (body "
                               f"0), which is static: its {field} is {nominal[0].tolist()}")
    what = POSITIVE.get(field)
    if what is not None and (v < 0).any():
        w, *at = (int(i) for i in np.argwhere(v < 0)[0])
        bad = v[(w,) + tuple(at)]
        raise RolloutError(f"model_params[{name!r}]: world {w} sets {field}{at} = {bad:.6g}: MuJoCo "
                           f"requires {what} >= 0")


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
    from .force_params import check_force_params, is_force_key

    forces = {k: v for k, v in params.items() if is_force_key(k)}
    out = check_force_params(scene, forces, B) if forces and owner is None and not shared else {}
    for name, v in params.items():
        if not isinstance(name, str):
            raise RolloutError(f"model_params keys are MJX field paths like 'body_mass' or 'opt.gravity', got {name!r}")
        if name in out:
            continue
        if is_force_key(name):
            raise RolloutError(f"model_params[{name!r}]: force provider parameters are set per world by rollout() "
                               f"on an MjScene" + (" (not through simulate())" if shared else ""))
        member, path = scene, name
        if owner is not None:
            from mjharness.adapters.system_types import SystemSpecError

            try:
                _, member, path = owner(name)
            except SystemSpecError as e:
                raise RolloutError(f"model_params: {e}") from None
            member.backend_impl.require("per_world_params", f"model_params[{name!r}] (model fields set per world)")
        if path == "opt.timestep":
            raise RolloutError(f"model_params[{name!r}]: the timestep is the run's dt, one for every world (the "
                               f"integrators step by it, not by the model's field): give dt=, or run one rollout "
                               f"per timestep")
        ref = field_value(backend_model(member), path)
        dtype = ref.dtype if isinstance(ref, jax.core.Tracer) else np.asarray(ref).dtype
        if not np.issubdtype(dtype, np.floating):
            raise RolloutError(f"model_params[{name!r}]: the field is {dtype}, not a floating field; "
                               f"only floating fields can be set and differentiated")
        shape = tuple(np.shape(ref))
        concrete = not isinstance(v, jax.core.Tracer)
        v = numeric_array(f"model_params[{name!r}]", v) if concrete and not shared else v
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
        if concrete:
            _check_physical(name, path, np.asarray(v, np.float64), np.asarray(ref, np.float64))
        out[name] = jnp.asarray(v, jnp.float64) if shared else np.asarray(v, np.float64)
    return out


def nu_of(scene) -> int:
    return SceneView.of(scene).nu


def check_ctrl(scene, ctrl, B: int, steps: int, n: int, *, shared: bool = False):
    """(mode, array or None, callable or None). ``shared`` (``simulate``): values may be tracers, an array may
    be (steps, nu) for every world, and a Controller is refused (it runs in ``rollout``)."""
    if shared:
        return _traced_ctrl(scene, ctrl, B, steps)
    if ctrl is None:
        return CtrlMode.NONE, None, None
    nu = nu_of(scene)
    if isinstance(ctrl, Controller):
        return CtrlMode.CONTROLLER, None, ctrl  # checked with the initial states (check_episodes)
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
        return CtrlMode.CALLABLE, None, ctrl
    arr = numeric_array("ctrl", ctrl)
    if nu == 0:
        raise RolloutError(f"ctrl array of shape {arr.shape} given, but the scene has no actuators (nu=0)")
    if arr.shape != (B, steps, nu):
        raise RolloutError(f"ctrl array must have shape (batch, steps, nu) = {(B, steps, nu)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise RolloutError("ctrl array holds non-finite values")
    return CtrlMode.ARRAY, arr, None


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


def _traced_ctrl(scene, ctrl, B: int, steps: int):
    if isinstance(ctrl, Controller):
        raise RolloutError("simulate takes ctrl=None, an array or a ctrl(t, x) function; a Controller (state carried "
                           "between steps, terminations, episodes) runs in rollout(...)")
    if ctrl is None:
        return CtrlMode.NONE, None, None
    nu = nu_of(scene)
    if nu == 0:
        raise RolloutError("ctrl given, but the scene has no actuators (nu=0)")
    if callable(ctrl):
        return CtrlMode.CALLABLE, None, ctrl
    shape = tuple(jnp.shape(ctrl))
    if shape == (steps, nu):
        ctrl = jnp.broadcast_to(jnp.asarray(ctrl, jnp.float64), (B, steps, nu))
    elif shape != (B, steps, nu):
        raise RolloutError(f"ctrl must have shape (batch, steps, nu) = {(B, steps, nu)} or (steps, nu), got {shape}")
    return CtrlMode.ARRAY, jnp.asarray(ctrl, jnp.float64), None


def numeric_array(name: str, v) -> np.ndarray:
    """``v`` (a list, tuple, NumPy or JAX array) as a float64 array, or one RolloutError naming ``name`` (a string,
    a mapping, ragged rows, objects that are not numbers)."""
    if isinstance(v, (str, bytes, Mapping)):
        raise RolloutTypeError(f"{name} must be an array of numbers, got {type(v).__name__} {str(v)[:60]!r}")
    try:
        return np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise RolloutTypeError(f"{name} must be an array of numbers ({type(v).__name__} given: {e})") from None


def check_x0(x0, batch, layout: StateLayout, *, shared: bool = False):
    """Initial states (B, n) (or (n,) with ``batch``; ``shared``: (n,) is one world and values may be tracers)."""
    n = layout.size
    if shared:
        shape = tuple(jnp.shape(x0))
        if shape == (n,):
            x0 = jnp.asarray(x0)[None]
        elif len(shape) != 2 or shape[1] != n:
            raise RolloutError(f"x0 must have shape (batch, n) or (n,) with n={n} (the layout size), got {shape}")
        return jnp.asarray(x0, jnp.float64)
    x0 = numeric_array("x0", x0)
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
    spec = {**scene_carry_spec(scene), **integrator_carry_spec(integ, scene)}
    if not spec:
        return (), {}
    init = dict(scene.init_carry()) if scene_carry_spec(scene) else {}
    init.update(integ.init_carry(scene, dt))
    carry0 = {}
    for name, shape in spec.items():
        v = np.asarray(init[name], np.float64)
        if v.shape != tuple(shape):
            raise RolloutError(f"carry {name!r}: init_carry gives shape {v.shape}, carry_spec says {tuple(shape)}")
        carry0[name] = np.broadcast_to(v, (B,) + v.shape).copy()
    return tuple((k, tuple(s)) for k, s in spec.items()), carry0


def check_carry(carry, carry_spec, carry0: dict, defaults: tuple = (), *, shared: bool = False) -> dict:
    """A user's initial carry (e.g. ``result.carry`` of a previous run) checked against the plan's; entries
    named in ``defaults`` (a closed loop's) may be left out and start as in ``carry0``. ``shared``
    (``simulate``): an entry may have the entry's shape (every world) and values may be tracers."""
    if shared:
        return _traced_carry(carry, carry_spec, carry0)
    if carry is None:
        return carry0
    names = [k for k, _ in carry_spec]
    carry = {**{k: carry0[k] for k in defaults if k not in carry}, **carry}
    if set(carry) != set(names):
        raise RolloutError(f"carry has entries {sorted(carry)}, this run carries {names}")
    out = {}
    for name, _ in carry_spec:
        v = numeric_array(f"carry[{name!r}]", carry[name])
        if v.shape != carry0[name].shape:
            raise RolloutError(f"carry[{name!r}] must have shape {carry0[name].shape} (batch x carry_spec), "
                               f"got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise RolloutError(f"carry[{name!r}] holds non-finite values")
        out[name] = v.copy()
    return out


def _traced_carry(carry, spec, carry0: dict) -> dict:
    if carry is None:
        return {k: jnp.asarray(v) for k, v in carry0.items()}
    names = [k for k, _ in spec]
    if set(carry) != set(names):
        raise RolloutError(f"carry has entries {sorted(carry)}, this simulation carries {names}")
    out = {}
    for name, shape in spec:
        B = carry0[name].shape[0]
        v = carry[name]
        if tuple(jnp.shape(v)) == tuple(shape):
            v = jnp.broadcast_to(jnp.asarray(v, jnp.float64), (B,) + tuple(shape))
        elif tuple(jnp.shape(v)) != (B,) + tuple(shape):
            raise RolloutError(f"carry[{name!r}] must have shape {(B,) + tuple(shape)}, got {tuple(jnp.shape(v))}")
        out[name] = jnp.asarray(v, jnp.float64)
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
