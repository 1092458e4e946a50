"""Issue 45's comparison: our fit against mujoco.minimize.least_squares with finite differences on MuJoCo C.

The problem of tests/test_fit.py: 64 double_pendulum worlds, 40 RK4 steps of 0.01 s recorded every 4, link1
mass 1.3 and shoulder damping 0.4, measurement noise 1e-3, both started 50 % off. Ours: ``fit`` of the file's
model with jacobian="auto" (on a CPU: finite differences of batched MuJoCo C rollouts) and "exact" (through the
MJX rollout; its first call compiles), each first call timed, then the three interleaved ``--repeats`` times
(medians). Theirs:
``mujoco.minimize.least_squares`` on residuals from ``mujoco.rollout`` with MuJoCo's own RK4 (the same scheme
as ours on this contact-free model), its Jacobian by finite differences. Prints the estimates, our 95 %
intervals, whether theirs lie inside them, and the wall times with the machine's load.

    python scripts/fit_vs_minimize.py [--json data/fit/fit_vs_minimize.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import h5py
import mujoco
import numpy as np
from mujoco import minimize
from mujoco import rollout as mjrollout

from mjharness.adapters import MjScene
from mjharness.rollout import initial_states, open_rollout, rollout
from mjharness.rollout.fit import fit

B, STEPS, R, DT, MASS, DAMP, NOISE = 64, 40, 4, 0.01, 1.3, 0.4, 1e-3
PARAMS = ["body_mass:link1", "dof_damping:shoulder"]


def noisy_file(scene: MjScene, path: str) -> None:
    m = scene.model
    mass, damp = np.tile(m.body_mass, (B, 1)), np.tile(m.dof_damping, (B, 1))
    mass[:, m.body("link1").id] = MASS
    damp[:, m.jnt_dofadr[m.joint("shoulder").id]] = DAMP
    rollout(scene, "rk4", dt=DT, steps=STEPS, x0=initial_states(scene, B, 0, 0.5), record_every=R, out=path,
            progress=False, model_params={"body_mass": mass, "dof_damping": damp})
    with h5py.File(path, "r+") as f:
        f["x"][...] = f["x"][()] + NOISE * np.random.default_rng(0).standard_normal(f["x"].shape)


def theirs(path: str, z0: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, int]:
    """mujoco.minimize with finite differences, residuals by mujoco.rollout (RK4, MuJoCo C)."""
    with open_rollout(path) as f:
        model, x0, goal = f.model(), np.asarray(f.x0), np.asarray(f.x)
    model.opt.integrator, model.opt.timestep = mujoco.mjtIntegrator.mjINT_RK4, DT
    link1, adr = model.body("link1").id, model.jnt_dofadr[model.joint("shoulder").id]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    d = mujoco.MjData(model)
    s0 = np.empty((B, mujoco.mj_stateSize(model, spec)))
    for w in range(B):
        d.qpos[:], d.qvel[:] = x0[w, :model.nq], x0[w, model.nq:model.nq + model.nv]
        mujoco.mj_getState(model, d, s0[w], spec)
    runner, datas = mjrollout.Rollout(nthread=2), [mujoco.MjData(model) for _ in range(2)]

    def one(z):
        model.body_mass[link1], model.dof_damping[adr] = z
        state, _ = runner.rollout(model, datas, s0, nstep=STEPS)
        xs = state[:, R - 1::R, 1:1 + model.nq + model.nv].transpose(1, 0, 2)  # (T, B, n) after each R-th step
        return ((xs - goal[..., :model.nq + model.nv]) / NOISE).ravel()

    def residual(z):
        z = np.asarray(z, np.float64)
        return one(z) if z.ndim == 1 else np.stack([one(c) for c in z.T], axis=1)  # points as columns

    x, trace = minimize.least_squares(z0, residual, bounds=[lo, hi], max_iter=100, verbose=0)
    return np.asarray(x).ravel(), len(trace)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    scene = MjScene("double_pendulum")
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    z0 = np.array([start[p] for p in PARAMS])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "noisy.h5")
        noisy_file(scene, path)

        def ours(jacobian):
            t = time.perf_counter()
            res = fit(path, PARAMS, integrator="rk4", start=start, noise=NOISE, progress=False, jacobian=jacobian)
            return res, time.perf_counter() - t

        def mine():
            t = time.perf_counter()
            est, iters = theirs(path, z0, np.zeros(2), np.full(2, 1e30))
            return est, iters, time.perf_counter() - t

        # First calls (what a user's first fit in a process costs: loading, tracing, compiling), then interleaved.
        res, auto_first = ours("auto")
        res_x, exact_first = ours("exact")
        est, iters, theirs_first = mine()
        auto, exact, their = [], [], []
        for _ in range(a.repeats):
            auto.append(ours("auto")[1])
            exact.append(ours("exact")[1])
            their.append(mine()[2])
    inside = {p: bool(res.ci95[p][0] <= e <= res.ci95[p][1]) for p, e in zip(PARAMS, est)}
    med = lambda v: float(np.median(v))  # noqa: E731
    out = dict(ours={p: res.values[p] for p in PARAMS}, ci95={p: list(res.ci95[p]) for p in PARAMS},
               ours_jacobian=res.jacobian, ours_iterations=res.iterations,
               ours_exact={p: res_x.values[p] for p in PARAMS}, ours_exact_iterations=res_x.iterations,
               theirs=dict(zip(PARAMS, est.tolist())), theirs_iterations=iters,
               wall_s={"ours_auto_first": auto_first, "ours_exact_first": exact_first, "theirs_first": theirs_first,
                       "ours_auto_median": med(auto), "ours_exact_compiled_median": med(exact),
                       "theirs_median": med(their), "ours_auto": auto, "ours_exact_compiled": exact, "theirs": their},
               theirs_inside_our_intervals=inside, load=os.getloadavg(), repeats=a.repeats,
               truth={PARAMS[0]: MASS, PARAMS[1]: DAMP})
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
