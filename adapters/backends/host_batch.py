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

Joint noise needs M(q)^-1 f for constant generalized forces f (the diffusion): ``SolveM`` is ``mj_solveM`` on the
factor every world's ``mj_forward`` left in the ``Batch`` (qLD, qLDiagInv), for the whole batch at once in NumPy,
with C's operations in C's order (``mj_solveLD``'s passes, ``mju_dotSparse``'s four partial sums), so its bits are
``mj_solveM``'s (tests/test_backends_chunk.py).
"""

from __future__ import annotations

import copy
import threading

import mujoco
import numpy as np
from mujoco.batch import MODEL_FIELDS, Batch

FULL = int(mujoco.mjtState.mjSTATE_INTEGRATION)
_INPUTS = ("time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl")
# Batch.forward checks qpos/qvel/qacc as mj_step does and resets a world whose values are bad (NaN or beyond
# 1e10); a stage evaluation must see the state as given, so such worlds go through the per-world loop.
_RESETS = [int(getattr(mujoco.mjtWarning, w)) for w in ("mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADQACC")]
PARAM_PREFIX = "force:"  # per-world fields that are force provider parameters (providers.py), not MjModel fields
_KEEP = 4  # batch sizes kept (one per distinct callback batch: the chunk's, a single world's, ...)


def is_force_param(name: str) -> bool:
    """Whether per-world field ``name`` is a force provider parameter (``"force:drag.CD"``), not a model field."""
    return name.startswith(PARAM_PREFIX)


def field_slices(layout: tuple | None) -> list[tuple[str, slice]]:
    """[(name, slice of the flat per-world row)] of every field of ``layout`` ((name, size), ...)."""
    bounds = np.cumsum([0] + [size for _, size in layout or ()])
    return [(name, slice(int(lo), int(hi))) for (name, _), lo, hi in zip(layout or (), bounds[:-1], bounds[1:])]


def model_slices(layout: tuple | None) -> list[tuple[str, slice]]:
    """``field_slices`` of the MjModel fields only (force provider parameters left out)."""
    return [(name, sl) for name, sl in field_slices(layout) if not is_force_param(name)]


class SolveM:
    """``mj_solveM`` of constant right-hand sides ``force`` (k, nv) on a batch of factors: ``(qLD (n, nM), qLDiagInv
    (n, nv)) -> (n, k nv)``, each world's row M^-1 force[0], ..., M^-1 force[k-1] as ``mj_solveM`` gives them.

    ``mj_solveLD``: x <- L^-T x (rows from the last; a row whose x_i is 0 is skipped), x <- D^-1 x, x <- L^-1 x (rows
    from the first, each ``x_i -= mju_dotSparse(row, x)``). Vectorized over worlds and right-hand sides; the first
    pass keeps C's row order (a row updates its ancestors, which rows share), the last pass runs the rows of one
    depth in the dof tree at once (a row reads only its ancestors, all shallower and final by then: the same
    operations on the same values as C's order; dm_control's humanoid: 14 depths for 26 rows, 1.0 ms instead of
    1.5 at batch 1024), and a row's dot product keeps C's summation order (``_dot``). Rows of the first pass that
    stay zero in every world (off the forces' dofs and their ancestors) are left out, as C skips them."""

    def __init__(self, m: mujoco.MjModel, force: np.ndarray):
        self.force = np.ascontiguousarray(force, np.float64).reshape(-1, m.nv)
        rownnz, rowadr, colind = m.M_rownnz, m.M_rowadr, m.M_colind
        rows = [(i, slice(int(rowadr[i]), int(rowadr[i] + rownnz[i] - 1)), colind[rowadr[i]:rowadr[i] + rownnz[i] - 1])
                for i in range(m.nv) if rownnz[i] > 1]
        live = set(np.flatnonzero(self.force.any(axis=0)).tolist())  # dofs that may be nonzero after pass 1
        self.up = []
        for i, sl, cols in reversed(rows):
            if i in live:
                self.up.append((i, sl, cols))
                live.update(cols.tolist())
        # the last pass by depth (the row's ancestor count): (rows (r,), qLD entries (d, r), ancestors (d, r))
        depth: dict[int, list] = {}
        for i, sl, cols in rows:
            depth.setdefault(len(cols), []).append((i, np.arange(sl.start, sl.stop), cols))
        self.down = [(np.array([r[0] for r in level]), np.array([r[1] for r in level]).T,
                      np.array([r[2] for r in level]).T) for _, level in sorted(depth.items())]

    def __call__(self, qld: np.ndarray, diaginv: np.ndarray) -> np.ndarray:
        n, (k, nv) = qld.shape[0], self.force.shape
        q = np.ascontiguousarray(qld.T)[:, :, None]  # (nM, n, 1): a row's entries for every world
        x = np.empty((nv, n, k))
        x[...] = self.force.T[:, None, :]
        for i, sl, cols in self.up:  # x <- L^-T x
            xi = x[i]
            x[cols] = np.where(xi != 0, x[cols] - q[sl] * xi, x[cols])
        x *= diaginv.T[:, :, None]  # x <- D^-1 x
        for rows, entries, cols in self.down:  # x <- L^-1 x, one depth at a time
            x[rows] -= _dot(q[entries] * x[cols])
        return x.transpose(1, 2, 0).reshape(n, k * nv)


def _dot(p: np.ndarray) -> np.ndarray:
    """Sum over the first axis of the products ``p`` in ``mju_dotSparse``'s order (its AVX and plain C forms agree):
    four partial sums over the first multiple of four, combined as (s0 + s2) + (s1 + s3), then the rest one by one
    onto that (onto 0 when there are fewer than four)."""
    d = p.shape[0]
    whole = d - d % 4
    if whole:
        s = p[0:4].copy()
        for j in range(4, whole, 4):
            s += p[j:j + 4]
        res = (s[0] + s[2]) + (s[1] + s[3])
    else:
        res = np.zeros(p.shape[1:])
    for j in range(whole, d):
        res = res + p[j]
    return res


_HISTORY = int(mujoco.mjtState.mjSTATE_HISTORY)
_SENSOR_OFF = int(mujoco.mjtDisableBit.mjDSBL_SENSOR)


def sensing(m: mujoco.MjModel) -> bool:
    """Whether a ``Batch`` evaluating or stepping ``m`` must compute its sensors. Its callers read the state, qacc
    and the mass matrix's factor, never ``sensordata``: recorded outputs, and the sensordata a closed loop reads,
    come from ``host.HostOutputs``' own ``mj_forward`` (sensors on). In MuJoCo sensors only write ``sensordata``
    (and, for acceleration sensors, ``mj_rnePostConstraint``'s cacc / cfrc_int / cfrc_ext, which nothing reads back):
    its own RK4 skips them in three stages of four. They are kept where something else may ride on them: an engine
    plugin, a history buffer (delayed sensors or actuators), an installed ``mjcb_sensor``."""
    return bool(m.nsensor and (m.nplugin or mujoco.mj_stateSize(m, _HISTORY) or mujoco.get_mjcb_sensor() is not None))


def without_sensors(m: mujoco.MjModel, copied: bool = False) -> mujoco.MjModel:
    """``m`` with ``mjDSBL_SENSOR`` set where ``sensing(m)`` is False (a copy unless ``copied``: the model is the
    caller's own copy), else ``m`` itself: dm_control's humanoid at batch 1024, ``Batch.forward`` 6.3 -> 5.6 ms
    (34 sensors: touch, rangefinders, accelerometers), the same qacc bits."""
    if not m.nsensor or sensing(m) or m.opt.disableflags & _SENSOR_OFF:
        return m
    out = m if copied else copy.deepcopy(m)
    out.opt.disableflags |= _SENSOR_OFF
    return out


def start_row(pool) -> np.ndarray:
    """The ``mjSTATE_INTEGRATION`` row of the pool's MjData: what a Batch's worlds start from (the scene's applied
    forces, mocap, userdata), the stage's own inputs written over it at every call."""
    row = np.empty(mujoco.mj_stateSize(pool.model, FULL))
    mujoco.mj_getState(pool.model, pool.datas[0], row, FULL)
    return row


def load_forward(b: Batch, inputs: list, fields: list, applied, base: tuple, t, x, ws, ctrl, p, forces
                 ) -> np.ndarray:
    """One ``Batch.forward`` of every world of ``b`` at the given inputs: ``inputs`` its bound ``_INPUTS`` columns,
    ``fields`` [(expanded per-world field, slice of the flat rows ``p``)], ``applied`` its bound (xfrc_applied,
    qfrc_applied) where providers' sums ``forces`` are added to the scene's ``base``; ``t`` (n,), ``x`` (n, >= nq +
    nv + na), ``ws`` (n, nv), ``ctrl`` (n, nu). Returns the worlds the Batch's checks reset (bad qpos/qvel/qacc),
    whose values a caller must evaluate again as given."""
    m = b.model
    nq, nv, na = m.nq, m.nv, m.na
    if applied is not None:  # the providers' sums at this state, on the scene's own applied forces
        np.add(base[0], forces[0], out=applied[0])
        np.add(base[1], forces[1], out=applied[1])
    for field, sl in fields:
        field[...] = p[:, sl].reshape(field.shape)
    time_, qpos, qvel, act, warm, u = inputs
    time_[:] = t
    qpos[:], qvel[:], act[:] = x[:, :nq], x[:, nq:nq + nv], x[:, nq + nv:nq + nv + na]
    warm[:], u[:] = ws, ctrl
    b.warning[...] = 0
    b.forward()
    return b.warning[:, _RESETS, 1].any(axis=1)


def kept_batch(owner, n: int, bound, model: mujoco.MjModel | None = None):
    """``owner``'s ``Batch`` of ``n`` worlds (on ``model``, default its pool's without sensors, and the pool's
    threads, started from ``owner.row0``) with what ``bound(batch)`` binds, made on first use; the ``_KEEP`` most
    recent sizes are kept in ``owner.batches``."""
    got = owner.batches.get(n)
    if got is None:
        if len(owner.batches) >= _KEEP:
            owner.batches.pop(next(iter(owner.batches)))
        b = Batch(without_sensors(owner.pool.model) if model is None else model, n, nthread=owner.pool.threads)
        b.state[:] = owner.row0
        got = owner.batches[n] = bound(b)
    return got


class BatchForward:
    """``f(t, x, ctrl, ws, h[, p]) -> (..., 3 nv + na [+ k nv])`` as ``HostPool.evaluate`` in mode "forward", with
    M^-1 of ``force``'s rows (k, nv) after the first 3 nv + na columns when given (``SolveM``); with ``layout``
    ((field, size), ...), ``p`` (..., P) holds each world's fields, flat. ``forces`` (``providers.HostForces``): the
    scene's force providers, whose sums are added to the scene's xfrc_applied / qfrc_applied before the forward."""

    def __init__(self, pool, layout: tuple | None = None, force: np.ndarray | None = None, forces=None):
        self.pool, self.layout = pool, layout
        self.force, self.forces = force, forces
        self.solve = None if force is None else SolveM(pool.model, force)
        self.slices = model_slices(layout)  # force provider parameters: HostForces reads them
        self.row0 = start_row(pool)
        self.batches: dict[int, tuple] = {}
        self.lock = threading.Lock()  # a Batch serves one call at a time

    def _batch(self, n: int):
        def bound(b):
            fields = [(b.expand(name), sl) for name, sl in self.slices]
            factor = None if self.solve is None else (b.bind("qLD"), b.bind("qLDiagInv"))
            applied = None if self.forces is None else (b.bind("xfrc_applied"), b.bind("qfrc_applied"))
            return (b, [b.bind(f) for f in _INPUTS], b.bind("qacc"), b.bind("act_dot"), fields, factor, applied)

        return kept_batch(self, n, bound)

    def __call__(self, t, x, ctrl, ws, h, p=None, out=None):
        m = self.pool.model
        nq, nv, na = m.nq, m.nv, m.na
        x = np.asarray(x, np.float64)
        lead = x.shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        x = x.reshape(n, -1)
        width = 3 * nv + na + (0 if self.force is None else self.force.size)
        out = np.empty((n, width)) if out is None else out.reshape(n, width)
        forces = None if self.forces is None else self.forces(np.reshape(t, n), x, np.reshape(ctrl, (n, -1)), p)
        with self.lock:
            b, inputs, qacc, act_dot, fields, factor, applied = self._batch(n)
            rows = None if not fields else np.asarray(p, np.float64).reshape(n, -1)
            reset = load_forward(b, inputs, fields, applied, self.pool.base, np.asarray(t, np.float64).reshape(n), x,
                                 np.asarray(ws, np.float64).reshape(n, nv),
                                 np.asarray(ctrl, np.float64).reshape(n, m.nu), rows, forces)
            out[:, nv:2 * nv] = qacc
            out[:, 2 * nv:2 * nv + na] = act_dot
            if factor is not None:
                out[:, 3 * nv + na:] = self.solve(*factor)
        out[:, :nv] = x[:, nq:nq + nv]  # mj_forward leaves qvel as given
        out[:, 2 * nv + na:3 * nv + na] = out[:, nv:2 * nv]  # the forward qacc is also the next warm start
        if reset.any():  # worlds the batch's checks reset: the per-world loop evaluates them as given
            w = np.flatnonzero(reset)
            own = None if self.layout is None else (self.layout, np.reshape(p, (n, -1))[w])
            out[w] = self.pool.evaluate("forward", *(np.reshape(a, (n, -1))[w] for a in (t, x, ctrl, ws, h)),
                                        force=self.force, fields=own, forces=self.forces)
        return out.reshape(lead + (width,))


def batched(pool, mode: str, force, layout: tuple | None = None) -> bool:
    """Whether stage evaluations of ``mode`` (with ``force`` columns or None, per-world fields of ``layout`` or
    None) need nothing but mj_forward (and ``SolveM`` for the force columns), with fields a Batch holds per
    simulation. (A world's own damping may be nonzero: with fields, Euler takes mj_Euler's per-world solve.)"""
    if layout is not None:
        return mode == "forward" and all(name in MODEL_FIELDS for name, _ in model_slices(layout))
    return mode == "forward" or (force is None and mode == "euler" and not pool._damped)


def forward_caller(pool, layout: tuple | None = None, force: np.ndarray | None = None,
                   forces=None) -> BatchForward:
    """The pool's ``BatchForward`` for ``layout``, ``force`` and ``forces`` (one each per pool: its Batches persist
    across stages and chunks)."""
    cache = pool.__dict__.setdefault("_batch_forward", {})
    key = (layout, None if force is None else (force.shape, force.tobytes()), id(forces))
    got = cache.get(key)
    if got is None:
        got = cache[key] = BatchForward(pool, layout, force, forces)
    return got
