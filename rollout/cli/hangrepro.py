"""``mjharness hangrepro``: the batched-MJX hang reproduced (humanoid ``mjx.step`` on jax 0.10), one JSON line.

    mjharness hangrepro --batch 64 --steps 200 --dtype float32 [--mode loop|scan] [--scene humanoid]
        [--solver newton|cg] [--iterations N] [--ls-iterations N] [--devices N] [--xla-flags "..."]
        [--no-async] [--stall-s S] [--no-cache] [--check]

What it measures is ``mjharness.rollout.diagnostics.hangrepro.reproduce``. A stalled device call
prints ``"status": "stalled"`` and exits with status 3 at once: the stuck XLA call cannot be joined,
so a normal exit could wait on it forever. Run it under ``timeout`` as well, as the tests do.
"""

from __future__ import annotations

import json
import os
import sys

from . import xla_log


def add_parser(sub) -> None:
    p = sub.add_parser("hangrepro", help="reproduce the batched-MJX hang of jax 0.10 (one JSON line)",
                       description="Run jit(vmap(mjx.step)) (or a scan of it) on a humanoid-scale scene under the "
                                   "watchdog; print versions, settings, compile and step timings and the status.")
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
    p.add_argument("--xla-flags", default=None, help="appended to XLA_FLAGS before JAX starts its backend")
    p.add_argument("--no-async", action="store_true", help="jax_cpu_enable_async_dispatch=False")
    p.add_argument("--no-cache", action="store_true", help="no persistent compilation cache")
    p.add_argument("--check", action="store_true",
                   help="also step MuJoCo C from the same state; report max |qpos - qpos_C| of world 0")
    p.add_argument("--stall-s", type=float, default=120.0, help="watchdog limit in seconds (0 = off)")
    p.set_defaults(func=command, subject=lambda args: f"scene {args.scene!r}")


def command(args) -> int:
    from mjharness.rollout.diagnostics.hangrepro import reproduce

    rec = reproduce(args.scene, batch=args.batch, steps=args.steps, dtype=args.dtype, mode=args.mode,
                    chunk=args.chunk, solver=args.solver, iterations=args.iterations,
                    ls_iterations=args.ls_iterations, keyframe=args.keyframe, devices=args.devices,
                    xla_flags=args.xla_flags, no_async=args.no_async, no_cache=args.no_cache, check=args.check,
                    stall_s=args.stall_s)
    print(json.dumps(rec), flush=True)
    if rec["status"] == "stalled":
        xla_log.uninstall()  # pass on what XLA logged, then leave without joining the stuck call
        sys.stderr.flush()
        os._exit(3)  # the stuck XLA call cannot be joined; a normal exit could wait on it forever
    return 0
