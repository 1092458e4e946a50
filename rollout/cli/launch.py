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
from .options import forward_argv
from .summary import episode_lines, flagged_lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(args) -> list[str]:
    """A worker's command line: every forwarded ``run`` option as given (``options.RUN_OPTIONS``)."""
    argv = [sys.executable, "-m", "mjharness.rollout.cli", "run", *forward_argv(args), "--distributed"]
    return argv + (["--debug"] if getattr(args, "debug", False) else [])


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


def initialize() -> tuple[int, int]:
    """This process's (index, count) in the distributed runtime (``--distributed``)."""
    from mjharness.rollout.engine.distributed import initialize as _initialize

    return _initialize()


def resume_source(resume: str, process) -> str:
    """The file whose settings a resume reads: the file itself, or in a multi-process run this process's
    shard, else any shard or the joined file (they share every setting)."""
    if process is None:
        return resume
    from mjharness.rollout.h5.join import shard_path, shard_paths

    joined = os.path.abspath(resume)
    k, n = process
    for path in [shard_path(joined, k, n), *shard_paths(joined, n), joined]:
        if os.path.isfile(path):
            return path
    raise CliError(f"--resume {resume}: neither the file nor any of its {n} shards exists")


def process_summary(r, process) -> None:
    k, n = process
    st = r.stats
    print(f"  process {k}/{n}: backend {st.get('backend', '?')}, run {st['run_s']:.2f} s, "
          f"{st['world_steps_per_s']:.0f} world-steps/s on {st['devices']} device(s), shard {st['shard']}",
          file=sys.stderr)
    if k == 0:

        j = st["joined"]
        print(f"  joined {r.path}: {j['samples']} samples x {j['batch']} worlds, complete={j['complete']}")
        for line in flagged_lines(st.get("flagged", {})) + episode_lines(r.path):  # every process's worlds
            print(line)
