"""Stage evaluations without Python per world: ``mj_forward`` of a whole batch through ``mujoco.batch.Batch``.

``HostPool.evaluate`` loops over worlds in Python (``mj_setState``, ``mj_forward``, row copies per world),
which is the right tool when a world needs more than ``mj_forward`` (``mj_Euler``'s damped solve,
``mj_implicit``, ``mj_solveM`` for joint noise). A plain forward evaluation needs
only ``mj_forward``: here the inputs are written into the ``Batch``'s state rows as whole columns, one
``Batch.forward`` runs every world on the pool's thread count (the caller's thread included) in C, and
qacc / act_dot come back as whole columns. Same inputs, same ``mj_forward``: the same bits as the
per-world loop (tests/test_backends_chunk.py), at a fraction of its Python (scripts/profile_c_stages.py).
``Batch.forward`` resets a world with bad qpos/qvel/qacc (as ``mj_step``'s checks do); those worlds, rare,
are evaluated again by the per-world loop, which takes every state as given.

Per-world model fields (randomized worlds) are the ``Batch``'s per-simulation fields (``Batch.expand``): each
call writes every world's values (the flat row the stage is given), so world w's ``mj_forward`` runs on the
nominal model with w's fields, as the per-world loop's model copies do (``host.WorldFields``).
"""

from __future__ import annotations

import threading

import mujoco
import numpy as np
from mujoco.batch import MODEL_FIELDS, Batch

FULL = int(mujoco.mjtState.mjSTATE_INTEGRATION)
_INPUTS = ("time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl")
# Batch.forward checks qpos/qvel/qacc as mj_step does and resets a world whose values are bad (NaN or beyond
# 1e10); a stage evaluation must see the state as given, so such worlds go through the per-world loop.
_RESETS = [int(getattr(mujoco.mjtWarning, w)) for w in ("mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADQACC")]
_KEEP = 4  # batch sizes kept (one per distinct callback batch: the chunk's, a single world's, ...)


class BatchForward:
    """``f(t, x, ctrl, ws, h[, p]) -> (..., 3 nv + na)`` as ``HostPool.evaluate`` in mode "forward" (no force
    columns); with ``layout`` ((field, size), ...), ``p`` (..., P) holds each world's fields, flat."""

    def __init__(self, pool, layout: tuple | None = None):
        self.pool, self.layout = pool, layout
        bounds = np.cumsum([0] + [size for _, size in layout or ()])
        self.slices = [(name, slice(lo, hi)) for (name, _), lo, hi in zip(layout or (), bounds[:-1], bounds[1:])]
        m = pool.model
        self.row0 = np.empty(mujoco.mj_stateSize(m, FULL))
        mujoco.mj_getState(m, pool.datas[0], self.row0, FULL)  # applied forces, mocap, userdata as the pool's
        self.batches: dict[int, tuple] = {}
        self.lock = threading.Lock()  # a Batch serves one call at a time

    def _batch(self, n: int):
        got = self.batches.get(n)
        if got is None:
            if len(self.batches) >= _KEEP:
                self.batches.pop(next(iter(self.batches)))
            b = Batch(self.pool.model, n, nthread=self.pool.threads)
            b.state[:] = self.row0
            fields = [(b.expand(name), sl) for name, sl in self.slices]
            got = self.batches[n] = (b, [b.bind(f) for f in _INPUTS], b.bind("qacc"), b.bind("act_dot"), fields)
        return got

    def __call__(self, t, x, ctrl, ws, h, p=None, out=None):
        m = self.pool.model
        nq, nv, na = m.nq, m.nv, m.na
        x = np.asarray(x, np.float64)
        lead = x.shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        x = x.reshape(n, -1)
        out = np.empty((n, 3 * nv + na)) if out is None else out.reshape(n, 3 * nv + na)
        with self.lock:
            b, (time_, qpos, qvel, act, warm, u), qacc, act_dot, fields = self._batch(n)
            if fields:
                p = np.asarray(p, np.float64).reshape(n, -1)
                for field, sl in fields:
                    field[...] = p[:, sl].reshape(field.shape)
            time_[:] = np.asarray(t, np.float64).reshape(n)
            qpos[:], qvel[:], act[:] = x[:, :nq], x[:, nq:nq + nv], x[:, nq + nv:nq + nv + na]
            warm[:] = np.asarray(ws, np.float64).reshape(n, nv)
            u[:] = np.asarray(ctrl, np.float64).reshape(n, m.nu)
            b.warning[...] = 0
            b.forward()
            out[:, nv:2 * nv] = qacc
            out[:, 2 * nv:2 * nv + na] = act_dot
            reset = b.warning[:, _RESETS, 1].any(axis=1)
        out[:, :nv] = x[:, nq:nq + nv]  # mj_forward leaves qvel as given
        out[:, 2 * nv + na:] = out[:, nv:2 * nv]  # the forward qacc is also the next warm start
        if reset.any():  # worlds the batch's checks reset: the per-world loop evaluates them as given
            w = np.flatnonzero(reset)
            own = None if self.layout is None else (self.layout, np.reshape(p, (n, -1))[w])
            out[w] = self.pool.evaluate("forward", *(np.reshape(a, (n, -1))[w] for a in (t, x, ctrl, ws, h)),
                                        fields=own)
        return out.reshape(lead + (3 * nv + na,))


def batched(pool, mode: str, force, layout: tuple | None = None) -> bool:
    """Whether stage evaluations of ``mode`` (with ``force`` columns or None, per-world fields of ``layout`` or
    None) need nothing but mj_forward, with fields a Batch holds per simulation. (A world's own damping may be
    nonzero: with fields, Euler takes mj_Euler's per-world solve.)"""
    if layout is not None:
        return force is None and mode == "forward" and all(name in MODEL_FIELDS for name, _ in layout)
    return force is None and (mode == "forward" or (mode == "euler" and not pool._damped))


def forward_caller(pool, layout: tuple | None = None) -> BatchForward:
    """The pool's ``BatchForward`` for ``layout`` (one each per pool: its Batches persist across stages and
    chunks)."""
    cache = pool.__dict__.setdefault("_batch_forward", {})
    got = cache.get(layout)
    if got is None:
        got = cache[layout] = BatchForward(pool, layout)
    return got
