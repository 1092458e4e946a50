"""Reproduction of the batched-MJX hang: batched ``mjx.step`` on a humanoid-scale scene, hanging on some jax versions.

    mjharness hangrepro --batch 64 --steps 200 --dtype float32 [--mode loop|scan] [--scene humanoid]
        [--solver newton|cg] [--iterations N] [--ls-iterations N] [--devices N] [--xla-flags "..."]
        [--no-async] [--stall-s S] [--no-cache] [--check]

    rec = reproduce(scene="humanoid", batch=64, steps=20, dtype="float64", devices=2)   # in Python

``reproduce`` returns one record (the CLI prints it as one JSON line): versions, settings,
``compile_s`` (lower + XLA compile, persistent cache as configured; ``no_cache`` turns it off),
``first_call_s``, ``world_steps_per_s`` (batch * steps / wall time of the timed steps, after the first
call) and ``status``. A call that makes no progress for ``stall_s`` seconds (the in-process watchdog)
gives ``"status": "stalled"`` naming the step; the stuck XLA call cannot be joined, so the process
must then end with ``os._exit`` (the CLI exits 3): a hang is a result, not a stuck terminal.

``mode="loop"`` is the pattern of the report: ``jax.jit(jax.vmap(mjx.step))`` called once per step on
its own output. ``mode="scan"`` runs ``chunk`` steps per call inside ``lax.scan``. ``devices=N``
splits the host into N XLA CPU devices and shards the batch over them instead of one vmap device.

What it found (bundled humanoid, 2-core machine, mujoco 4.0.0, mujoco-mjx 3.17.0): with the batch
sharded over 2 CPU devices, batch 64 hangs at the first call, CPU idle, on every jax/jaxlib 0.10.x
tried (0.10.0, 0.10.1, 0.10.2: 8 of 8 runs, float32 and float64, keyframe or qpos0, also with
single-threaded Eigen or synchronous dispatch), never on 0.9.2 (0 of 36 runs on 1 or 2 devices).
Batch 4-32 and the small ``brick`` scene run. On one device (plain vmap) it did not reproduce (19
runs on 0.10.2). Hence the pin ``jax>=0.9.2,<0.10`` and no XLA flag against it;
``tests/test_hang.py`` runs the hanging configuration under a timeout.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import mujoco
from jax._src import xla_bridge
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from mjharness.integrators.errors import UserError
from mjharness.scenes import load_scene
from mjharness.scenes.settings import configure, mjx

from .watchdog import DeviceStallError, Watchdog

__all__ = ["reproduce", "HangReproError"]

_SOLVERS = {"newton": mujoco.mjtSolver.mjSOL_NEWTON, "cg": mujoco.mjtSolver.mjSOL_CG}


class HangReproError(UserError, ValueError):
    """Settings the reproduction cannot run with (names the setting)."""


def _check(batch, steps, chunk, devices, dtype, mode, solver, xla_flags) -> None:
    for name, v in (("batch", batch), ("steps", steps), ("chunk", chunk), ("devices", devices)):
        if not (isinstance(v, int) and v >= 1):
            raise HangReproError(f"{name} must be an int >= 1, got {v!r}")
    if devices > 1 and batch % devices:
        raise HangReproError(f"batch {batch} is not divisible by devices {devices}")
    if dtype not in ("float32", "float64") or mode not in ("loop", "scan"):
        raise HangReproError(f"dtype must be float32|float64 and mode loop|scan, got {dtype!r}, {mode!r}")
    if solver is not None and solver not in _SOLVERS:
        raise HangReproError(f"solver must be one of {sorted(_SOLVERS)}, got {solver!r}")
    if xla_flags and xla_bridge.backends_are_initialized():
        raise HangReproError("xla_flags: the XLA backend was started before the flags could apply; "
                             "set XLA_FLAGS in the environment instead")


def _configure(dtype, devices, xla_flags, no_async, no_cache) -> None:
    # XLA reads XLA_FLAGS when its backend starts (the first array), which happens after this.
    if xla_flags:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + xla_flags).strip()
    # mjharness.scenes.settings already applied the environment's width and cache on import: say
    # width and cache again so the run is the one asked for.
    jax.config.update("jax_enable_x64", dtype == "float64")
    if no_cache:
        jax.config.update("jax_enable_compilation_cache", False)
    if no_async:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if devices > 1:
        jax.config.update("jax_num_cpu_devices", devices)


def _model(scene, solver, iterations, ls_iterations, keyframe):
    model = load_scene(scene)
    if solver:
        model.opt.solver = _SOLVERS[solver]
    if iterations is not None:
        model.opt.iterations = iterations
    if ls_iterations is not None:
        model.opt.ls_iterations = ls_iterations
    data = mujoco.MjData(model)
    if keyframe is not None:
        mujoco.mj_resetDataKeyframe(model, data, keyframe)
    return model, data


def _record(scene, model, batch, steps, dtype, mode, chunk, devices) -> dict:
    import jaxlib

    cache_on = jax.config.values.get("jax_enable_compilation_cache", True)
    return {
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "mujoco": mujoco.__version__, "scene": scene,
        "nq": model.nq, "nv": model.nv, "batch": batch, "steps": steps, "dtype": dtype, "mode": mode,
        "chunk": chunk if mode == "scan" else 1, "solver": int(model.opt.solver),
        "iterations": int(model.opt.iterations), "ls_iterations": int(model.opt.ls_iterations),
        "devices": devices, "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "async_dispatch": bool(jax.config.values.get("jax_cpu_enable_async_dispatch", True)),
        "cache_dir": (jax.config.values.get("jax_compilation_cache_dir") or "") if cache_on else "",
        "cpus": os.cpu_count(),
    }


def _program(model, data, batch, mode, chunk, devices, rec):
    """(jitted step function, MJX model, batched MJX data, steps per call)."""
    mx = mjx.put_model(model)
    dx = mjx.put_data(model, data)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), dx)
    step = jax.vmap(mjx.step, in_axes=(None, 0))
    if mode == "loop":
        fn, per_call = step, 1
    else:
        def fn(m, d):
            return jax.lax.scan(lambda c, _: (step(m, c), None), d, None, length=chunk)[0]
        per_call = chunk
    # put_data and step disagree on integer widths of contact index fields under x64 (DESIGN §7):
    # give the input step's output dtypes, so every call on its own output has one signature.
    out_shapes = jax.eval_shape(step, mx, state)
    state = jax.tree.map(lambda x, s: x.astype(s.dtype), state, out_shapes)
    if devices == 1:
        return jax.jit(fn), mx, state, per_call
    # Auto axes: the batch is split over devices by its input sharding; the jitted code is unchanged.
    mesh = jax.make_mesh((devices,), ("batch",), axis_types=(AxisType.Auto,))
    shard, rep = NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())
    state = jax.device_put(state, shard)
    mx = jax.device_put(mx, rep)
    rec["batch_sharding"] = str(jax.tree.leaves(state)[0].sharding)
    # Pin the output to the input's sharding, so each call takes the previous call's output as is.
    return jax.jit(fn, in_shardings=(rep, shard), out_shardings=shard), mx, state, per_call


def _mujoco_c(model, data, steps: int, d, rec) -> None:
    ref = mujoco.MjData(model)
    ref.qpos[:], ref.qvel[:], ref.act[:], ref.ctrl[:] = data.qpos, data.qvel, data.act, data.ctrl
    for _ in range(steps):
        mujoco.mj_step(model, ref)
    rec["c_time"] = float(ref.time)
    rec["max_abs_qpos_vs_c"] = float(abs(jax.device_get(d.qpos[0]) - ref.qpos).max())


def reproduce(scene: str = "humanoid", *, batch: int = 64, steps: int = 200, dtype: str = "float32",
              mode: str = "loop", chunk: int = 50, solver: str | None = None, iterations: int | None = None,
              ls_iterations: int | None = None, keyframe: int | None = None, devices: int = 1,
              xla_flags: str | None = None, no_async: bool = False, no_cache: bool = False, check: bool = False,
              stall_s: float = 120.0) -> dict:
    """Run the reproduction; the record (see the module docstring). ``check``: also step MuJoCo C from
    the same state and report max |qpos - qpos_C| of world 0."""
    configure()  # float64, the XLA:CPU flag and the caches, as users get them
    _check(batch, steps, chunk, devices, dtype, mode, solver, xla_flags)
    _configure(dtype, devices, xla_flags, no_async, no_cache)
    model, data = _model(scene, solver, iterations, ls_iterations, keyframe)
    rec = _record(scene, model, batch, steps, dtype, mode, chunk, devices)
    jitted, mx, d, per_call = _program(model, data, batch, mode, chunk, devices, rec)
    calls = -(-steps // per_call)
    wd = Watchdog(stall_s, scene=scene, batch=batch)
    t0 = time.perf_counter()
    try:
        compiled = wd(lambda: jitted.lower(mx, d).compile(), step="compile")
        rec["compile_s"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        d = wd(compiled, mx, d, step=0)
        rec["first_call_s"] = round(time.perf_counter() - t1, 4)
        t2 = time.perf_counter()
        for i in range(1, calls):
            d = wd(compiled, mx, d, step=i * per_call)
        run = time.perf_counter() - t2
    except DeviceStallError as e:
        rec.update(status="stalled", error=str(e), stalled_at=e.context.get("step"),
                   wall_s=round(time.perf_counter() - t0, 2))
        return rec
    timed_steps = (calls - 1) * per_call
    rec["run_s"] = round(run, 4)
    rec["world_steps_per_s"] = round(batch * timed_steps / run, 1) if timed_steps else None
    rec["finite"] = bool(jnp.all(jnp.isfinite(d.qpos)) and jnp.all(jnp.isfinite(d.qvel)))
    rec["time"] = float(d.time[0])
    rec["qpos_dtype"] = str(d.qpos.dtype)
    # Every world starts from the same state, so the batch must agree with itself exactly.
    rec["batch_spread"] = float(jnp.max(jnp.abs(d.qpos - d.qpos[:1])))
    if check:
        _mujoco_c(model, data, calls * per_call, d, rec)
    rec["status"] = "ok"
    return rec
