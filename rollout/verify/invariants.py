"""Energy and angular-momentum drift of a recorded trajectory, evaluated by MuJoCo C."""

from __future__ import annotations

import copy
import math

import mujoco
import numpy as np

MAX_INVARIANT_EVALS = 400_000   # mj_forward calls for energy/momentum; beyond this the time axis is strided


def _drift(drift, scale, t_axis, stride) -> dict:
    """Summary of drift (samples, B): the worst world and time, per world and vs time."""
    w = int(np.argmax(np.max(drift, axis=0)))
    k = int(np.argmax(drift[:, w]))
    mx = float(drift[k, w])
    return dict(max_abs_drift=mx, rel_drift=mx / scale if scale > 0 else float("inf"), world=w,
                time=float(t_axis[k]), per_world=np.max(drift, axis=0), drift_vs_time=np.max(drift, axis=1),
                time_axis=t_axis, stride=stride)


def recorded_invariants(model: mujoco.MjModel, x0: np.ndarray, x: np.ndarray, time: np.ndarray,
                        max_evals: int = MAX_INVARIANT_EVALS) -> tuple[dict, dict]:
    """(energy, momentum) dicts for the trajectory x (T, B, n) ([qpos; qvel; ...] first): total energy
    (mj_energyPos + mj_energyVel) and total angular momentum about the system's centre of mass, world axes
    (subtree_angmom of the world body), each as max |value(t) - value(0)| over the samples."""
    m = copy.deepcopy(model)
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    T, B = x.shape[:2]
    stride = max(1, math.ceil(T * B / max_evals))
    tsel = np.arange(stride - 1, T, stride)
    if len(tsel) == 0 or tsel[-1] != T - 1:
        tsel = np.append(tsel, T - 1)
    nq, nv = m.nq, m.nv
    E = np.empty((len(tsel) + 1, B))
    L = np.empty((len(tsel) + 1, B, 3))

    def ev(q, v):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(m, d)
        mujoco.mj_subtreeVel(m, d)
        return d.energy.sum(), d.subtree_angmom[0].copy()

    for b in range(B):
        E[0, b], L[0, b] = ev(x0[b, :nq], x0[b, nq:nq + nv])
        for k, j in enumerate(tsel):
            E[k + 1, b], L[k + 1, b] = ev(x[j, b, :nq], x[j, b, nq:nq + nv])
    t_axis = np.asarray(time)[tsel]
    energy = _drift(np.abs(E[1:] - E[:1]), float(np.max(np.abs(E[0]))), t_axis, stride)
    energy["initial"] = E[0].tolist()
    momentum = _drift(np.linalg.norm(L[1:] - L[:1], axis=-1), float(np.max(np.linalg.norm(L[0], axis=-1))),
                      t_axis, stride)
    momentum["initial"] = L[0].tolist()
    return energy, momentum
