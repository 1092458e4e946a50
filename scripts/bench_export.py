"""Throughput of ``mjharness export`` (issue 44's bar: >= 100 MB/s of written Parquet/HDF5 for 1,000 episodes).

    python scripts/bench_export.py                       # makes data/bench/export_run1000.h5 (64 worlds, 20000 steps)
    python scripts/bench_export.py --file RUN.h5         # an existing closed-loop file
    python scripts/bench_export.py --out data/bench/export_<date>.json

The file: the bundled arm with arm_reach's controller, its ``reached`` rule and resets, arm_reach's ``distance``
reward, every sample recorded; observations qpos, qvel and the whole state x, and the default qpos, qvel. Each
format is exported into a fresh folder and timed from the call to its return (reading the file, the frames,
writing, the metadata; the libraries imported before); MB/s is the bytes the dataset's files hold afterwards
over that time. Each export runs in a fresh process (as
``mjharness export`` does: a process's first export pays for its fresh memory), the cases interleaved over
``--repeats`` rounds; the machine's load (``uptime``) is recorded with every figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np


def _make(path: str, batch: int, steps: int) -> None:
    from mjharness.examples import arm_reach
    from mjharness.rollout import rollout

    rollout("arm", steps=steps, batch=batch, ctrl=arm_reach.make(), terminate=arm_reach.reached, on_terminate="reset",
            reward=arm_reach.distance, backend="mujoco", out=path, progress=True)


def _bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)


# One export in a fresh process, as `mjharness export` runs: the libraries imported first, the clock around export().
CHILD = """
import json, os, sys, time
import minari, pandas, pyarrow.parquet  # noqa: F401
from mjharness.rollout.export import export
path, out, fmt, obs = sys.argv[1:5]
t = time.perf_counter()
export(path, out, format=fmt, obs=obs, progress=True)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def _one(path: str, work: str, fmt: str, obs: str) -> dict:
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run([sys.executable, "-c", CHILD, path, out, fmt, obs], capture_output=True, text=True,
                         check=True)
    wall = json.loads(run.stdout.strip().splitlines()[-1])["seconds"]
    mb = _bytes(out) / 1e6
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": wall, "written_mb": mb, "mb_per_s": mb / wall,
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", help="an existing closed-loop rollout file (default: make one)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20000, help="steps of the made file (64 worlds: ~1100 episodes)")
    p.add_argument("--obs", action="append", help="observations (repeatable; default: qpos,qvel,x and qpos,qvel)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=f"data/bench/export_{datetime.date.today().isoformat()}.json")
    args = p.parse_args()
    obs_sets = args.obs or ["qpos,qvel,x", "qpos,qvel"]

    from mjharness.rollout import open_rollout

    path = args.file or "data/bench/export_run1000.h5"
    if not args.file and not os.path.exists(path):
        _make(path, args.batch, args.steps)
    with open_rollout(path) as f:
        rows = [r for r in f.episode_table() if r["end"] != "running"]
        input_mb = os.path.getsize(path) / 1e6

    result: dict = {"file": path, "file_mb": input_mb, "episodes": len(rows), "repeats": args.repeats, "runs": {}}
    cases = [(fmt, obs) for obs in obs_sets for fmt in ("lerobot", "minari")]
    work = tempfile.mkdtemp(prefix="bench_export_")
    try:
        for r in range(args.repeats):  # interleaved: a change of the shared machine's load hits every case alike
            for fmt, obs in cases:
                one = _one(path, work, fmt, obs)
                result["runs"].setdefault(f"{fmt} obs={obs}", []).append(one)
                print(f"round {r}: {fmt} obs={obs}: {len(rows)} episodes, {one['written_mb']:.1f} MB in "
                      f"{one['seconds']:.2f} s = {one['mb_per_s']:.0f} MB/s ({one['uptime']})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["median_mb_per_s"] = {k: float(np.median([v["mb_per_s"] for v in runs]))
                                 for k, runs in result["runs"].items()}
    result["cpus"] = os.cpu_count()
    result["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    for k, v in result["median_mb_per_s"].items():
        print(f"median {k}: {v:.0f} MB/s")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
