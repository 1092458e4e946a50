"""MuJoCo C mj_step reference trajectories and backend='mujoco' rollouts on the same worlds (shared by
tests/test_backends.py and the measurement script scripts/backends/backends_bar.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, ImplicitFast, SemiImplicitEuler
from mjharness.rollout import rollout

C_INTEGRATOR = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4,
                "implicit_fast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}
OURS = {"euler": SemiImplicitEuler, "rk4": RK4, "implicit_fast": ImplicitFast}


def worlds(m: mujoco.MjModel, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x0 (B, nq+nv+na), ctrl (B, nu)): the default (or first keyframe) state, velocities and controls
    perturbed per world so the worlds differ."""
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    rng = np.random.default_rng(seed)
    x0 = np.tile(np.concatenate([d.qpos, d.qvel, d.act]), (batch, 1))
    x0[:, m.nq:m.nq + m.nv] += 0.1 * rng.standard_normal((batch, m.nv))
    lo, hi = m.actuator_ctrlrange.T if m.nu else (np.zeros(0), np.zeros(0))
    span = np.where(m.actuator_ctrllimited.astype(bool), hi - lo, 2.0) if m.nu else np.zeros(0)
    mid = np.where(m.actuator_ctrllimited.astype(bool), 0.5 * (hi + lo), 0.0) if m.nu else np.zeros(0)
    ctrl = mid + 0.3 * span * (rng.random((batch, m.nu)) - 0.5)
    return x0, ctrl


def c_trajectory(m: mujoco.MjModel, x0: np.ndarray, steps: int) -> np.ndarray:
    """MuJoCo C's mj_step from x0 (qpos, qvel) with fresh data (a cold warm start): (steps, nq + nv)."""
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = x0[:m.nq], x0[m.nq:m.nq + m.nv]
    out = []
    for _ in range(steps):
        mujoco.mj_step(m, d)
        out.append(np.concatenate([d.qpos, d.qvel]))
    return np.array(out)


def c_trajectories(m: mujoco.MjModel, method: str, x0: np.ndarray, ctrl: np.ndarray, steps: int) -> np.ndarray:
    """(T, B, nq+nv+na) from MuJoCo C's own mj_step with ``<option integrator>`` = ``method``."""
    old = m.opt.integrator
    m.opt.integrator = C_INTEGRATOR[method]
    try:
        out = np.empty((steps,) + x0.shape)
        for b in range(x0.shape[0]):
            d = mujoco.MjData(m)
            d.qpos[:], d.qvel[:], d.act[:] = x0[b, :m.nq], x0[b, m.nq:m.nq + m.nv], x0[b, m.nq + m.nv:]
            d.ctrl[:] = ctrl[b]
            for i in range(steps):
                mujoco.mj_step(m, d)
                out[i, b] = np.concatenate([d.qpos, d.qvel, d.act])
    finally:
        m.opt.integrator = old
    return out


def backend_trajectories(scene: MjScene, method: str, x0: np.ndarray, ctrl: np.ndarray, steps: int) -> np.ndarray:
    """(T, B, n) from our integrator ``method`` on ``scene`` (constant per-world controls)."""
    m = scene.model
    c = np.broadcast_to(ctrl[:, None, :], (x0.shape[0], steps, m.nu)).copy() if m.nu else None
    r = rollout(scene, OURS[method](), dt=m.opt.timestep, steps=steps, x0=x0, ctrl=c, progress=False)
    return np.asarray(r.x)


def max_diff(scene: MjScene, method: str, steps: int, batch: int) -> float:
    x0, ctrl = worlds(scene.model, batch)
    ref = c_trajectories(scene.model, method, x0, ctrl, steps)
    ours = backend_trajectories(scene, method, x0, ctrl, steps)
    n = scene.nq + scene.nv + scene.na
    return float(np.max(np.abs(ours[..., :n] - ref)))


def one_ulp_spread(m: mujoco.MjModel, method: str, x0: np.ndarray, ctrl: np.ndarray, steps: int,
                   ref: np.ndarray) -> np.ndarray:
    """Per step, max over x0 with qpos or qvel moved one ulp up or down of |C(moved x0) - C(x0)|: how far
    MuJoCo C's own trajectories part under a rounding-sized change. Over 1000 steps of a contact scene
    this grows by orders of magnitude (a contact that starts one step earlier, Lyapunov growth), and it
    depends on the direction, so all four are taken."""
    spread = np.zeros(steps)
    for seg in (slice(0, m.nq), slice(m.nq, m.nq + m.nv)):
        for direction in (np.inf, -np.inf):
            x1 = x0.copy()
            x1[:, seg] = np.nextafter(x1[:, seg], direction)
            spread = np.maximum(spread, np.abs(c_trajectories(m, method, x1, ctrl, steps) - ref).max(axis=(1, 2)))
    return spread


def bar(scene: MjScene, method: str, steps: int, batch: int) -> dict:
    """Ours vs mj_step on the same worlds, next to C's own one-ulp spread, over the steps where C's own
    trajectory stays bounded (|x| < 1e3: the humanoid diverges under C's implicitfast)."""
    m = scene.model
    x0, ctrl = worlds(m, batch)
    ref = c_trajectories(m, method, x0, ctrl, steps)
    ours = backend_trajectories(scene, method, x0, ctrl, steps)[..., :ref.shape[-1]]
    bounded = np.abs(ref).max(axis=(1, 2)) < 1e3
    n = int(np.argmin(bounded)) if not bounded.all() else steps
    spread = one_ulp_spread(m, method, x0, ctrl, steps, ref)
    diff = np.abs(ours - ref).max(axis=(1, 2))
    return {"steps_bounded": n, "diff": float(diff[:n].max()), "ulp_spread": float(spread[:n].max()),
            "diff_first_step": float(diff[0])}


def mjwarp_step_fn(m: mujoco.MjModel, method: str, steps: int, naconmax: int):
    """jit(vmap) of ``steps`` MJWarp steps (``mjx.step``, impl='warp', MuJoCo's own integrator ``method``):
    ``(x0 (B, n), ctrl (B, nu)) -> (B, T, n)`` float32 trajectories (needs warp-lang)."""
    old = m.opt.integrator
    m.opt.integrator = C_INTEGRATOR[method]
    try:
        mm = mjx.put_model(m, impl="warp")
        d0 = mjx.put_data(m, mujoco.MjData(m), impl="warp", naconmax=naconmax)
    finally:
        m.opt.integrator = old
    f32 = d0.qpos.dtype

    def one(x, u):
        d = d0.replace(qpos=x[:m.nq].astype(f32), qvel=x[m.nq:m.nq + m.nv].astype(f32),
                       act=x[m.nq + m.nv:].astype(f32), ctrl=u.astype(f32))

        def body(d, _):
            d = mjx.step(mm, d)
            return d, jnp.concatenate([d.qpos, d.qvel, d.act])
        return jax.lax.scan(body, d, None, length=steps)[1]
    return jax.jit(jax.vmap(one))


def mjwarp_trajectories(m: mujoco.MjModel, method: str, x0: np.ndarray, ctrl: np.ndarray, steps: int,
                        naconmax: int) -> np.ndarray:
    """(T, B, n) float64 from MJWarp's own integrator on the same worlds as ``c_trajectories``."""
    out = mjwarp_step_fn(m, method, steps, naconmax)(x0, ctrl)
    return np.swapaxes(np.asarray(out), 0, 1).astype(np.float64)
