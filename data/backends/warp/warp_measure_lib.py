# ruff: noqa: E401, E402, E501, E702  (a measurement script: path set-up before imports)
"""raw_warp from warp_measure.py."""
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from backend_common import C_INTEGRATOR
from mujoco import mjx


def raw_warp(m, method, x0, ctrl, steps):
    """(T, B, n) and world-steps/s of mjx.step with impl='warp' (MJWarp's own integrator)."""
    old = m.opt.integrator
    m.opt.integrator = C_INTEGRATOR[method]
    try:
        mm = mjx.put_model(m, impl="warp")
        d0 = mjx.put_data(m, mujoco.MjData(m), impl="warp", naconmax=48 * 1024)
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
    f = jax.jit(jax.vmap(one))
    out = np.asarray(f(x0, ctrl))  # compile + run
    t = time.perf_counter(); out = np.asarray(f(x0, ctrl)); dt = time.perf_counter() - t
    return np.swapaxes(out, 0, 1).astype(np.float64), x0.shape[0] * steps / dt


