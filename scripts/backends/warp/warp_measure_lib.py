"""raw_warp for the warp measurement scripts: MJWarp's own mjx.step trajectories, timed."""
import time

import numpy as np
from backend_common import mjwarp_step_fn


def raw_warp(m, method, x0, ctrl, steps, naconmax=48 * 1024):
    """(T, B, n) and world-steps/s of mjx.step with impl='warp' (MJWarp's own integrator)."""
    f = mjwarp_step_fn(m, method, steps, naconmax)
    np.asarray(f(x0, ctrl))  # compile + run
    t = time.perf_counter()
    out = np.asarray(f(x0, ctrl))
    dt = time.perf_counter() - t
    return np.swapaxes(out, 0, 1).astype(np.float64), x0.shape[0] * steps / dt
