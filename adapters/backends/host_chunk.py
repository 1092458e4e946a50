"""Whole chunks in MuJoCo C: when our integrator *is* MuJoCo's own scheme, a chunk is one host call.

``SemiImplicitEuler`` is MuJoCo's Euler, ``RK4`` (exp-map quaternions) its RK4 and ``ImplicitFast`` its
implicitfast. When a run uses one of them and nothing per stage needs JAX (no extra states, noise,
ctrl callable) or the host (no force providers), the stage-by-stage path (one ``pure_callback`` per stage, our
update arithmetic in XLA) only re-does what ``mj_step`` does. Here the chunk is instead
``mujoco.batch.Batch.rollout`` (MuJoCo 4's batched ``mj_step`` on a persistent thread pool, as fast as
``mujoco.rollout``): the rows ``[qpos, qvel, act, qacc_warmstart]`` after every step come back in one
call, so the warm start goes in and out with the state, exactly as ``mj_step`` keeps it. Per-world model
fields (``randomize``, ``model_params``) are the ``Batch``'s per-simulation fields (``Batch.expand``), written
once per run with the values the stage path writes into its model copies (derived constants included), so
both paths step the same models.

The engine's rules are kept exactly:
- ``mj_step`` resets a world whose qpos/qvel/qacc is bad (NaN or beyond 1e10, a warning) where the engine
  freezes a world whose state turns non-finite (``STATUS_NONFINITE`` at that step's global index) and
  lets large finite values run. A world whose warning counters rose, or whose recorded state holds a
  non-finite value, is therefore re-run from the chunk's start by ``_WorldLoop``: ``mj_forward`` and the
  scheme's own update (``mj_Euler`` / ``mj_RungeKutta`` / ``mj_implicit``, what ``mj_step`` runs after its
  checks) one step at a time, frozen at the engine's rule. Healthy worlds never pay for this.
- recorded outputs are read by ``host.HostOutputs`` (the stage path's own reads) at the recorded rows:
  ``live`` at the state after the sample's last step, ``sampled`` at the state before it.
- time: ``mj_step`` accumulates ``d.time += h`` where the engine evaluates at ``t0 + k dt``; the two
  differ in the last bits, so a model whose dynamics read the time (clock sensors, plugins, callbacks)
  keeps the stage path (``why_not``).

Not every model qualifies (``why_not`` names the first reason); ``None`` from ``make_runner`` sends
the run to the compiled JAX chunk.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import mujoco
import numpy as np
from mujoco.batch import MODEL_FIELDS, Batch

from mjharness.integrators import RK4, STATUS_NONFINITE, STATUS_NONFINITE_CTRL, ImplicitFast, SemiImplicitEuler
from mjharness.integrators import tableaux as _tb
from mjharness.integrators.names import IntegratorKind, OutputSemantics

from .base import ChunkRun, ChunkStatic, CtrlMode
from .host_batch import start_row, without_sensors

_S = mujoco.mjtState
_I = mujoco.mjtIntegrator
# The row recorded after every step: the engine's x (qpos, qvel, act) and its carry (the warm start).
REC = int(_S.mjSTATE_QPOS | _S.mjSTATE_QVEL | _S.mjSTATE_ACT | _S.mjSTATE_WARMSTART)
# ... or the state only, when no sample's warm start is recorded (no file, no outputs): 33 % fewer bytes a row on
# humanoid; the warm start after a group is read from the Batch itself.
REC_X = int(_S.mjSTATE_QPOS | _S.mjSTATE_QVEL | _S.mjSTATE_ACT)
FULL = int(_S.mjSTATE_INTEGRATION)
# State mj_step advances that the stage path does not carry: such models keep the stage path.
_UNCARRIED = int(_S.mjSTATE_HISTORY | _S.mjSTATE_PLUGIN | _S.mjSTATE_PLASTIC)
# Options under which mj_step does more than checks + mj_forward + the scheme's update.
_ENABLE = {"mjENBL_SLEEP": "sleeping islands", "mjENBL_IPC": "IPC", "mjENBL_FWDINV": "the fwdinv comparison"}
_CALLBACKS = ("act_bias", "act_dyn", "act_gain", "contactfilter", "control", "passive", "sensor", "time")
# Budget of one Batch.rollout record buffer; a chunk runs in groups of whole samples below it.
RECORD_BYTES = 128 << 20
# Records smaller than this are copied into the trajectory on the calling thread: a hand-off would cost more.
SPLIT_BYTES = 8 << 20


class Scheme(NamedTuple):
    integrator: int           # mjtIntegrator
    advance: object           # what mj_step runs after mj_forward (the fallback loop's update)


SCHEMES: dict[type, Scheme] = {
    SemiImplicitEuler: Scheme(int(_I.mjINT_EULER), mujoco.mj_Euler),
    RK4: Scheme(int(_I.mjINT_RK4), lambda m, d: mujoco.mj_RungeKutta(m, d, 4)),
    ImplicitFast: Scheme(int(_I.mjINT_IMPLICITFAST), mujoco.mj_implicit),
}


def scheme_of(integ) -> Scheme | None:
    """MuJoCo's scheme that ``integ`` reproduces, or None (subclasses and other tableaux are ours only)."""
    if type(integ) is RK4 and integ.tableau != _tb.RK4:
        return None
    return SCHEMES.get(type(integ))


def _model_reason(m: mujoco.MjModel) -> str:
    if mujoco.mj_stateSize(m, _UNCARRIED):
        return "the model has history, plugin or plastic state, which mj_step advances and the stage path does not"
    if np.any(m.sensor_type == int(mujoco.mjtSensor.mjSENS_CLOCK)) or m.nplugin:
        return "the model reads the time (clock sensor or plugin), which mj_step accumulates differently"
    for flag, what in _ENABLE.items():
        if m.opt.enableflags & int(getattr(mujoco.mjtEnableBit, flag)):
            return f"the model enables {what}"
    if any(getattr(mujoco, f"get_mjcb_{c}")() is not None for c in _CALLBACKS):
        return "a MuJoCo callback (mjcb_*) is installed"
    return ""


def why_not(scene, st: ChunkStatic, run: ChunkRun) -> str:
    """'' when the chunks of ``st`` and ``run`` on ``scene`` can run whole in C, else the first reason."""
    loop = run.loop
    loop_names = {name for name, _ in loop.ep.carry_spec()} if loop is not None else set()
    reasons = (
        (scheme_of(st.integ) is None, f"{type(st.integ).__name__} is not one of MuJoCo's own schemes"),
        (st.kind != IntegratorKind.FIXED, f"a {st.kind} integrator"),
        (scene.quaternion_update != "quaternion", "quaternion_update='quaternion_qdot' is not MuJoCo's update"),
        (st.ctrl_mode not in (CtrlMode.NONE, CtrlMode.ARRAY)
         and not (st.ctrl_mode == CtrlMode.CONTROLLER and loop is not None),
         "a ctrl function computes the controls at every step"),
        (st.closed_loop and loop is None, "a termination rule runs between steps"),
        (loop is not None and loop.ep.sensors, "the closed loop reads sensordata"),
        (loop is not None and bool(st.outputs), "outputs are recorded beside a closed loop"),
        (bool(_unexpandable(run.values)), f"per-world model fields {_unexpandable(run.values)} that mj_step cannot "
                                          f"take per simulation"),
        (bool(getattr(scene, "force_providers", ())), "force providers run at every stage"),
        (bool(scene.needs()) or scene.layout.size != scene.nq + scene.nv + scene.na,
         "extra states or noise need JAX at every stage"),
        (tuple(name for name, _ in st.carry if name not in loop_names) != ("qacc_warmstart",),
         f"the carry is {st.carry}"),
        (any(o.fn is not None for o in st.outputs), "an output function"),
        (any(o.field == "flight" for o in st.outputs), "flight outputs are computed in JAX from each recorded state"),
    )
    why = next((text for bad, text in reasons if bad), "")
    return why or _model_reason(scene.model)


# Per-world fields that decide the scheme or the step: the run's own (dt, the integrator) are what it steps.
_RUN_FIELDS = ("opt.timestep", "opt.integrator")


def _unexpandable(params) -> list:
    """The per-world fields a Batch cannot hold per simulation, or that would change the run's scheme."""
    return [name for name, _ in params if name not in MODEL_FIELDS or name in _RUN_FIELDS]


class HostChunk(NamedTuple):
    """What one chunk gives back, on the host (the compiled chunk's ``ChunkOutput`` fields)."""

    x: np.ndarray             # (B, n) after the chunk
    carry: dict               # {"qacc_warmstart": (B, nv)}
    status: np.ndarray        # (B,) int8
    status_step: np.ndarray   # (B,) int64
    xs: np.ndarray            # (S, B, n) after each recorded step
    carries: dict             # {"qacc_warmstart": (S, B, nv)}
    outputs: dict             # {name: (S, B, ...)}


def _step_model(model: mujoco.MjModel, integrator: int, dt: float) -> mujoco.MjModel:
    """A copy of ``model`` whose mj_step is the run's scheme at the run's step (the scene's model untouched), its
    sensors off where they cannot matter (``host_batch.without_sensors``: a chunk's recorded outputs and a closed
    loop's sensordata come from ``HostOutputs``, with the scene's own model)."""
    m = copy.deepcopy(model)
    m.opt.integrator, m.opt.timestep = integrator, dt
    return without_sensors(m, copied=True)


class _WorldLoop:
    """One world at a time, step by step, with the engine's freezing rule (worlds mj_step warned about)."""

    def __init__(self, m: mujoco.MjModel, row0: np.ndarray, advance, batch: Batch | None = None):
        self.m, self.advance, self.row0 = m, advance, row0
        self.batch = batch        # with per-simulation fields: world w runs on the batch's model of w
        self.d = mujoco.MjData(m)
        self.n = m.nq + m.nv + m.na
        self.save = np.empty(mujoco.mj_stateSize(m, FULL))

    def load(self, t: float, x: np.ndarray, ws: np.ndarray, ctrl: np.ndarray, world: int = 0) -> None:
        if self.batch is not None:
            self.m = self.batch.get_model(world)
        m, d = self.m, self.d
        mujoco.mj_setState(m, d, self.row0, FULL)  # applied forces, mocap, userdata as the batch's rows
        d.time = t
        d.qpos[:], d.qvel[:], d.act[:] = x[:m.nq], x[m.nq:m.nq + m.nv], x[m.nq + m.nv:self.n]
        d.qacc_warmstart[:], d.ctrl[:] = ws, ctrl

    def run(self, u: np.ndarray | None, nstep: int, k0: int) -> tuple[np.ndarray, int, int]:
        """(rows (nstep, n + nv) after each step, global index of the failing step or -1, its status) from the
        loaded state."""
        m, d, save = self.m, self.d, self.save
        rec = np.empty((nstep, mujoco.mj_stateSize(m, REC)))
        ctrl = d.ctrl
        for j in range(nstep):
            if u is not None:
                ctrl[:] = u[j]
            if not np.isfinite(ctrl).all():  # mj_step would zero it and run on: the world stops here instead
                mujoco.mj_getState(m, d, rec[j], REC)
                rec[j + 1:] = rec[j]
                return rec, k0 + j, STATUS_NONFINITE_CTRL
            mujoco.mj_getState(m, d, save, FULL)
            mujoco.mj_forward(m, d)
            self.advance(m, d)
            mujoco.mj_getState(m, d, rec[j], REC)
            if not np.isfinite(rec[j, :self.n]).all():  # frozen at the last good state and warm start
                mujoco.mj_setState(m, d, save, FULL)
                mujoco.mj_getState(m, d, rec[j], REC)
                rec[j + 1:] = rec[j]
                return rec, k0 + j, STATUS_NONFINITE
        return rec, -1, 0


class _Stepper(NamedTuple):
    """What a run's chunks step with: the model copy (the run's scheme and step), the ``Batch`` (its thread pool
    and rows), a row as the pool's MjData and the bound state columns."""

    m: mujoco.MjModel
    batch: Batch
    row0: np.ndarray          # applied forces, mocap, userdata as the scene's data
    fields: dict              # bound state columns (time, qpos, qvel, act, qacc_warmstart, ctrl)


def _stepper(scene, integrator: int, dt: float, B: int, params=()) -> _Stepper:
    """Made per run, from the scene's model as it is now (a model edited in place since the last run counts;
    a Batch costs about a millisecond). ``params``: ((field, (B, ...) values), ...) set per simulation."""
    pool = scene.backend_state.pool
    m = _step_model(pool.model, integrator, dt)
    batch = Batch(m, B, nthread=pool.threads)
    for name, values in params:
        field = batch.expand(name)
        field[...] = np.asarray(values).reshape(field.shape)
    row0 = start_row(pool)
    fields = {f: batch.bind(f) for f in ("time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl")}
    return _Stepper(m, batch, row0, fields)


def _sel(ids: np.ndarray, B: int):
    """``ids`` (sorted, unique) as an index: a slice when it is every world (no gather/scatter copies)."""
    return slice(None) if len(ids) == B else ids


class ChunkRunner:
    """``runner(x, carry, status, status_step, k0, ctrl) -> HostChunk``: one chunk of a run on MuJoCo C.

    ``ctrl``: (B, chunk steps, nu) for array controls, else None (the scene's ``data.ctrl``). Steps on a
    ``Batch`` of B simulations with the scene's pool's thread count (the caller's thread included) for the
    run's lifetime."""

    def __init__(self, scene, st: ChunkStatic, run: ChunkRun):
        from ..outputs import needs_rne
        from .host import HostOutputs

        pool, scheme, batch = scene.backend_state.pool, scheme_of(st.integ), st.batch
        assert scheme is not None  # why_not refused the integrators MuJoCo has no scheme of
        self.pool = pool
        self.m, self.batch, self.row0, self.fields = _stepper(scene, scheme.integrator, float(run.dt), batch,
                                                              run.values)
        # (worlds, steps) -> record buffer, reused by the run's chunks and the scene's next runs: a fresh 100 MB
        # buffer costs its page faults at every write (measured ~5 % of a humanoid Euler run of 200 steps).
        self.buffers = scene.backend_state.fns.setdefault("chunk_records", {})
        self.st, self.run, self.B = st, run, batch
        self.nq, self.nv, self.na = self.m.nq, self.m.nv, self.m.na
        self.n = self.nq + self.nv + self.na
        if mujoco.mj_stateSize(self.m, REC) != self.n + self.nv:
            raise RuntimeError(f"mujoco {mujoco.__version__} packs mjSTATE rows differently than host_chunk expects")
        self.ctrl0 = np.array(scene.data.ctrl, np.float64)
        self.loop = _WorldLoop(self.m, self.row0, scheme.advance, self.batch if run.values else None)
        # Outputs read off each world's own fields, flat per world as the stage path hands them over.
        layout = tuple((name, int(np.prod(np.shape(v)[1:], dtype=np.int64))) for name, v in run.values) or None
        self.flat_params = None if layout is None else np.concatenate(
            [np.asarray(v, np.float64).reshape(batch, -1) for _, v in run.values], axis=1)
        self.outputs = HostOutputs(pool, st.outputs, needs_rne(st.outputs), layout) if st.outputs else None

    def __call__(self, x, carry, status, status_step, k0: int, ctrl=None, dest=None,
                 carries: bool = True) -> HostChunk:
        """``dest``: where the chunk's recorded states go, (S, B, n) (e.g. the run's in-memory trajectory: written
        once, in place; None: a new array); ``carries=False``: the warm start after each sample is not kept (only
        the chunk's last), when nothing records it."""
        st, run = self.st, self.run
        R, S = st.record_every, st.samples
        nstep = max(0, min(st.chunk, run.steps - k0))  # steps past ``steps`` (the last chunk's tail) do not run
        x, ws = np.array(x, np.float64), np.array(carry["qacc_warmstart"], np.float64)
        status, status_step = np.array(status, np.int8), np.array(status_step, np.int64)
        u = None if ctrl is None else np.asarray(ctrl, np.float64)
        live = np.flatnonzero(status == 0)
        rows = _Rows(x, ws, S, status != 0, keep_pre=st.semantics == OutputSemantics.SAMPLED and bool(st.outputs),
                     dest=dest, carries=carries or bool(st.outputs), pool=self.pool)
        self._load(live, k0, x, ws)
        for w in self._run_groups(live, nstep, R, u, rows, REC if rows.wss is not None else REC_X):
            self.loop.load(run.t0 + k0 * run.dt, x[w], ws[w], self.ctrl0, w)
            rec, failed, code = self.loop.run(None if u is None else u[w], nstep, k0)
            rows.put(np.array([w]), rec[None], 0, R, None)
            if failed >= 0:
                status[w], status_step[w] = code, failed
        rows.fill_tail(nstep // R)
        outs = self._outputs(rows, k0, nstep // R, u) if self.outputs is not None else {}
        return HostChunk(x=rows.x, carry={"qacc_warmstart": rows.ws}, status=status, status_step=status_step,
                         xs=rows.xs, carries={} if rows.wss is None else {"qacc_warmstart": rows.wss}, outputs=outs)

    def _load(self, live, k0, x, ws):
        f, nq, nv, sel = self.fields, self.nq, self.nv, _sel(live, self.B)
        # Whole rows first: a world mj_step reset last time (mj_resetData) lost the scene's applied forces.
        self.batch.state[sel] = self.row0
        f["time"][sel] = self.run.t0 + k0 * self.run.dt
        f["qpos"][sel] = x[sel, :nq]
        f["qvel"][sel] = x[sel, nq:nq + nv]
        f["act"][sel] = x[sel, nq + nv:self.n]
        f["qacc_warmstart"][sel] = ws[sel]
        f["ctrl"][sel] = self.ctrl0

    def _buffer(self, n: int, ng: int, width: int) -> np.ndarray:
        buf = self.buffers.get((n, ng, width))
        if buf is None:
            self.buffers.clear()  # one size at a time (the last chunk's, or fewer live worlds, is another)
            buf = self.buffers[(n, ng, width)] = np.empty((n, ng, width))
        return buf

    def _run_groups(self, live, nstep, R, u, rows, spec: int) -> np.ndarray:
        """Step the ``live`` worlds ``nstep`` steps in groups of whole samples (records of one group within
        ``RECORD_BYTES``); returns the worlds to re-run step by step: warned about by mj_step, or non-finite."""
        width = mujoco.mj_stateSize(self.m, spec)
        group = max(R, RECORD_BYTES // max(1, len(live) * width * 8) // R * R)
        warn = self.batch.warning  # (nsim, mjNWARNING, [lastinfo, number]), live
        bad = np.zeros(self.B, bool)
        ids, prev = live, None
        for g0 in range(0, nstep, group):
            keep = ~bad[ids]
            if not keep.all():
                ids, prev = ids[keep], None if prev is None else prev[keep]
            if not len(ids):
                break
            ng = min(group, nstep - g0)
            sel = _sel(ids, self.B)
            # Zeroed first: mj_step's reset (mj_resetData) clears the counters before it counts its own warning,
            # so a count compared with the one before could come out equal.
            warn[sel] = 0
            ctl = None if u is None else u[sel, g0:g0 + ng]
            rec = self.batch.rollout(ng, control=ctl, record=(spec,), ids=None if len(ids) == self.B else
                                     ids.astype(np.int32), out={spec: self._buffer(len(ids), ng, width)})[spec]
            ws_now = self.fields["qacc_warmstart"][sel] if spec == REC_X else None  # the state-only rows lack it
            # A non-finite value anywhere makes the world's sum non-finite (so can an overflowing sum of finite
            # values: that world is re-run too, which is exact, only slower).
            new_bad = warn[sel, :, 1].any(axis=1) | ~np.isfinite(rec.sum(axis=(1, 2)))
            bad[ids] = new_bad
            if new_bad.any():
                good = ~new_bad
                rows.put(ids[good], rec[good], g0, R, None if prev is None else prev[good],
                         None if ws_now is None else ws_now[good])
            else:
                rows.put(ids, rec, g0, R, prev, ws_now)
            prev = rec[:, -1].copy()  # the buffer is reused by the next group
        return np.flatnonzero(bad)

    def _outputs(self, rows, k0, valid, u) -> dict:
        """Recorded outputs of the ``valid`` samples (later rows NaN: past ``steps``, never written)."""
        st, run, R, B = self.st, self.run, self.st.record_every, self.B
        S = rows.xs.shape[0]
        out = {o.name: np.full((S, B) + tuple(o.shape), np.nan) for o in st.outputs}
        if not valid:
            return out
        ends = k0 + (np.arange(valid) + 1) * R  # global index after each sample's last step
        sampled = st.semantics == OutputSemantics.SAMPLED
        xs, wss = (rows.pre, rows.pre_ws) if sampled else (rows.xs, rows.wss)
        t = run.t0 + (ends - 1 if sampled else ends) * run.dt
        # The controls an output sees: the sample's last step's (as the compiled chunk's ``_ctrl_at``).
        uu = (np.broadcast_to(self.ctrl0, (valid, B, self.m.nu)) if u is None
              else np.swapaxes(u[:, (np.arange(valid) + 1) * R - 1], 0, 1))
        p = None if self.flat_params is None else np.broadcast_to(self.flat_params, (valid,) + self.flat_params.shape)
        assert self.outputs is not None  # made whenever the run records outputs
        flat = self.outputs.evaluate(np.broadcast_to(t[:, None], (valid, B)), xs[:valid], uu, wss[:valid], p)
        o = 0
        for spec in st.outputs:
            w = int(np.prod(spec.shape, dtype=np.int64))
            out[spec.name][:valid] = flat[..., o:o + w].reshape((valid, B) + tuple(spec.shape))
            o += w
        return out


class _Rows:
    """The chunk's recorded rows, time-major as the engine's chunk returns them. A frozen world's rows are its
    entry state; ``put`` writes the rows a group of steps ended and the latest state of the worlds it stepped;
    ``fill_tail`` gives the rows past the run's last step the final state. Every other row is written by put."""

    def __init__(self, x, ws, S: int, frozen: np.ndarray, keep_pre: bool, dest=None, carries: bool = True,
                 pool=None):
        self.pool = pool                           # its threads copy large records (_time_major)
        self.x0, self.ws0 = x, ws                  # entry
        self.x, self.ws = x.copy(), ws.copy()      # latest
        self.n, self.B = x.shape[1], x.shape[0]
        # The time-major rows are written once, from the world-major records, straight where they are kept.
        self.xs = dest if dest is not None else np.empty((S,) + x.shape)
        self.wss = np.empty((S,) + ws.shape) if carries else None
        self.pre = np.empty_like(self.xs) if keep_pre else None
        self.pre_ws = np.empty_like(self.wss) if keep_pre else None
        for a, v in ((self.xs, x), (self.wss, ws), (self.pre, x), (self.pre_ws, ws)):
            if a is not None and frozen.any():
                a[:, frozen] = v[frozen]

    def put(self, ids, rec, g0: int, R: int, prev, ws_last=None):
        """``rec`` (len(ids), steps, n + nv): rows after steps g0, g0 + 1, ... of the worlds ``ids``;
        ``prev``: their rows after step g0 - 1 (None: g0 is the chunk's first step, the entry state);
        ``ws_last``: their warm start after the last step when ``rec`` holds the state only (n wide)."""
        if not len(ids):
            return
        n, ng, sel = self.n, rec.shape[1], _sel(ids, self.B)
        self.x[sel] = rec[:, -1, :n]
        self.ws[sel] = rec[:, -1, n:] if ws_last is None else ws_last
        j0, j1 = -(-(g0 + 1) // R) - 1, (g0 + ng) // R  # the samples whose last step is in this group
        if j1 <= j0:
            return
        first = j0 * R + R - 1 - g0                 # their last steps: first, first + R, ... (a view, no copy)
        last = rec[:, first::R][:, :j1 - j0]
        _time_major(self.xs, j0, j1, sel, last[..., :n], self.pool)
        if self.wss is not None:
            _time_major(self.wss, j0, j1, sel, last[..., n:], self.pool)
        if self.pre is None or self.pre_ws is None:
            return
        before = np.arange(j0, j1) * R + R - 2 - g0
        inside = before >= 0
        pre = np.empty_like(last)
        pre[:, inside] = rec[:, before[inside]]
        if not inside.all():                        # the row before is the previous group's last, or the entry
            pre[:, ~inside] = (prev if prev is not None else
                               np.concatenate([self.x0[sel], self.ws0[sel]], axis=1))[:, None]
        self.pre[j0:j1, sel] = np.swapaxes(pre[..., :n], 0, 1)
        self.pre_ws[j0:j1, sel] = np.swapaxes(pre[..., n:], 0, 1)

    def fill_tail(self, valid: int):
        """Rows of samples that did not end by the run's last step: the state after it (as masked steps keep)."""
        self.xs[valid:] = self.x
        if self.wss is not None:
            self.wss[valid:] = self.ws


def _time_major(dst, j0: int, j1: int, sel, src, pool) -> None:
    """``dst[j0:j1, sel] = src`` swapped to time-major (``src``: (worlds, j1 - j0, ...)), in ranges of samples on the
    pool's threads when large. Writing a fresh trajectory is mostly first-touch page faults, which run in parallel:
    humanoid, batch 1024, 200 steps, every step kept, 90 MB: 0.20 s of a 2.0 s SemiImplicitEuler run on one thread,
    0.04-0.15 s on two (measured)."""
    k = pool.threads if pool is not None and pool.executor is not None and src.nbytes >= SPLIT_BYTES else 1
    cuts = np.linspace(j0, j1, k + 1).astype(int)

    def part(a: int, b: int) -> None:
        dst[a:b, sel] = np.swapaxes(src[:, a - j0:b - j0], 0, 1)

    if k == 1:
        part(j0, j1)
        return
    for f in [pool.executor.submit(part, a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]:
        f.result()
