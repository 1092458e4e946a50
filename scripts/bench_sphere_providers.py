"""Throughput of force providers on MuJoCo C (issue 43's bar: 10,000 dropped spheres with drag >= 0.5x the
world-steps/s of the same run without providers).

    python scripts/bench_sphere_providers.py                                   # 10,000 worlds, 200 RK4 steps, 3 rounds
    python scripts/bench_sphere_providers.py --out data/bench/sphere_providers_<date>.json

The scene is examples/monte_carlo_spheres.py's sphere released over (40 N, 75 W) in ECI, on backend="mujoco", RK4 at
dt = 0.05 s, nothing recorded but the last state (record_every = steps, no file). Cases, run interleaved (one of each
per round, so a change of the shared machine's load hits them alike):

- ``none``: no provider, MuJoCo's uniform gravity (the point-mass value at the release point): the whole-chunk
  ``mj_step`` path, the bar's baseline;
- ``zero``: the same plus a provider returning zeros (NumPy, no work): what the stage path itself costs, the floor
  of any provider;
- ``drag``: the same plus the example's ``drag`` provider (US 1976 air turning with the Earth, NED wind), its CD and
  wind drawn per world by ``randomize`` as in the example: the bar's case;
- ``gravity+drag``: the example's own configuration: point-mass gravity of each world's mass as a second provider
  (masses per world through ``model_params``), MuJoCo's gravity 0.

MuJoCo's stage timers are off unless ``MJHARNESS_MUJOCO_TIMERS=1`` (``configure()``; recorded as ``mujoco_timers``).
Each case runs once untimed first, at the timed length (imports, the chunk's and the jitted drag's compiles for these
shapes; a chunk of another length would compile again inside the timed run). A run is timed from the
call of ``rollout`` to its return; world-steps/s = worlds x steps / seconds. ``uptime`` is recorded beside every
timed run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import time

import numpy as np

CASES = ("none", "zero", "drag", "gravity+drag")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _runner(case: str, worlds: int, steps: int, seed: int = 0):
    """A function running ``case`` once (the scene, states and parameters made beforehand)."""
    from mjharness.examples import monte_carlo_spheres as mc
    from mjharness.rollout import rollout

    providers = {"none": (), "zero": (), "drag": ("drag",), "gravity+drag": ("gravity", "drag")}[case]
    if case == "zero":  # no flight frame needed: nothing is recorded
        from mjharness.adapters import MjScene

        s = MjScene(mc.xml(gravity=True), backend="mujoco")
        s.add_force(lambda t, x, data: np.zeros((x.shape[0], 2, 6)), name="zero")
    else:
        s = mc.scene("mujoco", providers)
    d = mc.draws(worlds, seed)
    x0 = mc.initial_states(s, d)
    kw: dict = {}
    if "drag" in providers:
        kw["randomize"] = mc.RANDOMIZE
    if "gravity" in providers:
        body_mass = np.repeat(s.model.body_mass[None], worlds, axis=0)
        body_mass[:, 1] = d["mass"]
        kw["model_params"] = {"body_mass": body_mass, "force:gravity.mass": d["mass"]}

    def run(n_steps: int = steps):
        return rollout(s, "rk4", dt=0.05, steps=n_steps, x0=x0, seed=seed, record_every=n_steps, progress=False, **kw)

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", type=int, default=10000)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", default="none,zero,drag", help=f"comma-separated, of {CASES}")
    p.add_argument("--out", default=f"data/bench/sphere_providers_{datetime.date.today().isoformat()}.json")
    args = p.parse_args()
    cases = args.cases.split(",")

    import mjharness

    mjharness.configure()
    runners = {c: _runner(c, args.worlds, args.steps) for c in cases}
    for c in cases:  # untimed, at the timed length (a chunk's compile depends on it): imports, compiles, allocations
        runners[c]()
    runs: dict = {c: [] for c in cases}
    for k in range(args.rounds):
        for c in cases:
            load = _uptime()
            t = time.perf_counter()
            r = runners[c]()
            wall = time.perf_counter() - t
            assert np.isfinite(np.asarray(r.x)).all(), f"{c}: non-finite states"
            runs[c].append({"seconds": wall, "world_steps_per_s": args.worlds * args.steps / wall, "uptime": load})
            print(f"round {k} {c:13s} {wall:7.2f} s  {args.worlds * args.steps / wall:9.4g} world-steps/s  [{load}]",
                  flush=True)
    best = {c: max(r["world_steps_per_s"] for r in runs[c]) for c in cases}
    median = {c: float(np.median([r["world_steps_per_s"] for r in runs[c]])) for c in cases}
    from mjharness.scenes.mujoco_timers import timers_on

    result = {"worlds": args.worlds, "steps": args.steps, "integrator": "rk4", "dt": 0.05, "backend": "mujoco",
              "rounds": args.rounds, "mujoco_timers": timers_on(), "runs": runs, "median_world_steps_per_s": median,
              "best_world_steps_per_s": best, "cpus": os.cpu_count(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if "none" in cases:
        # per round (the interleaved pairs), then of the medians
        result["ratio_to_none"] = {c: {"per_round": [a["world_steps_per_s"] / b["world_steps_per_s"]
                                                     for a, b in zip(runs[c], runs["none"])],
                                       "of_medians": median[c] / median["none"]} for c in cases if c != "none"}
        for c, r in result["ratio_to_none"].items():
            print(f"{c}: {r['of_medians']:.2f} of 'none' (per round {', '.join(f'{v:.2f}' for v in r['per_round'])})")
    result["uptime_end"] = _uptime()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
