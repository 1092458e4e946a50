"""How the bench times, counts compiles and measures memory.

Every peer is a *call* ``state -> (state, seconds)``: raw peers time themselves around
``jax.block_until_ready`` (``timed``); peers that run through ``rollout()`` report the engine's own
``stats["run_s"]`` (or the whole call's wall time). The peers of a cell are timed *interleaved*, one
call of each per round, so the peers a ratio compares run under the same machine conditions (on a
shared machine the load drifts within minutes). Calls are chained: each starts where the last ended.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Peer", "timed", "warm", "time_interleaved", "result_row", "compile_timed", "cache_counts",
           "cache_word", "xla_peak", "device_peak", "rss_peak"]


@dataclass
class Peer:
    """One peer, compiled and warmed up, ready for ``time_interleaved``."""

    name: str
    call: Callable            # state -> (state, seconds of the call)
    state: object
    warm_s: float             # the warm-up call's seconds (sizes the engine's runs)
    finals: tuple             # (qpos, qvel) after exactly `steps` steps from x0, for the agreement check
    finish: Callable          # (seconds per call, final state) -> result row
    close: Callable = lambda: None
    cpu: Callable | None = None  # CPU seconds of the last call's timed part (None: the whole call's, measured)


def timed(fn: Callable) -> Callable:
    """``fn(state) -> state`` as a peer call ``state -> (state, seconds)``, ready (blocked on) at the end."""
    import jax

    def call(state):
        t = time.perf_counter()
        state = jax.block_until_ready(fn(state))
        return state, time.perf_counter() - t

    return call


def warm(call: Callable, state, pick=lambda s: s):
    """One warm-up call (first-run allocations, page faults, thread pools).

    Returns (state, ``pick(state)`` copied to numpy, seconds)."""
    import jax
    import numpy as np

    state, seconds = call(state)
    return state, jax.tree_util.tree_map(lambda a: np.array(a, copy=True), pick(state)), seconds


def time_interleaved(peers, *, repeats: int, min_time: float, cpu: dict | None = None) -> dict:
    """Time every peer's calls in rounds (one call of each per round), each until ``repeats`` calls and
    ``min_time`` seconds; a peer that has both sits out the rest. Returns {name: [seconds per call]}.
    ``cpu``: filled with {name: [CPU seconds of the process (every thread) per call]}, over the part of the
    call its seconds time (``Peer.cpu``: an engine peer timed by its run's ``run_s`` gives its ``run_cpu_s``):
    a peer that is faster on the wall clock only by keeping more cores busy shows there."""
    times: dict[str, list[float]] = {p.name: [] for p in peers}
    cpu = {} if cpu is None else cpu
    cpu.update({p.name: [] for p in peers})

    def needs(p):
        return len(times[p.name]) < repeats or sum(times[p.name]) < min_time

    while any(needs(p) for p in peers):
        for p in peers:
            if needs(p):
                c = time.process_time()
                p.state, seconds = p.call(p.state)
                cpu[p.name].append(time.process_time() - c if p.cpu is None else p.cpu())
                times[p.name].append(seconds)
    return times


def result_row(name, *, batch, steps, times, compile_s, mem, extra=None) -> dict:
    """A peer's figures: calls, seconds, world-steps per second over the timed calls, compile, memory."""
    total = sum(times)
    r = dict(peer=name, batch=batch, steps_per_call=steps, calls=len(times), timed_s=total,
             call_s=[round(t, 6) for t in times], best_call_s=min(times),
             world_steps_per_s=batch * steps * len(times) / total, compile_s=compile_s, peak_bytes=mem,
             rss_peak=rss_peak())
    if extra:
        r.update(extra)
    return r


# -- compiles: JAX's persistent cache ---------------------------------------------------------------

_CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}
_LISTENING: list[Callable[..., None]] = []


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of JAX's persistent compilation cache in this process so far."""
    if not _LISTENING:
        import jax

        def listen(event, **_):
            if event in _CACHE_EVENTS:
                _CACHE_EVENTS[event] += 1

        jax.monitoring.register_event_listener(listen)
        _LISTENING.append(listen)
    return _CACHE_EVENTS["/jax/compilation_cache/cache_hits"], _CACHE_EVENTS["/jax/compilation_cache/cache_misses"]


def cache_word(h0: int, m0: int) -> str:
    """What the persistent cache did since the counts were (h0, m0): 'miss', 'hit' or 'off'."""
    h, m = cache_counts()
    return "miss" if m > m0 else "hit" if h > h0 else "off"


def compile_timed(lowerable, *args):
    """(compiled, seconds, cache) of ``lowerable.lower(*args).compile()``; cache as ``cache_word``."""
    h0, m0 = cache_counts()
    t = time.perf_counter()
    compiled = lowerable.lower(*args).compile()
    dt = time.perf_counter() - t
    return compiled, dt, cache_word(h0, m0)


# -- memory ---------------------------------------------------------------------------------------

def xla_peak(compiled) -> int | None:
    """Bytes XLA plans for one call (arguments + outputs + temporaries - donated aliases)."""
    try:
        ma = compiled.memory_analysis()
        return int(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
                   - ma.alias_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


def device_peak() -> int | None:
    """The device's peak bytes in use (accelerators; the CPU backend reports none)."""
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:
        return None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def rss_peak() -> int:
    """The process's peak resident set, bytes."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kb if sys.platform == "darwin" else kb * 1024)
