"""Issue 45's acceptance protocol for ``fit`` on a robot model given by path (a held-out MJCF, not a bundled scene).

1. The model: the MJCF at ``--model`` (default: gymnasium's hopper.xml, which has contacts; reacher.xml has none).
   If it has no sensors, jointpos and jointvel sensors are added (``mujoco.MjSpec``) to every hinge and slide
   joint of a kinematic tree an actuator drives.
2. Known parameters (``choose_params``): the masses of the bodies moved by the first two actuated joints (x1.2,
   x0.8), the damping of the first and last actuated joints (x1.3 of the nominal, 0.5 where it is 0), the
   frictionloss of the second (1 % of its actuator's largest torque); and one parameter that cannot affect the
   data: the friction of a geom that takes part in no contact (one that cannot collide with anything by its
   contype/conaffinity bits, else one of a moving body that touched nothing in the recorded run).
3. A file recorded on MuJoCo C (the model's own integrator and timestep) with those values in every world: B
   worlds from perturbed initial velocities, driven by a fixed random control sequence (uniform in each
   actuator's range, held for ``--hold`` steps), recording ``sensordata``.
4. 20 noise seeds: Gaussian noise on the recorded sensors, per component ``--noise-frac`` times the component's
   spread over the clean data. Each seed is fitted (``jacobian="auto"``: MuJoCo C by finite differences on this
   CPU; ``noise=`` per component) from +50 % and from -50 % of the truth. Counted: per parameter, the seeds whose
   95 % interval holds the truth (the bar: 18-20 of 20); the invisible parameter flagged with an infinite
   interval; convergence: both starts end at the same estimate (within 1e-3 of a standard error) before the
   iteration limit.
5. ``mujoco.minimize.least_squares`` (its own forward-difference Jacobian) on residuals from ``mujoco.rollout``
   (MuJoCo C, the same model, controls, initial states and noise weights; sensors read at the state after each
   step, as the file records them) on seed 0 from +50 %: its estimates inside our intervals, and wall times of
   both, interleaved ``--repeats`` times, with the machine's load.

    python scripts/fit_robot_check.py [--model PATH] [--json data/fit/robot_check_<model>.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import h5py
import mujoco
import numpy as np

GYM_ASSETS = os.path.join(os.path.dirname(__import__("importlib.util").util.find_spec("gymnasium").origin),
                          "envs", "mujoco", "assets") if __import__("importlib.util").util.find_spec("gymnasium") \
    else ""
HINGE_SLIDE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


def load_model(path: str) -> mujoco.MjModel:
    """The MJCF at ``path``, with jointpos/jointvel sensors on the driven trees' hinge and slide joints if it has
    no sensors (a joint of a tree nothing drives does not move: a sensor on it would read a constant)."""
    spec = mujoco.MjSpec.from_file(path)
    m = spec.compile()
    if m.nsensor:
        return m
    driven = {int(m.body_rootid[m.jnt_bodyid[m.actuator_trnid[a, 0]]]) for a in range(m.nu)
              if int(m.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT)}
    for j in range(m.njnt):
        if int(m.jnt_type[j]) in HINGE_SLIDE and int(m.body_rootid[m.jnt_bodyid[j]]) in driven:
            name = m.joint(j).name
            for kind, tag in ((mujoco.mjtSensor.mjSENS_JOINTPOS, "pos"), (mujoco.mjtSensor.mjSENS_JOINTVEL, "vel")):
                spec.add_sensor(name=f"{name}_{tag}", type=kind, objtype=mujoco.mjtObj.mjOBJ_JOINT, objname=name)
    return spec.compile()


def _can_collide(m: mujoco.MjModel, g: int) -> bool:
    """Whether geom ``g`` can enter any contact: by contype/conaffinity with a geom of another body, or by an
    explicit <pair>."""
    if m.npair and (np.any(m.pair_geom1 == g) or np.any(m.pair_geom2 == g)):
        return True
    other = m.geom_bodyid != m.geom_bodyid[g]
    return bool(np.any(other & (((m.geom_contype[g] & m.geom_conaffinity) != 0)
                                | ((m.geom_contype & m.geom_conaffinity[g]) != 0))))


@dataclass
class Problem:
    """The protocol's model, parameters and recorded file."""

    model: mujoco.MjModel
    truth: dict[str, float]  # identifiable parameter -> its true value
    invisible: str  # a parameter that cannot affect the data
    invisible_value: float
    path: str  # the recorded file (noise-free sensors)
    clean: np.ndarray  # (T, B, nsensordata)
    noise: np.ndarray  # (nsensordata,) the noise std per component
    x0: np.ndarray
    ctrl: np.ndarray  # (B, steps, nu)
    steps: int
    record_every: int
    extra: dict = field(default_factory=dict)


def choose_params(m: mujoco.MjModel) -> dict[str, float]:
    """Identifiable parameters and true values (see the module doc), from the model's actuated joints."""
    joints = [int(m.actuator_trnid[a, 0]) for a in range(m.nu)
              if int(m.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT)
              and int(m.jnt_type[m.actuator_trnid[a, 0]]) in HINGE_SLIDE]
    if len(joints) < 2:
        raise SystemExit(f"the model has {len(joints)} actuated hinge/slide joints; the protocol needs two")
    truth: dict[str, float] = {}
    for j, s in zip(joints[:2], (1.2, 0.8)):
        b = int(m.jnt_bodyid[j])
        truth[f"body_mass:{m.body(b).name}"] = s * float(m.body_mass[b])
    for j in (joints[0], joints[-1]):
        d = float(m.dof_damping[m.jnt_dofadr[j]])
        truth[f"dof_damping:{m.joint(j).name}"] = 1.3 * d if d > 0 else 0.5
    a = [k for k in range(m.nu) if m.actuator_trnid[k, 0] == joints[1]][0]
    torque = abs(float(m.actuator_gear[a, 0])) * float(np.max(np.abs(m.actuator_ctrlrange[a]))
                                                      if m.actuator_ctrllimited[a] else 1.0)
    truth[f"dof_frictionloss:{m.joint(joints[1]).name}"] = 0.01 * torque
    return truth


def _set(m: mujoco.MjModel, values: dict[str, float]) -> None:
    """Set ``field:name`` values on a MuJoCo model (the protocol's fields only)."""
    for p, v in values.items():
        fld, _, name = p.partition(":")
        if fld == "body_mass":
            m.body_mass[m.body(name).id] = v
        elif fld.startswith("dof_"):
            getattr(m, fld)[m.jnt_dofadr[m.joint(name).id]] = v
        elif fld == "geom_friction":
            m.geom_friction[m.geom(name).id] = v
        else:
            raise ValueError(p)


def _touched(m: mujoco.MjModel, truth: dict, x0: np.ndarray, ctrl: np.ndarray) -> set[int]:
    """The geoms in any contact of the run at the truth (plain MuJoCo C, per world)."""
    m = _copy(m)
    _set(m, truth)
    d, seen = mujoco.MjData(m), set()
    for w in range(x0.shape[0]):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = x0[w, :m.nq], x0[w, m.nq:m.nq + m.nv]
        for k in range(ctrl.shape[1]):
            d.ctrl[:] = ctrl[w, k]
            mujoco.mj_step(m, d)
            seen.update(d.contact.geom[:d.ncon].ravel().tolist())
    return seen


def _copy(m: mujoco.MjModel) -> mujoco.MjModel:
    import copy

    return copy.deepcopy(m)


def make_problem(model_path: str, folder: str, worlds: int, steps: int, record_every: int, hold: int,
                 noise_frac: float, ctrl_frac: float = 0.2) -> Problem:
    """Load, choose the parameters, record the noise-free file ``folder/clean.h5`` (see the module doc)."""
    from mjharness.adapters import MjScene
    from mjharness.rollout import rollout
    from mjharness.rollout.engine.plan import initial_states

    m = load_model(model_path)
    truth = choose_params(m)
    scene = MjScene(m, backend="mujoco")
    rng = np.random.default_rng(0)
    lo, hi = np.where(m.actuator_ctrllimited[:, None] > 0, m.actuator_ctrlrange, [-1.0, 1.0]).T
    mid, half = 0.5 * (lo + hi), 0.5 * ctrl_frac * (hi - lo)
    ctrl = np.repeat(rng.uniform(mid - half, mid + half, (worlds, -(-steps // hold), m.nu)), hold, axis=1)[:, :steps]
    x0 = np.asarray(initial_states(scene, worlds, 0, 0.1), np.float64)
    touched = _touched(m, truth, x0, ctrl)
    moving = [g for g in range(m.ngeom) if m.geom_bodyid[g] != 0 and m.geom(g).name]
    free = [g for g in moving if not _can_collide(m, g)] or [g for g in moving if g not in touched]
    if not free:
        raise SystemExit("every named geom of a moving body touches something: no invisible friction to fit")
    invisible = f"geom_friction:{m.geom(free[0]).name}"
    fields = {"body_mass": np.tile(m.body_mass, (worlds, 1)), "dof_damping": np.tile(m.dof_damping, (worlds, 1)),
              "dof_frictionloss": np.tile(m.dof_frictionloss, (worlds, 1))}
    for p, v in truth.items():
        fld, _, name = p.partition(":")
        i = m.body(name).id if fld == "body_mass" else m.jnt_dofadr[m.joint(name).id]
        fields[fld][:, i] = v
    path = os.path.join(folder, "clean.h5")
    r = rollout(scene, None, steps=steps, x0=x0, record_every=record_every, ctrl=ctrl, out=path, overwrite=True,
                progress=False, outputs=["sensordata"], model_params=fields)
    clean = np.asarray(r.outputs["sensordata"], np.float64)
    spread = clean.std(axis=(0, 1))
    if np.any(spread <= 0):
        raise SystemExit(f"sensors {np.flatnonzero(spread <= 0).tolist()} read a constant: no noise level from "
                         f"their spread")
    return Problem(model=m, truth=truth, invisible=invisible, invisible_value=float(m.geom_friction[free[0], 0]),
                   path=path, clean=clean, noise=noise_frac * spread, x0=x0, ctrl=ctrl, steps=steps,
                   record_every=record_every, extra={"scene": scene, "can_collide": _can_collide(m, free[0]),
                                                     "contact_geoms": sorted(touched)})


def noisy_file(p: Problem, seed: int, folder: str) -> str:
    """A copy of the recording whose sensors carry seed ``seed``'s Gaussian noise (std ``p.noise`` per component)."""
    out = os.path.join(folder, f"seed{seed}.h5")
    shutil.copy(p.path, out)
    with h5py.File(out, "r+") as f:
        f["outputs/sensordata"][...] = p.clean + p.noise * np.random.default_rng(1000 + seed).standard_normal(
            p.clean.shape)
    return out


def start_of(p: Problem, sign: float) -> dict[str, float]:
    """Every parameter (1 + sign/2) times its truth (the invisible one: its nominal value)."""
    s = {k: (1 + 0.5 * sign) * v for k, v in p.truth.items()}
    s[p.invisible] = (1 + 0.5 * sign) * p.invisible_value
    return s


def ours(p: Problem, path: str, sign: float, iterations: int = 50):
    from mjharness.rollout.fit import fit

    params = [*p.truth, p.invisible]
    return fit(path, params, scene=p.extra["scene"], start=start_of(p, sign), noise=p.noise,
               target="outputs:sensordata", progress=False, iterations=iterations)


def theirs(p: Problem, path: str, sign: float, threads: int = 2) -> tuple[dict[str, float], int]:
    """mujoco.minimize.least_squares (forward differences of its own) on residuals from mujoco.rollout."""
    from mujoco import minimize
    from mujoco import rollout as mjrollout

    with h5py.File(path, "r") as f:
        goal = f["outputs/sensordata"][()]
    m = _copy(p.model)
    params = [*p.truth, p.invisible]
    B, R, T = p.x0.shape[0], p.record_every, goal.shape[0]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    d = mujoco.MjData(m)
    s0 = np.empty((B, mujoco.mj_stateSize(m, spec)))
    for w in range(B):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = p.x0[w, :m.nq], p.x0[w, m.nq:m.nq + m.nv]
        mujoco.mj_getState(m, d, s0[w], spec)
    # One step more than the file: mj_step evaluates sensors at the state before it integrates, so the sensors of
    # the state after step k are those the (k+1)-th step reports.
    u = np.concatenate([p.ctrl, p.ctrl[:, -1:]], axis=1)
    runner, datas = mjrollout.Rollout(nthread=threads), [mujoco.MjData(m) for _ in range(threads)]
    sizes = [3 if q.startswith("geom_friction") else 1 for q in params]

    def one(z):
        for q, v in zip(params, np.split(z, np.cumsum(sizes)[:-1])):
            _set(m, {q: v if v.size > 1 else float(v[0])})
        _, sens = runner.rollout(m, datas, s0, u, nstep=p.steps + 1)
        ys = sens[:, R::R][:, :T].transpose(1, 0, 2)
        return ((ys - goal) / p.noise).ravel()

    def residual(z):
        z = np.asarray(z, np.float64)
        return one(z) if z.ndim == 1 else np.stack([one(c) for c in z.T], axis=1)  # points as columns

    st = start_of(p, 1.0)
    z0 = np.concatenate([np.atleast_1d(np.asarray(st[q], np.float64)) * np.ones(n) for q, n in zip(params, sizes)])
    if p.invisible.startswith("geom_friction"):
        z0[-3:] = 1.5 * p.model.geom_friction[p.model.geom(p.invisible.partition(":")[2]).id]
    x, trace = minimize.least_squares(z0, residual, bounds=[np.zeros_like(z0), np.full_like(z0, 1e30)],
                                      max_iter=100, verbose=0)
    x = np.asarray(x).ravel()
    return dict(zip(p.truth, x[:len(p.truth)].tolist())), len(trace)


def protocol(p: Problem, folder: str, seeds: int = 20, signs=(1.0, -1.0), log=print) -> dict:
    """Fit every seed from each start; coverage, flags and convergence as counted in the module doc."""
    cover = {k: 0 for k in p.truth}
    cover_minus = {k: 0 for k in p.truth}
    flagged, inf_interval, converged, runs = 0, 0, 0, []
    for seed in range(seeds):
        path = noisy_file(p, seed, folder)
        res = {}
        for sign in signs:
            t = time.perf_counter()
            res[sign] = ours(p, path, sign)
            runs.append(dict(seed=seed, start=sign, wall_s=time.perf_counter() - t, iterations=res[sign].iterations,
                             values={k: res[sign].values[k] for k in p.truth},
                             stderr={k: float(res[sign].stderr[k]) for k in p.truth},
                             reduced_chi2=res[sign].residuals["reduced_chi2"],
                             chi2_p=res[sign].residuals.get("chi2_p")))
        a = res[signs[0]]
        for k, v in p.truth.items():
            cover[k] += bool(a.ci95[k][0] < v < a.ci95[k][1])
            if len(signs) > 1:
                b = res[signs[1]]
                cover_minus[k] += bool(b.ci95[k][0] < v < b.ci95[k][1])
        inv = [lab for lab in a.unidentifiable]
        flagged += all(lab.startswith(p.invisible) for lab in inv) and len(inv) > 0 and \
            not any(lab.startswith(k) for k in p.truth for lab in inv)
        inf_interval += bool(np.all(np.isinf(np.asarray(a.ci95[p.invisible][1]))))
        ok = all(r.iterations < 50 for r in res.values())
        if len(signs) > 1:
            b = res[signs[1]]
            ok &= all(abs(a.values[k] - b.values[k]) < 1e-3 * a.stderr[k] for k in p.truth)
        converged += ok
        log(f"seed {seed}: " + ", ".join(f"{k}={a.values[k]:.6g}±{a.stderr[k]:.2g}" for k in p.truth)
            + f"; iterations {[r.iterations for r in res.values()]}; flagged {inv}; converged {ok}")
    return dict(coverage=cover, coverage_minus_start=cover_minus if len(signs) > 1 else None,
                invisible_flagged=flagged, invisible_infinite_interval=inf_interval, converged=converged,
                seeds=seeds, runs=runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(GYM_ASSETS, "hopper.xml"))
    ap.add_argument("--worlds", type=int, default=16)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--record-every", type=int, default=2)
    ap.add_argument("--hold", type=int, default=10, help="steps each random control is held")
    ap.add_argument("--noise-frac", type=float, default=0.02)
    ap.add_argument("--ctrl-frac", type=float, default=0.2, help="the random controls' span, a fraction of each "
                    "actuator's range about its middle (full-range torques throw a light arm against its limits)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    name = os.path.splitext(os.path.basename(a.model))[0]
    out = a.json or os.path.join(os.path.dirname(__file__), "..", "data", "fit", f"robot_check_{name}.json")
    with tempfile.TemporaryDirectory() as tmp:
        p = make_problem(a.model, tmp, a.worlds, a.steps, a.record_every, a.hold, a.noise_frac, a.ctrl_frac)
        print(f"{name}: truth {p.truth}; invisible {p.invisible} (can collide by its bits: "
              f"{p.extra['can_collide']}); {p.clean.shape[0]} samples x {a.worlds} worlds x {p.clean.shape[2]} "
              f"sensor components", flush=True)
        t = time.perf_counter()
        load0 = os.getloadavg()
        prot = protocol(p, tmp, a.seeds, log=lambda s: print(s, flush=True))
        prot_wall = time.perf_counter() - t
        path = noisy_file(p, 0, tmp)
        mine, their, est = [], [], None
        for _ in range(a.repeats):  # interleaved
            t = time.perf_counter()
            res = ours(p, path, 1.0)
            mine.append(time.perf_counter() - t)
            t = time.perf_counter()
            est, iters = theirs(p, path, 1.0)
            their.append(time.perf_counter() - t)
        assert est is not None
        inside = {k: bool(res.ci95[k][0] <= e <= res.ci95[k][1]) for k, e in est.items()}
    s = p.model.opt
    summary = dict(
        model=os.path.abspath(a.model), integrator=int(s.integrator), timestep=float(s.timestep),
        geoms_in_contact=[p.model.geom(g).name or str(g) for g in p.extra["contact_geoms"]], worlds=a.worlds,
        steps=a.steps, record_every=a.record_every, hold=a.hold, noise_frac=a.noise_frac, ctrl_frac=a.ctrl_frac,
        truth=p.truth, invisible=p.invisible,
        coverage=prot["coverage"], coverage_minus_start=prot["coverage_minus_start"],
        invisible_flagged=prot["invisible_flagged"], invisible_infinite_interval=prot["invisible_infinite_interval"],
        converged_both_starts=prot["converged"], seeds=a.seeds, protocol_wall_s=prot_wall, load_before=load0,
        compare=dict(seed=0, ours={k: res.values[k] for k in p.truth},
                     ci95={k: list(res.ci95[k]) for k in p.truth}, ours_iterations=res.iterations,
                     ours_jacobian=res.jacobian, theirs=est, theirs_iterations=iters, theirs_inside_ours=inside,
                     wall_s_ours=mine, wall_s_theirs=their, ours_median=float(np.median(mine)),
                     theirs_median=float(np.median(their)), load=os.getloadavg()),
        passes=dict(coverage=all(18 <= c <= a.seeds for c in prot["coverage"].values()),
                    flagged=prot["invisible_flagged"] == a.seeds, converged=prot["converged"] == a.seeds,
                    agree=all(inside.values()), no_slower=float(np.median(mine)) <= float(np.median(their))),
        runs=prot["runs"])
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"-> {out}")
    return 0 if all(summary["passes"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
