"""``mjharness bench``: throughput of our integrators beside raw MJX and MuJoCo C's ``mujoco.rollout``.

    mjharness bench [SCENE ...] --batch 1 64 1024 --steps 1000 [--json out.json]
    mjharness bench --cache-check [SCENE]       # second process vs first: persistent compile cache
    mjharness bench --full --json bench.json    # the README's measurement plan
    mjharness bench --grad [SCENE] --steps 1000 # jax.grad through simulate vs the forward run (RK4)

The measurement is ``mjharness.rollout.bench.bench_report``; exit status 1 when a cell failed.
"""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="throughput of our integrators vs raw MJX and mujoco.rollout",
                       description="Benchmark SCENE(s) at each --batch: raw mjx.step / mjx.forward, our "
                                   "integrators through rollout(), MuJoCo's multi-threaded rollout, and our rollout "
                                   "engine with and without HDF5 export. Prints a table; --json writes every figure.")
    p.add_argument("scenes", nargs="*", metavar="SCENE",
                   help="bundled scene names or MJCF paths (default: the bench's scenes, from 1 to 27 dof)")
    p.add_argument("--batch", type=int, nargs="+", default=[64], help="batch size(s) (default 64)")
    p.add_argument("--steps", type=int, default=1000, help="steps per timed call (default 1000)")
    p.add_argument("--peers", nargs="+", metavar="PEER",
                   help="raw peers (mjx_step, mjx_forward, mujoco_rollout), engine peers (rollout, rollout_h5) "
                        "or any integrator name (mjharness run --list-integrators); default: the bench's set")
    p.add_argument("--repeats", type=int, default=2, help="timed calls at least (default 2, after one warm-up)")
    p.add_argument("--min-time", type=float, default=1.0, help="timed seconds at least per peer (default 1)")
    p.add_argument("--record-every", type=int, default=10, help="record_every of the engine peers (default 10)")
    p.add_argument("--nthread", type=int, help="mujoco.rollout threads (default: all cores)")
    p.add_argument("--full", action="store_true",
                   help="the README's measurement plan (pendulum, chain12, humanoid at several batches)")
    p.add_argument("--cache-check", action="store_true",
                   help="also run, per SCENE, two fresh processes against an empty cache (second vs first compile)")
    p.add_argument("--cold-start", action="store_true",
                   help="also time, per SCENE, a fresh `mjharness run` process per backend (mujoco, mjx) against an "
                        "empty compile cache, at the first --batch and --steps")
    p.add_argument("--grad", action="store_true",
                   help="instead: time and peak memory of jax.grad through simulate vs the forward run (RK4, "
                        "SCENE default double_pendulum, each --batch, --steps)")
    p.add_argument("--json", metavar="FILE", help="write the report (machine, versions, every figure) to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=command, subject=lambda args: "scene(s) " + (" ".join(args.scenes) or "(the bench's)"))


def command(args) -> int:
    from mjharness.rollout.bench import DEFAULT_PEERS, bench_report, format_table

    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    if args.grad:
        return _grad(args, log)
    report = bench_report(scenes=args.scenes, batches=args.batch, steps=args.steps, peers=args.peers or DEFAULT_PEERS,
                          repeats=args.repeats, min_time=args.min_time, record_every=args.record_every,
                          nthread=args.nthread, full=args.full, cache_check=args.cache_check, json_path=args.json,
                          log=log)
    if args.cold_start:
        from mjharness.rollout.bench.coldstart import cold_starts
        from mjharness.rollout.bench.plan import DEFAULT_SCENES
        from mjharness.rollout.bench.report import write_json

        report["cold_start"] = cold_starts(args.scenes or DEFAULT_SCENES, steps=args.steps, batch=args.batch[0],
                                           log=log)
        if args.json:
            write_json(report, args.json)
    print(format_table(report))
    if report.get("cold_start"):
        from mjharness.rollout.bench.coldstart import format_cold

        print("\n".join(format_cold(report["cold_start"], args.steps, args.batch[0])))
    if args.json:
        print(f"\nwrote {args.json}")
    return 1 if report["errors"] else 0


def _grad(args, log) -> int:
    from mjharness.rollout.bench.command import grad_report
    from mjharness.rollout.bench.grad import format_grad

    report = grad_report(scenes=args.scenes, batches=args.batch, steps=args.steps, record_every=args.record_every,
                         repeats=args.repeats, min_time=args.min_time, json_path=args.json, log=log)
    for rep in report["grad"]:
        print(format_grad(rep))
    for e in report["errors"]:
        print(f"FAILED {e['scene']} batch {e['batch']}: {e['error']}")
    if args.json:
        print(f"\nwrote {args.json}")
    return 1 if report["errors"] else 0
