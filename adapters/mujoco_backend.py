"""MjScene's ``backend="mujoco"``: stage evaluations by MuJoCo C ``mj_forward`` on native threads.

One batched host call per stage: ``jax.pure_callback`` with ``vmap_method="broadcast_all"`` turns
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
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators import ContractError

MODES = ("forward", "euler", "implicit")
_S = mujoco.mjtState
# What a stage sets on MjData: packed by mj_setState in this (bit) order.
_STATE = int(_S.mjSTATE_TIME | _S.mjSTATE_QPOS | _S.mjSTATE_QVEL | _S.mjSTATE_ACT | _S.mjSTATE_WARMSTART
             | _S.mjSTATE_CTRL)


class BackendError(ContractError):
    """A request the chosen dynamics backend cannot serve (e.g. differentiation through MuJoCo C)."""


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

    def _slice(self, i, lo, hi, mode, t, x, ctrl, ws, h, out):
        """Worlds lo..hi on thread i's MjData: only MuJoCo C calls and row copies per world; everything
        that can be done on the whole slice at once (qvel, rates) is done after the loop."""
        m, d = self.model, self.datas[i]
        nq, nv, na = m.nq, m.nv, m.na
        # MjData's array attributes build a new numpy view on every access: take them once.
        qvel, act, qacc, act_dot = d.qvel, d.act, d.qacc, d.act_dot
        x, out = x[lo:hi], out[lo:hi]
        step = mode == "implicit" or (mode == "euler" and self._damped)
        after = np.empty((hi - lo, nv + na)) if step else None  # qvel, act after mj_Euler / mj_implicit
        stepper = self._implicit_model if mode == "implicit" else m
        advance = mujoco.mj_implicit if mode == "implicit" else mujoco.mj_Euler
        # One mj_setState per world instead of six numpy assignments (less Python under the GIL):
        # rows [time, qpos, qvel, act, qacc_warmstart, ctrl] in mjtState bit order, built for the slice at once.
        packed = np.concatenate([t[lo:hi, None], x[:, :nq + nv + na], ws[lo:hi], ctrl[lo:hi]], axis=1)
        for w in range(hi - lo):
            mujoco.mj_setState(m, d, packed[w], _STATE)
            mujoco.mj_forward(m, d)
            out[w, 2 * nv:2 * nv + na] = act_dot
            out[w, 2 * nv + na:] = qacc
            if step:  # advances d: only the velocity (and activation) change is read back
                advance(stepper, d)
                after[w, :nv] = qvel
                after[w, nv:] = act
        out[:, :nv] = x[:, nq:nq + nv]  # mj_forward leaves qvel as given
        if not step:
            out[:, nv:2 * nv] = out[:, 2 * nv + na:]
            return
        hs = h[lo:hi, None]
        out[:, nv:2 * nv] = (after[:, :nv] - x[:, nq:nq + nv]) / hs
        if mode == "implicit" and na:
            out[:, 2 * nv:2 * nv + na] = (after[:, nv:] - x[:, nq + nv:]) / hs

    def evaluate(self, mode, t, x, ctrl, ws, h):
        """Arrays with one common leading batch shape (or none) -> (..., 3 nv + na) float64."""
        # The callback may hand over jax Arrays: index those per world and each index is a JAX dispatch
        # (measured 2-5 ms a world on the humanoid, 100x mj_forward). One host copy up front instead.
        t, x, ctrl, ws, h = (np.asarray(a, dtype=np.float64) for a in (t, x, ctrl, ws, h))
        lead = x.shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        t, h = t.reshape(n), h.reshape(n)
        x, ctrl, ws = (a.reshape(n, -1) for a in (x, ctrl, ws))
        out = np.empty((n, self.width))
        k = min(self.threads, n)
        if k <= 1 or self.executor is None:
            self._slice(0, 0, n, mode, t, x, ctrl, ws, h, out)
        else:
            bounds = np.linspace(0, n, k + 1).astype(int)
            futs = [self.executor.submit(self._slice, i, bounds[i], bounds[i + 1], mode, t, x, ctrl, ws, h, out)
                    for i in range(k)]
            for f in futs:
                f.result()
        return out.reshape(lead + (self.width,))

    def __del__(self):
        if getattr(self, "executor", None) is not None:
            self.executor.shutdown(wait=False)


def make_evaluator(pool: HostPool, mode: str):
    """``f(t, x, ctrl, ws, h) -> (3 nv + na,)`` for one world, batched by vmap into one host call."""
    if mode not in MODES:
        raise BackendError(f"backend 'mujoco': unknown evaluation mode {mode!r}")
    shape = jax.ShapeDtypeStruct((pool.width,), jnp.float64)

    @jax.custom_jvp
    def evaluate(t, x, ctrl, ws, h):
        lead = jnp.shape(x)[:-1]
        spec = jax.ShapeDtypeStruct(lead + shape.shape, shape.dtype)
        return jax.pure_callback(lambda *a: pool.evaluate(mode, *a), spec, t, x, ctrl, ws, h,
                                 vmap_method="broadcast_all")

    @evaluate.defjvp
    def _no_jvp(primals, tangents):
        raise BackendError("MjScene backend='mujoco' evaluates MuJoCo C on the host and is not differentiable "
                           "(jax.grad / jax.jvp); use backend='mjx' to differentiate")

    return evaluate


class HostData:
    """The fields of a host evaluation that ``MjScene._derivative`` reads (like MJX data)."""

    def __init__(self, out, nv, na):
        self.qvel = out[..., :nv]
        self.qacc_used = out[..., nv:2 * nv]
        self.act_dot = out[..., 2 * nv:2 * nv + na]
        self.qacc = out[..., 2 * nv + na:]
