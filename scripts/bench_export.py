"""Throughput of ``mjharness export`` (issue 44's bar: >= 100 MB/s of written Parquet/HDF5 for 1,000 episodes).

    python scripts/bench_export.py                       # makes data/bench/export_run1000.h5 (64 worlds, 20000 steps)
    python scripts/bench_export.py --file RUN.h5         # an existing closed-loop file
    python scripts/bench_export.py --out data/bench/export_<date>.json

The file: the bundled arm with arm_reach's controller, its ``reached`` rule and resets, arm_reach's ``distance``
reward, every sample recorded, observations qpos, qvel and the whole state x. Each format is exported into a
fresh folder and timed from the call to its return (reading the file, the frames, writing, the metadata; the
libraries imported before); MB/s is
the bytes the dataset's files hold afterwards over that time. The machine's load (``uptime``) is recorded with the
figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import tempfile
import time


def _make(path: str, batch: int, steps: int) -> None:
    from mjharness.examples import arm_reach
    from mjharness.rollout import rollout

    rollout("arm", steps=steps, batch=batch, ctrl=arm_reach.make(), terminate=arm_reach.reached, on_terminate="reset",
            reward=arm_reach.distance, backend="mujoco", out=path, progress=True)


def _bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", help="an existing closed-loop rollout file (default: make one)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20000, help="steps of the made file (64 worlds: ~1100 episodes)")
    p.add_argument("--obs", default="qpos,qvel,x")
    p.add_argument("--out", default=f"data/bench/export_{datetime.date.today().isoformat()}.json")
    args = p.parse_args()

    from mjharness.rollout import open_rollout
    from mjharness.rollout.export import export

    path = args.file or "data/bench/export_run1000.h5"
    if not args.file and not os.path.exists(path):
        _make(path, args.batch, args.steps)
    with open_rollout(path) as f:
        rows = [r for r in f.episode_table() if r["end"] != "running"]
        input_mb = os.path.getsize(path) / 1e6
    import minari  # noqa: F401  (imported before the clock starts, as in a program that exports twice)
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    result = {"file": path, "file_mb": input_mb, "episodes": len(rows), "obs": args.obs, "formats": {}}
    work = tempfile.mkdtemp(prefix="bench_export_")
    try:
        for fmt in ("lerobot", "minari"):
            out = os.path.join(work, fmt)
            t = time.perf_counter()
            export(path, out, format=fmt, obs=args.obs, progress=True)
            wall = time.perf_counter() - t
            mb = _bytes(out) / 1e6
            result["formats"][fmt] = {"seconds": wall, "written_mb": mb, "mb_per_s": mb / wall,
                                      "episodes_per_s": len(rows) / wall}
            print(f"{fmt}: {len(rows)} episodes, {mb:.1f} MB in {wall:.2f} s = {mb / wall:.0f} MB/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    result["cpus"] = os.cpu_count()
    result["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"load: {result['uptime']}\nwritten: {args.out}")


if __name__ == "__main__":
    main()
