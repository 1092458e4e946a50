# ruff: noqa: E401, E402, E501, E702, I001  (a measurement script: path set-up before imports)
"""How fast humanoid diverges from C: ours-on-warp and raw MJWarp vs C after 1, 3, 10, 30 steps (4 worlds).
Its output is data/backends/warp/warp_humanoid_growth.out."""
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tests")]
import warp; warp.config.quiet = True
import numpy as np
from backend_common import backend_trajectories, c_trajectories, worlds
from warp_measure_lib import raw_warp

from mjharness.adapters.mjscene import MjScene

s = MjScene("humanoid", backend="warp"); m = s.model; n = m.nq + m.nv
x0, ctrl = worlds(m, 4)
for method in ["euler", "rk4"]:
    T = 30
    ref = c_trajectories(m, method, x0, ctrl, T)
    ours = backend_trajectories(s, method, x0, ctrl, T)[..., :n]
    raw, _ = raw_warp(m, method, x0, ctrl, T)
    for k in [1, 3, 10, 30]:
        print(f"humanoid {method:5s} after {k:2d} steps: ours-vs-C {np.abs(ours[k-1]-ref[k-1]).max():.2e}  "
              f"MJWarp-vs-C {np.abs(raw[k-1]-ref[k-1]).max():.2e}  ours-vs-MJWarp {np.abs(ours[k-1]-raw[k-1]).max():.2e}",
              flush=True)
