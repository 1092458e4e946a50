"""The engine peer: one ``rollout()`` call as a timed bench call, and the scene's own scheme.

Below ``peers`` (which dispatches to every peer), ``backends`` and ``outputs`` (which build engine
peers on another backend or recording outputs), so none of them imports another in a circle.
"""

from __future__ import annotations

import contextlib
import os
import time

from mjharness.integrators import INTEGRATORS, ContractError

from .timing import Peer, cache_counts, cache_word, result_row, warm

__all__ = ["engine_peer", "integrators", "scene_scheme"]


def integrators() -> dict:
    """The integrator registry (read at call time: integrators registered after import count too)."""
    return INTEGRATORS


def scene_scheme(scene) -> str | None:
    """Registry name of the scene's own integrator (``MjScene.default_integrator``: what
    ``rollout(scene, None)`` runs); None when the scene names a scheme no registered integrator steps."""
    try:
        name = getattr(scene, "default_integrator", None)
    except ContractError:
        return None
    return name if name in integrators() else None


def engine_peer(name, scene, x0, *, integ, dt, steps, record_every, sample, chained, clock, extra,
                chunk=None, out=None, outputs=None, randomize=None, context=contextlib.nullcontext,
                **loop) -> Peer:
    """A peer whose call is one ``rollout()`` of ``steps`` steps from the state (x, t0).

    ``sample``: which recorded sample of the warm-up call is the state after the cell's steps (the
    agreement check). ``chained``: the next call starts where this one ended (else every call starts
    from x0: a whole run as a user makes it). ``clock``: ``"run_s"`` times the engine's compiled chunk
    calls and their host transfer, ``"wall"`` the whole ``rollout()`` call. ``extra(stats)``: the
    peer's own fields of its result row. ``context()``: entered around every call (e.g. files without
    chunk checksums, to measure what they cost). ``randomize``: drawn per world (the same draws every call);
    ``loop``: a closed loop (``ctrl``, ``terminate``, ``on_terminate``) run in every call.
    """
    from mjharness.rollout import rollout
    from mjharness.rollout.engine import integrator_config

    stats: list[dict] = []  # every call's stats (the first is the warm-up: it compiled)
    firsts: list = []       # the first call's sample (the warm-up's)
    config: dict = {}

    def call(state):
        x, t0 = state
        t = time.perf_counter()
        with context():
            r = rollout(scene, integ, dt=dt, steps=steps, x0=x, t0=t0, record_every=record_every, chunk=chunk,
                        out=out, overwrite=out is not None, progress=False, keep=out is None, outputs=outputs,
                        randomize=randomize, **loop)
        wall = time.perf_counter() - t
        stats.append(r.stats)
        if not firsts:
            firsts.append(r.x[sample])
            config.update(integrator_config(r.integrator))
        nxt = (r.x[-1], t0 + steps * dt) if chained else state
        return nxt, (r.stats["run_s"] if clock == "run_s" else wall)

    def close():
        if out and os.path.exists(out):
            os.remove(out)

    counts = cache_counts()
    try:
        state, _, warm_s = warm(call, (x0, 0.0))
    except BaseException:
        close()
        raise
    # The warm-up compiled, or reused this process's function, or compiled nothing (MuJoCo C running whole
    # chunks: "host"); compile_s is then 0, no figure.
    first = stats[0]["trace_cache"]
    cache = first if first in ("in-process", "host") else cache_word(*counts)

    def finish(times, _):
        return result_row(name, batch=x0.shape[0], steps=steps, times=times, compile_s=stats[0]["compile_s"],
                          mem=None, extra=dict(extra(stats), integrator=config, compile_cache=cache,
                                               finite=all(s["worlds_failed"] == 0 for s in stats)))

    (first,) = firsts
    cpu = (lambda: stats[-1]["run_cpu_s"]) if clock == "run_s" else None  # the CPU of what run_s times
    return Peer(name, call, state, warm_s, (first[:, scene.qpos_segment], first[:, scene.qvel_segment]),
                finish, close, cpu)
