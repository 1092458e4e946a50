"""A guard against device calls that never return (the batched-MJX hang): a stall becomes an error, not a hang.

jax/jaxlib 0.10.x on CPU hang executing batched humanoid-scale ``mjx.step`` calls (measured: batch 64
sharded over two CPU devices, every 0.10.x; 0.9.2 runs): the CPU goes idle, XLA's worker threads wait
for work and the caller waits forever for a result buffer.
An XLA call cannot be cancelled from Python, so the guard runs the call and its blocking wait
(``jax.block_until_ready``) in a (reused) daemon worker thread and watches it from the caller's thread:

    wd = Watchdog(scene="humanoid", batch=64)              # once per rollout
    carry = wd(chunk_fn, carry, step=k)                     # once per chunk: result is ready

A call is *stalled* when, for ``timeout_s`` seconds in a row, it shows no sign of progress. Signs of
progress, sampled every ``poll_s``: the worker thread runs Python (tracing, lowering: its innermost
frame changes), the worker is inside JAX's compiler (XLA compiles are long C++ calls, not device
calls), or -- on the CPU backend -- the process burns CPU time (a CPU computation works; the hang
above is idle). So a long but busy CPU chunk never trips the guard, and the time limit only bounds
the silence. On accelerators the host waits idle while the device works, so there ``timeout_s``
bounds the whole device call: size it above the longest chunk.

An interrupt (``KeyboardInterrupt``: Ctrl-C, or SIGTERM as the CLI maps it) that reaches the caller while
the worker runs is held until the call returns, then raised: unwinding at once would leave the worker
inside MuJoCo C or XLA while the interpreter shuts down, which segfaults (measured: a 256-world MuJoCo C
run interrupted mid-chunk, 9 of 9 times). The wait is one chunk at most, and a stall still ends it.

``timeout_s``: the argument, else the env var ``MJHARNESS_WATCHDOG_S``, else 300 s; ``0`` (or
``off``) turns the guard off (the call runs directly in the caller's thread).
"""

from __future__ import annotations

import functools
import os
import queue
import sys
import threading
import time

import jax

from mjharness.integrators.errors import FaultError

__all__ = ["DeviceStallError", "Watchdog", "call_with_watchdog", "watchdog_timeout", "DEFAULT_TIMEOUT_S",
           "ENV_VAR"]

ENV_VAR = "MJHARNESS_WATCHDOG_S"
DEFAULT_TIMEOUT_S = 300.0
# Process CPU time per wall second above which a CPU-backend call counts as working. The batched-MJX hang
# of jax 0.10 left the CPU idle; a real XLA CPU computation uses about one core or more.
_CPU_BUSY_CORES = 0.1
# Innermost frames in these JAX modules mean "compiling or reading the compile cache": progress.
_COMPILE_FILES = ("compiler.py", "compilation_cache.py", "cache_key.py")


class DeviceStallError(FaultError, RuntimeError):
    """A device call made no progress for ``timeout_s`` seconds; names its context (scene, batch, step).

    The stuck call cannot be cancelled: its worker thread is abandoned (a daemon) and the process
    should be restarted before more device work. ``.context`` holds the names given to the guard,
    ``.stalled_s`` the silent time, ``.elapsed_s`` the whole call, ``.where`` the worker's frame.
    """

    def __init__(self, context: dict, timeout_s: float, stalled_s: float, elapsed_s: float, where: str):
        self.context = dict(context)
        self.timeout_s = timeout_s
        self.stalled_s = stalled_s
        self.elapsed_s = elapsed_s
        self.where = where
        named = ", ".join(f"{k}={v!r}" for k, v in self.context.items()) or "no context given"
        super().__init__(
            f"device call made no progress for {stalled_s:.1f} s (limit {timeout_s:g} s; call running "
            f"{elapsed_s:.1f} s) at {named}; the worker is stuck at {where}. The call cannot be "
            f"cancelled: restart the process. A known cause is jax/jaxlib 0.10.x on CPU with a large MJX "
            f"scene sharded over several CPU devices (README: use jax<0.10); set {ENV_VAR} "
            f"(seconds, 0 = off) or timeout_s to change the limit."
        )


def watchdog_timeout(timeout_s: float | None = None) -> float:
    """The limit in force: the argument, else ``MJHARNESS_WATCHDOG_S``, else 300 s; 0 means off."""
    if timeout_s is None:
        raw = os.environ.get(ENV_VAR, "").strip()
        if not raw:
            return DEFAULT_TIMEOUT_S
        if raw.lower() in ("off", "none", "false", "no"):
            return 0.0
        try:
            timeout_s = float(raw)
        except ValueError:
            raise ValueError(f"{ENV_VAR}={raw!r}: expected a number of seconds (0 or 'off' disables)") from None
        source = f"{ENV_VAR}={raw!r}"
    else:
        source = f"timeout_s={timeout_s!r}"
    if not (timeout_s >= 0) or timeout_s == float("inf"):
        raise ValueError(f"{source}: the watchdog limit must be a finite number of seconds >= 0")
    return float(timeout_s)


@functools.lru_cache(maxsize=1)
def _is_cpu_backend() -> bool:
    return jax.default_backend() == "cpu"


def _frame_info(frame) -> tuple:
    if frame is None:
        return (None, -1)
    return (frame.f_code, frame.f_lasti)


def _where(frame) -> str:
    if frame is None:
        return "<no Python frame>"
    code = frame.f_code
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"


def _in_compiler(frame) -> bool:
    # Only the innermost frame matters: a long C++ compile is called straight from jax/_src/compiler.py.
    if frame is None:
        return False
    path = frame.f_code.co_filename.replace("\\", "/")
    return "/jax/_src/" in path and path.rsplit("/", 1)[-1] in _COMPILE_FILES


def _ready(out):
    return jax.block_until_ready(out)


class _Worker:
    """A daemon thread that runs guarded calls one at a time. Workers are reused: a fresh thread per
    call costs ~1 ms (thread start and JAX's per-thread state), as much as a small MJX step."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="mjharness-watchdog-worker", daemon=True)
        self.thread.start()
        ident = self.thread.ident
        assert ident is not None  # set by start()
        self.ident: int = ident

    def _loop(self):
        while True:
            fn, args, kwargs, box, done = self.jobs.get()
            try:
                box["out"] = _ready(fn(*args, **kwargs))
            except BaseException as e:  # noqa: B036 - handed to the caller's thread as is
                box["err"] = e
            finally:
                done.set()
            del fn, args, kwargs, box, done  # hold no reference to the caller's arrays between calls


_IDLE: list = []  # workers free for the next call; a stuck worker is never put back
_IDLE_LOCK = threading.Lock()


def _take_worker() -> _Worker:
    with _IDLE_LOCK:
        if _IDLE:
            return _IDLE.pop()
    return _Worker()


def call_with_watchdog(fn, *args, timeout_s: float | None = None, context: dict | None = None,
                       poll_s: float | None = None, **kwargs):
    """``jax.block_until_ready(fn(*args, **kwargs))``, raising ``DeviceStallError`` on a stall.

    ``context`` (e.g. ``{"scene": "humanoid", "batch": 64, "step": 1200}``) is named in the error.
    Exceptions of ``fn`` propagate unchanged. With the limit 0 the call runs in this thread, unguarded.
    """
    limit = watchdog_timeout(timeout_s)
    if limit == 0:
        return _ready(fn(*args, **kwargs))
    poll = min(1.0, max(0.01, limit / 20)) if poll_s is None else float(poll_s)
    box: dict = {}
    done = threading.Event()
    worker = _take_worker()
    cpu_backend = _is_cpu_backend()
    start = last_progress = time.monotonic()
    cpu_then = time.process_time()
    seen = None
    worker.jobs.put((fn, args, kwargs, box, done))
    interrupt = None
    while True:
        try:
            if done.wait(poll):
                break
        except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: let the running call finish first (see _drain)
            interrupt = interrupt or e
            continue
        now = time.monotonic()
        frame = sys._current_frames().get(worker.ident)
        info = _frame_info(frame)
        cpu_now = time.process_time()
        busy = cpu_backend and (cpu_now - cpu_then) >= _CPU_BUSY_CORES * poll
        if info != seen or busy or _in_compiler(frame):
            last_progress = now
        seen, cpu_then = info, cpu_now
        if now - last_progress >= limit:
            if interrupt is not None:
                raise interrupt
            raise DeviceStallError(context or {}, limit, now - last_progress, now - start, _where(frame))
    with _IDLE_LOCK:
        _IDLE.append(worker)
    if interrupt is not None:
        raise interrupt
    if "err" in box:
        raise box["err"]
    return box["out"]


class Watchdog:
    """A reusable guard with fixed context: ``wd(fn, *args, step=k)`` is one guarded, ready call.

    Keyword arguments of the constructor (scene, batch, ...) and of each call whose name is in
    ``context_keys`` (default: step, chunk) are named in the error; other keywords go to ``fn``.
    """

    context_keys = ("step", "chunk")

    def __init__(self, timeout_s: float | None = None, *, poll_s: float | None = None, **context):
        self.timeout_s = watchdog_timeout(timeout_s)
        self.poll_s = poll_s
        self.context = dict(context)

    def __call__(self, fn, *args, **kwargs):
        ctx = dict(self.context)
        for key in self.context_keys:
            if key in kwargs:
                ctx[key] = kwargs.pop(key)
        return call_with_watchdog(fn, *args, timeout_s=self.timeout_s, context=ctx, poll_s=self.poll_s, **kwargs)

    def __repr__(self) -> str:
        return f"Watchdog(timeout_s={self.timeout_s:g}, context={self.context!r})"
