"""The compiled chunk: the whole batch advanced by ``samples * record_every`` steps in one call.

An outer ``lax.scan`` over the samples of the chunk, an inner ``lax.scan`` over the ``record_every``
steps between samples and a ``vmap`` over worlds inside, so device memory is one chunk of samples
whatever ``steps`` is. Inputs and outputs are named pytrees (``WorldState``, ``ChunkInput``,
``ChunkOutput``): the carry of the loop is ``WorldState`` and is donated, so each chunk's output
state reuses the input's buffers.

Every step knows its global index k (time ``t0 + k dt``); steps with ``k >= steps`` (the tail of the
last chunk) change nothing, so results do not depend on the chunk size, the device count or on
resuming. Stochastic integrators draw ``prng.step_key(seed, world, k)`` with global indices. A world
whose step fails (non-finite state, adaptive underflow, ...) is frozen at its last good state and
carry; ``status_step`` is the global index of that step.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.adapters.backends.base import ChunkStatic, CtrlMode  # ChunkStatic: as backends are handed it
from mjharness.adapters.contacts import WORLD_AXIS
from mjharness.integrators import STATUS_NONFINITE, STATUS_NONFINITE_CTRL, IntegratorKind
from mjharness.integrators.names import OutputSemantics
from mjharness.integrators.prng import step_key

from .. import cache
from . import episodes as _ep


class WorldState(NamedTuple):
    """What one chunk hands to the next, per world (leading axis B)."""

    x: Any               # (B, n) float64 state values
    carry: dict          # name -> (B, *shape): carried, not integrated (solver warm start, next h, ...)
    status: Any          # (B,) int8 ``Status`` code; 0 while the world runs
    status_step: Any     # (B,) int64 global index of the failing step, -1 while ok


class StepConstants(NamedTuple):
    t0: Any              # () float64 time of step 0
    dt: Any              # () float64 step (adaptive: output interval)
    steps: Any           # () int64 total steps; later steps are masked
    seed: Any            # () int64 PRNG seed of stochastic integrators


class ChunkInput(NamedTuple):
    k0: Any              # () int64 global index of the chunk's first step
    consts: StepConstants
    wids: Any            # (B,) int64 global world index (pad worlds repeat the last one)
    ctrl: Any            # (chunk, B, nu) per-step controls, or a () placeholder
    params: tuple        # per-world model fields, each (B, *field shape)
    reset: tuple = ()    # (x (B, n), cold carry {name: (B, ...)}) an episode restarts from (episodes.py), or ()


class ChunkOutput(NamedTuple):
    state: WorldState    # after the chunk
    xs: Any              # (S, B, n) the state after each recorded step
    carries: dict        # name -> (S, B, *shape): the carry after each recorded step
    outputs: dict = {}   # name -> (S, B, *shape): recorded outputs (adapters.outputs), {} when none


for _t in (WorldState, StepConstants, ChunkInput, ChunkOutput):  # so jax.export can (de)serialize them
    jax.export.register_namedtuple_serialization(_t, serialized_name=f"mjharness.engine.{_t.__name__}")


def world_scene(scene, names, params):
    """The scene of one world with its per-world model fields: ``scene.with_params`` (an MjScene: its backend
    decides how, MJX model fields or MuJoCo C per-world fields), else an MJX model replaced (a user's model)."""
    if not names:
        return scene
    if callable(getattr(scene, "with_params", None)):
        return scene.with_params(dict(zip(names, params)))
    return scene.with_model(scene.mjx_model.tree_replace(dict(zip(names, params))))


def _outputs_batched(scene, st: ChunkStatic):
    """(x, carry, t, u, params) batched over worlds -> {name: (B, ...)}: the outputs of every world."""
    from mjharness.adapters.outputs import evaluate_outputs

    names = [p for p, _ in st.params]

    def world(x, carry, t, u, params):
        sc = world_scene(scene, names, params)
        return evaluate_outputs(sc, st.outputs, t, x, u, carry)

    # Named: MuJoCo Warp's shared contact arena is read by world index (adapters.contacts.WORLD_AXIS).
    u_axis = 0 if st.ctrl_mode in (CtrlMode.ARRAY, CtrlMode.CONTROLLER) else None
    return jax.vmap(world, in_axes=(0, 0, None, u_axis, 0), axis_name=WORLD_AXIS)


def _integrator_carry(st: ChunkStatic) -> tuple:
    """The carry entries of the scene and the integrator (not a closed loop's, ``episodes.EpisodePlan.carry_spec``):
    what the integrator steps with and what a reset makes cold."""
    loop = {name for name, _ in st.episodes.carry_spec()} if st.episodes is not None else set()
    return tuple(name for name, _ in st.carry if name not in loop)


def _advance_world(scene, st: ChunkStatic):
    """One step of one world: (state of the world, k, constants, ...) -> state of the world."""
    integ, kind, mode, ctrl_fn, ep = st.integ, st.kind, st.ctrl_mode, st.ctrl_fn, st.episodes
    names = [p for p, _ in st.params]
    integ_names = _integrator_carry(st)
    threaded = bool(integ_names)

    def world(x, carry, status, status_step, k, c: StepConstants, wid, u, params, reset):
        sc = world_scene(scene, names, params)
        t = c.t0 + k * c.dt
        live = (k < c.steps) & (status == 0)
        x_before, carry_before = x, carry
        if ep is not None:  # a new episode where the last one ended; the controller's u (episodes.py)
            x, carry, u_loop = _ep.begin(ep, sc, t, k, x, carry, live, wid, c.seed, reset)
            u = u_loop if mode == CtrlMode.CONTROLLER else u
        if mode == CtrlMode.CALLABLE:
            u = ctrl_fn(t, x, wid) if _ep.takes_world(ctrl_fn) else ctrl_fn(t, x)
            carry = _ep.applied(ep, carry, u) if ep is not None else carry
        elif mode == CtrlMode.NONE:
            u = None
        cin = {n: carry[n] for n in integ_names} if threaded else None  # nothing carried: None
        if callable(getattr(sc, "pre_step", None)):  # a System's per-model pre-step hooks
            x = sc.pre_step(t, x)
        key = step_key(c.seed, wid, k) if kind == IntegratorKind.STOCHASTIC else None  # global indices
        xn, cn, code = integ.integrate(sc, t, c.dt, x, u, cin, key)  # one contract, every kind (integrators/base.py)
        cn = {**carry, **(cn or {})} if threaded else carry
        xn = jnp.asarray(xn, x.dtype)
        code = jnp.asarray(code).astype(jnp.int8)
        if u is not None and mode != CtrlMode.ARRAY:  # a function's control (arrays are checked before the run)
            code = jnp.where(code != 0, code, jnp.where(jnp.all(jnp.isfinite(u)), 0, STATUS_NONFINITE_CTRL)
                             .astype(jnp.int8))
        code = jnp.where(code != 0, code, jnp.where(jnp.all(jnp.isfinite(xn)), 0, STATUS_NONFINITE).astype(jnp.int8))
        ok = live & (code == 0)
        fail = live & (code != 0)
        x = jnp.where(ok, xn, x_before)  # a failed step leaves the world as it was before it, carry included
        carry = jax.tree.map(lambda new, old: jnp.where(ok, jnp.asarray(new, old.dtype), old), cn, carry_before)
        status, status_step = jnp.where(fail, code, status), jnp.where(fail, k, status_step)
        if ep is not None:  # the termination rule on the committed state
            carry, status, status_step = _ep.end(ep, sc, t + c.dt, k, x, carry, ok, status, status_step, wid)
        return x, carry, status, status_step

    u_axis = 0 if mode == CtrlMode.ARRAY else None
    return jax.vmap(world, in_axes=(0, 0, 0, 0, None, None, 0, u_axis, 0, 0))


def _ctrl_at(st: ChunkStatic, u, t, s: WorldState, wids):
    """The controls an output evaluation sees: the last step's (array; a controller's, held in the carry), the
    policy's at (t, x) (callable)."""
    if st.ctrl_mode == CtrlMode.CALLABLE:
        if _ep.takes_world(st.ctrl_fn):
            return jax.vmap(st.ctrl_fn, in_axes=(None, 0, 0))(t, s.x, wids)
        return jax.vmap(st.ctrl_fn, in_axes=(None, 0))(t, s.x)
    if st.ctrl_mode == CtrlMode.CONTROLLER:
        return s.carry[_ep.CTRL]
    return u if st.ctrl_mode == CtrlMode.ARRAY else None


def chunk_fn(scene, st: ChunkStatic):
    """The Python function of one chunk for the whole batch: ``(WorldState, ChunkInput) -> ChunkOutput``."""
    batched = _advance_world(scene, st)
    advance = jax.checkpoint(batched) if st.remat_step else batched
    S, R = st.samples, st.record_every

    def chunk(state: WorldState, inp: ChunkInput) -> ChunkOutput:
        ks = inp.k0 + jnp.arange(S * R, dtype=inp.k0.dtype).reshape(S, R)  # int32 in a float32 run: no warning
        us = inp.ctrl.reshape((S, R) + inp.ctrl.shape[1:]) if st.ctrl_mode == CtrlMode.ARRAY else jnp.zeros((S, R))

        def step(s: WorldState, k_u):
            k, u = k_u
            return WorldState(*advance(*s, k, inp.consts, inp.wids, u, inp.params, inp.reset)), None

        def sample(s: WorldState, ks_us):
            s, _ = jax.lax.scan(step, s, ks_us)
            return s, (s.x, s.carry)

        if not st.outputs:
            state, (xs, carries) = jax.lax.scan(sample, state, (ks, us))
            return ChunkOutput(state=state, xs=xs, carries=carries)

        def sample_out(s: WorldState, ks_us):
            kr, ur = ks_us
            s, _ = jax.lax.scan(step, s, (kr[:-1], ur[:-1]))  # all but the last step
            pre = s
            s, _ = step(s, (kr[-1], ur[-1]))
            k_eval = kr[-1] if st.semantics == OutputSemantics.SAMPLED else kr[-1] + 1
            at = pre if st.semantics == OutputSemantics.SAMPLED else s
            t = inp.consts.t0 + k_eval * inp.consts.dt
            u = _ctrl_at(st, ur[-1], t, at, inp.wids)
            return s, (s.x, s.carry, evaluate(at.x, at.carry, t, u, inp.params))

        evaluate = _outputs_batched(scene, st)
        state, (xs, carries, outs) = jax.lax.scan(sample_out, state, (ks, us))
        return ChunkOutput(state=state, xs=xs, carries=carries, outputs=outs)

    return chunk


def shardings(st: ChunkStatic):
    """(in_shardings, out_shardings) of the chunk function: worlds split over ``st.devices``."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(st.devices), ("batch",))
    b0, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
    b1 = NamedSharding(mesh, P(None, "batch"))
    carry0 = {name: b0 for name, _ in st.carry}
    state = WorldState(x=b0, carry=carry0, status=b0, status_step=b0)
    resets = st.episodes is not None and st.episodes.resets
    cold = {name: b0 for name in _integrator_carry(st)} if resets else {}
    inp = ChunkInput(k0=rep, consts=StepConstants(rep, rep, rep, rep), wids=b0,
                     ctrl=b1 if st.ctrl_mode == CtrlMode.ARRAY else rep, params=tuple(b0 for _ in st.params),
                     reset=(b0, cold) if resets else ())
    out = ChunkOutput(state=state, xs=b1, carries={name: b1 for name, _ in st.carry},
                      outputs={o.name: b1 for o in st.outputs})
    return (state, inp), out


_PER_SCENE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scene_entry(scene, key) -> tuple:
    """A per-scene cache's key for ``key``: with the scene's ``revision`` (``MjScene.recompile`` bumps it: what was
    traced before closes over the old model and, on MuJoCo C, the old model's batches)."""
    return getattr(scene, "revision", 0), key


def compiled_chunk(scene, st: ChunkStatic, args: tuple[WorldState, ChunkInput]):
    """(compiled chunk function for ``st``, compile seconds, of which trace+lower, trace source).

    Cached per scene object and its revision (``scene_entry``) in this process (this also covers runs the disk
    cache cannot key: ctrl callables, user states), by trace key in this process and on disk (``rollout.cache``).
    """
    entry = scene_entry(scene, st)
    try:
        per_scene = _PER_SCENE.setdefault(scene, {})
        hash(entry)
    except TypeError:  # an unhashable integrator or ctrl: compile without caching
        per_scene = None
    if per_scene is not None and entry in per_scene:
        return per_scene[entry], 0.0, 0.0, "in-process"
    ins, outs = shardings(st)
    key = None
    # A user function's code cannot be keyed (a ctrl callable, an output function): trace it every process.
    if st.ctrl_mode not in (CtrlMode.CALLABLE, CtrlMode.CONTROLLER) and st.episodes is None and \
            not any(o.fn is not None for o in st.outputs):
        key = cache.chunk_key(scene, st.integ, (st.kind, st.ctrl_mode, st.params, st.carry, st.samples,
                                                st.record_every, st.batch, st.n, st.nu)
                                + ((st.outputs, st.semantics) if st.outputs else ()), args)
    compiled, dt, t_lower, source = cache.compile_cached(chunk_fn(scene, st), args, in_shardings=ins,
                                                         out_shardings=outs, donate_argnums=(0,), key=key)
    if per_scene is not None:
        per_scene[entry] = compiled
    return compiled, dt, t_lower, source
