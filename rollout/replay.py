"""One episode of a rollout file: where it starts, and its states simulated again from the file alone.

``episode_start(f, world, episode)`` says what an episode of a closed loop (``rollout(ctrl=Controller(...),
terminate=..., on_terminate="reset")``, docs/episodes.md) starts from: its first step's global index and time,
the state and the carry. Episode 0 starts from the run's ``/x0`` and ``/carry0`` rows; a reset episode from what
the engine restarts a world with (``engine.episodes.begin``, ``engine.host_loop.HostLoop.begin``): the state of
``reset_to`` ("x0": the world's ``/x0``; "draw": ``episodes.draw_state`` keyed by the file's seed, the world's
global index and the episode; "key:NAME": the model's keyframe), the integrator's cold carry (warm start zeros),
``episode``/``episode_start`` set, ``terminated`` 0, ``ctrl`` zeros (the controller overwrites it before the
episode's first step uses it) and the controller state ``init(x, world)``.

``replay(f, world, episode)`` runs that episode again with ``rollout()``: one world from the episode's start
state and carry, the controls the file recorded (``/ctrl`` held as the controller held them, or the run's
``/inputs/ctrl``), the world's own model fields (``/model_params``), the file's model (``/model/mjb``),
integrator, timestep and backend; with ``check`` its states are compared with the file's samples of that
episode, bit for bit when the run and the replay are MuJoCo C (``mj_step`` on the same numbers gives the same
numbers).

This module reads a file (``h5``) and runs the engine, so it sits above both; ``RolloutFile.episode_start`` and
``RolloutFile.replay`` import it on use (``h5`` does not import the engine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .h5.errors import RolloutFileError
from .h5.layout import carry_slots_of_table

if TYPE_CHECKING:
    from .h5.reader import RolloutFile

# The closed loop's own carry entries (engine.episodes; kept literal: importing the engine loads JAX).
CTRL, EPISODE, EPISODE_START, PENDING, CONTROLLER = "ctrl", "episode", "episode_start", "terminated", "controller"
# A replay on MuJoCo C of a run on MuJoCo C is compared bit for bit; anything else (MJX, Warp: XLA's or CUDA's
# arithmetic at another batch size) within these tolerances (np.allclose).
RTOL, ATOL = 1e-9, 1e-12


class ReplayError(RolloutFileError):
    """An episode that cannot be replayed (or located): names the file, world, episode and why."""


class ReplayMismatchError(ReplayError):
    """A replayed episode differs from the file's samples: names the first differing sample and state.

    Attributes: ``world``, ``episode``, ``sample`` (index into the file's samples), ``step`` (global step),
    ``state`` (state name), ``file_value``, ``replay_value``."""

    def __init__(self, message: str, **where: Any):
        super().__init__(message)
        self.world, self.episode, self.sample = where.get("world"), where.get("episode"), where.get("sample")
        self.step, self.state = where.get("step"), where.get("state")
        self.file_value, self.replay_value = where.get("file_value"), where.get("replay_value")


@dataclass(frozen=True)
class EpisodeRow:
    """One episode of one (local) world as the file records it (``h5.episodes.episode_table``)."""

    world: int
    episode: int
    start_step: int
    end_step: int
    end: str
    samples: np.ndarray   # indices of the samples holding the episode's states


# -- locating an episode ---------------------------------------------------------------------------------

def _int(name: str, v, f: RolloutFile) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ReplayError(f"{f.path}: {name} must be an int, got {v!r}")
    return int(v)


def episode_row(f: RolloutFile, world: int, episode: int) -> EpisodeRow:
    """The row of ``episode`` of local ``world`` (0 <= world < batch); a file without a termination rule has one
    episode per world, episode 0 (steps 0 .. the last recorded, or the failure)."""
    w, e = _int("world", world, f), _int("episode", episode, f)
    if not 0 <= w < f.batch:
        raise ReplayError(f"{f.path}: world {w} is not one of the file's {f.batch} worlds (0..{f.batch - 1})")
    rule = EPISODE in carry_slots_of_table(f.table("layout"))
    rows = f.episodes(w) if rule else [_single_episode(f, w)]
    if not 0 <= e < len(rows):
        why = "" if rule else ": the run had no termination rule"
        raise ReplayError(f"{f.path}: world {w} has no episode {e} (it has episodes 0..{len(rows) - 1}{why})")
    r = rows[e]
    return EpisodeRow(w, e, int(r["start_step"]), int(r["end_step"]), str(r["end"]), np.asarray(r["samples"]))


def _single_episode(f: RolloutFile, w: int) -> dict:
    """The one episode of a world of a run without a termination rule."""
    a, T = f.attrs, f.samples
    R = int(a["record_every"])
    status, status_step = int(f.status[w]), int(f.status_step[w])
    samples = np.arange(T)
    if status != 0:  # a frozen world: its samples stop with the first at or after the failure
        samples = samples[(samples + 1) * R - 1 < status_step + R]
        return dict(start_step=0, end_step=status_step, end="failed", samples=samples)
    return dict(start_step=0, end_step=T * R - 1, end="truncated" if f.complete else "running", samples=samples)


# -- where an episode starts ---------------------------------------------------------------------------

def _flags(text) -> dict:
    """``every=2 sensors=True jax; ...`` of a controller/terminate attribute: {"every": 2, "sensors": True,
    "mode": "jax"}."""
    head = str(text or "").partition(";")[0]
    m = dict(re.findall(r"(every|sensors)=(\w+)", head))
    mode = "host" if re.search(r"\bhost\b", head) else "jax"
    return dict(every=int(m.get("every", 1)), sensors=m.get("sensors") == "True", mode=mode)


def _scene(f: RolloutFile):
    """The file's model as the run's scene (its binary model, quaternion policy, on MuJoCo C)."""
    from mjharness.adapters import MjScene

    a = f.attrs
    if a.get("system"):
        raise ReplayError(f"{f.path}: a System run (several models): the file holds its first model only")
    if f.mjb is None:
        raise ReplayError(f"{f.path}: no /model/mjb (written before the binary model was stored, or not a MuJoCo "
                          f"scene): the model that ran is not in the file bit for bit")
    return MjScene(f.model("mjb"), quaternion_update=a.get("quaternion_update") or "quaternion",
                   backend=a.get("backend") or "mujoco")


def file_integrator(f: RolloutFile):
    """The integrator the file's ``integrator`` attribute describes (its registered name and recorded options),
    refused when the rebuilt one's configuration differs from the recorded one."""
    import inspect

    from mjharness.integrators import get_integrator

    from .h5.attrs import integrator_config

    cfg = f.attrs.get("integrator") or {}
    name = cfg.get("name") if isinstance(cfg, dict) else None
    if not isinstance(name, str):
        raise ReplayError(f"{f.path}: the integrator attribute {cfg!r} names no registered integrator; pass "
                          f"integrator= (the run's integrator object)")
    try:
        probe = get_integrator(name)
        takes = inspect.signature(type(probe)).parameters
        integ = get_integrator(name, **{k: v for k, v in cfg.items() if k in takes and k != "name"})
    except (KeyError, TypeError, ValueError) as e:
        raise ReplayError(f"{f.path}: the file's integrator {name!r} cannot be rebuilt ({e}); pass "
                          f"integrator=") from None
    if integrator_config(integ) != cfg:
        raise ReplayError(f"{f.path}: the file's integrator {name!r} does not rebuild to its recorded "
                          f"configuration; pass integrator= (the run's integrator object)")
    return integ


def _cold_carry(f: RolloutFile, scene, integ) -> dict:
    """The scene's and the integrator's cold carry of one world {name: (*shape,)} (``engine.inputs.carry_plan``):
    what a reset episode restarts with."""
    from .engine.inputs import carry_plan

    _, carry0 = carry_plan(scene, integ, float(f.attrs["dt"]), 1)
    return {name: np.asarray(v[0], np.float64) for name, v in carry0.items()}


def _carry_row(f: RolloutFile, flat: np.ndarray) -> dict:
    """One world's flat carry (nc,) by name, each entry in its declared shape."""
    slots = carry_slots_of_table(f.table("layout"))
    return {name: np.array(flat[off:off + size]).reshape(shape) for name, (shape, off, size) in slots.items()}


def _reset_state(f: RolloutFile, w: int, e: int, scene) -> np.ndarray:
    """The state episode ``e`` (>= 1) of local world ``w`` restarts from (``loop_plan.check_episodes``'s reset
    inputs, drawn as ``HostLoop.begin`` draws)."""
    a = f.attrs
    reset_to = str(a.get("reset_to") or "x0")
    if reset_to == "x0":
        return np.array(f.x0[w], np.float64)
    if reset_to.startswith("key:"):
        try:
            return np.asarray(scene.reset(keyframe=reset_to[4:]), np.float64)
        except KeyError as err:
            raise ReplayError(f"{f.path}: reset_to={reset_to!r}: {err}") from None
    if reset_to != "draw":
        raise ReplayError(f"{f.path}: reset_to={reset_to!r} is none of 'x0', 'draw', 'key:NAME'")
    import jax
    import jax.numpy as jnp

    from .engine.episodes import draw_state
    from .engine.inputs import _perturb_scale
    from .engine.scene_view import SceneView

    view = SceneView.of(scene)
    base = np.asarray(view.x0() if view.x0 else scene.layout.default_values(), np.float64)
    scale = tuple(float(v) for v in _perturb_scale(view, base.size, float(a.get("perturb", 0.0)),
                                                   float(a.get("perturb_qpos", 0.0))))
    quats = tuple((r.value_slice.start, r.value_slice.stop) for r in scene.layout.special)
    seed, offset = int(a["seed"]), int(a.get("world_offset", 0) or 0)
    # As HostLoop draws: jit(vmap(...)) over the file's whole batch, this world's row taken. XLA vectorises the
    # normal transform by batch size: a batch of 1 differs from a batch of 8 in the last bit.
    draw = jax.jit(jax.vmap(lambda b, wi, ei: draw_state(b, scale, quats, seed, wi, ei)))
    Bf = f.batch
    x = draw(jnp.broadcast_to(jnp.asarray(base), (Bf, base.size)), jnp.asarray(offset + np.arange(Bf), jnp.int64),
             jnp.full((Bf,), e, jnp.int32))
    return np.asarray(x[w], np.float64)


def _controller_state(f: RolloutFile, x: np.ndarray, wid: int, init, leaves: dict) -> tuple[dict, dict]:
    """({carry name: value}, {carry name: why missing}) of the controller state ``init(x, world)`` a reset
    episode starts with; ``init`` None: the file's recorded ``controller.init`` imported again (``/code``)."""
    if not leaves:
        return {}, {}
    if init is None:
        from .h5.provenance import resolve

        rec = f.code.get("controller.init")
        if rec is None:
            return {}, {k: "the file does not record the controller's init (/code); pass init=" for k in leaves}
        try:
            init = resolve(f.path, "controller.init", rec)
        except RolloutFileError as e:
            return {}, {k: f"{e}; pass init=" for k in leaves}
    import inspect

    import jax

    try:
        n_pos = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                    for p in inspect.signature(init).parameters.values())
    except (TypeError, ValueError):
        n_pos = 2
    fn = (lambda x_, w_: init(x_, w_)) if n_pos >= 2 else (lambda x_, w_: init(x_))
    if _flags(f.attrs.get("controller"))["mode"] == "jax":  # as HostLoop calls JAX code: jit(vmap(init))
        import jax.numpy as jnp

        c = jax.tree.map(lambda v: np.asarray(v)[0],
                         jax.jit(jax.vmap(fn))(jnp.asarray(x)[None], jnp.asarray([wid], jnp.int64)))
    else:
        c = fn(x.copy(), wid)
    values = [np.asarray(v, np.float64) for v in jax.tree.leaves(c)]
    names = list(leaves)
    if len(values) != len(names):
        raise ReplayError(f"{f.path}: the controller's init returns {len(values)} state leaves, the file carries "
                          f"{len(names)} ({names})")
    return {k: v.reshape(leaves[k].shape) for k, v in zip(names, values)}, {}


def episode_start(f: RolloutFile, world: int, episode: int, *, init=None) -> dict:
    """Where ``episode`` of local ``world`` starts: ``{"step", "t", "x", "carry", "missing"}``.

    ``step``: the global index of its first step; ``t``: its start time (``t0 + step * dt``, as the engine
    computes it); ``x`` (n,): the state it starts from; ``carry`` ({name: array}, the file's carry entries): the
    carry its first step begins with; ``missing`` ({name: why}): carry entries that cannot be known from the
    file (a reset episode's controller state when the controller's ``init`` cannot be imported again; pass
    ``init=``), left out of ``carry``. Episode 0 starts from ``/x0`` and ``/carry0``; a reset episode as
    ``engine.episodes.begin`` restarts a world (module docstring). Refused (``ReplayError``): a world or
    episode the file does not have, and an episode that began between two samples (``start_step`` -1)."""
    row = episode_row(f, world, episode)
    a = f.attrs
    t0, dt = np.float64(a.get("t0", 0.0)), np.float64(a["dt"])
    if row.start_step < 0:
        raise ReplayError(f"{f.path}: episode {row.episode} of world {row.world} began and ended between two "
                          f"samples (record_every={a['record_every']}): the file does not say at which step it "
                          f"started")
    w = row.world
    carry0 = _carry_row(f, f.carry0[w]) if f.carry_layout else {}
    if row.episode == 0:
        return dict(step=row.start_step, t=t0 + np.float64(row.start_step) * dt, x=np.array(f.x0[w], np.float64),
                    carry=carry0, missing={})
    scene = _scene(f)
    x = _reset_state(f, w, row.episode, scene)
    carry = {k: v for k, v in _cold_carry(f, scene, file_integrator(f)).items() if k in carry0}
    carry.update({CTRL: np.zeros_like(carry0[CTRL])} if CTRL in carry0 else {})
    carry.update({EPISODE: np.float64(row.episode), EPISODE_START: np.float64(row.start_step),
                  PENDING: np.float64(0.0)})
    leaves = {k: v for k, v in carry0.items() if k.startswith(CONTROLLER)}
    wid = int(a.get("world_offset", 0) or 0) + w
    c, missing = _controller_state(f, x, wid, init, leaves)
    carry.update(c)
    carry = {k: np.asarray(carry[k], np.float64).reshape(np.shape(carry0[k])) for k in carry0 if k in carry}
    return dict(step=row.start_step, t=t0 + np.float64(row.start_step) * dt, x=x, carry=carry, missing=missing)
