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
import re
import subprocess
import sys
import tempfile
import time

SUMMARY = re.compile(r"wall ([\d.]+) s, compile ([\d.]+) s .*?\(([\d.]+) world-steps/s\)")


def one(scene: str, backend: str, steps: int, batch: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, MJHARNESS_CACHE_DIR=os.path.join(d, "cache"))
        argv = [sys.executable, "-m", "mjharness.rollout.cli", "run", scene, "--steps", str(steps), "--batch",
                str(batch), "--backend", backend, "--no-progress", "--out", os.path.join(d, "r.h5")]
        t = time.perf_counter()
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return dict(scene=scene, backend=backend, error=f"timeout {timeout:g} s")
        total = time.perf_counter() - t
    m = SUMMARY.search(p.stdout)
    chosen = re.search(r"backend (\w+) \(", p.stderr)
    if p.returncode or not m:
        return dict(scene=scene, backend=backend, error=(p.stderr or p.stdout)[-300:], total_s=total)
    return dict(scene=scene, backend=backend, ran=chosen.group(1) if chosen else "?", total_s=round(total, 2),
                compile_s=float(m.group(2)), world_steps_per_s=float(m.group(3)))


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
