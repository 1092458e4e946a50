"""Our SemiImplicitEuler / RK4 through the state registry against MuJoCo C's own mj_step.

SemiImplicitEuler on an exp-map (``quaternion``) scene must reproduce mj_step with the Euler
integrator (implicit joint damping included); RK4 on the same kind of scene (RKMK stages for the
quaternions) must reproduce mj_step with integrator RK4. Contact-free scenes, 1000 steps, max
|difference| in qpos/qvel <= 1e-9. The ball chain whips its last link at up to 16 rad/s: there
RK4 on 4-component quaternion derivatives (``quaternion_qdot``) is 2.4e-8 away from C, RKMK
is at rounding level.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, SemiImplicitEuler
from mjharness.scenes import load_scene

STEPS = 1000
TOL = 1e-9
_INTEG = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4}


def _model(name: str) -> mujoco.MjModel:
    m = load_scene(name)
    if name == "arm":
        m.dof_damping[:] = [0.3, 0.2, 0.1, 0.5]  # exercises MuJoCo's implicit Euler damping
    return m


def _ctrl(m) -> np.ndarray | None:
    return np.linspace(0.3, -0.4, m.nu) if m.nu else None


def _c_trajectory(name: str, method: str) -> np.ndarray:
    m = _model(name)
    m.opt.integrator = _INTEG[method]
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    ctrl = _ctrl(m)
    if ctrl is not None:
        d.ctrl[:] = ctrl
    out = np.empty((STEPS, m.nq + m.nv))
    for i in range(STEPS):
        mujoco.mj_step(m, d)
        out[i, :m.nq], out[i, m.nq:] = d.qpos, d.qvel
    return out


def _ours(name: str, method: str) -> np.ndarray:
    m = _model(name)
    scene = MjScene(m, quaternion_update="quaternion")
    integ = SemiImplicitEuler() if method == "euler" else RK4()
    h = m.opt.timestep
    x0 = scene.reset(keyframe=0) if m.nkey else scene.x0()
    ctrl = _ctrl(m)
    ctrl = None if ctrl is None else jnp.asarray(ctrl)

    @jax.jit
    def run(x0):
        def body(carry, _):
            t, x = carry
            x = integ.integrate(scene, t, h, x, ctrl)[0]
            return (t + h, x), x
        return jax.lax.scan(body, (0.0, x0), None, length=STEPS)[1]

    xs = np.asarray(run(jnp.asarray(x0)))
    return xs[:, :m.nq + m.nv]


@pytest.mark.parametrize("name,method", [("mixed", "euler"), ("arm", "euler"),
                                         ("mixed", "rk4"), ("ball_chain", "rk4"), ("arm", "rk4")])
def test_matches_mujoco_c(name, method):
    c = _c_trajectory(name, method)
    ours = _ours(name, method)
    diff = np.abs(ours - c).max()
    print(f"{name}/{method}: max |ours - MuJoCo C| over {STEPS} steps = {diff:.2e}")
    # The motion is not trivial: the state moved far more than the tolerance.
    assert np.abs(c[-1] - c[0]).max() > 1e-2
    assert diff <= TOL, f"{name}/{method}: max |ours - MuJoCo C| = {diff:.3e} over {STEPS} steps"
