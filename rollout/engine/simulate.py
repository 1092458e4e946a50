"""``simulate``: the pure, jit-able, differentiable form of ``rollout`` (no files, no host loop).

It runs the very chunk function ``rollout`` compiles (``chunk.chunk_fn``), looped over chunks with a
``lax.scan``; each chunk, and each step inside it, is wrapped in ``jax.checkpoint``, so reverse mode keeps
one state per chunk boundary plus the states of the chunk it reverses, and recomputes a step's MJX data
while it runs backwards: memory grows with ``steps / chunk`` plus one chunk of states, not with ``steps``
of MJX data (measured 195 MiB -> 3.8 MiB for a 1000-step RK4 gradient at batch 64). The default chunk is
about sqrt(steps) steps, which balances the two. Forward numbers are unchanged (bit-equal to rollout).

Differentiable with respect to ``x0``, ``ctrl`` and every floating ``model_params`` field, by
``jax.grad``/``jax.vjp``/``jax.jacrev`` for fixed-step and stochastic integrators (the increments are
fixed by ``seed``), and by forward mode only (``jax.jvp``/``jax.jacfwd``) for adaptive ones: their
step loop is a ``lax.while_loop``, which JAX cannot reverse.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from mjharness.adapters.backends import CtrlMode
from mjharness.integrators import ContractError, check_pair
from mjharness.scenes.settings import configure

from ..errors import RolloutError

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from .arguments import IntegratorLike, SceneLike
from .announce import compiling
from .chunk import ChunkInput, ChunkStatic, StepConstants, WorldState, chunk_fn, scene_entry
from .inputs import carry_plan, check_carry, check_ctrl, check_model_params, check_x0, nu_of
from .resolve import resolve_scene, scene_integrator, scene_timestep
from .spec import RunSpec, check_int, check_spec


def _check_not_reversed(integ, *inputs) -> None:
    """Reverse mode through an adaptive integrator's lax.while_loop fails deep inside JAX; say why up front.

    jax.grad/vjp/jacrev trace their inputs as LinearizeTracers (JAX >= 0.7, direct linearize); jax.jvp and
    jacfwd as JVPTracers, which pass. Only inputs given to simulate are seen: a gradient w.r.t. a value
    closed over elsewhere still gets JAX's own while_loop error.
    """
    try:
        from jax._src.interpreters.ad import LinearizeTracer
    except ImportError:  # another JAX layout: JAX's own error still says "Reverse-mode differentiation"
        return
    if any(isinstance(v, LinearizeTracer) for v in jax.tree_util.tree_leaves(inputs)):
        raise RolloutError(f"{type(integ).__name__} is adaptive (a lax.while_loop over steps): simulate is "
                           f"differentiable through it in forward mode only; use jax.jvp or jax.jacfwd, or a "
                           f"fixed-step integrator (RK4, SemiImplicitEuler) for jax.grad/jax.vjp/jax.jacrev")


def check_param_fields(scene, model_params, B: int) -> dict:
    """``plan.check_model_params`` with shared values allowed (broadcast over worlds), tracers welcome."""
    return check_model_params(scene, model_params, B, shared=True)


def default_chunk(steps: int, record_every: int) -> int:
    """About sqrt(steps) steps, a multiple of record_every: checkpoint memory ~ boundaries + one chunk."""
    samples = max(1, math.ceil(math.sqrt(steps / record_every)))
    return samples * record_every


def make_static(**kw) -> ChunkStatic:
    """A ChunkStatic from keywords; fields added later with defaults (e.g. outputs) get empty values."""
    names = {f.name for f in dataclasses.fields(ChunkStatic)}
    for f in dataclasses.fields(ChunkStatic):
        if f.name not in kw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kw[f.name] = ()
    return ChunkStatic(**{k: v for k, v in kw.items() if k in names})


def simulate(scene: SceneLike, integrator: IntegratorLike, x0: ArrayLike, *, dt: float | None, steps: int,
             ctrl: ArrayLike | Callable | None = None, model_params: dict | None = None, record_every: int = 1,
             carry: dict | None = None, seed: int = 0, chunk: int | None = None, t0: float = 0.0,
             progress: bool = True) -> tuple[jax.Array, jax.Array]:
    """Simulate ``x0`` (B, n) for ``steps`` steps of ``dt``: ``(time (T,), xs (T, B, n))``, T = steps // record_every.

    Pure and jit-able (``x0``, ``ctrl``, ``model_params`` values and ``carry`` may be tracers; ``scene``,
    ``integrator``, ``dt``, ``steps``, ``record_every``, ``seed`` and ``chunk`` are static) and
    differentiable (see the module doc). Same steps as ``rollout`` (its chunk function, its runtime constants):
    bit-equal to ``rollout`` for the same inputs, whatever either's chunk, eager or under ``jax.jit``.

    ctrl: None, an array (B, steps, nu) or (steps, nu), or a jit-able ``ctrl(t, x) -> (nu,)``.
    model_params: MJX model field paths -> values, the field's shape (shared) or (B, *shape) per world,
        e.g. ``{"dof_damping": (nv,), "body_mass": (B, nbody), "opt.gravity": (3,)}``; floating fields only.
    carry: initial carry (name -> (B, *shape) or (*shape)); None = cold (the scene's ``init_carry``).
    chunk: steps per checkpointed chunk (rounded up to a multiple of record_every); default ~sqrt(steps).
    progress: say on stderr when it is traced and when its compile ends (``engine.announce``; also under the
        caller's ``jax.jit`` / ``jax.grad``, whose compile can take minutes on a CPU).
    """
    configure()  # float64 before the first array (idempotent)
    # The run specification's own checks (engine/spec.py); x0, ctrl and model_params may be tracers.
    run = check_spec(RunSpec.from_options(steps=steps, dt=dt, record_every=record_every, seed=seed, chunk=chunk,
                                          t0=t0))
    steps, record_every, seed = run.steps, run.recording.record_every, run.start.seed
    scene = resolve_scene(scene, needs={"differentiable": "simulate (pure, differentiable)"})
    integ = scene_integrator(scene, integrator)
    try:
        kind = check_pair(scene, integ)
    except ContractError as e:
        raise RolloutError(str(e)) from None
    dt = scene_timestep(scene, dt)
    n = scene.layout.size
    x0 = check_x0(x0, None, scene.layout, shared=True)
    B = jnp.shape(x0)[0]
    mode, u, ctrl_fn = check_ctrl(scene, ctrl, B, steps, n, shared=True)
    params = check_param_fields(scene, model_params, B)
    spec, carry0 = carry_plan(scene, integ, dt, B)
    carry = check_carry(carry, spec, carry0, shared=True)
    if kind == "adaptive":
        _check_not_reversed(integ, x0, u, params, carry)
    C = default_chunk(steps, record_every) if chunk is None else check_int("chunk", chunk, 1)
    C = -(-C // record_every) * record_every
    C = min(C, -(-steps // record_every) * record_every)
    S, N = C // record_every, -(-steps // C)
    st = make_static(integ=integ, kind=kind, ctrl_mode=mode, ctrl_fn=ctrl_fn,
                     params=tuple((k, tuple(v.shape[1:])) for k, v in params.items()), carry=spec, samples=S,
                     record_every=record_every, batch=B, n=n, nu=nu_of(scene), devices=(), remat_step=True)
    key = (st, N, C, steps // record_every, float(t0), float(dt), steps, seed)
    if isinstance(x0, jax.core.Tracer) or scene_entry(scene, key) not in _PROGRAMS.get(scene, {}):  # a compile follows
        compiling(f"simulate: {integ.name}, {steps} steps x {B} world(s) on {getattr(scene, 'backend', 'jax')}",
                  progress)
    time, xs = _program(scene, key)(x0, u, params, carry)
    return time, xs


_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _program(scene, key):
    """The jitted core of ``simulate`` for (scene, static key), cached per scene object and revision.

    Always a ``jax.jit``, also when ``simulate`` is called eagerly: eagerly, ``dt``, ``t0``, ... would reach
    the scan as literals that XLA folds into the steps, which changes round-off; staged behind the
    optimization barrier they are runtime values, as in ``rollout``'s compiled chunk, so the two agree bit
    for bit. Inside an outer jit/grad the inner jit is inlined.
    """
    entry = scene_entry(scene, key)
    try:
        per_scene = _PROGRAMS.setdefault(scene, {})
        hash(entry)
    except TypeError:  # an unhashable integrator, ctrl or scene: a fresh program each call
        return jax.jit(functools.partial(_core, scene, *key))
    if entry not in per_scene:
        per_scene[entry] = jax.jit(functools.partial(_core, scene, *key))
    return per_scene[entry]


def _core(scene, st: ChunkStatic, N: int, C: int, T: int, t0: float, dt: float, steps: int, seed: int,
          x0, u, params: dict, carry: dict):
    B, n, S = st.batch, st.n, st.samples
    body = jax.checkpoint(chunk_fn(scene, st))
    # A barrier so XLA does not fold dt, t0 into the steps: rollout passes them as arguments, and
    # folding them would change round-off.
    consts = jax.lax.optimization_barrier(
        StepConstants(jnp.float64(t0), jnp.float64(dt), jnp.int64(steps), jnp.int64(seed)))
    wids = jnp.arange(B, dtype=jnp.int64)
    if st.ctrl_mode == CtrlMode.ARRAY:  # (N, C, B, nu): time-major per chunk; masked steps past the end get zeros
        u = jnp.concatenate([u, jnp.zeros((B, N * C - steps, u.shape[2]))], axis=1)
        us = u.transpose(1, 0, 2).reshape(N, C, B, u.shape[2])
    else:
        us = jnp.zeros((N,))
    ptuple = tuple(params.values())

    def one(state, k0_u):
        k0, uc = k0_u
        out = body(state, ChunkInput(k0=k0, consts=consts, wids=wids, ctrl=uc, params=ptuple))
        return out.state, out.xs

    state0 = WorldState(x=x0, carry=carry, status=jnp.zeros(B, jnp.int8), status_step=jnp.full(B, -1, jnp.int64))
    _, xs = jax.lax.scan(one, state0, (jnp.arange(N, dtype=jnp.int64) * C, us))
    xs = xs.reshape((N * S, B, n))[:T]
    time = t0 + jnp.arange(1, T + 1, dtype=jnp.float64) * st.record_every * dt  # as rollout's
    return time, xs
