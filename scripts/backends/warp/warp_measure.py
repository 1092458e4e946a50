# ruff: noqa: E401, E402, E501, E702, I001  (a measurement script: path set-up before imports)
"""backend='warp' vs MuJoCo C mj_step, and raw MJWarp (mjx.step, impl='warp') vs C, on the same worlds.
Run: python scripts/backends/warp/warp_measure.py [steps ...]  (CPU; warp helper); its output is
data/backends/warp/warp_measure.out."""
import os
import sys
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tests")]
import warp; warp.config.quiet = True
import importlib.metadata as md

import jax
import mujoco
import numpy as np
from backend_common import backend_trajectories, c_trajectories, worlds
from warp_measure_lib import raw_warp

from mjharness.adapters.mjscene import MjScene

print("mujoco", mujoco.__version__, "mujoco-mjx", md.version("mujoco-mjx"), "warp-lang", warp.__version__,
      "mujoco-warp(pip)", md.version("mujoco-warp"), "jax", jax.__version__, "x64", jax.config.jax_enable_x64,
      "device", jax.devices()[0], "naconmax", 48 * 1024, flush=True)


steps_list = [int(a) for a in sys.argv[1:]] or [100, 1000]
for name in ["box_on_plane", "humanoid"]:
    scene = MjScene(name, backend="warp")
    m = scene.model
    n = m.nq + m.nv + m.na
    for steps in steps_list:
        for batch in ([4, 64] if steps <= 100 else [4]):
            x0, ctrl = worlds(m, batch)
            for method in ["euler", "rk4"]:
                ref = c_trajectories(m, method, x0, ctrl, steps)
                backend_trajectories(scene, method, x0, ctrl, steps)  # compile
                t = time.perf_counter()
                ours = backend_trajectories(scene, method, x0, ctrl, steps)
                ours_rate = batch * steps / (time.perf_counter() - t)
                raw, raw_rate = raw_warp(m, method, x0, ctrl, steps)
                d_ours = np.abs(ours[..., :n] - ref).max()
                d_raw = np.abs(raw - ref).max()
                d_or = np.abs(ours[..., :n] - raw).max()
                print(f"{name:12s} {method:5s} steps {steps:5d} batch {batch:3d}  ours-vs-C {d_ours:.2e}  "
                      f"MJWarp-vs-C {d_raw:.2e}  ours-vs-MJWarp {d_or:.2e}  |x|max {np.abs(ref).max():.2e}  "
                      f"ours {ours_rate:8.0f} w-steps/s  MJWarp {raw_rate:8.0f} w-steps/s", flush=True)
