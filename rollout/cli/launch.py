"""``mjharness run --distributed`` (this process is one of N, from MJHARNESS_* or cluster variables) and
``mjharness run --local-processes N`` (N such processes on this machine, coordinator on localhost).

Each local process gets its own CPU device(s) (``--devices``, default 1) through XLA_FLAGS. The
launcher watches its children: when one fails, it stops the others and exits non-zero.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from .errors import CliError

_FORWARD = (("integrator", "--integrator"), ("dt", "--dt"), ("steps", "--steps"), ("batch", "--batch"),
            ("record_every", "--record-every"), ("seed", "--seed"), ("perturb", "--perturb"), ("out", "--out"),
            ("resume", "--resume"), ("chunk", "--chunk"), ("compression", "--compression"), ("mjx", "--mjx"),
            ("quaternion_update", "--quaternion-update"), ("watchdog_s", "--watchdog-s"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(args) -> list[str]:
    argv = [sys.executable, "-m", "mjharness.rollout.cli", "run"] + ([args.scene] if args.scene else [])
    for attr, flag in _FORWARD:
        v = getattr(args, attr, None)
        if v is not None:
            argv += [flag, str(v)]
    argv += ["--distributed", "--no-progress"] + (["--overwrite"] if args.overwrite else [])
    argv += ["--debug"] if getattr(args, "debug", False) else []
    return argv


def launch_local(args) -> int:
    n = args.local_processes
    if n < 1:
        raise CliError(f"--local-processes must be >= 1, got {n}")
    per = args.devices or 1
    port = free_port()
    procs = []
    for k in range(n):
        env = dict(os.environ, MJHARNESS_COORDINATOR=f"127.0.0.1:{port}", MJHARNESS_NUM_PROCESSES=str(n),
                   MJHARNESS_PROCESS_ID=str(k), JAX_PLATFORMS="cpu",
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={per}"))
        procs.append(subprocess.Popen(child_argv(args), env=env))
    print(f"mjharness run: {n} local processes x {per} CPU device(s), coordinator 127.0.0.1:{port}, pids "
          f"{[p.pid for p in procs]}", file=sys.stderr)
    return _watch(procs)


def _watch(procs) -> int:
    while True:
        codes = [p.poll() for p in procs]
        bad = [(k, c) for k, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for p in procs:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
            k, c = bad[0]
            print(f"mjharness run: process {k} exited with status {c}; stopped the others (each shard holds its "
                  f"flushed chunks; --resume continues)", file=sys.stderr)
            return 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.2)


def run_distributed(args) -> int:
    from mjharness.rollout.engine.distributed import distributed_rollout, initialize
    from mjharness.rollout.h5.join import shard_path

    from .run import DEFAULTS, _resume_settings

    k, n = initialize()
    if args.resume:
        joined = os.path.abspath(args.resume)
        shard = shard_path(joined, k, n)
        if not os.path.isfile(shard):
            raise CliError(f"--resume {args.resume}: shard {shard} of process {k}/{n} is missing")
        args.resume = shard  # settings (scene, integrator, dt, ...) from this process's shard
        s = _resume_settings(args)
        out, resume = joined, True
    else:
        if not args.out:
            raise CliError("--distributed / --local-processes need --out")
        s = dict(scene=args.scene or "pendulum", integrator=args.integrator, dt=args.dt,
                 steps=args.steps or DEFAULTS["steps"], record_every=args.record_every or DEFAULTS["record_every"],
                 seed=args.seed or 0, batch=args.batch or DEFAULTS["batch"], chunk=args.chunk or DEFAULTS["chunk"],
                 quaternion_update=args.quaternion_update or "quaternion")
        out, resume = args.out, False
    st = distributed_rollout(s["scene"], s["integrator"], out=out, steps=s["steps"], batch=s["batch"], dt=s["dt"],
                             seed=s["seed"], record_every=s["record_every"], chunk=s["chunk"],
                             overwrite=args.overwrite, resume=resume, perturb=args.perturb,
                             compression=None if args.compression == "none" else args.compression,
                             watchdog_s=args.watchdog_s, progress=False, mjx=args.mjx,
                             quaternion_update=s["quaternion_update"], devices=args.devices).stats
    print(f"  process {k}/{n}: run {st['run_s']:.2f} s, {st['world_steps_per_s']:.0f} world-steps/s on "
          f"{st['devices']} device(s), shard {st['shard']}", file=sys.stderr)
    if k == 0:
        j = st["joined"]
        print(f"  joined {out}: {j['samples']} samples x {j['batch']} worlds, complete={j['complete']}")
    return 0
