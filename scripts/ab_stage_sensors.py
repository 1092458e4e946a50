"""A/B of the batches' sensors (issue 42, item 3): the joint-noise stage of dm_control's humanoid with the stage
``Batch`` computing every sensor (as before ``host_batch.without_sensors``) and with ``mjDSBL_SENSOR`` (nothing reads
a stage's sensordata), interleaved in one process (``scripts/profile_c_stages.py``'s ``profile``: each timed rollout
followed by ``mujoco.rollout``'s Euler step of the same worlds, which computes its sensors: it returns them).
Each arm runs in a fresh process: a process's first scene of a model binds the compiled chunk's host calls to its
``Batch``, which later scenes of the same model reuse, so switching in one process would time one arm twice.

    python scripts/ab_stage_sensors.py --scene /tmp/dmc/humanoid.xml --rounds 5 \
        --json data/bench/stage_sensors_ab_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

KEYS = ("stage_ms", "mj_forward_ms", "host_python_copies_ms", "callback_xla_ms", "overhead", "rollout_step_ms",
        "vs_rollout", "load")


CHILD = """
import json, os, sys
sys.path.insert(0, {here!r})
import profile_c_stages as pcs
from mjharness.adapters.backends import host_batch
if {sensors!r}:
    host_batch.without_sensors = lambda m, copied=False: m  # every sensor computed, as before
row = pcs.profile({scene!r}, "euler_maruyama", 1024, {steps!r}, 2, 1, 0, {{"abdomen_z": 0.1}}, True)
print(json.dumps({{k: row[k] for k in {keys!r}}}))
"""


def _arm(scene: str, steps: int, sensors: bool) -> dict:
    code = CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), sensors=sensors, scene=scene, steps=steps,
                        keys=KEYS)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scene", default="humanoid", help="a bundled scene or an MJCF path (dm_control's humanoid.xml "
                    "with its common/ folder for the figures in docs/run.md)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args()
    out: dict = {"sensors": [], "no_sensors": []}
    for r in range(a.rounds):
        for name in ("sensors", "no_sensors") if r % 2 == 0 else ("no_sensors", "sensors"):
            out[name].append(_arm(a.scene, a.steps, name == "sensors"))
            print(r, name, {k: round(v, 4) for k, v in out[name][-1].items()}, flush=True)
    out["median_vs_rollout"] = {name: float(np.median([x["vs_rollout"] for x in out[name]]))
                                for name in ("sensors", "no_sensors")}
    out["median_stage_ms"] = {name: float(np.median([x["stage_ms"] for x in out[name]]))
                              for name in ("sensors", "no_sensors")}
    out["scene"], out["date"] = a.scene, datetime.date.today().isoformat()
    print(out["median_vs_rollout"], out["median_stage_ms"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
