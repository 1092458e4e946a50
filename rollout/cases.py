"""Check-case suite: small MuJoCo scenes with analytic (or independent) answers, one feature per case.

    mjharness cases                         # every case with its documented integrator and step: a table
    mjharness cases dzhanibekov free_fall   # some cases
    mjharness cases --all-integrators       # also Euler, SemiImplicitEuler, Heun, Midpoint, RK38 (and the
                                            # stochastic methods for the OU case): the README's error table
    mjharness cases --list | --json out.json | --duration 2.0

Each case lives in ``data/cases/<name>.json``: its scene (bundled name or inline MJCF), initial
states, integrator, step, horizon, tolerance per metric and the committed expected errors of every
method (measured). The analytic solutions are computed here at run time (scipy for the Jacobi
elliptic functions). A case passes when every metric is within its tolerance.

In Python: ``run_case(load_case("dzhanibekov"))`` returns a ``CaseResult`` (metrics, details).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time as _time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators import _config  # noqa: F401  (float64)

__all__ = ["CASES_DIR", "list_cases", "load_case", "run_case", "run_suite", "CaseResult", "CaseError",
           "format_table", "rigid_symmetric", "euler_jacobi", "jacobi_flip_times", "symmetric_torque_omega",
           "ou_moments", "add_parser", "main_cases", "FIXED_METHODS", "STOCHASTIC_METHODS"]

def _packaged_cases_dir() -> str:
    """``data/cases`` ships as package data of ``mjharness.data`` (editable and wheel installs alike)."""
    try:
        from importlib import resources

        return str(resources.files("mjharness.data").joinpath("cases"))
    except (ImportError, TypeError):  # pragma: no cover - a source tree without the install
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cases")


CASES_DIR = os.environ.get("MJHARNESS_CASES_DIR") or _packaged_cases_dir()
FIXED_METHODS = ("euler", "semi_implicit_euler", "heun", "midpoint", "rk4", "rk38")
STOCHASTIC_METHODS = ("euler_maruyama", "stochastic_heun", "sra1")


class CaseError(ValueError):
    """A case file is missing or malformed, or a case cannot run (names the case)."""


# ==================================================================================================
# analytic solutions (numpy; scipy for elliptic functions)

def _hat(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])


def _rot(axis, angle):
    """Rotation matrices exp(angle [axis]) for a unit axis (3,) and angles (T,): (T, 3, 3)."""
    K = _hat(axis)
    a = np.asarray(angle)[..., None, None]
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * (K @ K)


def _quat_to_mat(q):
    q = np.asarray(q, float) / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def _mat_to_quat(R):
    q = np.empty(R.shape[:-2] + (4,))
    for idx in np.ndindex(R.shape[:-2]):
        q[idx] = 0
        mujoco.mju_mat2Quat(q[idx], np.ascontiguousarray(R[idx]).ravel())
    return q


@dataclass(frozen=True)
class FreeBodyInertia:
    """A free body's inertia as MuJoCo compiled it: mass, COM (body frame), principal moments and axes."""

    mass: float
    com: np.ndarray       # (3,) body frame
    moments: np.ndarray   # (3,)
    axes: np.ndarray      # (3, 3) body <- principal (columns are the principal axes)
    gravity: np.ndarray   # (3,)

    @classmethod
    def from_model(cls, model: mujoco.MjModel, body: int | str = 1) -> FreeBodyInertia:
        b = body if isinstance(body, int) else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
        g = np.zeros(3) if model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY) else \
            np.array(model.opt.gravity)
        return cls(float(model.body_mass[b]), np.array(model.body_ipos[b]), np.array(model.body_inertia[b]),
                   _quat_to_mat(model.body_iquat[b]), g)


def _com_kinematics(I: FreeBodyInertia, x):
    p, q, v, w = x[:3], x[3:7], x[7:10], x[10:13]
    R = _quat_to_mat(q)
    return p + R @ I.com, v + R @ np.cross(w, I.com), R


def _assemble(I: FreeBodyInertia, pc, vc, Rp, wp):
    """Free-joint states (T, 13) from COM position/velocity, principal-frame attitude and angular velocity."""
    Rb = Rp @ I.axes.T
    wb = wp @ I.axes.T
    p = pc - Rb @ I.com
    v = vc - np.einsum("tij,tj->ti", Rb, np.cross(wb, I.com))
    return np.concatenate([p, _mat_to_quat(Rb), v, wb], -1)


def _symmetry_axis(moments, rtol=1e-9) -> tuple[int, float, float]:
    """(s, I_perp, I_s): the symmetry axis of an axisymmetric (or isotropic) inertia."""
    d = np.asarray(moments)
    scale = np.max(d)
    for s in (2, 0, 1):
        i, j = [k for k in range(3) if k != s]
        if abs(d[i] - d[j]) <= rtol * scale:
            return s, float(d[i]), float(d[s])
    raise CaseError(f"principal moments {d.tolist()} are not axisymmetric (two equal)")


def rigid_symmetric(I: FreeBodyInertia, x0, t):
    """Exact free-body motion for an axisymmetric (or isotropic) body under uniform gravity, no torque.

    COM: p_c0 + v_c0 t + g t^2 / 2. Attitude (principal frame): R(t) = exp(Ω t [L̂]) R0 exp(-λ t [e_s]),
    Ω = |L| / I_perp, λ = (I_s - I_perp) / I_perp ω_s; body rate ω(t) = exp(λ t [e_s]) ω0.
    Returns (T, 13) free-joint states [pos, quat, vel (world), angvel (body)].
    """
    t = np.asarray(t, float)
    x0 = np.asarray(x0, float)
    pc0, vc0, Rb0 = _com_kinematics(I, x0)
    s, Ip, Is = _symmetry_axis(I.moments)
    Rp0 = Rb0 @ I.axes
    w0 = I.axes.T @ x0[10:13]
    e = np.eye(3)[s]
    J = np.diag(I.moments)
    Lw = Rp0 @ (J @ w0)
    lam = (Is - Ip) / Ip * w0[s]
    nL = np.linalg.norm(Lw)
    A = _rot(Lw / nL, nL / Ip * t) if nL > 0 else np.broadcast_to(np.eye(3), (len(t), 3, 3))
    Rp = A @ Rp0 @ _rot(e, -lam * t)
    wp = np.einsum("tij,j->ti", _rot(e, lam * t), w0)
    pc = pc0 + vc0 * t[:, None] + 0.5 * I.gravity * t[:, None] ** 2
    vc = vc0 + I.gravity * t[:, None]
    return _assemble(I, pc, vc, Rp, wp)


def symmetric_torque_omega(I: FreeBodyInertia, w0_body, torque_body, t):
    """Body angular velocity (T, 3) of an axisymmetric body under a constant body-frame torque along
    its symmetry axis: ω_s = ω_s0 + τ t / I_s, the transverse part turns by
    φ(t) = (I_s - I_perp) / I_perp (ω_s0 t + τ t^2 / (2 I_s))."""
    s, Ip, Is = _symmetry_axis(I.moments)
    w0 = I.axes.T @ np.asarray(w0_body, float)
    tau = I.axes.T @ np.asarray(torque_body, float)
    off = np.delete(tau, s)
    if np.max(np.abs(off)) > 1e-12 * max(1.0, np.max(np.abs(tau))):
        raise CaseError(f"the torque {list(torque_body)} (body frame) is not along the symmetry axis")
    t = np.asarray(t, float)
    e = np.eye(3)[s]
    phi = (Is - Ip) / Ip * (w0[s] * t + tau[s] * t ** 2 / (2 * Is))
    perp = w0 - w0[s] * e
    wp = np.einsum("tij,j->ti", _rot(e, phi), perp) + np.outer(w0[s] + tau[s] * t / Is, e)
    return wp @ I.axes.T


def _sorted_frame(I: FreeBodyInertia):
    """(moments ascending, E body <- sorted principal, right-handed)."""
    idx = np.argsort(I.moments)
    E = I.axes[:, idx].copy()
    if np.linalg.det(E) < 0:
        E[:, 0] *= -1
    return I.moments[idx], E


def _ellipf(phi, m):
    """Incomplete elliptic integral F(phi | m) for any real phi (quasi-periodic continuation)."""
    from scipy.special import ellipk, ellipkinc

    n = np.round(phi / np.pi)
    return 2 * n * ellipk(m) + ellipkinc(phi - n * np.pi, m)


def _jacobi_params(Id, w):
    """Parameters of the Jacobi solution for sorted moments Id (I1 < I2 < I3) and rate w (sorted frame)."""
    I1, I2, I3 = Id
    if not (I1 < I2 < I3):
        raise CaseError(f"the Jacobi solution needs three distinct principal moments, got {Id.tolist()}")
    E2 = float(w @ (Id * w))
    M2 = float(np.sum((Id * w) ** 2))
    if M2 >= E2 * I2:   # rotation about the major axis side: ω3 never vanishes (dn)
        A = np.sqrt([(E2 * I3 - M2) / (I1 * (I3 - I1)), (E2 * I3 - M2) / (I2 * (I3 - I2)),
                     (M2 - E2 * I1) / (I3 * (I3 - I1))])
        Om = math.sqrt((I3 - I2) * (M2 - E2 * I1) / (I1 * I2 * I3))
        m = (I2 - I1) * (E2 * I3 - M2) / ((I3 - I2) * (M2 - E2 * I1))
        if not 0 <= m < 1 - 1e-9:
            raise CaseError(f"rate {w.tolist()} lies on (or within 1e-9 of) the separatrix (m = {m}); the Jacobi "
                            "solution is ill-conditioned there")
        sgn = 1.0 if w[2] >= 0 else -1.0
        cn0, sn0 = w[0] / (sgn * A[0]), w[1] / A[1]
        return "major", A, Om, m, sgn, math.atan2(sn0, cn0)
    A = np.sqrt([(E2 * I3 - M2) / (I1 * (I3 - I1)), (M2 - E2 * I1) / (I2 * (I2 - I1)),
                 (M2 - E2 * I1) / (I3 * (I3 - I1))])
    Om = math.sqrt((I2 - I1) * (E2 * I3 - M2) / (I1 * I2 * I3))
    m = (I3 - I2) * (M2 - E2 * I1) / ((I2 - I1) * (E2 * I3 - M2))
    if not 0 <= m < 1 - 1e-9:
        raise CaseError(f"rate {w.tolist()} lies on (or within 1e-9 of) the separatrix (m = {m}); the Jacobi "
                        "solution is ill-conditioned there")
    sgn = 1.0 if w[0] >= 0 else -1.0
    cn0, sn0 = w[2] / (sgn * A[2]), w[1] / A[1]
    return "minor", A, Om, m, sgn, math.atan2(sn0, cn0)


def euler_jacobi(I: FreeBodyInertia, w0_body, t):
    """Body angular velocity (T, 3) of a torque-free asymmetric body: Jacobi elliptic functions
    (Landau & Lifshitz §37; both regimes M^2 > 2 E I2 and M^2 < 2 E I2; phase from the initial rate)."""
    from scipy.special import ellipj

    Id, E = _sorted_frame(I)
    w = E.T @ np.asarray(w0_body, float)
    regime, A, Om, m, sgn, phi0 = _jacobi_params(Id, w)
    tau = Om * np.asarray(t, float) + _ellipf(phi0, m)
    sn, cn, dn, _ = ellipj(tau, m)
    if regime == "major":
        ws = np.stack([sgn * A[0] * cn, A[1] * sn, sgn * A[2] * dn], -1)
    else:
        ws = np.stack([sgn * A[0] * dn, A[1] * sn, sgn * A[2] * cn], -1)
    return ws @ E.T


def jacobi_flip_times(I: FreeBodyInertia, w0_body, t_end):
    """Times in (0, t_end] at which the intermediate-axis rate changes sign (ω2 = A2 sn(Ωt + τ0) = 0)."""
    from scipy.special import ellipk

    Id, E = _sorted_frame(I)
    w = E.T @ np.asarray(w0_body, float)
    _, _, Om, m, _, phi0 = _jacobi_params(Id, w)
    K = ellipk(m)
    tau0 = _ellipf(phi0, m)
    j = np.arange(math.floor(tau0 / (2 * K)) + 1, math.floor((Om * t_end + tau0) / (2 * K)) + 1)
    return (2 * j * K - tau0) / Om


def ou_moments(theta, sigma, v0, x0, t):
    """Mean and variance of dv = -θ v dt + σ dW, dx = v dt from (x0, v0): (mean_v, var_v, mean_x, var_x)."""
    t = np.asarray(t, float)
    e1, e2 = np.exp(-theta * t), np.exp(-2 * theta * t)
    mean_v = v0 * e1
    var_v = sigma ** 2 / (2 * theta) * (1 - e2)
    mean_x = x0 + v0 * (1 - e1) / theta
    var_x = sigma ** 2 / theta ** 2 * (t - 2 * (1 - e1) / theta + (1 - e2) / (2 * theta))
    return mean_v, var_v, mean_x, var_x


# ==================================================================================================
# cases: files, scenes, runs

def list_cases(cases_dir: str | None = None) -> list[str]:
    d = cases_dir or CASES_DIR
    if not os.path.isdir(d):
        raise CaseError(f"no case directory {d!r} (set MJHARNESS_CASES_DIR or give --cases-dir)")
    names = [f[:-5] for f in os.listdir(d) if f.endswith(".json")]
    return sorted(names, key=lambda n: (load_case(n, d).get("order", 99), n))


_REQUIRED = ("name", "feature", "scene", "check", "integrator", "dt", "duration", "tolerance", "expected")


def load_case(name: str, cases_dir: str | None = None) -> dict:
    d = cases_dir or CASES_DIR
    path = name if name.endswith(".json") else os.path.join(d, f"{name}.json")
    if not os.path.isfile(path):
        known = ", ".join(n[:-5] for n in sorted(os.listdir(d)) if n.endswith(".json")) if os.path.isdir(d) else ""
        raise CaseError(f"no case {name!r} (looked for {path}); known: {known}")
    with open(path) as fh:
        try:
            case = json.load(fh)
        except ValueError as e:
            raise CaseError(f"{path}: not valid JSON ({e})") from None
    missing = [k for k in _REQUIRED if k not in case]
    if missing:
        raise CaseError(f"{path}: missing keys {missing}")
    if case["check"] not in _CHECKS:
        raise CaseError(f"{path}: unknown check {case['check']!r}; known: {sorted(_CHECKS)}")
    return case


_SCENES: dict = {}


def _scene(case):
    from mjharness.adapters import MjScene
    from mjharness.scenes import load_scene

    src = case["scene"] if isinstance(case["scene"], str) else case["scene"]["xml"]
    noise = tuple((n["joint"], float(n["sigma"])) for n in case.get("noise", ()))
    key = (src, case.get("quaternion_update", "quaternion"), noise)
    if key not in _SCENES:
        sc = MjScene(load_scene(src), quaternion_update=key[1])
        for joint, sigma in noise:
            sc.add_joint_noise(joint, sigma)
        _SCENES[key] = sc
    return _SCENES[key]


def _initial_states(case, scene) -> np.ndarray:
    worlds = case.get("worlds")
    if worlds is None:
        key = case.get("keyframe")
        base = scene.reset(keyframe=key) if key is not None else scene.x0()
        worlds_x = [base]
    else:
        worlds_x = []
        for w in worlds:
            x = scene.reset(keyframe=case.get("keyframe")) if case.get("keyframe") is not None else scene.x0()
            if "qpos" in w:
                x[scene.qpos_segment] = w["qpos"]
            if "qvel" in w:
                x[scene.qvel_segment] = w["qvel"]
            worlds_x.append(x)
    x0 = np.stack(worlds_x)
    for r in scene.layout.special:  # authored quaternions normalised, as MuJoCo does on load
        x0[:, r.value_slice] /= np.linalg.norm(x0[:, r.value_slice], axis=1, keepdims=True)
    B = int(case.get("batch", 1))
    if B > 1 and len(x0) == 1:
        x0 = np.repeat(x0, B, axis=0)
    return x0


def _padded_tableau(name):
    """(a, b, c) of an explicit RK method padded to 4 stages (zero weights: the same method)."""
    from mjharness.integrators import tableaux as tb

    t = tb.TABLEAUX[name]
    s = len(t.b)
    a = np.zeros((4, 4))
    a[:s, :s] = np.array(t.a)
    b = np.zeros(4)
    b[:s] = t.b
    c = np.zeros(4)
    c[:s] = t.c
    return jnp.asarray(a), jnp.asarray(b), jnp.asarray(c)


_RUNNERS: dict = {}


def _runner(scene, integ, kind: str, samples: int, R: int, has_ctrl: bool):
    """Compiled (B worlds) x (samples of R steps) trajectory function, cached per configuration."""
    key = (id(scene), integ, kind, samples, R, has_ctrl)
    if key in _RUNNERS:
        return _RUNNERS[key]
    from mjharness.integrators.prng import step_key
    from mjharness.integrators.rk import rk_step

    def world(x0, u, wid, dt, seed, tab):
        u = u if has_ctrl else None

        def one(k, x):
            t = k * dt
            if kind == "family":
                return rk_step(scene, tab, t, x, dt, u)
            if kind == "stochastic":
                return integ.step(scene, t, x, dt, step_key(seed, wid, k), ctrl=u)
            return integ.step(scene, t, x, dt, ctrl=u)

        def outer(x, j):
            x = jax.lax.fori_loop(0, R, lambda i, y: one(j * R + i, y), x)
            return x, x

        return jax.lax.scan(outer, x0, jnp.arange(samples, dtype=jnp.int64))[1]

    fn = jax.jit(jax.vmap(world, in_axes=(0, 0, 0, None, None, None)))
    _RUNNERS[key] = fn
    _SCENE_REFS.append(scene)  # keep the scene alive while its runner is cached (id reuse)
    return fn


_SCENE_REFS: list = []


def _simulate(case, method: str, duration: float | None = None, shared: bool = False):
    """(scene, time (T,), xs (T, B, n), x0 (B, n), seconds) of the case with ``method``."""
    from mjharness.integrators import get_integrator
    from mjharness.integrators.tableaux import TABLEAUX

    scene = _scene(case)
    x0 = _initial_states(case, scene)
    dt = float(case["dt"])
    R = int(case.get("record_every", 1))
    dur = float(duration if duration is not None else case["duration"])
    steps = int(round(dur / dt))
    samples = steps // R
    if samples < 1:
        raise CaseError(f"case {case['name']!r}: duration {dur} is shorter than one sample ({R} x {dt})")
    B = x0.shape[0]
    ctrl = case.get("ctrl")
    has_ctrl = ctrl is not None
    u = np.broadcast_to(np.asarray(ctrl if has_ctrl else [0.0], float), (B, len(ctrl) if has_ctrl else 1))
    # Explicit RK methods other than the case's own share one compiled program per scene (tableau as
    # arrays padded to 4 stages with zero weights: the same method, one compile instead of five).
    family = method in TABLEAUX and (shared or method != case["integrator"].lower())
    integ = get_integrator(method)
    kind = "family" if family else ("stochastic" if getattr(integ, "is_stochastic", False) else "fixed")
    tab = _padded_tableau(method) if family else (jnp.zeros((4, 4)), jnp.zeros(4), jnp.zeros(4))
    fn = _runner(scene, None if family else integ, kind, samples, R, has_ctrl)
    t = _time.perf_counter()
    xs = fn(jnp.asarray(x0), jnp.asarray(u), jnp.arange(B, dtype=jnp.int64), jnp.float64(dt),
            jnp.int64(int(case.get("seed", 0))), tab)
    xs = np.asarray(jnp.swapaxes(xs, 0, 1))
    secs = _time.perf_counter() - t
    time = (np.arange(samples) + 1) * R * dt
    return scene, time, xs, x0, secs


# -- the checks: (case, scene, time, xs, x0) -> ({metric: error}, details) -------------------------------

def _free_body(scene):
    m = scene.model
    if m.njnt < 1 or m.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE:
        raise CaseError("this check needs a free body as the scene's first joint")
    return FreeBodyInertia.from_model(m, int(m.jnt_bodyid[0]))


def _quat_err(a, b):
    return np.minimum(np.max(np.abs(a - b), -1), np.max(np.abs(a + b), -1))


def _check_rigid_symmetric(case, scene, time, xs, x0):
    I = _free_body(scene)
    errs = dict(pos=0.0, quat=0.0, vel=0.0, angvel=0.0)
    for b in range(xs.shape[1]):
        ref = rigid_symmetric(I, x0[b, :13], time)
        x = xs[:, b, :13]
        errs["pos"] = max(errs["pos"], float(np.max(np.abs(x[:, :3] - ref[:, :3]))))
        errs["quat"] = max(errs["quat"], float(np.max(_quat_err(x[:, 3:7], ref[:, 3:7]))))
        errs["vel"] = max(errs["vel"], float(np.max(np.abs(x[:, 7:10] - ref[:, 7:10]))))
        errs["angvel"] = max(errs["angvel"], float(np.max(np.abs(x[:, 10:13] - ref[:, 10:13]))))
    return errs, {}


def _world_angmom(I: FreeBodyInertia, x):
    R = _quat_to_mat(x[..., 3:7])
    Ib = I.axes @ np.diag(I.moments) @ I.axes.T
    return np.einsum("...ij,...j->...i", R, x[..., 10:13] @ Ib.T)


def _check_euler_jacobi(case, scene, time, xs, x0):
    I = _free_body(scene)
    ew = eL = 0.0
    for b in range(xs.shape[1]):
        ref = euler_jacobi(I, x0[b, 10:13], time)
        ew = max(ew, float(np.max(np.abs(xs[:, b, 10:13] - ref))))
        L0 = _world_angmom(I, x0[b])
        eL = max(eL, float(np.max(np.abs(_world_angmom(I, xs[:, b]) - L0))))
    return dict(angvel=ew, world_angmom=eL), {}


def _zero_crossings(t, y):
    s = np.flatnonzero(np.sign(y[1:]) != np.sign(y[:-1]))
    return t[s] - y[s] * (t[s + 1] - t[s]) / (y[s + 1] - y[s])


def _check_flip_timing(case, scene, time, xs, x0):
    I = _free_body(scene)
    _, E = _sorted_frame(I)
    worst, details = 0.0, []
    t_full = np.concatenate([[0.0], time])
    for b in range(xs.shape[1]):
        ref = jacobi_flip_times(I, x0[b, 10:13], time[-1])
        w2 = np.concatenate([[x0[b, 10:13] @ E[:, 1]], xs[:, b, 10:13] @ E[:, 1]])
        got = _zero_crossings(t_full, w2)
        if len(ref) == 0:
            raise CaseError(f"case {case['name']!r}: no flip within the horizon; lengthen the duration")
        if len(got) != len(ref):
            err = math.inf
        else:
            err = float(np.max(np.abs(got - ref)))
        worst = max(worst, err)
        details.append(dict(world=b, analytic=ref.tolist(), simulated=got.tolist()))
    return dict(flip_time=worst), dict(flips=details)


def _check_body_torque(case, scene, time, xs, x0):
    I = _free_body(scene)
    m = scene.model
    # The actuator's generalized force on the free joint's rotational dofs is the body-frame torque.
    gear = np.zeros(6)
    for a in range(m.nu):
        gear += np.array(m.actuator_gear[a]) * float(case["ctrl"][a])
    tau = gear[3:6]
    e = 0.0
    for b in range(xs.shape[1]):
        ref = symmetric_torque_omega(I, x0[b, 10:13], tau, time)
        e = max(e, float(np.max(np.abs(xs[:, b, 10:13] - ref))))
    return dict(angvel=e), {}


def _check_energy(case, scene, time, xs, x0):
    from .crosscheck import recorded_invariants

    e, _ = recorded_invariants(scene.model, x0, xs, time)
    return dict(energy_drift=e["max_abs_drift"]), dict(initial_energy=e["initial"], rel_drift=e["rel_drift"])


def _joint_angle_y(q):
    """Rotation angle about the y axis of quaternions q (..., 4) that rotate about y."""
    return 2 * np.arctan2(q[..., 2], q[..., 0])


def _check_ball_vs_hinge(case, scene, time, xs, x0):
    from mjharness.scenes import load_scene

    from .crosscheck import mujoco_peer_trajectory

    m = scene.model
    hinge = load_scene(case["params"]["hinge_xml"])
    nb = m.njnt
    ang0 = np.stack([_joint_angle_y(x0[:, 4 * j:4 * j + 4]) for j in range(nb)], -1)
    rate0 = x0[:, m.nq + 1:m.nq + m.nv:3]
    xh0 = np.concatenate([ang0, rate0], -1)
    dt = float(case["dt"])
    R = int(case.get("record_every", 1))
    ref = mujoco_peer_trajectory(hinge, xh0, len(time), R, dt, "RK4")
    q = xs[..., :m.nq].reshape(xs.shape[:2] + (nb, 4))
    w = xs[..., m.nq:m.nq + m.nv].reshape(xs.shape[:2] + (nb, 3))
    ang = _joint_angle_y(q)
    d_ang = np.abs(np.angle(np.exp(1j * (ang - ref[..., :nb]))))
    return dict(angle=float(np.max(d_ang)), rate=float(np.max(np.abs(w[..., 1] - ref[..., nb:2 * nb]))),
                off_plane=float(max(np.max(np.abs(q[..., [1, 3]])), np.max(np.abs(w[..., [0, 2]]))))), {}


def _check_ou(case, scene, time, xs, x0):
    p = case["params"]
    m = scene.model
    theta = float(m.dof_damping[0]) / float(m.body_mass[int(m.jnt_bodyid[0])])
    sigma = float(case["noise"][0]["sigma"]) / float(m.body_mass[int(m.jnt_bodyid[0])])
    v, x = xs[..., m.nq], xs[..., 0]
    mv, vv, mx, vx = ou_moments(theta, sigma, float(x0[0, m.nq]), float(x0[0, 0]), time)
    N = xs.shape[1]
    ddof = 1
    errs = dict(mean_v=float(np.max(np.abs(v.mean(1) - mv))), var_v=float(np.max(np.abs(v.var(1, ddof=ddof) - vv))),
                var_x=float(np.max(np.abs(x.var(1, ddof=ddof) - vx))))
    # One standard error of each estimate at the time of its largest variance (for the tolerance's scale).
    se = dict(mean_v=float(np.sqrt(vv.max() / N)), var_v=float(vv.max() * np.sqrt(2 / (N - 1))),
              var_x=float(vx.max() * np.sqrt(2 / (N - 1))))
    return errs, dict(theta=theta, sigma=sigma, worlds=N, standard_error=se, tolerance_in_se=p.get("tolerance_in_se"))


_CHECKS = {
    "rigid_symmetric": _check_rigid_symmetric,
    "euler_jacobi": _check_euler_jacobi,
    "flip_timing": _check_flip_timing,
    "body_torque": _check_body_torque,
    "energy": _check_energy,
    "ball_vs_hinge": _check_ball_vs_hinge,
    "ou_moments": _check_ou,
}


@dataclass
class CaseResult:
    case: str
    integrator: str
    dt: float
    duration: float
    metrics: dict
    tolerance: dict
    expected: dict | None
    details: dict = field(default_factory=dict)
    seconds: float = 0.0
    gated: bool = True      # the case's documented integrator (pass/fail) or a documented extra method

    @property
    def passed(self) -> bool:
        return all(math.isfinite(v) and v <= self.tolerance[k] for k, v in self.metrics.items())

    def to_dict(self) -> dict:
        return dict(case=self.case, integrator=self.integrator, dt=self.dt, duration=self.duration,
                    metrics=self.metrics, tolerance=self.tolerance, expected=self.expected, passed=self.passed,
                    gated=self.gated, details=self.details, seconds=self.seconds)


def run_case(case, method: str | None = None, duration: float | None = None, shared: bool = False) -> CaseResult:
    """Run ``case`` (a name or a loaded dict) with ``method`` (default: its documented integrator)."""
    if isinstance(case, str):
        case = load_case(case)
    method = (method or case["integrator"]).lower()
    try:
        import scipy  # noqa: F401
    except ImportError:  # pragma: no cover - scipy is a dependency of the suite
        raise CaseError(f"case {case['name']!r} needs scipy (elliptic functions, splines): pip install scipy") \
            from None
    scene, time, xs, x0, secs = _simulate(case, method, duration, shared)
    metrics, details = _CHECKS[case["check"]](case, scene, time, xs, x0)
    tol = case["tolerance"]
    tolerance = {k: float(tol[k]) for k in metrics}
    exp = case["expected"].get(method)
    if method != case["integrator"].lower():
        # Other methods are documented, not gated: their committed error is their tolerance (x10).
        tolerance = {k: 10 * float(exp[k]) if exp and k in exp else math.inf for k in metrics}
    return CaseResult(case=case["name"], integrator=method, dt=float(case["dt"]),
                      duration=float(duration if duration is not None else case["duration"]), metrics=metrics,
                      tolerance=tolerance, expected=exp, details=details, seconds=secs,
                      gated=method == case["integrator"].lower())


def _methods_for(case, all_integrators: bool) -> list[str]:
    if not all_integrators:
        return [case["integrator"].lower()]
    pool = STOCHASTIC_METHODS if case["integrator"].lower() in STOCHASTIC_METHODS else FIXED_METHODS
    return list(pool)


def run_suite(names=None, all_integrators: bool = False, duration: float | None = None, progress=None,
              cases_dir: str | None = None) -> list[CaseResult]:
    names = names or list_cases(cases_dir)
    out = []
    for n in names:
        case = load_case(n, cases_dir)
        for meth in _methods_for(case, all_integrators):
            r = run_case(case, meth, duration, shared=all_integrators)
            out.append(r)
            if progress:
                progress(r)
    return out


def format_table(results) -> str:
    lines = [f"{'case':26s} {'metric':13s} {'integrator':20s} {'dt':>7s} {'max error':>10s} {'tolerance':>10s}  result"]
    for r in results:
        for i, (k, v) in enumerate(r.metrics.items()):
            res = ("pass" if v <= r.tolerance[k] else "FAIL") if r.gated else \
                ("(doc)" if v <= r.tolerance[k] else "(doc, worse)")
            lines.append(f"{r.case if i == 0 else '':26s} {k:13s} {r.integrator:20s} {r.dt:7.0e} {v:10.2e} "
                         f"{r.tolerance[k]:10.1e}  {res}")
    return "\n".join(lines)


# -- CLI ----------------------------------------------------------------------------------------------

def add_parser(sub):
    """``mjharness cases``: the check-case suite (CLI registry protocol)."""
    p = sub.add_parser("cases", help="run the check-case suite (analytic references) and print a table",
                       description="Run the check cases of data/cases with their documented integrator and step; "
                                   "print case, metric, integrator, max error, tolerance, pass/fail; exit 1 "
                                   "when a case fails.")
    p.add_argument("names", nargs="*", help="cases to run (default all; see --list)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--all-integrators", action="store_true",
                   help="also run the other fixed (or stochastic) methods, documented but not gated")
    p.add_argument("--duration", type=float, help="override every case's horizon [s] (shorter: quicker)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--cases-dir", help=f"directory of case files (default {CASES_DIR})")
    p.set_defaults(func=main_cases)


def main_cases(args) -> int:
    try:
        names = args.names or list_cases(args.cases_dir)
        if args.list:
            for n in names:
                c = load_case(n, args.cases_dir)
                print(f"{n:26s} {c['integrator']:16s} dt={c['dt']:<8g} {c['duration']:>5g} s  {c['feature']}")
            return 0
        print(f"mjharness cases: {len(names)} case(s)" + (" x all methods" if args.all_integrators else ""),
              file=sys.stderr)
        def progress(r):
            print(f"  {r.case} / {r.integrator}: {r.seconds:.1f} s", file=sys.stderr)

        results = run_suite(names, args.all_integrators, args.duration, cases_dir=args.cases_dir, progress=progress)
    except CaseError as e:
        print(f"mjharness cases: error: {e}", file=sys.stderr)
        return 2
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.to_dict() for r in results], fh, indent=1, default=float)
    failed = [r for r in results if r.gated and not r.passed]
    print(f"{len([r for r in results if r.gated]) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0

