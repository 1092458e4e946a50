"""The host loop: compile the chunk once, call it chunk after chunk, stream samples to the file.

The HDF5 writer thread writes chunk k while chunk k+1 computes. The batch is sharded over devices
(padded to a multiple of the device count; pad worlds repeat the last world and are dropped). A
resumed run restarts from the file's last flushed sample: its state, carry and statuses.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time as _time

import jax
import numpy as np

from mjharness.adapters.backends import ChunkRun, CtrlMode
from mjharness.adapters.forces import force_param_units
from mjharness.adapters.outputs import flagged_rows, output_attrs, sensor_table
from mjharness.integrators import STATUS_TERMINATED as TERMINATED
from mjharness.integrators.status import failed
from mjharness.scenes import scene_info

from .. import h5
from . import episodes as _ep
from . import interrupts
from .chunk import ChunkInput, ChunkOutput, ChunkStatic, StepConstants, WorldState, compiled_chunk, shardings
from .force_params import field_of_key, is_force_key
from .plan import Plan
from .results import RolloutResult


def _pad(a, Bp, axis=0):
    B = a.shape[axis]
    if B == Bp:
        return a
    idx = np.concatenate([np.arange(B), np.full(Bp - B, B - 1)])
    return np.take(a, idx, axis=axis)


def _static(plan: Plan, Bp: int) -> ChunkStatic:
    ph, rec = plan.physics, plan.record
    return ChunkStatic(integ=ph.integ, kind=ph.kind, ctrl_mode=plan.control.mode, ctrl_fn=plan.control.fn,
                       params=tuple((k, v.shape[1:]) for k, v in plan.params.fields.items()), carry=plan.carry.spec,
                       samples=rec.chunk // rec.record_every, record_every=rec.record_every, batch=Bp,
                       n=plan.start.x0.shape[1], nu=ph.view.nu, devices=plan.devices, outputs=rec.outputs,
                       semantics=rec.semantics, episodes=plan.loop.episodes)


def _start_state(plan: Plan):
    """(x, carry, status, status_step) on the host where the run starts (a resumed file's last flushed sample)."""
    B = plan.start.x0.shape[0]
    x, carry = plan.start.x0, dict(plan.carry.initial)
    status, status_step = np.zeros(B, np.int8), np.full(B, -1, np.int64)
    info = plan.resume
    if info is None:
        return x, carry, status, status_step
    if plan.carry.spec and info.carry_layout:  # (a file from before /carry starts cold)
        carry = {name: np.asarray(info.carry_last[name]).reshape((B,) + tuple(shape))
                 for name, shape in plan.carry.spec}
    if info.x_last is not None:
        x = info.x_last
        status, status_step = info.status.copy(), info.status_step.copy()
        # A world that failed after the resumed sample (in unrecorded trailing steps) runs again.
        again = status_step >= plan.start.start_step
        status[again], status_step[again] = 0, -1
    return x, carry, status, status_step


def _carry0(plan: Plan, B: int) -> np.ndarray | None:
    """The initial carry of every world, flat (B, width), or None when nothing is carried."""
    flat = _flat_carry({k: v[None] for k, v in plan.carry.initial.items()}, plan.carry.spec, 1, B)
    return None if flat is None else flat[0]


def _flat_carry(carries: dict, spec, S: int, B: int) -> np.ndarray | None:
    if not spec:
        return None
    return np.concatenate([np.asarray(carries[name]).reshape(S, B, -1) for name, _ in spec], axis=-1)


def _file_spec(plan: Plan, T: int, S: int, compression) -> h5.FileSpec:
    scene, view = plan.physics.scene, plan.physics.view
    model = view.model
    B = plan.start.x0.shape[0]
    return h5.FileSpec(
        attrs=plan.attrs, model=model, compat_log=list(view.compat_log),
        layout=h5.layout_table(scene.layout, view.joint_of), x0=plan.start.x0,
        model_params=plan.params.fields, model_param_attrs=_param_attrs(plan), samples=T, qpos=view.qpos_segment,
        qvel=view.qvel_segment, time_chunk=S, compression=compression,
        sample_dtype="f8" if plan.attrs["x64"] else "f4",  # the file's samples have the run's float width
        carry_layout=tuple((name, tuple(shape)) for name, shape in plan.carry.spec),
        carry0=_carry0(plan, B), outputs=_output_records(plan),
        sensors=tuple(sensor_table(model)) if any(o.field == "sensordata" for o in plan.record.outputs) else (),
        carry_views=tuple(name for name in CARRY_VIEWS if name in dict(plan.carry.spec)) if plan.loop.episodes else (),
        source_xml=scene_info(model).source_xml if model is not None else None, code=_code(plan),
        ctrl_input=plan.control.array if plan.control.mode == CtrlMode.ARRAY else None)


def _code(plan: Plan) -> dict:
    """{role: function} of every function the run calls, kept in the file with its source (``/code``)."""
    ep = plan.loop.episodes
    code = {"ctrl": plan.control.fn} if plan.control.mode == CtrlMode.CALLABLE else {}
    if ep is not None and ep.controller is not None:
        code.update({"controller.init": ep.controller.init, "controller.step": ep.controller.step})
    if ep is not None and ep.terminate is not None:
        code["terminate"] = ep.terminate.fn
    if ep is not None and ep.reward is not None:
        code["reward"] = ep.reward.fn
    code.update({f"output.{o.name}": o.fn for o in plan.record.outputs if o.fn is not None})
    return code


# Carry entries of a closed loop a file also shows at its root (virtual datasets over /carry): /ctrl, /episode,
# /reward.
CARRY_VIEWS = (_ep.CTRL, _ep.EPISODE, _ep.REWARD)


def _param_attrs(plan: Plan) -> dict:
    """{field: {"randomize": {KEY: DIST}, "units": unit}}: each randomized field's distributions, and the units of
    force provider parameters their provider declared, as the file records them."""
    rand = plan.params.randomize or {}
    out: dict[str, dict] = {}
    for key, dist in rand.items():
        field = field_of_key(key) if is_force_key(key) else key.partition(":")[0].partition("[")[0]
        out.setdefault(field, {}).setdefault("randomize", {})[key] = dist
    scene = plan.physics.scene
    declared = force_param_units(scene) if hasattr(scene, "__dict__") else {}  # add_force(..., param_units=)
    for field, unit in declared.items():
        out.setdefault(field, {})["units"] = unit
    return {name: a for name, a in out.items() if name in plan.params.fields}


def _output_records(plan: Plan) -> tuple:
    rec = plan.record
    return tuple((o.name, o.shape, output_attrs(o, rec.semantics), o.labels, o.comps) for o in rec.outputs)


def _input_maker(plan: Plan, i_in: ChunkInput, Bp: int):
    """``chunk_input(k)``: the chunk's inputs on the devices (constants put once, controls per chunk)."""
    put = jax.device_put
    B = plan.start.x0.shape[0]
    wids = np.arange(Bp, dtype=np.int64)
    wids[B:] = B - 1
    wids += plan.start.world_offset  # global world index: noise streams do not depend on the process split
    wids_d = put(wids, i_in.wids)
    params = tuple(put(_pad(v, Bp), sh) for v, sh in zip(plan.params.fields.values(), i_in.params))
    reset = () if not plan.loop.reset else (put(_pad(plan.loop.reset[0], Bp), i_in.reset[0]),
                                       {k: put(_pad(v, Bp), i_in.reset[1][k]) for k, v in plan.loop.reset[1].items()})
    c = i_in.consts
    consts = StepConstants(put(np.float64(plan.start.t0), c.t0), put(np.float64(plan.physics.dt), c.dt),
                           put(np.int64(plan.record.steps), c.steps), put(np.int64(plan.start.seed), c.seed))

    def chunk_input(k) -> ChunkInput:
        if plan.control.mode != CtrlMode.ARRAY:
            u = put(np.zeros((), np.float64), i_in.ctrl)
        else:
            assert plan.control.array is not None  # CtrlMode.ARRAY holds the checked array
            u = plan.control.array[:, k:k + plan.record.chunk]
            if u.shape[1] < plan.record.chunk:  # masked steps past the end: any finite value
                u = np.concatenate([u, np.zeros((B, plan.record.chunk - u.shape[1], u.shape[2]))], axis=1)
            u = put(np.ascontiguousarray(_pad(u, Bp).transpose(1, 0, 2)), i_in.ctrl)
        return ChunkInput(k0=put(np.int64(k), i_in.k0), consts=consts, wids=wids_d, ctrl=u, params=params,
                          reset=reset)

    return chunk_input


def _device_state(x, carry, status, status_step, s_in: WorldState, Bp: int) -> WorldState:
    # Copies: the state is donated to the chunk function and must not alias plan.start.x0 or a file's data.
    put = jax.device_put
    return WorldState(x=put(_pad(np.array(x, np.float64), Bp), s_in.x),
                      carry={k: put(_pad(np.array(v, np.float64), Bp), s_in.carry[k]) for k, v in carry.items()},
                      status=put(_pad(np.array(status, np.int8), Bp), s_in.status),
                      status_step=put(_pad(np.array(status_step, np.int64), Bp), s_in.status_step))


def _open_writer(plan: Plan, resume: bool, S: int, compression):
    if plan.record.out is None:
        return None
    if resume:
        h5.extend_rollout_file(plan.record.out, plan.record.samples, {"steps": plan.attrs["steps"]},
                               start=plan.start.start_step // plan.record.record_every)
    else:
        h5.create_rollout_file(plan.record.out, _file_spec(plan, plan.record.samples, S, compression))
    return h5.RolloutWriter(plan.record.out)


def _memory(plan: Plan, keep: bool):
    """(x (T, B, n), outputs {name: (T, B, ...)}, closed-loop carry {name: (T, B, ...)}) in memory, the resumed
    file's samples filled in."""
    if not keep:
        return None, None, None
    B, n = plan.start.x0.shape
    xs_mem = np.empty((plan.record.samples, B, n))
    outs = {o.name: np.full((plan.record.samples, B) + o.shape, np.nan) for o in plan.record.outputs}
    loop = {name: np.full((plan.record.samples, B) + tuple(shape), np.nan) for name, shape in _loop_spec(plan)}
    j_start = plan.start.start_step // plan.record.record_every
    if j_start > 0:
        held = plan.resume.prefix if plan.resume is not None else None
        assert held is not None, "a resumed run that keeps its trajectory reads the file's samples with its plan"
        xs_mem[:j_start] = held.x[:j_start]
        for name, v in outs.items():
            v[:j_start] = held.outputs[name][:j_start]
        for name, v in loop.items():
            v[:j_start] = held.carry[name].reshape(v[:j_start].shape)
    return xs_mem, outs, loop


def _loop_spec(plan: Plan) -> tuple:
    return plan.loop.episodes.carry_spec() if plan.loop.episodes is not None else ()


def _note_flags(flags: dict, specs, outputs: dict, j0: int) -> None:
    """Add a chunk's flagged rows (contact overflow) to ``flags``: {output: {world: [first row, rows]}}."""
    for name, rows in flagged_rows(specs, outputs).items():
        for w in np.nonzero(rows.any(axis=0))[0].tolist():
            first = j0 + int(np.argmax(rows[:, w]))
            seen = flags.setdefault(name, {}).setdefault(w, [first, 0])
            seen[0], seen[1] = min(seen[0], first), seen[1] + int(rows[:, w].sum())


def _loop(plan: Plan, st: ChunkStatic, compiled, state, chunk_input, *, writer, xs_mem, outs_mem, guard, bar,
          host, flags=None, loop_mem=None):
    """Run the chunks from ``plan.start.start_step``; returns the host (status, status_step, carry) at the end.
    ``flags`` (a dict) collects the rows the outputs flag (``_note_flags``)."""
    B = plan.start.x0.shape[0]
    T, R, S = plan.record.samples, plan.record.record_every, st.samples
    st_h, sst_h, carry_h = host  # a resumed run that is already complete runs no chunk
    k = plan.start.start_step
    while k < plan.record.steps:
        interrupts.check()  # an interrupt a gc callback swallowed (during loading, compiling, a chunk) ends here
        inp = chunk_input(k)
        out = guard(compiled, state, inp, step=k) if guard is not None else jax.block_until_ready(
            compiled(state, inp))
        state = out.state
        j0 = k // R
        nvalid = max(0, min(S, T - j0))
        # One transfer per chunk.
        xs, cs, os_, st_h, sst_h, carry_h = jax.device_get((out.xs, out.carries, out.outputs, state.status,
                                                            state.status_step, state.carry))
        xs, st_h, sst_h = xs[:nvalid, :B], st_h[:B], sst_h[:B]
        os_ = {name: np.asarray(v)[:nvalid, :B] for name, v in os_.items()}
        if flags is not None:
            _note_flags(flags, plan.record.outputs, os_, j0)
        if outs_mem is not None:
            for name, v in os_.items():
                outs_mem[name][j0:j0 + nvalid] = v
        times = plan.start.t0 + (np.arange(j0, j0 + nvalid) + 1) * R * plan.physics.dt
        if xs_mem is not None and not np.may_share_memory(xs, xs_mem):  # (host chunks wrote theirs in place)
            xs_mem[j0:j0 + nvalid] = xs
        for name, v in (loop_mem or {}).items():
            v[j0:j0 + nvalid] = np.asarray(cs[name])[:nvalid, :B]
        if writer is not None and nvalid:
            flat = _flat_carry(cs, plan.carry.spec, S, st.batch)
            writer.put(j0, times, xs, st_h, sst_h, carry=None if flat is None or not writer.has_carry
                       else flat[:nvalid, :B], outputs=os_)
        k_next = min(k + plan.record.chunk, plan.record.steps)
        if bar is not None:
            bar.update(k_next - k)
            bar.set_postfix_str(_bar_text(st_h[:B], cs, plan, B), refresh=False)
        k = k_next
    return np.array(st_h), np.array(sst_h), {name: np.asarray(v)[:B] for name, v in carry_h.items()}


def _host_loop(plan: Plan, B: int):
    """The run's closed loop on host arrays (``host_loop.HostLoop``) for a backend stepping whole segments, or None."""
    if plan.loop.episodes is None or plan.control.mode not in (CtrlMode.CONTROLLER, CtrlMode.NONE, CtrlMode.ARRAY):
        return None
    from .host_loop import HostLoop

    wids = plan.start.world_offset + np.arange(B, dtype=np.int64)
    return HostLoop(plan.loop.episodes, t0=plan.start.t0, dt=plan.physics.dt, seed=plan.start.seed, wids=wids,
                    reset=plan.loop.reset)


def _host_chunks(plan: Plan, st: ChunkStatic, xs: np.ndarray | None, carries: bool):
    """(chunk function, chunk_input) when the scene's backend runs whole chunks on the host (MuJoCo's own scheme
    on MuJoCo C: one batched mj_step call per chunk), else None: the compiled chunk. The function takes and
    gives what the compiled one does (``WorldState``, ``ChunkOutput``), as host arrays. ``xs``: the in-memory
    trajectory (T, B, n) the chunks write their samples into in place (None: not kept); ``carries``: whether the
    carry after each sample is needed (a file records it). ``st``: the run's static part, for its B worlds
    (not padded)."""
    if plan.physics.view.chunk_runner is None:
        return None
    values = ChunkRun(dt=plan.physics.dt, t0=plan.start.t0, steps=plan.record.steps,
                      values=tuple(plan.params.fields.items()), loop=_host_loop(plan, st.batch))
    runner = plan.physics.view.chunk_runner(st, values)
    if runner is None:
        return None

    def chunk_input(k):
        return k, (plan.control.array[:, k:k + plan.record.chunk] if plan.control.mode == CtrlMode.ARRAY else None)

    S, T = plan.record.chunk // plan.record.record_every, plan.record.samples

    def run(state: WorldState, inp) -> ChunkOutput:
        j0 = inp[0] // plan.record.record_every
        dest = xs[j0:j0 + S] if xs is not None and j0 + S <= T else None  # a whole chunk of rows fits: in place
        r = runner(*state, *inp, dest=dest, carries=carries)
        return ChunkOutput(state=WorldState(r.x, r.carry, r.status, r.status_step), xs=r.xs, carries=r.carries,
                           outputs=r.outputs)

    return run, chunk_input


def _chunk_function(plan: Plan, st: ChunkStatic, state: WorldState, xs_mem, say):
    """(static, chunk function, chunk_input, the state as it takes it, (compile_s, trace_s, trace source)): the
    backend's own whole chunks on the host (MuJoCo C: adapters/backends/host_chunk.py), else the compiled chunk."""
    B = plan.start.x0.shape[0]
    host_st = dataclasses.replace(st, batch=B)
    host = _host_chunks(plan, host_st, xs_mem, carries=plan.record.out is not None)
    if host is not None:
        say(f"{plan.physics.view.backend} runs whole chunks of {plan.record.chunk} steps natively (batch {B}): "
            f"nothing to compile")
        return host_st, *host, state, (0.0, 0.0, "host")
    (s_in, i_in), _ = shardings(st)
    chunk_input = _input_maker(plan, i_in, st.batch)
    state = _device_state(*state, s_in, st.batch)
    say(f"compiling the chunk function ({plan.physics.view.backend or 'jax'}, batch {B}, {plan.record.chunk} "
        f"steps per chunk)...")
    compiled, compile_s, trace_s, source = compiled_chunk(plan.physics.scene, st,
                                                          (state, chunk_input(plan.start.start_step)))
    say(f"compiled in {compile_s:.1f} s ({COMPILE_SOURCES.get(source, source)})")
    return st, compiled, chunk_input, state, (compile_s, trace_s, source)


def _stats(plan: Plan, B: int, status, flags: dict, *, run_s: float, **timing) -> dict:
    """``RolloutResult.stats``: timings, throughput, world outcomes, the file's size, the backend and why."""
    steps_run = plan.record.steps - plan.start.start_step
    return dict(**timing, run_s=run_s, steps=steps_run,
                steps_per_s=steps_run / run_s if run_s > 0 else float("inf"),
                world_steps_per_s=steps_run * B / run_s if run_s > 0 else float("inf"),
                worlds_ok=int((status == 0).sum()), worlds_failed=int(failed(status).sum()),
                worlds_terminated=int((status == TERMINATED).sum()),
                file_bytes=os.path.getsize(plan.record.out) if plan.record.out else 0, devices=len(plan.devices),
                chunk=plan.record.chunk,
                backend=str(plan.physics.view.backend or ""), backend_reason=plan.physics.backend_reason,
                # {output: {world: (first flagged row, flagged rows)}} over this call's rows (contact overflow)
                flagged={name: {w: tuple(v) for w, v in sorted(per.items())} for name, per in flags.items()})


def execute(plan: Plan, *, progress: bool | str | None = None) -> RolloutResult:
    """Carry out ``plan``: compile (or not, on a host backend), open the file, run the chunks, stream them.
    ``progress``: the spec's unless given (``PHASES``: the phase lines only)."""
    ex, keep, resume = plan.spec.execution, plan.spec.recording.keep, plan.resume is not None
    progress = ex.progress if progress is None else progress
    compression, watchdog_s = plan.spec.storage.compression, ex.watchdog_s
    scene = plan.physics.scene
    B = plan.start.x0.shape[0]
    ndev = len(plan.devices)
    st = _static(plan, -(-B // ndev) * ndev)
    x, carry, status, status_step = _start_state(plan)
    t_wall = _time.perf_counter()
    say = _phase_printer(progress)
    xs_mem, outs_mem, loop_mem = _memory(plan, keep)
    st, compiled, chunk_input, state, (compile_s, trace_s, trace_source) = _chunk_function(
        plan, st, WorldState(x, carry, status, status_step), xs_mem, say)

    # Only now (inputs checked, function compiled) does anything touch the disk, under the file's writer lock.
    lock = h5.FileLock(plan.record.out).acquire() if plan.record.out else None
    try:
        with interrupts.deferred():  # Ctrl-C here leaves a whole (empty, resumable) file, not half of one
            writer = _open_writer(plan, resume, st.samples, compression)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    guard = _watchdog(watchdog_s, plan.physics.view.name, B)
    bar = _progress(progress and progress != PHASES, plan.record.steps, plan.start.start_step)
    t_run, c_run = _time.perf_counter(), _time.process_time()
    done = False
    flags: dict = {}
    try:
        status, status_step, carry = _loop(plan, st, compiled, state, chunk_input, writer=writer, xs_mem=xs_mem,
                                           outs_mem=outs_mem, guard=guard, bar=bar, host=(status, status_step, carry),
                                           flags=flags, loop_mem=loop_mem)
        done = True
    finally:
        if bar is not None:
            bar.close()
        try:
            if writer is not None:
                writer.close(complete=done)
                if done and plan.loop.episodes is not None and plan.loop.episodes.terminate is not None:
                    # /episodes for generic readers (the reader derives it too)
                    h5.write_episode_table(str(plan.record.out))
        finally:
            if lock is not None:
                lock.release()
    run_s, run_cpu_s = _time.perf_counter() - t_run, _time.process_time() - c_run
    stats = _stats(plan, B, status, flags, wall_s=_time.perf_counter() - t_wall, compile_s=compile_s,
                   trace_s=trace_s, run_s=run_s, run_cpu_s=run_cpu_s, trace_cache=trace_source)
    R = plan.record.record_every
    time = plan.start.t0 + (np.arange(plan.record.samples) + 1) * R * plan.physics.dt
    return RolloutResult(time=time, x=xs_mem, status=status,
                         status_step=status_step, x0=plan.start.x0, layout=scene.layout,
                         qpos_segment=plan.physics.view.qpos_segment,
                         qvel_segment=plan.physics.view.qvel_segment, path=plan.record.out, stats=stats,
                         carry=carry, integrator=plan.physics.integ, outputs=outs_mem,
                         output_names=tuple(o.name for o in plan.record.outputs), model_params=plan.params.fields,
                         loop=loop_mem, loop_info=_loop_info(plan))


def _loop_info(plan: Plan) -> dict | None:
    """What ``RolloutResult.episodes`` needs besides the recorded carry (None without a closed loop)."""
    if plan.loop.episodes is None:
        return None
    return dict(record_every=plan.record.record_every, steps=plan.record.steps, world_offset=plan.start.world_offset,
                names=tuple(name for name, _ in plan.loop.episodes.carry_spec()))


def _bar_text(status, carries: dict, plan: Plan, B: int) -> str:
    """The progress bar's tail: failed worlds, and terminated worlds / episodes begun with a termination rule."""
    text = f"{int(failed(status).sum())} failed"
    if plan.loop.episodes is not None and plan.loop.episodes.terminate is not None:
        if plan.loop.episodes.resets:
            text += f", {int(np.asarray(carries[_ep.EPISODE])[-1, :B].sum())} resets"
        else:
            text += f", {int((status == TERMINATED).sum())} terminated"
    return text


# ``execute(progress=PHASES)``: the phase lines (loading, compiling) without a progress bar (a multi-process
# run's process 0, whose bar covers every process: engine.shard_progress).
PHASES = "phases"

# How the chunk function was obtained (rollout/cache.compile_cached's source), as the phase line says it.
COMPILE_SOURCES = {"in-process": "already compiled in this process", "exported": "trace from the disk cache",
                   "traced": "traced here and cached for the next process", "plain": "traced here; not cacheable",
                   "host": "whole chunks run natively by the backend, nothing compiled"}


def _phase_printer(progress):
    """One line per long phase on stderr (through tqdm, so a live bar is not torn), or nothing."""
    if not progress:
        return lambda text: None
    from tqdm.auto import tqdm

    return lambda text: tqdm.write(f"rollout: {text}", file=sys.stderr)


def _watchdog(watchdog_s, name: str | None, B):
    from ..diagnostics.watchdog import Watchdog, watchdog_timeout

    if watchdog_timeout(watchdog_s) == 0:
        return None
    return Watchdog(watchdog_s, scene=name, batch=B)


def _progress(progress, total, initial):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="step", desc="rollout", dynamic_ncols=True)
