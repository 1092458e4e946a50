"""Issue 30's bar: backend="mujoco" against MuJoCo's own ``mujoco.rollout``, and the per-stage overhead.

Scene: dm_control's humanoid when dm_control is installed, else the bundled ``humanoid`` (said in the output).
Batch 1024, 200 steps, 2 threads each, interleaved (every repetition runs each peer once, in turn), median
of 3 repetitions; world-steps/s of

    mujoco_rollout        mujoco.rollout.Rollout(nthread=2) with <option integrator="Euler">, every step's state
    backend_mujoco        rollout(MjScene(backend="mujoco", threads=2), SemiImplicitEuler(), record_every=1)
    mujoco_rollout_rk4    the same with <option integrator="RK4">
    backend_mujoco_rk4    rollout(..., RK4(), record_every=1)

``backend_*`` are timed as the whole ``rollout()`` call (``wall``: planning, the chunk loop, the result)
and as the engine's chunk loop (``run_s``). With ``--record-every 1`` (default) both sides keep every
step's state (mujoco.rollout's output array, our time-major ``RolloutResult.x``); ``--record-every 200``
keeps our last state only, as the bench's backend peers do. Then the per-stage overhead of integrators
that run stage by stage (``scripts/profile_c_stages.py``): EulerMaruyama (200 steps) and DormandPrince
(the fewest steps that take >= 300 stages: the run's fixed costs are then not a stage's), batch 1024, the
median of as many timed rollouts as repetitions.

Timing needs a quiet machine: the load average is printed with every figure, and figures are marked
provisional when the 1-minute load was above 1.5 at the start (by its end the measurement's own threads
hold it near 2 on two cores).

    python scripts/measure_c_backend_bar.py --json data/bench/c_backend_bar.json
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import pathlib
import time

import mujoco
import numpy as np

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, SemiImplicitEuler
from mjharness.rollout import initial_states, rollout

QUIET = 1.5


def humanoid(mjcf: str | None = None) -> tuple[mujoco.MjModel, str]:
    """The bar's model: ``mjcf`` (e.g. dm_control's suite/humanoid.xml with its common/ folder), else dm_control's
    humanoid when dm_control is installed, else the bundled ``humanoid``."""
    if mjcf:
        return mujoco.MjModel.from_xml_path(mjcf), f"{mjcf}"
    try:
        from dm_control import suite

        env = suite.load("humanoid", "run")
        return env.physics.model.ptr, "dm_control humanoid (suite humanoid-run)"
    except ImportError:
        from mjharness.scenes import load_native

        return load_native("humanoid"), "bundled humanoid (dm_control is not installed)"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def native_peer(m: mujoco.MjModel, x0: np.ndarray, steps: int, threads: int, integrator):
    from mujoco import rollout as mjrollout

    m = copy.deepcopy(m)
    m.opt.integrator = integrator
    d = mujoco.MjData(m)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    s0 = np.empty((x0.shape[0], mujoco.mj_stateSize(m, spec)))
    for i, x in enumerate(x0):
        d.qpos[:], d.qvel[:], d.act[:] = x[:m.nq], x[m.nq:m.nq + m.nv], x[m.nq + m.nv:]
        mujoco.mj_getState(m, d, s0[i], spec)
    r = mjrollout.Rollout(nthread=threads)
    datas = [mujoco.MjData(m) for _ in range(threads)]
    buf = np.empty((x0.shape[0], steps, s0.shape[1]))

    def call():
        t = time.perf_counter()
        r.rollout(m, datas, s0, nstep=steps, state=buf)
        return {"wall": time.perf_counter() - t}, buf[:, -1, 1:1 + m.nq + m.nv]

    return call


def ours_peer(scene: MjScene, integ, x0: np.ndarray, steps: int, record_every: int):
    dt = float(scene.model.opt.timestep)

    def call():
        t = time.perf_counter()
        r = rollout(scene, integ, dt=dt, steps=steps, x0=x0, progress=False, record_every=record_every)
        wall = time.perf_counter() - t
        assert r.stats["trace_cache"] == "host", r.stats["trace_cache"]
        return {"wall": wall, "run_s": r.stats["run_s"]}, r.x[-1, :, :scene.nq + scene.nv]

    return call


def bar(batch: int, steps: int, threads: int, repeats: int, record_every: int, mjcf: str | None = None) -> dict:
    m, what = humanoid(mjcf)
    scene = MjScene(m, backend="mujoco", threads=threads)
    x0 = initial_states(scene, batch, 0, 0.01)
    peers = {"mujoco_rollout": native_peer(m, x0, steps, threads, mujoco.mjtIntegrator.mjINT_EULER),
             "backend_mujoco": ours_peer(scene, SemiImplicitEuler(), x0, steps, record_every),
             "mujoco_rollout_rk4": native_peer(m, x0, steps, threads, mujoco.mjtIntegrator.mjINT_RK4),
             "backend_mujoco_rk4": ours_peer(scene, RK4(), x0, steps, record_every)}
    finals = {name: call()[1] for name, call in peers.items()}  # warm-up, and the agreement of the final states
    runs = {name: [] for name in peers}
    for rep in range(repeats):
        for name, call in peers.items():
            t, _ = call()
            runs[name].append(dict(t, load=load()))
            print(f"  rep {rep} {name}: {batch * steps / t['wall']:.4g} world-steps/s (load {runs[name][-1]['load']})",
                  flush=True)

    def median(name, key="wall"):
        return float(np.median([batch * steps / r[key] for r in runs[name]]))

    rows = {name: dict(world_steps_per_s=median(name), runs=runs[name]) for name in peers}
    for name in ("backend_mujoco", "backend_mujoco_rk4"):
        rows[name]["world_steps_per_s_run_s"] = median(name, "run_s")
    ratio = {"euler": rows["backend_mujoco"]["world_steps_per_s"] / rows["mujoco_rollout"]["world_steps_per_s"],
             "rk4": rows["backend_mujoco_rk4"]["world_steps_per_s"] / rows["mujoco_rollout_rk4"]["world_steps_per_s"]}
    same = {"euler": float(np.abs(finals["backend_mujoco"] - finals["mujoco_rollout"]).max()),
            "rk4": float(np.abs(finals["backend_mujoco_rk4"] - finals["mujoco_rollout_rk4"]).max())}
    return dict(scene=what, batch=batch, steps=steps, threads=threads, repeats=repeats, record_every=record_every,
                rows=rows, ratio=ratio,
                max_abs_diff_final=same)


def stage_overhead(batch: int, threads: int, repeats: int, mjcf: str | None = None) -> list[dict]:
    path = pathlib.Path(__file__).with_name("profile_c_stages.py")
    spec = importlib.util.spec_from_file_location("profile_c_stages", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = []
    # 200 steps as the bar's other rows; DormandPrince from 1 step, as many as take >= 300 stages; EulerMaruyama
    # also with joint noise (a stage then solves M(q)^-1 of the noise forces), against mujoco.rollout's step.
    for integ, steps, min_stages, noise in (("euler_maruyama", 200, 0, None), ("dormand_prince", 1, 300, None),
                                            ("euler_maruyama", 200, 0, {"abdomen_z": 0.1})):
        row = mod.profile(mjcf or "humanoid", integ, batch, steps, threads, repeats, min_stages, noise,
                          vs_rollout=noise is not None)
        runs = ", ".join(f"{x['overhead']:.1%}" for x in row["runs"])
        vs = (f"; {row['vs_rollout']:+.1%} against mujoco.rollout's step ({row['rollout_step_ms']:.2f} ms; runs "
              + ", ".join(f"{x['vs_rollout']:+.1%}" for x in row["runs"]) + ")") if noise else ""
        print(f"  {integ}{' + joint noise ' + str(noise) if noise else ''}: {row['stages']} stages, "
              f"{row['stage_ms']:.2f} ms a stage, mj_forward {row['mj_forward_ms']:.2f} ms, overhead "
              f"{row['overhead']:.1%} (median of {runs}; load {row['load']}){vs}", flush=True)
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--record-every", type=int, default=1,
                    help="our peers' record_every (1: every step's state, as mujoco.rollout's output; --steps: the "
                         "last state only, as the bench's backend peers)")
    ap.add_argument("--no-stages", action="store_true", help="skip the per-stage overhead")
    ap.add_argument("--mjcf", help="the model to measure (default: dm_control's humanoid if installed, else the "
                                   "bundled humanoid); e.g. dm_control/suite/humanoid.xml of a dm_control checkout")
    ap.add_argument("--json")
    a = ap.parse_args()
    start = load()
    print(f"load at start {start} (1-minute average; > {QUIET}: figures provisional)", flush=True)
    report = dict(load_start=list(os.getloadavg()), mujoco=mujoco.__version__,
                  bar=bar(a.batch, a.steps, a.threads, a.repeats, a.record_every, a.mjcf))
    b = report["bar"]
    print(f"{b['scene']}, batch {b['batch']}, {b['steps']} steps, {b['threads']} threads, median of {b['repeats']}, "
          f"record_every {b['record_every']}:")
    for name, r in b["rows"].items():
        print(f"  {name:20s} {r['world_steps_per_s']:10.4g} world-steps/s")
    print(f"  ratio Euler {b['ratio']['euler']:.3f} (bar >= 0.95), RK4 {b['ratio']['rk4']:.3f} (bar >= 0.90); final "
          f"states differ by {b['max_abs_diff_final']}")
    if not a.no_stages:
        report["stages"] = stage_overhead(a.batch, a.threads, a.repeats, a.mjcf)
    report["load_end"] = list(os.getloadavg())
    # The measurement itself keeps both cores busy (a 1-minute load near 2 by its end): the load at the start is
    # what says whether anything else was running.
    report["provisional"] = start > QUIET
    print(f"load at end {report['load_end'][0]:.2f}" + ("  PROVISIONAL: machine not quiet" if report["provisional"]
                                                         else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
