"""Start-up and speed of the default backend (``auto``: MuJoCo C on CPU) against MJX, on the bundled scenes.

Each cell is one fresh ``mjharness run SCENE --steps S --batch B --backend {auto,mjx}`` process with an
empty compile cache (a user's first run), timed from process start to exit; the run's own summary
gives compile seconds and world-steps/s. The two backends run alternately per scene, so both see the
same machine load (recorded with the figures).

    python scripts/measure_backend_default.py --steps 500 --batch 64 --json data/bench/backend_default.json
"""

from __future__ import annotations

import argparse
import json
import os

# One cold run per (scene, backend): rollout/bench/coldstart.py (also behind `mjharness bench --cold-start`).
from mjharness.rollout.bench.coldstart import cold_run as one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenes", nargs="*")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json")
    a = ap.parse_args()
    from mjharness.scenes import list_scenes

    scenes = a.scenes or list_scenes()
    rows = []
    for s in scenes:
        for backend in ("auto", "mjx"):
            r = one(s, backend, a.steps, a.batch, a.timeout)
            r["load"] = os.getloadavg()[0]
            rows.append(r)
            print(json.dumps(r), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(steps=a.steps, batch=a.batch, cpu_count=os.cpu_count(), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
