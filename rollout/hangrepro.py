"""Reproduction of issue 9: batched ``mjx.step`` on a humanoid-scale scene, hanging on some jax versions.

    python -m mjharness.rollout.hangrepro --batch 64 --steps 200 --dtype float32 [--mode loop|scan]
        [--scene humanoid] [--solver newton|cg] [--iterations N] [--ls-iterations N] [--devices N]
        [--xla-flags "..."] [--no-async] [--stall-s S] [--no-cache]

Prints one JSON line: versions, settings, ``compile_s`` (lower + XLA compile, persistent cache as
configured: ``MJHARNESS_CACHE_DIR=""`` or ``--no-cache`` turns it off), ``first_call_s``,
``world_steps_per_s`` (batch * steps / wall time of the timed steps, after the first call) and
``status``. A call that makes no progress for ``--stall-s`` seconds (the in-process watchdog) prints
``"status": "stalled"`` naming the step and exits with code 3, so a hang is a result, not a stuck
terminal; run it under ``timeout`` as well, as the tests do.

``--mode loop`` is the pattern of the report: ``jax.jit(jax.vmap(mjx.step))`` called once per step on
its own output. ``--mode scan`` runs ``--chunk`` steps per call inside ``lax.scan``. ``--devices N``
splits the host into N XLA CPU devices and shards the batch over them instead of one vmap device.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m mjharness.rollout.hangrepro", description=__doc__.split("\n")[0])
    p.add_argument("--scene", default="humanoid", help="bundled scene name or MJCF path (default humanoid)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--mode", choices=("loop", "scan"), default="loop")
    p.add_argument("--chunk", type=int, default=50, help="steps per call in --mode scan")
    p.add_argument("--solver", choices=("newton", "cg"), default=None, help="override the scene's solver")
    p.add_argument("--iterations", type=int, default=None, help="override opt.iterations")
    p.add_argument("--ls-iterations", type=int, default=None, help="override opt.ls_iterations")
    p.add_argument("--keyframe", type=int, default=None, help="start from this keyframe (default qpos0)")
    p.add_argument("--devices", type=int, default=1, help="XLA CPU devices to shard the batch over")
    p.add_argument("--xla-flags", default=None, help="appended to XLA_FLAGS before JAX starts")
    p.add_argument("--no-async", action="store_true", help="jax_cpu_enable_async_dispatch=False")
    p.add_argument("--no-cache", action="store_true", help="no persistent compilation cache")
    p.add_argument("--check", action="store_true",
                   help="also step MuJoCo C from the same state; report max |qpos - qpos_C| of world 0")
    p.add_argument("--stall-s", type=float, default=120.0, help="watchdog limit in seconds (0 = off)")
    return p.parse_args(argv)


def _emit(rec):
    print(json.dumps(rec), flush=True)


def main(argv=None) -> int:
    a = _parse(argv)
    if a.batch < 1 or a.steps < 1 or a.chunk < 1 or a.devices < 1:
        raise SystemExit("--batch, --steps, --chunk and --devices must be >= 1")
    if a.devices > 1 and a.batch % a.devices:
        raise SystemExit(f"--batch {a.batch} is not divisible by --devices {a.devices}")
    # XLA reads XLA_FLAGS when its backend starts (the first array), which happens below.
    if a.xla_flags:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + a.xla_flags).strip()
    if a.no_cache:
        os.environ["MJHARNESS_CACHE_DIR"] = ""
    os.environ["MJHARNESS_X64"] = "1" if a.dtype == "float64" else "0"

    import jax
    import jax.numpy as jnp
    import mujoco
    from mujoco import mjx

    import mjharness.integrators._config  # noqa: F401 - x64 flag and persistent cache, as users get them
    from mjharness.rollout.watchdog import DeviceStallError, Watchdog
    from mjharness.scenes import load_scene

    # Importing mjharness.rollout (runpy does, before main) already ran _config with the environment
    # the process started with; say width and cache again so the run is the one asked for.
    jax.config.update("jax_enable_x64", a.dtype == "float64")
    if a.no_cache:
        jax.config.update("jax_enable_compilation_cache", False)
    from jax._src import xla_bridge

    if a.xla_flags and getattr(xla_bridge, "backends_are_initialized", lambda: False)():
        raise SystemExit("--xla-flags: the XLA backend was started before the flags could apply; "
                         "set XLA_FLAGS in the environment instead")
    if a.no_async:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if a.devices > 1:
        jax.config.update("jax_num_cpu_devices", a.devices)

    model = load_scene(a.scene)
    if a.solver:
        model.opt.solver = {"newton": mujoco.mjtSolver.mjSOL_NEWTON, "cg": mujoco.mjtSolver.mjSOL_CG}[a.solver]
    if a.iterations is not None:
        model.opt.iterations = a.iterations
    if a.ls_iterations is not None:
        model.opt.ls_iterations = a.ls_iterations
    data = mujoco.MjData(model)
    if a.keyframe is not None:
        mujoco.mj_resetDataKeyframe(model, data, a.keyframe)

    rec = {
        "jax": jax.__version__, "jaxlib": None,
        "mujoco": mujoco.__version__, "scene": a.scene, "nq": model.nq, "nv": model.nv,
        "batch": a.batch, "steps": a.steps, "dtype": a.dtype, "mode": a.mode,
        "chunk": a.chunk if a.mode == "scan" else 1, "solver": int(model.opt.solver),
        "iterations": int(model.opt.iterations), "ls_iterations": int(model.opt.ls_iterations),
        "devices": a.devices, "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "async_dispatch": bool(jax.config.values.get("jax_cpu_enable_async_dispatch", True)),
        "cache_dir": (jax.config.values.get("jax_compilation_cache_dir") or "")
        if jax.config.values.get("jax_enable_compilation_cache", True) else "", "cpus": os.cpu_count(),
    }
    try:
        import jaxlib

        rec["jaxlib"] = jaxlib.__version__
    except Exception:
        pass

    mx = mjx.put_model(model)
    dx = mjx.put_data(model, data)
    batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (a.batch,) + x.shape), dx)

    step = jax.vmap(mjx.step, in_axes=(None, 0))
    if a.mode == "loop":
        fn, per_call = step, 1
    else:
        def fn(m, d):
            return jax.lax.scan(lambda c, _: (step(m, c), None), d, None, length=a.chunk)[0]
        per_call = a.chunk
    calls = -(-a.steps // per_call)

    # put_data and step disagree on integer widths of contact index fields under x64 (DESIGN §7):
    # give the input step's output dtypes, so every call on its own output has one signature.
    out_shapes = jax.eval_shape(step, mx, batch)
    batch = jax.tree.map(lambda x, s: x.astype(s.dtype), batch, out_shapes)
    if a.devices > 1:
        from jax.sharding import AxisType, NamedSharding, PartitionSpec

        # Auto axes: the batch is split over devices by its input sharding; the jitted code is unchanged.
        mesh = jax.make_mesh((a.devices,), ("batch",), axis_types=(AxisType.Auto,))
        batch = jax.device_put(batch, NamedSharding(mesh, PartitionSpec("batch")))
        mx = jax.device_put(mx, NamedSharding(mesh, PartitionSpec()))
        rec["batch_sharding"] = str(jax.tree.leaves(batch)[0].sharding)
        # Pin the output to the input's sharding, so each call takes the previous call's output as is.
        jitted = jax.jit(fn, in_shardings=(NamedSharding(mesh, PartitionSpec()),
                                           NamedSharding(mesh, PartitionSpec("batch"))),
                         out_shardings=NamedSharding(mesh, PartitionSpec("batch")))
    else:
        jitted = jax.jit(fn)

    wd = Watchdog(a.stall_s, scene=a.scene, batch=a.batch)
    t0 = time.perf_counter()
    try:
        compiled = wd(lambda: jitted.lower(mx, batch).compile(), step="compile")
        rec["compile_s"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        d = wd(compiled, mx, batch, step=0)
        rec["first_call_s"] = round(time.perf_counter() - t1, 4)
        t2 = time.perf_counter()
        for i in range(1, calls):
            d = wd(compiled, mx, d, step=i * per_call)
        run = time.perf_counter() - t2
    except DeviceStallError as e:
        rec.update(status="stalled", error=str(e), stalled_at=e.context.get("step"),
                   wall_s=round(time.perf_counter() - t0, 2))
        _emit(rec)
        sys.stdout.flush()
        os._exit(3)  # the stuck XLA call cannot be joined; a normal exit could wait on it forever
    timed_steps = (calls - 1) * per_call
    rec["run_s"] = round(run, 4)
    rec["world_steps_per_s"] = round(a.batch * timed_steps / run, 1) if timed_steps else None
    rec["finite"] = bool(jnp.all(jnp.isfinite(d.qpos)) and jnp.all(jnp.isfinite(d.qvel)))
    rec["time"] = float(d.time[0])
    rec["qpos_dtype"] = str(d.qpos.dtype)
    # Every world starts from the same state, so the batch must agree with itself exactly.
    rec["batch_spread"] = float(jnp.max(jnp.abs(d.qpos - d.qpos[:1])))
    if a.check:
        ref = mujoco.MjData(model)
        ref.qpos[:], ref.qvel[:], ref.act[:], ref.ctrl[:] = data.qpos, data.qvel, data.act, data.ctrl
        for _ in range(calls * per_call):
            mujoco.mj_step(model, ref)
        rec["c_time"] = float(ref.time)
        rec["max_abs_qpos_vs_c"] = float(abs(jax.device_get(d.qpos[0]) - ref.qpos).max())
    rec["status"] = "ok"
    _emit(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
