"""The CPU paths beside open loops against the same runs without them (``mjharness bench``'s variant peers).

    python scripts/measure_cpu_paths.py [--scene humanoid] [--batch 1024] [--steps 200] [--repeats 5]
                                        [--json data/bench/cpu_paths.json]

One bench cell, every peer timed interleaved on 2 threads: randomized worlds (every body's mass, geom's friction
and dof's damping drawn per world) against un-randomized, for SemiImplicitEuler and RK4, and a decimated
closed loop (NumPy policy and NumPy rule every 4 steps, resets) against the open loop. Prints each ratio as
the worse of the wall-clock and process-CPU-time ratios, with the load at the start; run it on a quiet
machine (a load above 1.5 is reported as provisional).
"""

from __future__ import annotations

import argparse
import os
import sys

PEERS = ("backend_mujoco", "backend_mujoco_randomized", "backend_mujoco_closed_loop", "backend_mujoco_rk4",
         "backend_mujoco_rk4_randomized", "mujoco_rollout")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default="humanoid")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from mjharness.rollout.bench import bench_report, format_table

    load = os.getloadavg()[0]
    report = bench_report(scenes=[args.scene], batches=(args.batch,), steps=args.steps, peers=PEERS,
                          repeats=args.repeats, min_time=args.min_time, nthread=2, json_path=args.json,
                          log=lambda s: print(s, file=sys.stderr, flush=True))
    print(format_table(report))
    print(f"1-minute load at the start {load:.2f}{' (provisional: above 1.5)' if load > 1.5 else ''}")
    for c in report["cells"]:
        for r in c["results"]:
            if "vs_plain" in r:
                print(f"{r['peer']}: {r['vs_plain']:.3f} (wall {r['vs_plain_wall']:.3f}, "
                      f"CPU {r.get('vs_plain_cpu', float('nan')):.3f})")
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
