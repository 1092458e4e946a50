"""The peers of a bench cell, each set up (compiled, warmed up) as a timed call (``timing.Peer``).

Raw peers, what a user would write instead of us:

- ``mjx_step``: raw MJX, ``jax.jit`` of a ``lax.scan`` of ``jax.vmap(mjx.step)`` over N steps
  (MuJoCo's scheme of the model: for Euler one ``mjx.forward`` + the Euler update, implicit damping
  included);
- ``mjx_forward``: one ``mjx.forward`` + MJX's plain Euler update per step (no implicit-damping solve):
  the price of "one forward per step", the yardstick of RK4's four. (A scan of ``mjx.forward`` alone
  would measure nothing: the state never changes, and XLA hoists the loop-invariant forward out of
  the loop.)
- ``mujoco_rollout``: MuJoCo C's multi-threaded ``mujoco.rollout`` (one thread per core) from the same
  initial states (the CPU peer).

Peers that run through ``rollout()``, the engine entry point users call:

- every registered integrator (``mjharness.integrators.INTEGRATORS``) by its registry name: a chained
  ``rollout()`` of one chunk of N steps per call that records only the last state (the raw peers keep
  theirs on device), timed by the engine's ``stats["run_s"]`` (the compiled chunk call plus its host
  transfer), compile apart (``stats["compile_s"]``);
- ``rollout`` / ``rollout_h5``: the scene's own integrator at ``record_every`` without and with
  streaming HDF5 export (the price of the export and of the engine itself); each call is a whole run
  from the initial states, timed by its wall time (planning and the file's creation included).

Repeated ``rollout()`` calls on the same scene object reuse the engine's in-process compiled
function, so after the warm-up call every timed call is a run, not a compile.

Why ours can be faster than ``mjx_step`` on the same work: the raw scan carries the whole
``mjx.Data`` (about 100 arrays) from step to step, ours only ``x`` and the carry (the template data
is a compile-time constant); and ``mjx.step``'s Euler factors ``M + h diag(damping)`` every step
even when every damping is 0, ours only when some damping is positive, as MuJoCo C does.
"""

from __future__ import annotations

import contextlib
import os
import time

from mjharness.integrators.errors import UserError
from mjharness.rollout.h5.digest import without_hashes
from mjharness.rollout.h5.format import without_checksums

from .backends import CLOSED_LOOP_PAIRS, RANDOMIZED_PAIRS, setup_backend_peer
from .engine_peer import engine_peer, integrators, scene_scheme
from .outputs import setup_outputs_peer
from .timing import Peer, compile_timed, device_peak, result_row, timed, warm, xla_peak

__all__ = ["VARIANT_PAIRS", "RAW_PEERS", "ENGINE_PEERS", "DEFAULT_PEERS", "REFERENCE", "NATIVE", "BenchError",
           "peer_names", "check_peers", "check_counts", "scene_scheme", "same_scheme", "setup_peer", "native_states"]

RAW_PEERS = ("mjx_step", "mjx_forward", "mujoco_rollout", "mujoco_rollout_rk4")
ENGINE_PEERS = ("rollout", "rollout_h5", "rollout_h5_nocheck", "rollout_h5_nohash")


@contextlib.contextmanager
def _without_integrity():
    with without_checksums(), without_hashes():
        yield


# Engine peers writing a file, and what is around each of their calls: ``rollout_h5_nocheck`` writes neither
# the Fletcher-32 chunk checksums nor the content hashes (what file integrity costs in all), and
# ``rollout_h5_nohash`` keeps the checksums but not the hashes (what the XXH3 content hashes cost); users' files
# always have both.
FILE_PEERS = {"rollout_h5": contextlib.nullcontext, "rollout_h5_nocheck": _without_integrity,
              "rollout_h5_nohash": without_hashes}
OUTPUT_PEERS = ("rollout_outputs",)  # rollout() recording outputs (bench/outputs.py)
# rollout() on another dynamics backend (bench/backends.py); backend_mujoco_rk4: MuJoCo C stepping RK4
BACKEND_PEERS = ("backend_mujoco", "backend_mujoco_rk4", "backend_warp") + tuple(
    p for p, _ in RANDOMIZED_PAIRS + CLOSED_LOOP_PAIRS)
# Peers against the same run without what they add (per-world models, a closed loop): (peer, plain peer, what)
VARIANT_PAIRS = tuple((p, q, "randomized") for p, q in RANDOMIZED_PAIRS) + tuple(
    (p, q, "closed loop") for p, q in CLOSED_LOOP_PAIRS)
# The default selection: every raw and engine peer, and the two integrators the targets compare.
DEFAULT_PEERS = ("mjx_step", "mjx_forward", "semi_implicit_euler", "rk4", "mujoco_rollout", "rollout", "rollout_h5",
                 "rollout_h5_nocheck")
REFERENCE = "mjx_step"
NATIVE = "mujoco_rollout"
NATIVE_RK4 = "mujoco_rollout_rk4"  # mujoco.rollout with <option integrator="RK4"> on a copy of the model
# Our MuJoCo C backend beside mujoco.rollout stepping the same scheme: (peer, its native yardstick, scheme)
C_PAIRS = (("backend_mujoco", NATIVE, "Euler"), ("backend_mujoco_rk4", NATIVE_RK4, "RK4"))


class BenchError(UserError, ValueError):
    """Bad bench input (unknown peer, batch < 1, ...); names the offending value."""


def peer_names() -> tuple[str, ...]:
    """Every peer a cell can run: the raw and engine peers, then the registered integrators."""
    fixed = RAW_PEERS + ENGINE_PEERS + OUTPUT_PEERS + BACKEND_PEERS
    return fixed + tuple(n for n in sorted(integrators()) if n not in fixed)


def check_peers(peers) -> None:
    """Raise ``BenchError`` naming every name in ``peers`` that is no peer."""
    known = peer_names()
    bad = [p for p in peers if p not in known]
    if bad:
        raise BenchError(f"unknown peer(s) {bad}; peers: {', '.join(known)}")


def check_counts(**counts) -> None:
    """Raise ``BenchError`` naming the first of ``counts`` (name=value) that is not an int >= 1."""
    for k, v in counts.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BenchError(f"{k} must be an int >= 1, got {v!r}")


def same_scheme(scene) -> tuple[str, ...]:
    """The peers that integrate with the scene's own scheme: after the same steps from the same states
    they must agree (to rounding and solver tolerance), which shows they did the same work."""
    own = scene_scheme(scene)
    # The backend peers step with the scene's own scheme when it names one (bench/backends.py).
    # RK4 on any scene: its own pair; randomized worlds and closed loops step other physics.
    variants = {v for v, _, _ in VARIANT_PAIRS}
    backends = tuple(p for p in BACKEND_PEERS if p != "backend_mujoco_rk4" and p not in variants)
    return (REFERENCE, NATIVE) + ENGINE_PEERS + ((own,) + backends if own else ())


# -- raw MJX --------------------------------------------------------------------------------------

def _match_dtypes(new, old):
    """Cast ``new``'s leaves to ``old``'s dtypes: with x64, put_data's int32 contact fields come back
    int64 from mjx.step, which a scan carry refuses."""
    import jax

    return jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype) if a.dtype != b.dtype else a, new, old)


def _mjx_batch(scene, x0):
    """Batched MJX data whose qpos/qvel/act are the rows of ``x0`` (the same states as ours)."""
    import jax
    import jax.numpy as jnp

    from mjharness.scenes.settings import mjx

    d0 = mjx.put_data(scene.model, scene.data)
    return jax.jit(jax.vmap(lambda x: scene.to_mjx(x, d0)))(jnp.asarray(x0))


def _forward_update(m, d):
    """One ``mjx.forward`` and MJX's own explicit update of act, qvel, qpos, time (``_advance``)."""
    from mjharness.adapters.backends.mjx_private import advance
    from mjharness.scenes.settings import mjx

    d = mjx.forward(m, d)
    return advance(m, d, d.act_dot, d.qacc)


def _scan_mjx(m, steps: int, fn):
    """jit(scan(vmap(fn(m, d)))) over ``steps`` with the batch of data donated: the raw peer itself."""
    import jax

    batched = jax.vmap(lambda d: fn(m, d))

    def run(d):
        def body(d, _):
            return _match_dtypes(batched(d), d), None

        return jax.lax.scan(body, d, None, length=steps)[0]

    return jax.jit(run, donate_argnums=0)


def _setup_mjx(scene, x0, steps, name) -> Peer:
    import jax.numpy as jnp

    from mjharness.scenes.settings import mjx

    fn = mjx.step if name == "mjx_step" else _forward_update
    d = _mjx_batch(scene, x0)
    compiled, compile_s, cache = compile_timed(_scan_mjx(scene.mjx_model, steps, fn), d)
    call = timed(compiled)
    d, first, warm_s = warm(call, d, pick=lambda d: (d.qpos, d.qvel))

    def finish(times, d):
        return result_row(name, batch=x0.shape[0], steps=steps, times=times, compile_s=compile_s,
                          mem=xla_peak(compiled) or device_peak(),
                          extra=dict(finite=bool(jnp.all(jnp.isfinite(d.qpos))), compile_cache=cache))

    return Peer(name, call, d, warm_s, first, finish)


# -- MuJoCo C ---------------------------------------------------------------------------------------

def native_states(scene, x0):
    """mujoco.rollout initial states (mjSTATE_FULLPHYSICS) with qpos/qvel/act from the rows of ``x0``."""
    import mujoco
    import numpy as np

    m = scene.model
    d = mujoco.MjData(m)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    out = np.empty((x0.shape[0], mujoco.mj_stateSize(m, spec)))
    for i, x in enumerate(np.asarray(x0)):  # setup only (not timed)
        d.qpos[:] = x[scene.qpos_segment]
        d.qvel[:] = x[scene.qvel_segment]
        d.act[:] = x[scene.act_segment]
        mujoco.mj_getState(m, d, out[i], spec)
    return out


def _setup_native(scene, x0, steps, nthread=None, name=NATIVE) -> Peer:
    import copy

    import mujoco
    import numpy as np
    from mujoco import rollout as mjrollout

    m = scene.model
    if name == NATIVE_RK4:  # the same model stepping MuJoCo's RK4 (a copy: the scene's model is untouched)
        m = copy.deepcopy(m)
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    nthread = nthread or os.cpu_count() or 1
    B = x0.shape[0]
    s0 = native_states(scene, x0)
    # Chained calls of `steps`; the output buffer holds one call (B, steps, nstate), as the peers keep
    # theirs on device. A user keeping every step of a long run would pay more memory, not less time.
    buf = np.empty((B, steps, s0.shape[1]))
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    t = time.perf_counter()
    r = mjrollout.Rollout(nthread=nthread)
    setup_s = time.perf_counter() - t

    def run(state):
        r.rollout(m, datas, state, nstep=steps, state=buf)
        return buf[:, -1].copy()

    call = timed(run)
    state, first, warm_s = warm(call, s0)
    nq, nv = m.nq, m.nv  # mjSTATE_FULLPHYSICS rows: time, qpos, qvel, act, ...

    def finish(times, last):
        return result_row(name, batch=B, steps=steps, times=times, compile_s=setup_s,
                          mem=int(buf.nbytes + s0.nbytes),
                          extra=dict(finite=bool(np.all(np.isfinite(last))), nthread=nthread))

    return Peer(name, call, state, warm_s, (first[:, 1:1 + nq], first[:, 1 + nq:1 + nq + nv]), finish, r.close)


# -- through rollout() ------------------------------------------------------------------------------

def _setup_integrator(scene, x0, steps, name, dt) -> Peer:
    """Registered integrator ``name``: one chunk of ``steps`` per call, only the last state recorded."""
    return engine_peer(name, scene, x0, integ=name, dt=dt, steps=steps, record_every=steps, chunk=steps,
                        sample=0, chained=True, clock="run_s", extra=lambda stats: {})


def _setup_engine(name, scene, x0, *, steps, dt, record_every, run_steps, out, context) -> Peer:
    """``rollout`` / ``rollout_h5``: ``rollout(scene, None, ...)`` (the scene's own integrator) for
    ``run_steps`` (a multiple of ``steps``), recording every ``record_every``, to ``out`` (or memory)."""
    def extra(stats):
        return dict(record_every=record_every, chunk=stats[0]["chunk"], engine_run_s=[s["run_s"] for s in stats[1:]],
                    file_bytes=stats[-1]["file_bytes"])

    return engine_peer(name, scene, x0, integ=None, dt=dt, steps=run_steps, record_every=record_every, out=out,
                        sample=steps // record_every - 1, chained=False, clock="wall", extra=extra, context=context)


def setup_peer(name, scene, x0, *, steps, dt, record_every=10, nthread=None, run_steps=None,
               out=None) -> Peer:
    """Peer ``name`` (one of ``peer_names()``) compiled and warmed up on the rows of ``x0``.

    ``run_steps``: steps of an engine peer's call (default ``steps``); ``out``: ``rollout_h5``'s file."""
    if name in ("mjx_step", "mjx_forward"):
        return _setup_mjx(scene, x0, steps, name)
    if name in (NATIVE, NATIVE_RK4):
        return _setup_native(scene, x0, steps, nthread, name)
    if name in BACKEND_PEERS:
        return setup_backend_peer(name, scene, x0, steps=steps, dt=dt, nthread=nthread)
    if name in OUTPUT_PEERS:
        return setup_outputs_peer(name, scene, x0, steps=steps, dt=dt, record_every=record_every,
                                  run_steps=run_steps or steps)
    if name in ENGINE_PEERS:
        path = None if name not in FILE_PEERS or out is None else f"{os.path.splitext(out)[0]}-{name}.h5"
        return _setup_engine(name, scene, x0, steps=steps, dt=dt, record_every=record_every,
                             run_steps=run_steps or steps, out=path,
                             context=FILE_PEERS.get(name, contextlib.nullcontext))
    return _setup_integrator(scene, x0, steps, name, dt)
