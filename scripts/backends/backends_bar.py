"""Issue 16's bar table: backend='mujoco' (our SemiImplicitEuler / RK4 / ImplicitFast on MuJoCo C stages)
against MuJoCo C's own mj_step (Euler / RK4 / implicitfast), 1000 steps, batch 64, next to C's own
spread under one-ulp changes of x0 (tests/backend_common.bar). Usage:

    PYTHONPATH=tests python scripts/backends/backends_bar.py OUT.json [scene name or MJCF path ...]

Its tables are data/backends/bar_bundled.json and bar_public.json.
"""
import json
import sys
import time

import mujoco
from backend_common import bar

from mjharness.adapters import MjScene
from mjharness.scenes import list_scenes

out, names = sys.argv[1], sys.argv[2:] or list_scenes()
rows = []
for name in names:
    model = mujoco.MjModel.from_xml_path(name) if name.endswith(".xml") else name
    scene = MjScene(model, backend="mujoco", threads=2)
    for method in ("euler", "rk4", "implicit_fast"):
        t0 = time.time()
        r = dict(scene=name.split("/")[-3:] and "/".join(name.split("/")[-3:]), method=method, steps=1000, batch=64,
                 **bar(scene, method, 1000, 64), seconds=round(time.time() - t0, 1))
        rows.append(r)
        print(json.dumps(r), flush=True)
        json.dump(rows, open(out, "w"), indent=1)
