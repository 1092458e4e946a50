"""Closed loops inside a run: controllers with state, per-world termination, resets and episodes.

A ``Controller(init, step, every)`` computes each world's controls from its state and its own
controller state ``c`` (a pytree: an integral term, a filter, a phase of a state machine). A
termination rule ``terminate(t, x) -> bool`` ends a world's episode after a step; the world is then
frozen (``on_terminate="freeze"``, status ``TERMINATED``) or starts a new episode from its x0, a
keyframe or a fresh draw of the initial perturbation (``on_terminate="reset"``, ``reset_to``).

Everything a closed loop remembers travels in the run's carry, per world, next to the integrator's
(warm start, step size), so it is recorded with every sample and a resumed run continues it bit for
bit: ``ctrl`` (the control applied during the last step, the file's ``/ctrl``), ``episode`` (the
file's ``/episode``), ``episode_start`` (global index of the episode's first step), ``terminated``
(1 after the step that ended the episode, until the reset at the next step) and the controller
state's leaves (``controller<path>``). The step functions are traced into the chunk (jit-able JAX
code, any backend) or, when they are plain NumPy, called on the host for each world through
``jax.pure_callback`` (``mode == "host"``).

One step of a world (global index k, time t = t0 + k dt), in this order:
1. a world whose previous step ended its episode (``reset``) restarts: state, integrator carry and
   controller state as at an episode's start, ``episode += 1``, ``episode_start = k``;
2. every ``every`` steps of the episode the controller runs (zero-order hold in between):
   ``u, c = step(t, x, c)``; the integrator advances with ``u``;
3. every ``terminate.every`` steps of the episode the rule is evaluated on the new state at t + dt.
A step that fails (non-finite state) leaves the world frozen at its last good state and carry, as in
any run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.integrators import STATUS_TERMINATED

from ..errors import RolloutError
from .checks import RolloutTypeError

CTRL, EPISODE, EPISODE_START, PENDING = "ctrl", "episode", "episode_start", "terminated"
REWARD, RETURN = "reward", "episode_return"   # the last reward evaluated; the episode's sum of rewards so far
CONTROLLER = "controller"   # prefix of the controller state's carry entries


@dataclass(frozen=True, eq=False)
class Controller:
    """A controller with state, per world.

    Attributes:
        init: ``init(x0) -> c0`` (or ``init(x0, world)``, world the global world index): the controller state of
            a world starting from ``x0`` (n,), a pytree of arrays; called at the run's start and at every reset.
        step: ``step(t, x, c) -> (u, c_next)`` (``step(t, x, c, sensordata)`` with ``sensors=True``): the controls
            (nu,) applied until the next call and the next controller state (same structure, shapes, dtypes).
            Jit-able JAX code runs inside the compiled chunk; plain NumPy code runs on the host, world by world.
        every: run ``step`` every ``every`` steps of the episode and hold ``u`` in between (zero-order hold).
        sensors: pass the model's ``sensordata`` at (t, x), evaluated with the held controls.
    """

    init: Callable
    step: Callable
    every: int = 1
    sensors: bool = False


@dataclass(frozen=True, eq=False)
class Termination:
    """``fn(t, x) -> bool`` (``fn(t, x, sensordata)`` with ``sensors=True``) per world, evaluated on the state after
    every ``every``-th step of an episode. ``rollout(terminate=fn)`` means ``Termination(fn)``."""

    fn: Callable
    every: int = 1
    sensors: bool = False


@dataclass(frozen=True, eq=False)
class Reward:
    """``fn(t, x) -> float`` (``fn(t, x, sensordata)`` with ``sensors=True``; either may take ``world`` last) per
    world, evaluated like a termination rule on the state after a step, at the ends of control periods: after
    steps ``k`` with ``(k + 1 - episode_start) % every == 0``. ``every=None``: the Controller's ``every`` (1 without
    a Controller), so that a reward follows each action as in a gym step. Recorded as the file's ``/reward`` (the
    last evaluation's value, 0 before the first of an episode) and ``episode_return`` (the episode's sum so far;
    the ``return`` column of ``/episodes``). ``units``: the reward's unit in the file (CF text, "1" if unitless).
    ``rollout(reward=fn)`` means ``Reward(fn)``."""

    fn: Callable
    every: int | None = None
    sensors: bool = False
    units: str = "1"


@dataclass(frozen=True)
class EpisodePlan:
    """A run's checked closed loop (``check_episodes``): what the compiled chunk needs, hashable."""

    controller: Controller | None
    mode: str                    # "jax" | "host": how the controller's functions are called
    init_world: bool             # init takes (x0, world)
    treedef: Any                 # of the controller state
    leaves: tuple                # ((carry name, shape, dtype str), ...) of the controller state
    nu: int
    terminate: Termination | None
    terminate_mode: str          # "jax" | "host"
    terminate_sensors: bool
    on_terminate: str            # "freeze" | "reset"
    reset_to: str                # "x0" | "draw" | "key:NAME"
    draw_scale: tuple            # per-state std-dev of a fresh draw (reset_to="draw"), () otherwise
    quaternions: tuple           # ((start, stop), ...) value slices renormalised after a draw
    sensor_specs: tuple          # adapters.outputs rows of "sensordata" (when a function reads sensors)
    record_ctrl: bool = False    # a ctrl(t, x) function's controls are recorded too (a Controller's always are)
    reward: Reward | None = None
    reward_mode: str = "jax"     # "jax" | "host"
    reward_sensors: bool = False
    reward_every: int = 1        # resolved: Reward.every, else the Controller's every, else 1

    @property
    def resets(self) -> bool:
        return self.terminate is not None and self.on_terminate == "reset"

    @property
    def sensors(self) -> bool:
        return bool(self.controller is not None and self.controller.sensors) or self.terminate_sensors or \
            self.reward_sensors

    def carry_spec(self) -> tuple:
        """The engine's carry entries ((name, shape), ...): applied controls, episode bookkeeping, controller."""
        spec: list[tuple[str, tuple[int, ...]]] = []
        if self.controller is not None or self.record_ctrl:
            spec.append((CTRL, (self.nu,)))
        if self.terminate is not None:
            spec += [(EPISODE, ()), (EPISODE_START, ()), (PENDING, ())]
        if self.reward is not None:
            spec += [(REWARD, ()), (RETURN, ())]
        return tuple(spec) + tuple((name, shape) for name, shape, _ in self.leaves)

    def describe(self) -> dict:
        """File attributes (what a resume must match)."""
        out = {}
        if self.controller is not None:
            c = self.controller
            out["controller"] = f"every={c.every} sensors={c.sensors} {self.mode}; step={_qualname(c.step)}"
        if self.terminate is not None:
            t = self.terminate
            out.update(terminate=f"every={t.every} sensors={self.terminate_sensors} {self.terminate_mode}; "
                                 f"fn={_qualname(t.fn)}",
                       on_terminate=self.on_terminate, reset_to=self.reset_to if self.resets else "")
        if self.reward is not None:
            out["reward"] = (f"every={self.reward_every} sensors={self.reward_sensors} {self.reward_mode}; "
                             f"fn={_qualname(self.reward.fn)}")
            out["reward_units"] = self.reward.units
        return out


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def takes_world(fn) -> bool:
    """Whether a user function asks for the world index: it has a positional parameter named ``world`` (its last),
    e.g. ``ctrl(t, x, world)``, ``step(t, x, c, world)``, ``terminate(t, x, world)``; the global world index is
    then passed there (an int on the host, an int64 scalar in JAX code)."""
    try:
        ps = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return bool(ps) and ps[-1].name == "world"


def _positional(fn) -> int:
    """The number of positional parameters ``fn`` takes (-1: *args or unknown)."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return -1
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        return -1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps)


def _traceable(fn, *args) -> bool:
    """Whether ``fn`` traces with abstract ``args`` (JAX code); False for NumPy code (it needs concrete values)."""
    try:
        jax.eval_shape(fn, *args)
        return True
    except Exception:  # noqa: BLE001 - NumPy code needs concrete values; a real error is named by the concrete call
        return False


def _init_fn(ctrl: Controller, init_world: bool):
    """``init`` as ``f(x0, world)`` whichever of ``init(x0)`` / ``init(x0, world)`` the user wrote."""
    return (lambda x, w: ctrl.init(x, w)) if init_world else (lambda x, w: ctrl.init(x))


def _rule_reads_sensors(term: Termination) -> bool:
    """A rule gets sensordata when it says so or takes a third parameter besides ``world``:
    ``fn(t, x, sensordata)`` (``fn(t, x, sensordata, world)``)."""
    return term.sensors or _positional(term.fn) - takes_world(term.fn) == 3


def _leaf_name(path) -> str:
    return CONTROLLER + jax.tree_util.keystr(path)


def check_controller(ctrl: Controller, x0: np.ndarray, world_offset: int, nu: int, sensor_dim: int):
    """(mode, init takes world, treedef, leaves, c0 {carry name: (B, *shape)}), checked by calling the functions
    on world 0 (and tracing them) before anything compiles."""
    if not callable(ctrl.init) or not callable(ctrl.step):
        raise RolloutError("Controller(init, step): init and step must be callables")
    _every("Controller.every", ctrl.every)
    if nu == 0:
        raise RolloutError("ctrl is a Controller but the scene has no actuators (nu=0)")
    B, n = x0.shape
    init_world = _positional(ctrl.init) >= 2
    worlds = world_offset + np.arange(B)
    init = _init_fn(ctrl, init_world)
    try:
        c_first = init(np.array(x0[0]), int(worlds[0]))
    except Exception as e:  # noqa: BLE001 - a user's function: name it with what it was given
        raise RolloutError(f"Controller.init(x0{', world' if init_world else ''}) failed on world 0 "
                           f"(x0 of shape ({n},)): {type(e).__name__}: {e}") from e
    leaves, treedef = jax.tree_util.tree_flatten_with_path(c_first)
    spec = []
    for path, v in leaves:
        a = np.asarray(v)
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise RolloutError(f"Controller.init: state leaf {jax.tree_util.keystr(path)!r} is {a.dtype}, not numeric")
        spec.append((_leaf_name(path), tuple(a.shape), str(a.dtype)))
    sd = (np.zeros(sensor_dim),) if ctrl.sensors else ()
    wd = (int(worlds[0]),) if takes_world(ctrl.step) else ()
    t_abs, x_abs = jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((n,), jnp.float64)
    c_abs = jax.tree.map(lambda v: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype), c_first)
    sd_abs = tuple(jax.ShapeDtypeStruct(s.shape, jnp.float64) for s in sd)
    w_abs = tuple(jax.ShapeDtypeStruct((), jnp.int64) for _ in wd)
    mode = "jax" if _traceable(ctrl.step, t_abs, x_abs, c_abs, *sd_abs, *w_abs) and _traceable(
        init, x_abs, jax.ShapeDtypeStruct((), jnp.int64)) else "host"
    try:
        u, c_next = ctrl.step(0.0, np.array(x0[0]), c_first, *sd, *wd)
    except Exception as e:  # noqa: BLE001
        raise RolloutError(f"Controller.step(t, x, c{', sensordata' if ctrl.sensors else ''}"
                           f"{', world' if wd else ''}) failed on world 0: {type(e).__name__}: {e}") from e
    if np.shape(u) != (nu,):
        raise RolloutError(f"Controller.step must return (u, c_next) with u of shape ({nu},) (nu={nu}); "
                           f"u has shape {np.shape(u)}")
    _same_structure("Controller.step's c_next", c_next, treedef, spec)
    if mode == "jax":
        cs = jax.vmap(init)(jnp.asarray(x0), jnp.asarray(worlds))
        c0 = [np.asarray(v) for v in jax.tree.leaves(cs)]
    else:
        per = [jax.tree.leaves(init(np.array(x0[i]), int(worlds[i]))) for i in range(B)]
        c0 = [np.stack([np.asarray(p[j]) for p in per]) for j in range(len(spec))]
    carry0 = {}
    for (name, shape, _), v in zip(spec, c0):
        if v.shape != (B,) + shape:
            raise RolloutError(f"Controller.init: state leaf {name!r} has shape {v.shape[1:]} for some world, "
                               f"{shape} for world 0 (every world's state has one structure)")
        carry0[name] = np.asarray(v, np.float64)
    return mode, init_world, treedef, tuple(spec), carry0


def _same_structure(what, tree, treedef, spec):
    leaves, td = jax.tree_util.tree_flatten(tree)
    if td != treedef:
        raise RolloutError(f"{what} has the structure {td}, the controller state (init's) has {treedef}")
    for v, (name, shape, _) in zip(leaves, spec):
        if np.shape(v) != shape:
            raise RolloutError(f"{what}: leaf {name!r} has shape {np.shape(v)}, init gave {shape}")


def _every(name, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise RolloutError(f"{name} must be an int >= 1, got {v!r}")
    return int(v)


def as_termination(terminate) -> Termination | None:
    if terminate is None or isinstance(terminate, Termination):
        return terminate
    if callable(terminate):
        return Termination(terminate)
    raise RolloutError(f"terminate must be a callable fn(t, x) -> bool or a Termination, got "
                       f"{type(terminate).__name__}")


def _rule_on_world0(what: str, one: str, fn, sensors: bool, x0: np.ndarray, sensor_dim: int, world0: int):
    """(value on world 0, abstract arguments) of a per-world rule ``fn(t, x[, sensordata][, world])`` returning
    ``one`` value (its kind, for the error)."""
    sd = (np.zeros(sensor_dim),) if sensors else ()
    wd = (world0,) if takes_world(fn) else ()
    try:
        out = fn(0.0, np.array(x0[0]), *sd, *wd)
    except Exception as e:  # noqa: BLE001
        raise RolloutError(f"{what}(t, x{', sensordata' if sensors else ''}{', world' if wd else ''}) failed on "
                           f"world 0: {type(e).__name__}: {e}") from e
    if np.shape(out) != ():
        raise RolloutError(f"{what}(t, x) must return one {one} per world (shape ()), returned shape {np.shape(out)}")
    abs_ = (jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((x0.shape[1],), jnp.float64)) + tuple(
        jax.ShapeDtypeStruct(s.shape, jnp.float64) for s in sd) + tuple(jax.ShapeDtypeStruct((), jnp.int64) for _ in wd)
    return out, abs_


def check_termination(term: Termination, x0: np.ndarray, sensor_dim: int, world0: int = 0) -> tuple[str, bool]:
    """(mode, passes sensordata), checked by calling the rule on world 0."""
    if not callable(term.fn):
        raise RolloutError("Termination(fn): fn must be a callable")
    _every("Termination.every", term.every)
    sensors = _rule_reads_sensors(term)
    out, abs_ = _rule_on_world0("terminate", "bool", term.fn, sensors, x0, sensor_dim, world0)
    kind = np.asarray(out).dtype
    if kind != np.bool_:  # t - 0.005 (a float) would end every world whose value is not exactly 0
        raise RolloutTypeError(f"terminate(t, x) must return a bool (e.g. t > 0.005), returned {kind} "
                               f"{np.asarray(out)!r} on world 0")
    return ("jax" if _traceable(term.fn, *abs_) else "host"), sensors


def as_reward(reward) -> Reward | None:
    if reward is None or isinstance(reward, Reward):
        return reward
    if callable(reward):
        return Reward(reward)
    raise RolloutError(f"reward must be a callable fn(t, x) -> float or a Reward, got {type(reward).__name__}")


def check_reward(rew: Reward, x0: np.ndarray, sensor_dim: int, world0: int, controller_every: int | None
                 ) -> tuple[str, bool, int]:
    """(mode, passes sensordata, every), checked by calling the reward on world 0."""
    if not callable(rew.fn):
        raise RolloutError("Reward(fn): fn must be a callable")
    every = (controller_every or 1) if rew.every is None else _every("Reward.every", rew.every)
    if not isinstance(rew.units, str):
        raise RolloutError(f"Reward.units must be a string (CF units, '1' if unitless), got {rew.units!r}")
    sensors = rew.sensors or _positional(rew.fn) - takes_world(rew.fn) == 3
    out, abs_ = _rule_on_world0("reward", "number", rew.fn, sensors, x0, sensor_dim, world0)
    a = np.asarray(out)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a):
        raise RolloutTypeError(f"reward(t, x) must return a real number per world, returned {a.dtype} {a!r} on "
                               f"world 0")
    return ("jax" if _traceable(rew.fn, *abs_) else "host"), sensors, every


def wants_sensors(ctrl, terminate, reward=None) -> bool:
    """Whether a closed loop reads sensordata (then the scene is loaded keeping its sensors)."""
    term, rew = as_termination(terminate), as_reward(reward)
    return bool(isinstance(ctrl, Controller) and ctrl.sensors) or bool(
        term is not None and _rule_reads_sensors(term)) or bool(
        rew is not None and (rew.sensors or _positional(rew.fn) - takes_world(rew.fn) == 3))


def same_function_config(file_attr: str, now: str) -> bool:
    """A resume's closed loop matches its file's: the same settings (the text before ';'); the function itself
    cannot be compared (a user's code is trusted to be the same)."""
    return str(file_attr).partition(";")[0] == str(now).partition(";")[0]


def check_reset_to(reset_to: str, scene):
    """``reset_to`` checked: "x0", "draw" or "key:NAME" (a keyframe of the model)."""
    if reset_to in ("x0", "draw"):
        return reset_to
    if isinstance(reset_to, str) and reset_to.startswith("key:"):
        model = getattr(scene, "model", None)
        names = [model.key(i).name for i in range(model.nkey)] if model is not None else []
        if reset_to[4:] not in names:
            raise RolloutError(f"reset_to={reset_to!r}: no keyframe named {reset_to[4:]!r} (keyframes: {names})")
        return reset_to
    raise RolloutError(f"reset_to must be 'x0', 'draw' or 'key:NAME', got {reset_to!r}")


# -- inside the compiled chunk (one world) ---------------------------------------------------------

def _host(fn, shapes, *args):
    """``fn`` (NumPy, one world) called on the host; under vmap once per world."""
    return jax.pure_callback(fn, shapes, *args, vmap_method="sequential")


def _controller_state(ep: EpisodePlan, carry: dict):
    leaves = [carry[name].astype(dtype).reshape(shape) for name, shape, dtype in ep.leaves]
    return jax.tree_util.tree_unflatten(ep.treedef, leaves)


def _state_leaves(ep: EpisodePlan, c, like: dict, dtype) -> dict:
    return {name: jnp.asarray(v).astype(dtype).reshape(like[name].shape)
            for (name, _, _), v in zip(ep.leaves, jax.tree.leaves(c))}


def _shapes(ep: EpisodePlan):
    return jax.tree_util.tree_unflatten(ep.treedef, [jax.ShapeDtypeStruct(shape, np.dtype(dtype))
                                                     for _, shape, dtype in ep.leaves])


# A NumPy function is called on the host only where it is due (``due``): the world's result is otherwise masked,
# so a call would only cost time and repeat the user's side effects (``every`` means every).

def _call_init(ep: EpisodePlan, x, wid, due):
    assert ep.controller is not None  # called only for a run with a Controller
    init = _init_fn(ep.controller, ep.init_world)
    if ep.mode == "jax":
        return init(x, wid)
    shapes = _shapes(ep)

    def host(x, w, due):
        if not due:
            return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        return jax.tree.map(lambda v, s: np.asarray(v, s.dtype), init(np.asarray(x), int(w)), shapes)

    return _host(host, shapes, x, wid, due)


def _call_step(ep: EpisodePlan, t, x, c, sd, due, wid):
    assert ep.controller is not None  # called only for a run with a Controller
    step = ep.controller.step
    extra = ((sd,) if ep.controller.sensors else ()) + ((wid,) if takes_world(step) else ())
    if ep.mode == "jax":
        return step(t, x, c, *extra)
    shapes = (jax.ShapeDtypeStruct((ep.nu,), x.dtype), _shapes(ep))

    def host(t, x, c, due, *extra):
        if not due:
            return np.zeros(ep.nu, x.dtype), jax.tree.map(lambda v, s: np.asarray(v, s.dtype), c, shapes[1])
        u, cn = step(float(t), np.asarray(x), jax.tree.map(np.asarray, c), *_host_args(extra))
        return np.asarray(u, x.dtype), jax.tree.map(lambda v, s: np.asarray(v, s.dtype), cn, shapes[1])

    return _host(host, shapes, t, x, c, due, *extra)


def _host_args(extra) -> list:
    """sensordata as an array, the world index as an int (what a NumPy function is given)."""
    return [np.asarray(a) if np.ndim(a) else int(a) for a in extra]


def _call_terminate(ep: EpisodePlan, t, x, sd, due, wid):
    assert ep.terminate is not None  # called only for a run with a termination rule
    fn = ep.terminate.fn
    extra = ((sd,) if ep.terminate_sensors else ()) + ((wid,) if takes_world(fn) else ())
    if ep.terminate_mode == "jax":
        return jnp.asarray(fn(t, x, *extra)).astype(bool)

    def host(t, x, due, *extra):
        return np.asarray(bool(due) and bool(fn(float(t), np.asarray(x), *_host_args(extra))))

    return _host(host, jax.ShapeDtypeStruct((), np.bool_), t, x, due, *extra)


def _call_reward(ep: EpisodePlan, t, x, sd, due, wid, dtype):
    assert ep.reward is not None  # called only for a run with a reward
    fn = ep.reward.fn
    extra = ((sd,) if ep.reward_sensors else ()) + ((wid,) if takes_world(fn) else ())
    if ep.reward_mode == "jax":
        return jnp.asarray(fn(t, x, *extra)).astype(dtype)

    def host(t, x, due, *extra):
        return np.asarray(float(fn(float(t), np.asarray(x), *_host_args(extra))) if due else 0.0, dtype)

    return _host(host, jax.ShapeDtypeStruct((), dtype), t, x, due, *extra)


def draw_state(base, scale, quaternions, seed, world, episode):
    """The initial state of ``episode`` (>= 1) of ``world`` under ``reset_to="draw"``: ``base + scale * N(0, 1)``
    keyed by (seed, world, episode) (threefry: the same on every backend), quaternions renormalised."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), world), episode)
    x = base + jnp.asarray(scale, base.dtype) * jax.random.normal(key, base.shape, base.dtype)
    for lo, hi in quaternions:
        q = x[lo:hi]
        x = x.at[lo:hi].set(q / jnp.linalg.norm(q))
    return x


def _sensordata(ep: EpisodePlan, sc, t, x, u, carry):
    if not ep.sensors:
        return None
    from mjharness.adapters.outputs import evaluate_outputs

    out = evaluate_outputs(sc, ep.sensor_specs, t, x, u, carry)
    return jnp.asarray(out[ep.sensor_specs[0].name], x.dtype).reshape(-1)


def begin(ep: EpisodePlan, sc, t, k, x, carry: dict, live, wid, seed, reset):
    """Before a world's step: restart a terminated episode and run the controller.
    Returns (x, carry, u): the state and carry the step starts from (the engine's entries updated) and
    the controls it applies (None without a controller)."""
    if ep.resets:
        x_reset, cold = reset
        r = live & (carry[PENDING] > 0)
        e_next = carry[EPISODE] + 1
        if ep.draw_scale:
            x_reset = draw_state(x_reset, ep.draw_scale, ep.quaternions, seed, wid, e_next.astype(jnp.int32))
        x = jnp.where(r, x_reset.astype(x.dtype), x)
        new = {name: jnp.where(r, cold[name].astype(v.dtype), v) for name, v in carry.items() if name in cold}
        new.update({EPISODE: jnp.where(r, e_next, carry[EPISODE]),
                    EPISODE_START: jnp.where(r, jnp.asarray(k, carry[EPISODE_START].dtype), carry[EPISODE_START]),
                    PENDING: jnp.where(r, 0, carry[PENDING]).astype(carry[PENDING].dtype)})
        if ep.reward is not None:  # a new episode has no reward yet
            new.update({name: jnp.where(r, 0, carry[name]).astype(carry[name].dtype) for name in (REWARD, RETURN)})
        if ep.controller is not None:
            c0 = _state_leaves(ep, _call_init(ep, x, wid, r), carry, carry[CTRL].dtype)
            new.update({name: jnp.where(r, c0[name], carry[name]) for name in c0})
        carry = {**carry, **new}
    if ep.controller is None:  # (a ctrl(t, x) function's u is recorded by ``applied``)
        return x, carry, None
    c = _controller_state(ep, carry)
    sd = _sensordata(ep, sc, t, x, carry[CTRL], carry)
    n_in = k - carry[EPISODE_START].astype(jnp.asarray(k).dtype) if ep.terminate is not None else k
    due = (n_in % ep.controller.every) == 0
    u_new, c_new = _call_step(ep, t, x, c, sd, due & live, wid)
    u = jnp.where(due, jnp.asarray(u_new, carry[CTRL].dtype).reshape(ep.nu), carry[CTRL])
    c_new = _state_leaves(ep, c_new, carry, carry[CTRL].dtype)
    carry = {**carry, CTRL: u, **{name: jnp.where(due, v, carry[name]) for name, v in c_new.items()}}
    return x, carry, u


def applied(ep: EpisodePlan, carry: dict, u) -> dict:
    """The carry with a ctrl(t, x) function's controls of this step (``/ctrl``)."""
    if not ep.record_ctrl or u is None:
        return carry
    return {**carry, CTRL: jnp.asarray(u, carry[CTRL].dtype).reshape(carry[CTRL].shape)}


def _steps_in(ep: EpisodePlan, k, carry: dict):
    """Steps of the episode after step ``k`` (episodes start at 0 without a termination rule)."""
    return k + 1 - carry[EPISODE_START].astype(jnp.asarray(k).dtype) if ep.terminate is not None else k + 1


def end(ep: EpisodePlan, sc, t, k, x, carry: dict, ok, status, status_step, wid):
    """After a world's committed step (``ok``): the termination rule, then the reward, on the new state (the reward
    is due at a control period's end and at the step that ends an episode, so a period cut short by the rule has
    its reward too). Returns (carry, status, status_step)."""
    n_in = _steps_in(ep, k, carry)
    needs_sd = ep.reward_sensors or ep.terminate_sensors
    sd = _sensordata(ep, sc, t, x, carry.get(CTRL), carry) if needs_sd else None
    term = jnp.zeros((), bool)
    if ep.terminate is not None:
        due = ok & ((n_in % ep.terminate.every) == 0)
        term = due & _call_terminate(ep, t, x, sd, due, wid)
        if ep.on_terminate == "freeze":
            status = jnp.where(term, jnp.int8(STATUS_TERMINATED), status)
            status_step = jnp.where(term, k, status_step)
        carry = {**carry, PENDING: jnp.where(term, 1, carry[PENDING]).astype(carry[PENDING].dtype)}
    if ep.reward is not None:
        due = (ok & ((n_in % ep.reward_every) == 0)) | term
        dtype = carry[REWARD].dtype
        r = _call_reward(ep, t, x, sd, due, wid, dtype)
        carry = {**carry, REWARD: jnp.where(due, r, carry[REWARD]).astype(dtype),
                 RETURN: jnp.where(due, carry[RETURN] + r, carry[RETURN]).astype(dtype)}
    return carry, status, status_step
