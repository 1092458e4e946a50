"""The MuJoCo C backend's host machinery (``backends/mujoco_c.py``): stage evaluations by ``mj_forward``
on native threads.

One batched host call per stage: a ``buffer_callback`` (``_host_call``) with ``vmap_method="broadcast_all"`` turns
the engine's vmap over worlds into a single call that receives every world at once; the worlds are
split into contiguous slices, one per thread, each thread reusing its own ``MjData``
(``mj_forward`` releases the GIL, so the threads run in parallel).

Per world the call returns qvel, the acceleration the integrator wants, the activation rate and the
forward qacc (the next warm start, as ``mj_step`` saves it):
- ``"forward"``: qacc of ``mj_forward``.
- ``"euler"``: MuJoCo's Euler with implicit joint damping. ``mj_Euler`` itself solves
  (M + h diag(damping)) qacc = qfrc_smooth + qfrc_constraint with C's factorisation; the rate is read
  back as (qvel' - qvel) / h, so our update reproduces C's to rounding.
- ``"implicit"``: ``mj_implicit`` (implicitfast: M - h qDeriv without RNE) read back the same way,
  activations included (mj_advance's exact filter and clamping).
Not differentiable: a JVP (``jax.grad``, ``jax.jvp``) raises ``BackendError`` naming the backend.
"""

from __future__ import annotations

import copy
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.experimental.buffer_callback import buffer_callback

from . import host_batch as _host_batch
from .base import BackendError

MODES = ("forward", "euler", "implicit")
WRENCH = "applied_wrench"  # the output of the force providers' wrench sums (adapters/outputs.py)
_S = mujoco.mjtState
# What a stage sets on MjData: packed by mj_setState in this (bit) order.
_STATE = int(_S.mjSTATE_TIME | _S.mjSTATE_QPOS | _S.mjSTATE_QVEL | _S.mjSTATE_ACT | _S.mjSTATE_WARMSTART
             | _S.mjSTATE_CTRL)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class HostPool:
    """Threads with one ``MjData`` each, evaluating a batch of worlds through MuJoCo C."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, threads: int | None = None):
        threads = default_threads() if threads is None else threads
        if not isinstance(threads, int) or threads < 1:
            raise BackendError(f"backend 'mujoco': threads must be a positive int, got {threads!r}")
        self.model, self.threads = model, threads
        self.datas = []
        for _ in range(threads):
            d = mujoco.MjData(model)
            mujoco.mj_copyData(d, model, data)  # applied forces, mocap, userdata as the scene's data
            self.datas.append(d)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="mjharness-mujoco") if threads > 1 else None
        # mj_implicit insists on <option integrator="implicitfast">: a copy that says so, same data layout.
        self._implicit_model = copy.deepcopy(model)
        self._implicit_model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
        m = model
        self.width = 3 * m.nv + m.na
        if mujoco.mj_stateSize(m, _STATE) != 1 + m.nq + 2 * m.nv + m.na + m.nu:  # the packed row layout
            raise BackendError(f"backend 'mujoco': mujoco {mujoco.__version__} packs mjSTATE rows differently")
        self._damped = bool(not (m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
                            and np.any(m.dof_damping > 0))
        # The scene's own applied forces, to which force providers' sums are added at every stage.
        self.base = (data.xfrc_applied.copy(), data.qfrc_applied.copy())

    def _slice(self, i, lo, hi, mode, t, x, ctrl, ws, h, out, force=None, fields=None, applied=None):
        """Worlds lo..hi on thread i's MjData: only MuJoCo C calls and row copies per world; everything
        that can be done on the whole slice at once (qvel, rates) is done after the loop.
        ``force`` (k, nv): generalized forces whose M(q)^-1 f (mj_solveM on mj_forward's factor) is
        appended to each row after the first ``width`` columns (joint-noise diffusion).
        ``fields`` (layout, (n, P) values): per-world model fields (``WorldFields``), written before each world.
        ``applied`` ((n, nbody, 6), (n, nv)): force providers' sums (``providers.HostForces``), added to the scene's
        own xfrc_applied / qfrc_applied before each world's mj_forward."""
        m, d = self.model, self.datas[i]
        minv = None if force is None else np.empty_like(force)
        nq, nv, na = m.nq, m.nv, m.na
        # MjData's array attributes build a new numpy view on every access: take them once.
        qvel, act, qacc, act_dot = d.qvel, d.act, d.qacc, d.act_dot
        x, out = x[lo:hi], out[lo:hi]
        world = None if fields is None else self.world_fields(i, fields[0])  # per-world model fields
        # A world's own damping may be nonzero where the nominal model's is not: mj_Euler decides per world.
        step = mode == "implicit" or (mode == "euler" and (self._damped or world is not None))
        after = np.empty((hi - lo, nv + na)) if step else None  # qvel, act after mj_Euler / mj_implicit
        stepper = self._implicit_model if mode == "implicit" else m
        advance = mujoco.mj_implicit if mode == "implicit" else mujoco.mj_Euler
        if world is not None:
            m, stepper = world.model, (world.implicit if mode == "implicit" else world.model)
        # One mj_setState per world instead of six numpy assignments (less Python under the GIL):
        # rows [time, qpos, qvel, act, qacc_warmstart, ctrl] in mjtState bit order, built for the slice at once.
        packed = np.concatenate([t[lo:hi, None], x[:, :nq + nv + na], ws[lo:hi], ctrl[lo:hi]], axis=1)
        xfrc, qfrc = d.xfrc_applied, d.qfrc_applied
        for w in range(hi - lo):
            if world is not None:
                world.set(fields[1][lo + w])
            if applied is not None:
                xfrc[:], qfrc[:] = self.base[0] + applied[0][lo + w], self.base[1] + applied[1][lo + w]
            mujoco.mj_setState(m, d, packed[w], _STATE)
            mujoco.mj_forward(m, d)
            out[w, 2 * nv:2 * nv + na] = act_dot
            out[w, 2 * nv + na:self.width] = qacc
            if minv is not None:
                mujoco.mj_solveM(m, d, minv, force)
                out[w, self.width:] = minv.reshape(-1)
            if step:  # advances d: only the velocity (and activation) change is read back
                advance(stepper, d)
                after[w, :nv] = qvel
                after[w, nv:] = act
        out[:, :nv] = x[:, nq:nq + nv]  # mj_forward leaves qvel as given
        if not step:
            out[:, nv:2 * nv] = out[:, 2 * nv + na:self.width]
            return
        hs = h[lo:hi, None]
        out[:, nv:2 * nv] = (after[:, :nv] - x[:, nq:nq + nv]) / hs
        if mode == "implicit" and na:
            out[:, 2 * nv:2 * nv + na] = (after[:, nv:] - x[:, nq + nv:]) / hs

    def evaluate(self, mode, t, x, ctrl, ws, h, force=None, fields=None, out=None, forces=None):
        """Arrays with one common leading batch shape (or none) -> (..., 3 nv + na [+ force.size]) float64, written
        into ``out`` (C-contiguous float64 of that shape) when given; ``forces``: the scene's force providers
        (``providers.HostForces``), evaluated on the whole batch first."""
        if force is not None and mode != "forward":
            raise BackendError(f"backend 'mujoco': M^-1 f columns are evaluated in mode 'forward' only, not {mode!r}")
        # The callback may hand over jax Arrays: index those per world and each index is a JAX dispatch
        # (measured 2-5 ms a world on the humanoid, 100x mj_forward). One host copy up front instead.
        t, x, ctrl, ws, h = (np.asarray(a, dtype=np.float64) for a in (t, x, ctrl, ws, h))
        lead = x.shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        t, h = t.reshape(n), h.reshape(n)
        x, ctrl, ws = (a.reshape(n, -1) for a in (x, ctrl, ws))
        if fields is not None:
            fields = (fields[0], np.asarray(fields[1], dtype=np.float64).reshape(n, -1))
        width = self.width + (0 if force is None else force.size)
        out = np.empty((n, width)) if out is None else out.reshape(n, width)
        applied = None if forces is None else forces(t, x, ctrl, None if fields is None else fields[1])
        k = min(self.threads, n)
        if k <= 1 or self.executor is None:
            self._slice(0, 0, n, mode, t, x, ctrl, ws, h, out, force, fields, applied)
        else:
            bounds = np.linspace(0, n, k + 1).astype(int)
            futs = [self.executor.submit(self._slice, i, bounds[i], bounds[i + 1], mode, t, x, ctrl, ws, h, out,
                                         force, fields, applied) for i in range(k)]
            for f in futs:
                f.result()
        return out.reshape(lead + (width,))

    def world_fields(self, i: int, layout: tuple) -> WorldFields:
        """Thread ``i``'s model copies for per-world fields of ``layout`` (made on first use, one per thread)."""
        cache = self.__dict__.setdefault("_world_fields", {})
        if (i, layout) not in cache:
            cache[(i, layout)] = WorldFields(self, layout)
        return cache[(i, layout)]

    def __del__(self):
        if getattr(self, "executor", None) is not None:
            self.executor.shutdown(wait=False)


def _zero_copy() -> bool:
    """Whether host calls take XLA's buffers directly (``buffer_callback``): in a process whose only device is one CPU.
    Its buffers are NumPy-readable on CPU only, and it carries no sharding: over several devices XLA would call the
    host once per device, each time with the whole batch, where ``pure_callback`` makes one call on device 0."""
    return jax.default_backend() == "cpu" and jax.device_count() == 1


def _host_call(fn, shape: tuple, *args):
    """A host call of ``fn(*args, out=)`` giving JAX's float width: float64, or float32 when ``jax_enable_x64`` is
    off (a float32 run; MuJoCo C's float64 values are then rounded once, on the way out).

    ``buffer_callback`` hands ``fn`` XLA's own buffers, inputs and the output to fill, without copies, where
    ``jax.pure_callback`` copies every input into a fresh device array and the result back (measured: 0.35 ms of
    a 7.5 ms humanoid stage at batch 1024; scripts/profile_c_stages.py); ``pure_callback`` where that cannot be
    used (``_zero_copy``)."""
    dtype = jax.dtypes.canonicalize_dtype(jnp.float64)
    spec = jax.ShapeDtypeStruct(shape, dtype)
    if not _zero_copy():
        return jax.pure_callback(lambda *a: np.asarray(fn(*a), dtype), spec, *args, vmap_method="broadcast_all")

    def call(ctx, out, *a):
        res = np.asarray(out)
        a = [np.asarray(v) for v in a]
        if res.dtype == np.float64:
            fn(*a, out=res)
        else:
            res[...] = fn(*a)

    return buffer_callback(call, spec, vmap_method="broadcast_all")(*args)


def make_evaluator(pool: HostPool, mode: str, force: np.ndarray | None = None, forces=None):
    """``f(t, x, ctrl, ws, h) -> (3 nv + na [+ k nv],)`` for one world, batched by vmap into one host call.

    ``force`` (k, nv), a constant: the row also holds M(q)^-1 force[i] for each i (``HostData.minv_f``).
    ``forces``: the scene's force providers (``providers.HostForces``) or None."""
    if mode not in MODES:
        raise BackendError(f"backend 'mujoco': unknown evaluation mode {mode!r}")
    if force is not None:
        force = np.ascontiguousarray(force, dtype=np.float64).reshape(-1, pool.model.nv)
    width = pool.width + (0 if force is None else force.size)
    # A stage that needs only mj_forward runs the whole batch in C (host_batch.py: no Python per world).
    host = (_host_batch.forward_caller(pool, None, force, forces) if _host_batch.batched(pool, mode, force)
            else lambda t, x, ctrl, ws, h, out=None: pool.evaluate(mode, t, x, ctrl, ws, h, force=force, out=out,
                                                                  forces=forces))

    @jax.custom_jvp
    def evaluate(t, x, ctrl, ws, h):
        return _host_call(host, jnp.shape(x)[:-1] + (width,), t, x, ctrl, ws, h)

    @evaluate.defjvp
    def _no_jvp(primals, tangents):
        raise BackendError("MjScene backend='mujoco' evaluates MuJoCo C on the host and is not differentiable "
                           "(jax.grad / jax.jvp); use backend='mjx' to differentiate")

    return evaluate


# -- per-world model fields (model_params / randomize on backend="mujoco") --------------------------

def _field_writer(m: mujoco.MjModel, path: str):
    """``write(values)`` setting the field at dotted ``path`` of ``m`` (arrays in place, scalars by attribute)."""
    parent, _, name = path.rpartition(".")
    owner = m
    for part in filter(None, parent.split(".")):
        owner = getattr(owner, part)
    cur = getattr(owner, name)
    if isinstance(cur, np.ndarray):
        return lambda v: np.copyto(cur, v.reshape(cur.shape))
    return lambda v: setattr(owner, name, float(v[0]))


class WorldFields:
    """One thread's copies of the pool's models (forward/Euler and implicitfast) whose per-world fields are
    overwritten before each world: world w then runs the nominal model with its own values of every field of
    ``layout`` ((path, size), ...). The derived constants are among those fields (the run computed them with
    ``mj_setConst`` per world when it was planned), so each world is its own mj_setConst'ed model."""

    def __init__(self, pool: HostPool, layout: tuple):
        self.model, self.implicit = copy.deepcopy(pool.model), copy.deepcopy(pool._implicit_model)
        self._writes = _field_writes((self.model, self.implicit), layout)

    def set(self, row: np.ndarray) -> None:
        for sl, write in self._writes:
            write(row[sl])


def _field_writes(models, layout: tuple) -> list:
    """[(slice of the flat row, write)] setting every field of ``layout`` ((path, size), ...) on each of ``models``."""
    from .host_batch import model_slices  # force provider parameters are not model fields: HostForces reads them

    return [(sl, _field_writer(m, path)) for path, sl in model_slices(layout) for m in models]


def make_field_evaluator(pool: HostPool, mode: str, force: np.ndarray | None, layout: tuple, forces=None):
    """``make_evaluator`` with one more argument: the world's model fields of ``layout`` as one flat vector."""
    if mode not in MODES:
        raise BackendError(f"backend 'mujoco': unknown evaluation mode {mode!r}")
    if force is not None:
        force = np.ascontiguousarray(force, dtype=np.float64).reshape(-1, pool.model.nv)
    width = pool.width + (0 if force is None else force.size)

    # mj_forward only: the whole batch in C, the fields per simulation (host_batch.py: no Python per world).
    host = (_host_batch.forward_caller(pool, layout, force, forces) if _host_batch.batched(pool, mode, force, layout)
            else lambda t, x, ctrl, ws, h, p, out=None: pool.evaluate(mode, t, x, ctrl, ws, h, force=force,
                                                                       fields=(layout, p), out=out, forces=forces))

    @jax.custom_jvp
    def evaluate(t, x, ctrl, ws, h, p):
        return _host_call(host, jnp.shape(x)[:-1] + (width,), t, x, ctrl, ws, h, p)

    @evaluate.defjvp
    def _no_jvp(primals, tangents):
        raise BackendError("MjScene backend='mujoco' evaluates MuJoCo C on the host and is not differentiable "
                           "(jax.grad / jax.jvp); use backend='mjx' to differentiate")

    return evaluate


class HostData:
    """The fields of a host evaluation that ``MjScene._derivative`` reads (like MJX data)."""

    def __init__(self, out, nv, na):
        w = 3 * nv + na
        self.qvel = out[..., :nv]
        self.qacc_used = out[..., nv:2 * nv]
        self.act_dot = out[..., 2 * nv:2 * nv + na]
        self.qacc = out[..., 2 * nv + na:w]
        # (nv, k): M(q)^-1 of the evaluator's force columns, when it was given some (else (nv, 0))
        k = (out.shape[-1] - w) // nv if nv else 0
        self.minv_f = jnp.swapaxes(jnp.reshape(out[..., w:], out.shape[:-1] + (k, nv)), -1, -2)


# -- recorded outputs (adapters/outputs.py on backend="mujoco") ----------------------------------------

def output_width(specs) -> int:
    """Flat per-world width of the outputs ``specs`` (adapters.outputs.OutputSpec rows)."""
    return int(sum(np.prod(s.shape, dtype=np.int64) for s in specs))


class _OutputReader:
    """The per-world reads of ``specs`` off one MjData, each by its kind (``adapters.outputs.KINDS``)."""

    def __init__(self, m: mujoco.MjModel, d: mujoco.MjData, specs, rne: bool):
        self.m, self.d, self.rne = m, d, rne
        self.reads, o = [], 0
        for s in specs:
            w = int(np.prod(s.shape, dtype=np.int64))
            self.reads.append((slice(o, o + w), s.kind.host(m, d, s)))
            o += w

    def __call__(self, row: np.ndarray) -> None:
        if self.rne:
            mujoco.mj_rnePostConstraint(self.m, self.d)
        for sl, read in self.reads:
            row[sl] = read()


class HostOutputs:
    """Recorded outputs of a batch of worlds through MuJoCo C: mj_setState + mj_forward
    (+ mj_rnePostConstraint, mj_energyPos/Vel, mj_contactForce as the outputs need) per world, on the
    pool's threads with MjData of its own (a sampled evaluation may overlap the last step's stages).

    ``layout`` ((path, size), ...): per-world model fields. Each thread then reads its outputs off
    its own copy of the model, into which world w's fields (the run's per-world values: drawn, explicit and the
    derived constants mj_setConst gave them) are written before the world's mj_forward, as the dynamics do
    (``WorldFields``). ``forces`` (``providers.HostForces``): the scene's force providers, evaluated on the whole
    batch first and applied before each world's mj_forward, as the dynamics do; their wrench sums are the
    ``applied_wrench`` columns."""

    def __init__(self, pool: HostPool, specs, rne: bool, layout: tuple | None = None, forces=None):
        self.pool, self.width, self.layout, self.forces = pool, output_width(specs), layout, forces
        self.specs, self.rne = specs, rne
        # "applied_wrench" columns: the providers' wrench sums (zeros without providers)
        bounds = np.cumsum([0] + [int(np.prod(s.shape, dtype=np.int64)) for s in specs])
        self.wrench = [slice(lo, hi) for s, lo, hi in zip(specs, bounds[:-1], bounds[1:]) if s.field == WRENCH]
        self._readers: tuple[list, list] | None = None  # the per-world loop's, made on first use
        # Outputs that are MjData fields after mj_forward (bodies, sites, sensors, ...) come from one Batch.forward
        # of the whole batch: [(out columns, field, its flat columns)], or None (the per-world loop)
        self.reads = _batch_reads(pool.model, specs, rne, layout)
        if self.reads is not None:
            m = pool.model if any(f == "sensordata" for _, f, _ in self.reads) else _host_batch.without_sensors(
                pool.model)
            self.batch_model = m
            self.batches: dict[int, tuple] = {}
            self.row0 = _host_batch.start_row(pool)
            self.lock = threading.Lock()  # a Batch serves one call at a time

    @property
    def readers(self) -> list:
        return self._loop()[0]

    @property
    def writes(self) -> list:
        return self._loop()[1]

    def _loop(self) -> tuple[list, list]:
        """Each thread's ``_OutputReader`` on its own MjData (and model copy with per-world fields)."""
        if self._readers is None:
            readers, writes = [], []
            for src in self.pool.datas:
                m = self.pool.model if self.layout is None else copy.deepcopy(self.pool.model)
                d = mujoco.MjData(m)
                mujoco.mj_copyData(d, m, src)  # applied forces, mocap, userdata as the pool's
                readers.append(_OutputReader(m, d, self.specs, self.rne))
                writes.append(None if self.layout is None else _field_writes((m,), self.layout))
            self._readers = (readers, writes)
        return self._readers

    def _batch(self, n: int) -> tuple:
        def bound(b):
            fields = [(b.expand(name), sl) for name, sl in _host_batch.model_slices(self.layout)]
            applied = None if self.forces is None else (b.bind("xfrc_applied"), b.bind("qfrc_applied"))
            reads = [(osl, b.bind(field), cols) for osl, field, cols in self.reads]
            return b, [b.bind(f) for f in _host_batch._INPUTS], fields, applied, reads

        return _host_batch.kept_batch(self, n, bound, self.batch_model)

    def _batched(self, n: int, packed: np.ndarray, out: np.ndarray, fields, applied) -> np.ndarray:
        """The outputs of every world from ``Batch.forward`` calls of up to ``OUTPUT_BLOCK`` worlds into ``out``
        (a chunk's outputs are every sample of every world at once: one Batch that size would be hundreds of MB
        of fresh pages each run); the worlds the Batch's checks reset (bad qpos/qvel/qacc: rare) are returned for
        the per-world loop, which takes every state as given."""
        m = self.pool.model
        w = 1 + m.nq + m.nv + m.na  # packed rows: [time, x, qacc_warmstart, ctrl] (_STATE's order)
        reset = []
        with self.lock:
            for lo in range(0, n, OUTPUT_BLOCK):
                hi = min(n, lo + OUTPUT_BLOCK)
                b, inputs, expanded, applied_b, reads = self._batch(hi - lo)
                rows = packed[lo:hi]
                bad = _host_batch.load_forward(
                    b, inputs, expanded, applied_b, self.pool.base, rows[:, 0], rows[:, 1:w], rows[:, w:w + m.nv],
                    rows[:, w + m.nv:], None if fields is None else fields[lo:hi],
                    None if applied is None else (applied[0][lo:hi], applied[1][lo:hi]))
                for osl, arr, c in reads:
                    out[lo:hi, osl] = arr.reshape(hi - lo, -1)[:, c]
                reset.append(lo + np.flatnonzero(bad))
        return np.concatenate(reset)

    def _slice(self, i, lo, hi, packed, out, fields=None, applied=None, worlds=None):
        r, writes = self.readers[i], self.writes[i]
        m, d = r.m, r.d
        xfrc, qfrc = d.xfrc_applied, d.qfrc_applied
        for w in (range(lo, hi) if worlds is None else worlds[lo:hi]):
            if fields is not None:
                for sl, write in writes:
                    write(fields[w, sl])
            if applied is not None:  # the stage's own forces: the dynamics' mj_forward at this state
                xfrc[:], qfrc[:] = self.pool.base[0] + applied[0][w], self.pool.base[1] + applied[1][w]
            mujoco.mj_setState(m, d, packed[w], _STATE)
            mujoco.mj_forward(m, d)
            r(out[w])

    def evaluate(self, t, x, ctrl, ws, p=None, out=None):
        """Arrays with one common leading batch shape (or none) -> (..., width) float64 (written into ``out`` when
        given); ``p`` (..., P): each world's model fields of ``layout``, flat (required exactly when the outputs were
        built with a layout)."""
        if (p is None) != (self.layout is None):
            raise BackendError("backend 'mujoco': outputs with per-world model fields need each world's fields")
        m = self.pool.model
        t, x, ctrl, ws = (np.asarray(a, dtype=np.float64) for a in (t, x, ctrl, ws))
        lead = x.shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        packed = np.concatenate([t.reshape(n, 1), x.reshape(n, -1)[:, :m.nq + m.nv + m.na], ws.reshape(n, -1),
                                 ctrl.reshape(n, -1)], axis=1)
        fields = None if p is None else np.asarray(p, dtype=np.float64).reshape(n, -1)
        out = np.empty((n, self.width)) if out is None else out.reshape(n, self.width)
        applied = None if self.forces is None else self.forces(packed[:, 0], x.reshape(n, -1), ctrl.reshape(n, -1),
                                                               fields)
        worlds = None if self.reads is None else self._batched(n, packed, out, fields, applied)
        count = n if worlds is None else len(worlds)  # every world, or those the Batch reset
        k = min(self.pool.threads, count)
        if k <= 1 or self.pool.executor is None:
            if count:
                self._slice(0, 0, count, packed, out, fields, applied, worlds)
        else:
            bounds = np.linspace(0, count, k + 1).astype(int)
            for f in [self.pool.executor.submit(self._slice, i, bounds[i], bounds[i + 1], packed, out, fields,
                                                applied, worlds) for i in range(k)]:
                f.result()
        for sl in self.wrench:
            out[:, sl] = 0.0 if applied is None else applied[0].reshape(n, -1)
        return out.reshape(lead + (self.width,))


# Worlds per Batch.forward of the recorded outputs: a Batch this size stays small (humanoid: 7.6 MB of state rows
# and 1.7 MB of xpos) and is made once per HostOutputs.
OUTPUT_BLOCK = 4096


def _batch_reads(m: mujoco.MjModel, specs, rne: bool, layout: tuple | None) -> list | None:
    """[(columns of the output row, MjData field, the field's flat columns)] when every output of ``specs`` is a
    field ``mj_forward`` leaves in MjData (``OutputKind.field``: bodies, sites, sensors, qacc, ...; the providers'
    ``applied_wrench`` columns are filled afterwards), the per-world fields of ``layout`` are ones a ``Batch`` holds
    per simulation, and the model has no plugin or history state a Batch's rows would hold for it; else None."""
    from mujoco.batch import MODEL_FIELDS

    if rne or m.nplugin or mujoco.mj_stateSize(m, int(_S.mjSTATE_HISTORY)):
        return None
    if any(name not in MODEL_FIELDS for name, _ in _host_batch.model_slices(layout)):
        return None
    reads, o = [], 0
    for s in specs:
        w = int(np.prod(s.shape, dtype=np.int64))
        if s.field != WRENCH:
            where = s.kind.field(m, s)
            if where is None:
                return None
            reads.append((slice(o, o + w), where[0], where[1]))
        o += w
    return reads


def make_output_evaluator(outputs: HostOutputs):
    """``f(t, x, ctrl, ws) -> (width,)`` for one world (``f(t, x, ctrl, ws, p)`` with the world's flat model
    fields when ``outputs`` has a layout), batched by vmap into one host call."""

    @jax.custom_jvp
    def evaluate(t, x, ctrl, ws, *p):
        return _host_call(outputs.evaluate, jnp.shape(x)[:-1] + (outputs.width,), t, x, ctrl, ws, *p)

    @evaluate.defjvp
    def _no_jvp(primals, tangents):
        raise BackendError("recorded outputs on MjScene backend='mujoco' come from MuJoCo C on the host and are "
                           "not differentiable; use backend='mjx' to differentiate")

    return evaluate
