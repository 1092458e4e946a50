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

This module reads a file (``h5``) and runs the engine, so it sits above both. ``mjharness.rollout.open_rollout``
gives this module's ``RolloutFile``: ``h5``'s reader with ``episode_start`` and ``replay`` as methods (``h5``
imports nothing of the engine, so its own class cannot have them).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .h5.errors import RolloutFileError
from .h5.layout import carry_slots_of_table
from .h5.reader import RolloutFile as _FileReader

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

def _int(name: str, v, f: _FileReader) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ReplayError(f"{f.path}: {name} must be an int, got {v!r}")
    return int(v)


def episode_row(f: _FileReader, world: int, episode: int) -> EpisodeRow:
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


def _single_episode(f: _FileReader, w: int) -> dict:
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


# What a file's episode starts need, built once per open file: its scene, the reset draws (compiled once, drawn for
# every world per episode index), the cold carry and the controller's jitted init. A user (or a test) asking for
# every episode's start would otherwise rebuild the scene and compile the draw and the init at each call.
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _memo(f: _FileReader, key, make):
    """``make()`` once per (open file ``f``, ``key``)."""
    memo = _MEMO.setdefault(f, {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


def _scene(f: _FileReader):
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


class IntegratorRebuildError(ValueError):
    """A file's ``integrator`` attribute does not rebuild (``rebuild_integrator``); the message says why."""


def rebuild_integrator(cfg):
    """The integrator a file's ``integrator`` attribute ``cfg`` describes: its registered name with every recorded
    option its constructor takes (named parameters, the class's ``option_names`` for its ``**options``, not its
    ``recorded_only`` entries; a recorded tableau as a ``Tableau``); ``IntegratorRebuildError`` when it names
    none, cannot be built, or the rebuilt one's configuration differs from the recorded one."""
    import inspect

    from mjharness.integrators import get_integrator
    from mjharness.integrators.tableaux import tableau_from_dict

    from .h5.attrs import integrator_config

    name = cfg.get("name") if isinstance(cfg, dict) else None
    if not isinstance(name, str):
        raise IntegratorRebuildError(f"the file's integrator attribute {cfg!r} names no registered integrator")
    try:
        cls = type(get_integrator(name))
        takes = {k for k, p in inspect.signature(cls).parameters.items() if p.kind != p.VAR_KEYWORD}
        takes |= set(getattr(cls, "option_names", ()))  # what its **options take
        takes -= set(getattr(cls, "recorded_only", ()))  # config() entries that describe, not configure
        kwargs = {k: v for k, v in cfg.items() if k in takes and k != "name"}
        if isinstance(kwargs.get("tableau"), dict):  # recorded as Tableau.to_dict()
            kwargs["tableau"] = tableau_from_dict(kwargs["tableau"])
        integ = get_integrator(name, **kwargs)
        rebuilt = integrator_config(integ)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise IntegratorRebuildError(f"the file's integrator {name!r} cannot be rebuilt ({e})") from None
    if rebuilt != cfg:
        raise IntegratorRebuildError(f"the file's integrator {name!r} does not rebuild to its recorded "
                                     f"configuration")
    return integ


def file_integrator(f: _FileReader):
    """``rebuild_integrator`` of the file's ``integrator`` attribute; ``ReplayError`` naming the file when it
    does not rebuild."""
    try:
        return rebuild_integrator(f.attrs.get("integrator") or {})
    except IntegratorRebuildError as e:
        raise ReplayError(f"{f.path}: {e}; pass integrator= (the run's integrator object)") from None


def _cold_carry(f: _FileReader, scene, integ) -> dict:
    """The scene's and the integrator's cold carry of one world {name: (*shape,)} (``engine.inputs.carry_plan``):
    what a reset episode restarts with."""
    from .engine.inputs import carry_plan

    _, carry0 = carry_plan(scene, integ, float(f.attrs["dt"]), 1)
    return {name: np.asarray(v[0], np.float64) for name, v in carry0.items()}


def _carry_row(f: _FileReader, flat: np.ndarray) -> dict:
    """One world's flat carry (nc,) by name, each entry in its declared shape."""
    slots = carry_slots_of_table(f.table("layout"))
    return {name: np.array(flat[off:off + size]).reshape(shape) for name, (shape, off, size) in slots.items()}


class ResetStates:
    """The states reset episodes restart from (``loop_plan.check_episodes``'s reset inputs, drawn as
    ``HostLoop.begin`` draws): ``states(w, e)`` the state episode ``e`` (>= 1) of local world ``w`` restarts
    from. The scene is built once (``scene=`` or the file's) and, for ``reset_to="draw"``, the draw compiled once
    and each episode index drawn for every world in one call, kept: an exporter asks for every episode."""

    def __init__(self, f: _FileReader, scene=None):
        self.f, self._scene = f, scene
        self._draw: Any = None  # (jitted draw, base state)
        self.reset_to = str(f.attrs.get("reset_to") or "x0")
        self._drawn: dict[int, np.ndarray] = {}

    @property
    def scene(self):
        if self._scene is None:
            self._scene = _scene(self.f)
        return self._scene

    def __call__(self, w: int, e: int) -> np.ndarray:
        f, reset_to = self.f, self.reset_to
        if reset_to == "x0":
            return np.array(f.x0[w], np.float64)
        if reset_to.startswith("key:"):
            try:
                return np.asarray(self.scene.reset(keyframe=reset_to[4:]), np.float64)
            except KeyError as err:
                raise ReplayError(f"{f.path}: reset_to={reset_to!r}: {err}") from None
        if reset_to != "draw":
            raise ReplayError(f"{f.path}: reset_to={reset_to!r} is none of 'x0', 'draw', 'key:NAME'")
        if e not in self._drawn:
            self._drawn[e] = self._draw_all(e)
        return np.array(self._drawn[e][w], np.float64)

    def _draw_all(self, e: int) -> np.ndarray:
        import jax.numpy as jnp

        f = self.f
        if self._draw is None:
            self._draw = self._compile()
        draw, base = self._draw
        Bf, offset = f.batch, int(f.attrs.get("world_offset", 0) or 0)
        # As HostLoop draws: jit(vmap(...)) over the file's whole batch. XLA vectorises the normal transform by
        # batch size: a batch of 1 differs from a batch of 8 in the last bit.
        x = draw(jnp.broadcast_to(jnp.asarray(base), (Bf, base.size)), jnp.asarray(offset + np.arange(Bf), jnp.int64),
                 jnp.full((Bf,), e, jnp.int32))
        return np.asarray(x, np.float64)

    def _compile(self):
        import jax

        from .engine.episodes import draw_state
        from .engine.inputs import _perturb_scale
        from .engine.scene_view import SceneView

        a, scene = self.f.attrs, self.scene
        view = SceneView.of(scene)
        base = np.asarray(view.x0() if view.x0 else scene.layout.default_values(), np.float64)
        scale = tuple(float(v) for v in _perturb_scale(view, base.size, float(a.get("perturb", 0.0)),
                                                       float(a.get("perturb_qpos", 0.0))))
        quats = tuple((r.value_slice.start, r.value_slice.stop) for r in scene.layout.special)
        seed = int(a["seed"])
        return jax.jit(jax.vmap(lambda b, wi, ei: draw_state(b, scale, quats, seed, wi, ei))), base


def _controller_state(f: _FileReader, x: np.ndarray, wid: int, init, leaves: dict) -> tuple[dict, dict]:
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
            init = _memo(f, "recorded_init", lambda: resolve(f.path, "controller.init", rec))
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

        # keyed by identity (a callable object need not be hashable); the memo's closure keeps ``init`` alive
        batched = _memo(f, ("init", id(init), n_pos >= 2), lambda: jax.jit(jax.vmap(fn)))
        c = jax.tree.map(lambda v: np.asarray(v)[0], batched(jnp.asarray(x)[None], jnp.asarray([wid], jnp.int64)))
    else:
        c = fn(x.copy(), wid)
    values = [np.asarray(v, np.float64) for v in jax.tree.leaves(c)]
    names = list(leaves)
    if len(values) != len(names):
        raise ReplayError(f"{f.path}: the controller's init returns {len(values)} state leaves, the file carries "
                          f"{len(names)} ({names})")
    return {k: v.reshape(leaves[k].shape) for k, v in zip(names, values)}, {}


def episode_start(f: _FileReader, world: int, episode: int, *, init=None) -> dict:
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
    scene = _memo(f, "scene", lambda: _scene(f))
    x = _memo(f, "resets", lambda: ResetStates(f, scene))(w, row.episode)
    cold = _memo(f, "cold_carry", lambda: _cold_carry(f, scene, file_integrator(f)))
    carry = {k: np.array(v) for k, v in cold.items() if k in carry0}
    carry.update({CTRL: np.zeros_like(carry0[CTRL])} if CTRL in carry0 else {})
    carry.update({EPISODE: np.float64(row.episode), EPISODE_START: np.float64(row.start_step),
                  PENDING: np.float64(0.0)})
    leaves = {k: v for k, v in carry0.items() if k.startswith(CONTROLLER)}
    wid = int(a.get("world_offset", 0) or 0) + w
    c, missing = _controller_state(f, x, wid, init, leaves)
    carry.update(c)
    carry = {k: np.asarray(carry[k], np.float64).reshape(np.shape(carry0[k])) for k in carry0 if k in carry}
    return dict(step=row.start_step, t=t0 + np.float64(row.start_step) * dt, x=x, carry=carry, missing=missing)


# -- the episode simulated again --------------------------------------------------------------------------

def _sample_steps(row: EpisodeRow, R: int) -> np.ndarray:
    """The global step after which each of the episode's samples was taken; a frozen world's samples past its
    end hold its state after ``end_step``."""
    steps = (row.samples.astype(np.int64) + 1) * R - 1
    return np.minimum(steps, row.end_step) if row.end_step >= 0 else steps


def _held_controls(f: _FileReader, row: EpisodeRow, last: int, every: int) -> np.ndarray:
    """The controls of steps ``start_step .. last`` (steps, nu) from ``/ctrl``: a controller runs at the episode's
    steps ``start + i * every`` and holds its controls for ``every`` steps, so each hold is read from the first
    sample taken within it; refused when a hold has no sample (record_every > every)."""
    R, k = int(f.attrs["record_every"]), row.start_step
    steps = np.arange(k, last + 1)
    due = k + (steps - k) // every * every                    # the call whose controls step s applies
    j = (due + R) // R - 1                                     # the first sample taken at or after that call
    seen = (j + 1) * R - 1
    lost = seen > np.minimum(due + every - 1, last)
    if lost.any():
        s = int(steps[np.argmax(lost)])
        raise ReplayError(f"{f.path}: world {row.world} episode {row.episode}: the controls of step {s} are not in "
                          f"the file (the controller's every={every} holds them {every} steps, samples are "
                          f"record_every={R} steps apart): replay needs record_every <= every")
    return np.asarray(f.read("carry", np.s_[:f.samples, row.world]))[j][:, _ctrl_slice(f)]


def _ctrl_slice(f: _FileReader) -> slice:
    shape, off, size = carry_slots_of_table(f.table("layout"))[CTRL]
    return slice(off, off + size)


def _controls(f: _FileReader, row: EpisodeRow, last: int) -> np.ndarray | None:
    """The controls (steps, nu) the run applied during the episode's steps up to ``last``; None: it had none."""
    a = f.attrs
    kind = str(a.get("ctrl") or "none")
    if kind.startswith("array"):
        if "inputs/ctrl" not in f.h5:
            raise ReplayError(f"{f.path}: the run's controls were an array this file does not hold (no "
                              f"/inputs/ctrl): world {row.world} episode {row.episode} cannot be replayed")
        return np.asarray(f.read("inputs/ctrl", np.s_[row.world, row.start_step:last + 1]), np.float64)
    if kind == "controller" or kind.startswith("callable"):
        if CTRL not in carry_slots_of_table(f.table("layout")):
            raise ReplayError(f"{f.path}: the run's controls came from a function and the file does not record "
                              f"them (no /ctrl): world {row.world} episode {row.episode} cannot be replayed")
        every = _flags(a.get("controller"))["every"] if kind == "controller" else 1
        return _held_controls(f, row, last, every)
    return None


def _check_replayable(f: _FileReader, row: EpisodeRow, integ) -> None:
    from mjharness.integrators.names import IntegratorKind

    where = f"{f.path}: world {row.world} episode {row.episode}"
    if row.end == "failed":
        raise ReplayError(f"{where} ended 'failed' at step {row.end_step} (a non-finite state or control): its "
                          f"last samples hold the frozen last good state, not simulated ones")
    if not len(row.samples):
        raise ReplayError(f"{where} has no recorded sample to replay")
    if getattr(integ, "kind", None) == IntegratorKind.STOCHASTIC:
        raise ReplayError(f"{where}: the integrator {integ.name!r} is stochastic: its noise is keyed by the run's "
                          f"global step and world, which a replay of one episode does not reproduce")


def replay(f: _FileReader, world: int, episode: int, *, check: bool = True, integrator=None,
           backend: str | None = None, init=None) -> dict:
    """Simulate ``episode`` of local ``world`` again from the file alone and return its samples.

    The episode runs with ``rollout()``: one world from ``episode_start`` (state, carry with the warm start),
    for the steps up to the episode's last sample, with the controls the run applied (``/ctrl`` held as the
    controller held them; ``/inputs/ctrl`` for array controls), the world's ``/model_params``, the file's
    model (``/model/mjb``), integrator (``integrator=`` overrides it), timestep and backend (``backend=``
    overrides it). Returns ``{"world", "episode", "samples", "steps", "time", "x", "ctrl"}``: the file's
    sample indices of the episode, the global step after which each was taken, its time (as the file's
    ``/time``), the replayed states (m, n) and the controls applied during those steps (m, nu) (None without
    controls).

    ``check``: compare with the file's samples and raise ``ReplayMismatchError`` naming the first differing
    sample, step, state and world. Bit for bit (``np.array_equal``) when the run and the replay are both on
    MuJoCo C (``backend="mujoco"``); otherwise within ``np.allclose(rtol=RTOL, atol=ATOL)`` (MJX and Warp compile
    for their batch size: a batch of one is not the run's batch to the last bit). Refused (``ReplayError``,
    naming why): a world or episode the file lacks, an episode that began between two samples, a failed
    episode, controls the file does not hold (no ``/ctrl``, or a controller's ``every`` shorter than
    ``record_every``), a stochastic integrator, a System run, a file without its binary model.
    """
    from .engine import rollout

    row = episode_row(f, world, episode)
    a = f.attrs
    integ = integrator if integrator is not None else file_integrator(f)
    _check_replayable(f, row, integ)
    start = episode_start(f, world, episode, init=init)
    R = int(a["record_every"])
    steps_at = _sample_steps(row, R)
    last = int(steps_at.max())
    u = _controls(f, row, last)
    scene = _scene(f)
    cold = _cold_carry(f, scene, integ)
    carry = {k: np.asarray(start["carry"][k])[None] for k in cold}
    params = {k: np.asarray(v)[row.world:row.world + 1] for k, v in f.model_params.items()}
    run_backend = backend or a.get("backend") or "mujoco"
    r = rollout(scene, integ, x0=start["x"][None], carry=carry or None, ctrl=None if u is None else u[None],
                model_params=params or None, dt=float(a["dt"]), steps=last - row.start_step + 1,
                t0=float(start["t"]), record_every=1, seed=int(a["seed"]), backend=run_backend,
                quaternion_update=a.get("quaternion_update") or "quaternion", progress=False)
    at = steps_at - row.start_step
    out = dict(world=row.world, episode=row.episode, samples=row.samples, steps=steps_at,
               time=np.float64(a.get("t0", 0.0)) + (row.samples.astype(np.int64) + 1) * R * np.float64(a["dt"]),
               x=np.asarray(r.x[at, 0], np.float64), ctrl=None if u is None else u[at])
    if check:
        exact = batch_invariant(run_backend) and batch_invariant(a.get("backend"))
        compare(f, row, out, exact=exact)
    return out


def compare(f: _FileReader, row: EpisodeRow, out: dict, *, exact: bool) -> None:
    """Raise ``ReplayMismatchError`` at the first of the episode's samples whose replayed state differs from the
    file's (bit for bit when ``exact``, else ``np.allclose(rtol=RTOL, atol=ATOL)``)."""
    xf = np.asarray(f.read("x", np.s_[:f.samples, row.world]), np.float64)[row.samples]
    xr = out["x"]
    same = (xf == xr) | (np.isnan(xf) & np.isnan(xr)) if exact else np.isclose(xr, xf, rtol=RTOL, atol=ATOL)
    if same.all():
        return
    i, col = (int(v) for v in np.argwhere(~same)[0])
    name = next((nm for nm in f.layout.names if col in range(*f.layout[nm].value_slice.indices(xf.shape[1]))),
                f"x[{col}]")
    j, s = int(row.samples[i]), int(out["steps"][i])
    how = "bit for bit" if exact else f"within rtol={RTOL:g}, atol={ATOL:g}"
    raise ReplayMismatchError(
        f"{f.path}: the replay of world {row.world} episode {row.episode} differs from the file at sample {j} "
        f"(step {s}, t={out['time'][i]:.9g}), state {name!r} (x[{col}]): file {xf[i, col]!r}, replay "
        f"{xr[i, col]!r} ({how}; {int((~same).any(axis=1).sum())} of the episode's {len(xr)} samples differ)",
        world=row.world, episode=row.episode, sample=j, step=s, state=name, file_value=float(xf[i, col]),
        replay_value=float(xr[i, col]))


def batch_invariant(backend) -> bool:
    """Whether a run on ``backend`` (a name; None: unknown) gives a world the numbers it would have alone (MuJoCo C:
    then a replay is compared bit for bit)."""
    from mjharness.adapters.backends import BackendError, get_backend

    try:
        return bool(get_backend(str(backend)).caps.batch_invariant)
    except BackendError:  # no backend recorded (None), or one this installation does not know
        return False


class RolloutFile(_FileReader):
    """A rollout file read back (``h5.RolloutFile``: every dataset, attribute and table), which can also say where
    each episode starts and simulate one again: what ``mjharness.rollout.open_rollout`` returns."""

    def episode_start(self, world: int, episode: int, *, init=None) -> dict:
        """Where ``episode`` of ``world`` starts: ``{"step", "t", "x" (n,), "carry" {name: array}, "missing"}``
        (``episode_start``): episode 0 from ``/x0`` and ``/carry0``, a reset episode from what the engine restarts
        the world with (``reset_to``, the cold warm start, ``init(x, world)``)."""
        return episode_start(self, world, episode, init=init)

    def replay(self, world: int, episode: int, *, check: bool = True, integrator=None, backend: str | None = None,
               init=None) -> dict:
        """``episode`` of ``world`` simulated again from this file alone (``replay``): its start state and warm
        start, the recorded controls, the world's model fields, the file's model and integrator. Returns
        ``{"world", "episode", "samples", "steps", "time", "x", "ctrl"}``; ``check`` compares the states with the
        file's samples (bit for bit on MuJoCo C) and raises ``ReplayMismatchError`` naming the first differing
        sample, state and world."""
        return replay(self, world, episode, check=check, integrator=integrator, backend=backend, init=init)


def open_rollout(path) -> RolloutFile:
    """Open a rollout file for reading: a ``RolloutFile`` (every dataset, attribute and table; ``episodes``,
    ``episode_start``, ``replay``)."""
    return RolloutFile(path)
