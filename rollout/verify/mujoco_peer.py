"""MuJoCo C as the peer: ``mj_step`` from each world's initial state onto the recorded times."""

from __future__ import annotations

import copy

import mujoco
import numpy as np
from numpy.typing import ArrayLike

from .recorded import CrossCheckError, Recorded, no_model_params, partial_reference, sample_grid


def mujoco_peer_trajectory(model: mujoco.MjModel, x0: ArrayLike, samples: int, steps_per_sample: int, dt: float,
                           integrator: str = "RK4", t0: float = 0.0) -> np.ndarray:
    """MuJoCo C ``mj_step`` from each world's x0 = [qpos; qvel; act; ...] (B, >= nq+nv+na):
    (samples, B, nq + nv + na), sample j after (j + 1) * steps_per_sample steps of ``dt``."""
    m = copy.deepcopy(model)  # the caller's model keeps its timestep and integrator
    m.opt.timestep = dt
    m.opt.integrator = int(getattr(mujoco.mjtIntegrator, f"mjINT_{integrator.upper()}"))
    nq, nv, na = m.nq, m.nv, m.na
    x0 = np.asarray(x0, np.float64)
    out = np.empty((samples, x0.shape[0], nq + nv + na))
    d = mujoco.MjData(m)
    for i in range(x0.shape[0]):
        mujoco.mj_resetData(m, d)
        d.time = t0
        d.qpos[:] = x0[i, :nq]
        d.qvel[:] = x0[i, nq:nq + nv]
        d.act[:] = x0[i, nq + nv:nq + nv + na]
        for j in range(samples):
            for _ in range(steps_per_sample):
                mujoco.mj_step(m, d)
            out[j, i, :nq], out[j, i, nq:nq + nv], out[j, i, nq + nv:] = d.qpos, d.qvel, d.act
    return out


def reference_from_mujoco(rec: Recorded, model, integrator="RK4"):
    """(reference like rec.x, covered value indices, info) from MuJoCo C with ``integrator``."""
    no_model_params(rec, "the MuJoCo C peer")
    ctrl = str(rec.attrs.get("ctrl", "none"))
    if ctrl != "none" and model.nu:
        raise CrossCheckError(f"{rec.path}: the rollout was driven by controls ({ctrl}); the file does not store "
                              f"them, so MuJoCo C cannot replay it")
    t0, R, dt = sample_grid(rec)
    n = model.nq + model.nv + model.na
    peer = mujoco_peer_trajectory(model, rec.x0, len(rec.time), R, dt, integrator, t0)
    info = dict(method=f"MuJoCo C {mujoco.__version__} mj_step, integrator {integrator}", dt=dt, steps_per_sample=R)
    return partial_reference(rec, np.arange(n), peer), set(range(n)), info
