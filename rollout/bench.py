"""``mjharness bench``: our integrators side by side with the peers a user would pick instead.

    mjharness bench [SCENE ...] --batch 1 64 1024 --steps 1000 [--json out.json]
    mjharness bench --cache-check [SCENE]       # second process vs first: persistent compile cache
    mjharness bench --full --json bench.json    # FULL_PLAN: the README's measurement

One process, one scene, one batch, one dtype; for each *peer* (``PEERS``):

- ``mjx_step``: raw MJX, ``jax.jit`` of a ``lax.scan`` of ``jax.vmap(mjx.step)`` over N steps
  (MuJoCo's Euler: one ``mjx.forward`` + the Euler update, implicit damping included);
- ``mjx_forward``: one ``mjx.forward`` + MJX's plain Euler update per step (no implicit-damping solve):
  the price of "one forward per step", the yardstick of RK4's four. (A scan of ``mjx.forward`` alone
  would measure nothing: the state never changes, and XLA hoists the loop-invariant forward out of
  the loop.)
- ``semi_implicit_euler`` / ``rk4``: our integrators from the registry (``get_integrator``), the same
  jit/scan/vmap around ``integ.step`` on the value buffer ``x``;
- ``mujoco_rollout``: MuJoCo C's multi-threaded ``mujoco.rollout`` (one thread per core) from the same
  initial states (the CPU peer);
- ``rollout`` / ``rollout_h5``: our ``rollout()`` engine with SemiImplicitEuler at ``record_every``
  without and with streaming HDF5 export (the price of the export and of the engine itself); each
  call is a whole run from the initial states, of ``engine_steps`` steps (a call of at least
  ``min_time`` seconds, so per-run setup weighs as in a real run).

Compile time (``lower().compile()``) is reported apart, with ``compile_cache`` saying whether JAX's
persistent cache answered it (``hit``: the figure is a cache load, not a compile; ``miss``: a real
compile; ``in-process``: the engine reused this process's compiled function); a warm-up call precedes the timed calls;
every timed call ends in ``jax.block_until_ready``. All peers of a cell are compiled and warmed up
first, then timed *interleaved*, one call of each per round, so the peers a ratio compares run under
the same machine conditions. Calls repeat (chained: each starts where the last ended) until
``min_time`` seconds and ``repeats`` calls are timed per peer; throughput is world-steps per
second over the timed calls. Ratios are *time* ratios: ``x_mjx = time / time of mjx_step`` (1.05
means 5 % slower than raw MJX), ``x_native`` the same against ``mujoco_rollout``. Peak memory is
XLA's own account of the compiled function (arguments + outputs + temporaries - donated aliases) or,
on an accelerator, the device's peak bytes in use; ``rss_peak`` is the process's peak resident set.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from .cli import CliError

__all__ = ["PEERS", "DEFAULT_SCENES", "FULL_PLAN", "bench_cell", "plan_cells", "run_bench", "write_json",
           "format_table", "cache_check", "machine_info", "add_parser", "BenchError"]

PEERS = ("mjx_step", "mjx_forward", "semi_implicit_euler", "rk4", "mujoco_rollout", "rollout", "rollout_h5")
# Scene size from 1 to 27 dof: a pendulum, a 12-hinge chain (deep body tree, no contact), a humanoid
# with contacts. (The chain needs integrators/_config.XLA_CPU_FLAG: XLA:CPU's newer fusion emitters
# make MJX kinematics exponential in tree depth, 10-25 s per step of one 12-hinge world.)
DEFAULT_SCENES = ("bench_pendulum", "bench_chain12", "humanoid")
REFERENCE = "mjx_step"
NATIVE = "mujoco_rollout"


class BenchError(CliError, ValueError):
    """Bad bench input (unknown peer, batch < 1, ...); names the offending value."""


# -- machine and versions -------------------------------------------------------------------------

def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


def machine_info() -> dict:
    """Machine, device and versions (the header of every bench JSON)."""
    import jax

    dev = jax.devices()
    return dict(
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), host=platform.node(),
        platform=platform.platform(), python=platform.python_version(), cpu=_cpu_model(),
        cpu_count=os.cpu_count(), load_average=load_average(),
        backend=jax.default_backend(), devices=[str(d) for d in dev], device_kind=dev[0].device_kind,
        x64=bool(jax.config.jax_enable_x64),
        compile_cache=jax.config.jax_compilation_cache_dir,
        versions={k: _version(k) for k in ("mjharness", "mujoco", "mujoco-mjx", "jax", "jaxlib", "numpy", "h5py")})


# -- the peers ------------------------------------------------------------------------------------

def _match_dtypes(new, old):
    """Cast ``new``'s leaves to ``old``'s dtypes: with x64, put_data's int32 contact fields come back
    int64 from mjx.step, which a scan carry refuses (DESIGN.md section 7)."""
    import jax

    return jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype) if a.dtype != b.dtype else a, new, old)


def _mjx_batch(scene, x0):
    """Batched MJX data whose qpos/qvel/act are the rows of ``x0`` (the same states as ours)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    d0 = mjx.put_data(scene.model, scene.data)
    x0 = jnp.asarray(x0)

    def one(x):
        return scene.to_mjx(x, d0)

    return jax.jit(jax.vmap(one))(x0), d0


def _forward_update(m, d):
    """One ``mjx.forward`` and MJX's own explicit update of act, qvel, qpos, time (``_advance``)."""
    from mujoco import mjx
    from mujoco.mjx._src import forward as mjx_forward

    d = mjx.forward(m, d)
    return mjx_forward._advance(m, d, d.act_dot, d.qacc)


def _scan_mjx(m, steps: int, fn):
    """jit(scan(vmap(fn(m, d)))) over ``steps`` with the batch of data donated."""
    import jax

    batched = jax.vmap(lambda d: fn(m, d))

    def run(d):
        def body(d, _):
            return _match_dtypes(batched(d), d), None

        return jax.lax.scan(body, d, None, length=steps)[0]

    return jax.jit(run, donate_argnums=0)


def _scan_ours(scene, integ, steps: int):
    """jit(scan(vmap(integ.step))) over ``steps`` on the value buffers (donated), time carried."""
    import jax

    batched = jax.vmap(lambda t, x, h: integ.step(scene, t, x, h), in_axes=(None, 0, None))

    def run(x, t, h):
        def body(c, _):
            x, t = c
            return (batched(t, x, h), t + h), None

        return jax.lax.scan(body, (x, t), None, length=steps)[0]

    return jax.jit(run, donate_argnums=0)


_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}
_LISTENING = []


def _cache_counts() -> tuple[int, int]:
    """(hits, misses) of JAX's persistent compilation cache in this process so far."""
    if not _LISTENING:
        import jax

        def listen(event, **_):
            if event in _CACHE_EVENTS:
                _CACHE_EVENTS[event] += 1

        jax.monitoring.register_event_listener(listen)
        _LISTENING.append(listen)
    return tuple(_CACHE_EVENTS.values())


def _compile(lowerable, *args):
    """(compiled, seconds, cache) with cache = 'hit' / 'miss' / 'off' (the persistent cache's answer)."""
    h0, m0 = _cache_counts()
    t = time.perf_counter()
    compiled = lowerable.lower(*args).compile()
    dt = time.perf_counter() - t
    return compiled, dt, _cache_word(h0, m0)


def _cache_word(h0, m0) -> str:
    h, m = _cache_counts()
    return "miss" if m > m0 else "hit" if h > h0 else "off"


def _xla_peak(compiled) -> int | None:
    """Bytes XLA plans for one call (arguments + outputs + temporaries - donated aliases)."""
    try:
        ma = compiled.memory_analysis()
        return int(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
                   - ma.alias_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def _device_peak() -> int | None:
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:
        return None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def _rss_peak() -> int:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kb if sys.platform == "darwin" else kb * 1024)


@dataclass
class _Peer:
    """One peer, compiled and warmed up, ready for the interleaved timing (``_time_interleaved``)."""

    name: str
    call: Callable            # state -> state
    state: object
    warm_s: float             # the warm-up call's seconds (sizes the engine's runs)
    finals: tuple             # (qpos, qvel) after exactly `steps` steps from x0, for the agreement check
    finish: Callable          # (times, final state) -> result row
    close: Callable = lambda: None


def _warm(call, state, pick=lambda s: s):
    """One warm-up call (first-run allocations, page faults, thread pools): (state, pick(state) as numpy, s)."""
    import jax
    import numpy as np

    t = time.perf_counter()
    state = jax.block_until_ready(call(state))
    warm_s = time.perf_counter() - t
    return state, jax.tree_util.tree_map(lambda a: np.array(a, copy=True), pick(state)), warm_s


def _time_interleaved(peers, *, repeats: int, min_time: float) -> dict:
    """Time every peer's calls in rounds (one call of each per round), each until ``repeats`` calls and
    ``min_time`` seconds; a peer that has both sits out the rest. Interleaving puts the peers a ratio
    compares under the same machine conditions (on a shared machine the load drifts within minutes).
    Calls are chained: each starts where the last ended. Returns {name: [seconds per call]}."""
    import jax

    times = {p.name: [] for p in peers}

    def needs(p):
        return len(times[p.name]) < repeats or sum(times[p.name]) < min_time

    while any(needs(p) for p in peers):
        for p in peers:
            if needs(p):
                t = time.perf_counter()
                p.state = jax.block_until_ready(p.call(p.state))
                times[p.name].append(time.perf_counter() - t)
    return times


def _result(name, *, batch, steps, times, compile_s, mem, extra=None) -> dict:
    total = sum(times)
    r = dict(peer=name, batch=batch, steps_per_call=steps, calls=len(times), timed_s=total,
             call_s=[round(t, 6) for t in times], best_call_s=min(times),
             world_steps_per_s=batch * steps * len(times) / total, compile_s=compile_s, peak_bytes=mem,
             rss_peak=_rss_peak())
    if extra:
        r.update(extra)
    return r


def _setup_mjx(scene, x0, steps, fn, name) -> _Peer:
    import jax

    d, _ = _mjx_batch(scene, x0)
    compiled, compile_s, cache = _compile(_scan_mjx(scene.mjx_model, steps, fn), d)
    d, first, warm_s = _warm(compiled, d, pick=lambda d: (d.qpos, d.qvel))

    def finish(times, d):
        ok = bool(jax.numpy.all(jax.numpy.isfinite(d.qpos)))
        mem = _device_peak() or _xla_peak(compiled)
        return _result(name, batch=x0.shape[0], steps=steps, times=times, compile_s=compile_s, mem=mem,
                       extra=dict(finite=ok, compile_cache=cache))

    return _Peer(name, compiled, d, warm_s, first, finish)


def _setup_ours(scene, x0, steps, integ_name, dt) -> _Peer:
    import jax
    import jax.numpy as jnp

    from mjharness.integrators import get_integrator

    integ = get_integrator(integ_name)
    f = _scan_ours(scene, integ, steps)
    x = jax.device_put(jnp.asarray(x0))
    t0, h = jnp.asarray(0.0, x.dtype), jnp.asarray(dt, x.dtype)
    compiled, compile_s, cache = _compile(f, x, t0, h)

    def call(c):
        return compiled(c[0], c[1], h)

    state, (first, _), warm_s = _warm(call, (x, t0))

    def finish(times, state):
        mem = _device_peak() or _xla_peak(compiled)
        return _result(integ_name, batch=x0.shape[0], steps=steps, times=times, compile_s=compile_s, mem=mem,
                       extra=dict(finite=bool(jnp.all(jnp.isfinite(state[0]))), integrator=integ.config(),
                                  compile_cache=cache))

    return _Peer(integ_name, call, state, warm_s, (first[:, scene.qpos_segment], first[:, scene.qvel_segment]),
                 finish)


def _native_states(scene, x0):
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


def _setup_native(scene, x0, steps, nthread=None) -> _Peer:
    import mujoco
    import numpy as np
    from mujoco import rollout as mjrollout

    m = scene.model
    nthread = nthread or os.cpu_count() or 1
    B = x0.shape[0]
    s0 = _native_states(scene, x0)
    nstate = s0.shape[1]
    # Chained calls of `steps`; the output buffer holds one call (B, steps, nstate), as the peers keep
    # theirs on device. A user keeping every step of a long run would pay more memory, not less time.
    buf = np.empty((B, steps, nstate))
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    t = time.perf_counter()
    r = mjrollout.Rollout(nthread=nthread)
    setup_s = time.perf_counter() - t

    def call(state):
        r.rollout(m, datas, state, nstep=steps, state=buf)
        return buf[:, -1].copy()

    state, first, warm_s = _warm(call, s0)
    nq, nv = m.nq, m.nv  # mjSTATE_FULLPHYSICS rows: time, qpos, qvel, act, ...

    def finish(times, last):
        return _result(NATIVE, batch=B, steps=steps, times=times, compile_s=setup_s, mem=int(buf.nbytes + s0.nbytes),
                       extra=dict(finite=bool(np.all(np.isfinite(last))), nthread=nthread))

    return _Peer(NATIVE, call, state, warm_s, (first[:, 1:1 + nq], first[:, 1 + nq:1 + nq + nv]), finish, r.close)


def _setup_engine(scene, x0, steps, dt, record_every, out, run_steps) -> _Peer:
    """Our rollout() with SemiImplicitEuler for ``run_steps`` (a multiple of ``steps``), recording every
    ``record_every``, to ``out`` (or memory)."""
    from . import engine

    def call(x):
        r = engine.rollout(scene, "semi_implicit_euler", dt=dt, steps=run_steps, x0=x, record_every=record_every,
                           out=out, overwrite=True, progress=False, keep=out is None)
        call.stats.append(r.stats)
        if len(call.stats) == 1:  # the warm-up's sample after `steps` steps from x0 (for the agreement)
            call.last = r.x[steps // record_every - 1]
        return x  # the same start every call: an engine call is a whole run as a user makes it

    call.stats = []
    counts = _cache_counts()
    _, _, warm_s = _warm(call, x0)
    cache = "in-process" if call.stats[0]["trace_cache"] == "in-process" else _cache_word(*counts)
    name = "rollout_h5" if out else "rollout"

    def finish(times, _):
        compile_s = call.stats[0]["compile_s"]  # the warm-up compiled (or hit the in-process cache)
        run_s = [s["run_s"] for s in call.stats[1:]]
        extra = dict(record_every=record_every, chunk=call.stats[0]["chunk"], engine_run_s=run_s,
                     file_bytes=call.stats[-1]["file_bytes"], compile_cache=cache,
                     finite=all(s["worlds_failed"] == 0 for s in call.stats))
        return _result(name, batch=x0.shape[0], steps=run_steps, times=times, compile_s=compile_s, mem=None,
                       extra=extra)

    def close():
        if out and os.path.exists(out):
            os.remove(out)

    return _Peer(name, call, x0, warm_s, (call.last[:, scene.qpos_segment], call.last[:, scene.qvel_segment]),
                 finish, close)


def engine_steps(sie_call_s: float | None, steps: int, min_time: float, most: int = 50) -> int:
    """Steps of one engine call: a whole run, as a user makes it, long enough (``min_time``, judged from
    ``sie_call_s``, our SemiImplicitEuler's seconds per ``steps`` in this cell) that per-run setup
    (planning, the file's creation) weighs as in real use; a multiple of ``steps``, at most ``most``
    times it. Without that peer in the cell (``None``): ``steps``."""
    import math

    if sie_call_s is None or min_time <= 0:
        return steps
    return steps * max(1, min(most, math.ceil(min_time / max(sie_call_s, 1e-9))))


def bench_cell(scene, *, batch: int, steps: int, peers=PEERS, dt: float | None = None, record_every: int = 10,
               repeats: int = 2, min_time: float = 1.0, seed: int = 0, perturb: float = 0.01, nthread=None,
               tmpdir: str | None = None, log=None) -> dict:
    """Every peer on one scene and batch. ``scene``: an MjScene or anything ``load_scene`` takes."""
    from mujoco import mjx

    from .engine import initial_states, resolve_scene

    bad = [p for p in peers if p not in PEERS]
    if bad:
        raise BenchError(f"unknown peer(s) {bad}; peers: {', '.join(PEERS)}")
    for k, v in (("batch", batch), ("steps", steps), ("repeats", repeats), ("record_every", record_every)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BenchError(f"{k} must be an int >= 1, got {v!r}")
    if steps % record_every and {"rollout", "rollout_h5"} & set(peers):
        raise BenchError(f"steps={steps} must be a multiple of record_every={record_every}")
    scene = resolve_scene(scene)
    dt = float(scene.model.opt.timestep) if dt is None else float(dt)
    if dt != float(scene.model.opt.timestep) and ({"mjx_step", "mujoco_rollout"} & set(peers)):
        raise BenchError(f"dt={dt} differs from the scene's timestep {scene.model.opt.timestep}: the peers step "
                         f"with the model's timestep; edit the scene instead")
    x0 = initial_states(scene, batch, seed, perturb)
    say = log or (lambda s: None)
    set_up: list[_Peer] = []
    try:
        for p in peers:
            say(f"  {p}: compile + warm-up ...")
            if p == "mjx_step":
                peer = _setup_mjx(scene, x0, steps, mjx.step, p)
            elif p == "mjx_forward":
                peer = _setup_mjx(scene, x0, steps, _forward_update, p)
            elif p in ("semi_implicit_euler", "rk4"):
                peer = _setup_ours(scene, x0, steps, p, dt)
            elif p == NATIVE:
                peer = _setup_native(scene, x0, steps, nthread)
            else:
                path = None
                if p == "rollout_h5":
                    path = os.path.join(tmpdir or tempfile.gettempdir(), f"mjharness-bench-{os.getpid()}.h5")
                sie_s = next((q.warm_s for q in set_up if q.name == "semi_implicit_euler"), None)
                peer = _setup_engine(scene, x0, steps, dt, record_every, path, engine_steps(sie_s, steps, min_time))
            set_up.append(peer)
        say(f"  timing {len(set_up)} peers, interleaved ...")
        times = _time_interleaved(set_up, repeats=repeats, min_time=min_time)
        rows = [q.finish(times[q.name], q.state) for q in set_up]
        finals = {q.name: q.finals for q in set_up}
    finally:
        for q in set_up:
            q.close()
    for r in rows:
        say(f"  {r['peer']}: {r['world_steps_per_s']:.4g} world-steps/s, compile {r['compile_s']:.1f} s")
    _add_ratios(rows)
    _add_agreement(rows, finals)
    m = scene.model
    return dict(scene=getattr(scene, "name", "?"), source=_source(scene), nq=m.nq, nv=m.nv, nu=m.nu, ngeom=m.ngeom,
                dt=dt, batch=batch, steps=steps, record_every=record_every, load_average=load_average(),
                results=rows)


def _source(scene) -> str:
    from mjharness.scenes import scene_info

    try:
        return scene_info(scene.model).source
    except Exception:
        return "?"


# Peers that integrate with MuJoCo's Euler scheme: after the same steps from the same states they must
# agree (to rounding and solver tolerance), which shows they did the same work.
SAME_SCHEME = ("mjx_step", "semi_implicit_euler", "mujoco_rollout", "rollout", "rollout_h5")


def _add_agreement(rows, finals) -> None:
    """``max_dqpos`` / ``max_dqvel``: largest |difference| from the reference peer after one call's steps."""
    import numpy as np

    ref = next((p for p in (NATIVE, REFERENCE) if p in finals), None)
    for r in rows:
        r["agrees_with"] = None
        if ref is None or r["peer"] not in SAME_SCHEME:
            continue
        (q, v), (q0, v0) = finals[r["peer"]], finals[ref]
        r["agrees_with"] = ref
        r["max_dqpos"] = float(np.max(np.abs(np.asarray(q) - np.asarray(q0)), initial=0.0))
        r["max_dqvel"] = float(np.max(np.abs(np.asarray(v) - np.asarray(v0)), initial=0.0))


def _add_ratios(rows) -> None:
    """Time ratios against raw MJX and MuJoCo C (per world-step: same batch, any steps per call)."""
    by = {r["peer"]: r["world_steps_per_s"] for r in rows}
    for r in rows:
        for key, ref in (("x_mjx", REFERENCE), ("x_native", NATIVE)):
            r[key] = by[ref] / r["world_steps_per_s"] if ref in by else None
    if "rollout" in by and "rollout_h5" in by:
        for r in rows:
            if r["peer"] == "rollout_h5":
                r["x_rollout"] = by["rollout"] / r["world_steps_per_s"]


def targets(cells) -> list[dict]:
    """The issue's performance targets, checked on every cell that measures them."""
    out = []
    for c in cells:
        by = {r["peer"]: r for r in c["results"]}
        where = dict(scene=c["scene"], batch=c["batch"])

        def add(name, value, limit, note, where=where):
            out.append(dict(where, target=name, value=value, limit=limit, met=value <= limit, note=note))

        if c["batch"] >= 64 and "semi_implicit_euler" in by and REFERENCE in by:
            add("semi_implicit_euler / mjx_step time", by["semi_implicit_euler"]["x_mjx"], 1.10, "same work")
        if "rk4" in by and "mjx_forward" in by:
            add("rk4 / mjx_forward time", by["mjx_forward"]["world_steps_per_s"] / by["rk4"]["world_steps_per_s"],
                4.4, "4 forward calls + updates vs 1 forward")
        if "rollout_h5" in by and "rollout" in by:
            add("rollout_h5 / rollout wall", by["rollout_h5"]["x_rollout"], 1.10,
                f"HDF5 export at record_every={c['record_every']}")
    return out


# The measurement of the README: every peer where the targets are checked (batch 64), the scaling
# with batch on the cheap peers (raw MJX, ours, MuJoCo C), scene size from pendulum to humanoid.
# Each (scene, batch) compiles its own functions, so the plan keeps compiles few; steps per call are
# sized for about a second per timed call on a 2-core CPU (min_time repeats calls when shorter).
SCALING = ("mjx_step", "semi_implicit_euler", "mujoco_rollout")
FULL_PLAN = (
    ("bench_pendulum", 64, 1000, PEERS),
    ("bench_pendulum", 1, 1000, SCALING),
    ("bench_pendulum", 1024, 1000, SCALING),
    ("bench_pendulum", 8192, 200, SCALING),
    ("bench_chain12", 64, 500, PEERS),
    ("bench_chain12", 1, 1000, SCALING),
    ("bench_chain12", 1024, 50, SCALING),
    ("humanoid", 64, 200, PEERS),
    ("humanoid", 1024, 20, SCALING),
    ("humanoid", 1, 200, SCALING),
    ("humanoid", 8192, 5, SCALING),
)


def plan_cells(scenes=DEFAULT_SCENES, batches=(64,), steps=1000, peers=PEERS) -> list[tuple]:
    """(scene, batch, steps, peers) for every scene x batch."""
    return [(s, b, steps, tuple(peers)) for s in scenes for b in batches]


def run_bench(cells, *, log=None, json_path: str | None = None, **kw) -> dict:
    """The bench report: machine info, one entry per (scene, batch, steps, peers) cell, the targets.

    A cell that fails (out of memory, say) records its error and the rest go on. With ``json_path``
    the report is rewritten after every cell, so a killed run keeps what it measured.
    """
    from .engine import resolve_scene

    say = log or (lambda s: None)
    report = dict(machine=machine_info(), cells=[], errors=[], targets=[])
    scenes = {}
    for s, b, n, peers in cells:
        if s not in scenes:  # one MjScene per scene: the engine's compile cache is per scene object
            scenes[s] = resolve_scene(s)
        say(f"{s}, batch {b}, {n} steps/call, peers {' '.join(peers)} (load {load_average()})")
        try:
            report["cells"].append(bench_cell(scenes[s], batch=b, steps=n, peers=peers, log=log, **kw))
        except BenchError:
            raise
        except Exception as e:  # noqa: BLE001 - one failed cell must not lose the others
            report["errors"].append(dict(scene=s, batch=b, error=f"{type(e).__name__}: {e}"))
            say(f"  failed: {type(e).__name__}: {e}")
        report["targets"] = targets(report["cells"])
        report["load_average_end"] = load_average()
        if json_path:
            write_json(report, json_path)
    return report


def write_json(report: dict, path: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)


# -- output ---------------------------------------------------------------------------------------

def _si(v: float) -> str:
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f:
            return f"{v / f:.3g}{unit}"
    return f"{v:.3g}"


def _bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_table(report: dict) -> str:
    """The report as text: one table per cell, then the targets."""
    m = report["machine"]
    lines = [f"mjharness bench  {m['date']}  {m['cpu']} x{m['cpu_count']}  {m['backend']} ({m['device_kind']})  "
             f"x64={m['x64']}  load {m['load_average']}",
             "  ".join(f"{k} {v}" for k, v in m["versions"].items())]
    head = (f"  {'peer':22s} {'world-steps/s':>13s} {'x mjx':>7s} {'x native':>8s} {'compile s':>9s} {'cache':>10s} "
            f"{'peak mem':>10s}")
    for c in report["cells"]:
        lines += ["", f"{c['scene']} (nq={c['nq']} nv={c['nv']}), batch {c['batch']}, {c['steps']} steps/call, "
                      f"dt={c['dt']:g}, load {c['load_average']}", head]
        for r in c["results"]:
            xm = f"{r['x_mjx']:.3f}" if r.get("x_mjx") is not None else "-"
            xn = f"{r['x_native']:.3f}" if r.get("x_native") is not None else "-"
            bad = "" if r.get("finite", True) else "  NON-FINITE"
            cache = r.get("compile_cache", "-")
            lines.append(f"  {r['peer']:22s} {_si(r['world_steps_per_s']):>13s} {xm:>7s} {xn:>8s} "
                         f"{r['compile_s']:9.2f} {cache:>10s} {_bytes(r['peak_bytes']):>10s}{bad}")
    for e in report.get("errors", []):
        lines.append(f"\n{e['scene']} batch {e['batch']}: FAILED {e['error']}")
    if report.get("targets"):
        lines += ["", "targets:"]
        for t in report["targets"]:
            lines.append(f"  {'met ' if t['met'] else 'MISS'} {t['target']:36s} {t['value']:.3f} <= {t['limit']} "
                         f"({t['scene']}, batch {t['batch']}; {t['note']})")
    checks = report.get("cache_check") or []
    for cc in [checks] if isinstance(checks, dict) else checks:
        lines += ["", f"compile cache ({cc['scene']}, {cc['integrator']}): second process "
                      f"{cc['second_compile_s']:.2f} s vs first {cc['first_compile_s']:.2f} s = {cc['ratio']:.1%} "
                      f"of the first's compile "
                      f"({'met' if cc['met'] else 'MISS'} <= 30%; trace {cc['second_trace_cache']}, "
                      f"{'same' if cc['same_result'] else 'DIFFERENT'} result)"]
    return "\n".join(lines)


# -- persistent compile cache: two fresh processes -----------------------------------------------

_PROBE = """
import json, sys, time
t = time.perf_counter()
from mjharness.rollout import rollout
from mjharness.adapters import MjScene
from mjharness.scenes import load_scene
scene = MjScene(load_scene(sys.argv[1]))
t_ready = time.perf_counter()
r = rollout(scene, sys.argv[2], dt=float(scene.model.opt.timestep), steps=int(sys.argv[3]), batch=int(sys.argv[4]),
            record_every=int(sys.argv[3]), progress=False)
import hashlib, jax
print(json.dumps(dict(compile_s=r.stats["compile_s"], trace_s=r.stats["trace_s"], trace_cache=r.stats["trace_cache"],
                      run_s=r.stats["run_s"], import_and_load_s=t_ready - t, to_first_result_s=time.perf_counter() - t,
                      cache_dir=jax.config.jax_compilation_cache_dir,
                      x_sha256=hashlib.sha256(r.x.tobytes()).hexdigest())))
"""


def cache_check(scene: str = "bench_pendulum", *, integrator: str = "semi_implicit_euler", steps: int = 100,
                batch: int = 8, timeout: float = 900.0) -> dict:
    """Run the same rollout in two fresh processes sharing an empty temporary compile cache.

    The target: the second process starts its rollout (trace + lower + compile, i.e. the engine's
    ``compile_s``) in at most 30 % of the first's. The second process should take the traced chunk
    function from the disk (``trace_cache == "exported"``, ``rollout/aot.py``) and the executable
    from JAX's persistent cache; ``same_result`` says its trajectory equals the first's bitwise.
    """
    with tempfile.TemporaryDirectory(prefix="mjharness-cache-") as cache:
        env = dict(os.environ, MJHARNESS_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", _PROBE, scene, integrator, str(steps), str(batch)], env=env,
                               capture_output=True, text=True, timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"cache probe failed (exit {p.returncode}): {p.stderr[-2000:]}")
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        entries = sum(len(fs) for _, _, fs in os.walk(cache))
    first, second = runs
    ratio = second["compile_s"] / first["compile_s"]
    return dict(scene=scene, integrator=integrator, steps=steps, batch=batch, first=first, second=second,
                first_compile_s=first["compile_s"], second_compile_s=second["compile_s"], ratio=ratio,
                met=ratio <= 0.30, cache_entries=entries, second_trace_cache=second["trace_cache"],
                same_result=first["x_sha256"] == second["x_sha256"], load_average=load_average())


# -- CLI ------------------------------------------------------------------------------------------

def add_parser(sub):
    p = sub.add_parser("bench", help="throughput of our integrators vs raw MJX and mujoco.rollout",
                       description="Benchmark SCENE(s) at each --batch: raw mjx.step / mjx.forward, our "
                                   "SemiImplicitEuler and RK4, MuJoCo's multi-threaded rollout, and our rollout "
                                   "engine with and without HDF5 export. Prints a table; --json writes every figure.")
    p.add_argument("scenes", nargs="*", metavar="SCENE",
                   help=f"bundled scene names or MJCF paths (default: {' '.join(DEFAULT_SCENES)})")
    p.add_argument("--batch", type=int, nargs="+", default=[64], help="batch size(s) (default 64)")
    p.add_argument("--steps", type=int, default=1000, help="steps per timed call (default 1000)")
    p.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS), metavar="PEER",
                   help=f"which peers (default all: {' '.join(PEERS)})")
    p.add_argument("--repeats", type=int, default=2, help="timed calls at least (default 2, after one warm-up)")
    p.add_argument("--min-time", type=float, default=1.0, help="timed seconds at least per peer (default 1)")
    p.add_argument("--record-every", type=int, default=10, help="record_every of the engine peers (default 10)")
    p.add_argument("--nthread", type=int, help="mujoco.rollout threads (default: all cores)")
    p.add_argument("--full", action="store_true",
                   help="the README's measurement plan (FULL_PLAN: pendulum, chain12, humanoid at several batches)")
    p.add_argument("--cache-check", action="store_true",
                   help="also run, per SCENE, two fresh processes against an empty cache (second vs first compile)")
    p.add_argument("--json", metavar="FILE", help="write the report (machine, versions, every figure) to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    for b in args.batch:
        if b < 1:
            raise BenchError(f"--batch {b}: must be >= 1")
    if args.steps < 1 or args.repeats < 1 or args.record_every < 1:
        raise BenchError("--steps, --repeats and --record-every must be >= 1")
    scenes = args.scenes or list(DEFAULT_SCENES)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    cells = list(FULL_PLAN) if args.full else plan_cells(scenes, args.batch, args.steps, args.peers)
    report = run_bench(cells, repeats=args.repeats, min_time=args.min_time, record_every=args.record_every,
                       nthread=args.nthread, log=log, json_path=args.json)
    if args.cache_check:
        if log:
            log("compile cache check: two fresh processes ...")
        report["cache_check"] = [cache_check(s) for s in scenes]
    text = format_table(report)
    print(text)
    if args.json:
        write_json(report, args.json)
        print(f"\nwrote {args.json}")
    return 1 if report["errors"] else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mjharness")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench"] + list(sys.argv[1:] if argv is None else argv))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
