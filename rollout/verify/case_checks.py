"""The checks of the check cases: a simulated case -> ({metric: max error}, details).

Each check takes (case, scene, time (T,), xs (T, B, n), x0 (B, n)) and compares the trajectory with
its independent answer: an analytic solution (``mjharness.adapters.analytic``), MuJoCo C's energy, or
MuJoCo C running an equivalent scene.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from mjharness.adapters import RigidBody
from mjharness.adapters.analytic import (
    euler_jacobi,
    jacobi_flip_times,
    ou_moments,
    principal_frame,
    rigid_symmetric,
    symmetric_torque_omega,
)
from mjharness.integrators.errors import UserError
from mjharness.scenes import load_scene

from .invariants import recorded_invariants
from .mujoco_peer import mujoco_peer_trajectory
from .recorded import abs_diff


class CaseError(UserError, ValueError):
    """A case file is missing or malformed, or a case cannot run (names the case)."""


def _free_body(case, scene) -> RigidBody:
    """The scene's first joint's body as MuJoCo compiled it: inertia and gravity of the analytic solutions."""
    m = scene.model
    if m.njnt < 1 or m.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE:
        raise CaseError(f"case {case['name']!r}: the check {case['check']!r} needs a free body as the scene's "
                        "first joint")
    return RigidBody.from_mujoco(m, int(m.jnt_bodyid[0]))


def _check_rigid_symmetric(case, scene, time, xs, x0):
    body = _free_body(case, scene)
    parts = dict(pos=(slice(0, 3), False), quat=(slice(3, 7), True), vel=(slice(7, 10), False),
                 angvel=(slice(10, 13), False))
    errs = dict.fromkeys(parts, 0.0)
    for b in range(xs.shape[1]):
        ref = rigid_symmetric(body.inertia, x0[b, :13], time, gravity=body.gravity)
        for k, (sl, sign_free) in parts.items():
            errs[k] = max(errs[k], float(np.max(abs_diff(xs[:, b, sl], ref[:, sl], sign_free))))
    return errs, {}


def _spin_angmom(body: RigidBody, x):
    """World-axes angular momentum about the centre of mass of free-body states x (..., 13)."""
    return np.asarray(body.angular_momentum(x[..., :13], about=body.com_position(x[..., :13])))


def _check_euler_jacobi(case, scene, time, xs, x0):
    body = _free_body(case, scene)
    ew = eL = 0.0
    for b in range(xs.shape[1]):
        ref = euler_jacobi(body.inertia, x0[b, 10:13], time)
        ew = max(ew, float(np.max(np.abs(xs[:, b, 10:13] - ref))))
        eL = max(eL, float(np.max(np.abs(_spin_angmom(body, xs[:, b]) - _spin_angmom(body, x0[b])))))
    return dict(angvel=ew, world_angmom=eL), {}


def _zero_crossings(t, y):
    s = np.flatnonzero(np.sign(y[1:]) != np.sign(y[:-1]))
    return t[s] - y[s] * (t[s + 1] - t[s]) / (y[s + 1] - y[s])


def _check_flip_timing(case, scene, time, xs, x0):
    body = _free_body(case, scene)
    _, E = principal_frame(body.inertia)
    worst, details = 0.0, []
    t_full = np.concatenate([[0.0], time])
    for b in range(xs.shape[1]):
        ref = jacobi_flip_times(body.inertia, x0[b, 10:13], time[-1])
        if len(ref) == 0:
            raise CaseError(f"case {case['name']!r}: no flip within the horizon; lengthen the duration")
        w2 = np.concatenate([[x0[b, 10:13] @ E[:, 1]], xs[:, b, 10:13] @ E[:, 1]])
        got = _zero_crossings(t_full, w2)
        err = float(np.max(np.abs(got - ref))) if len(got) == len(ref) else math.inf
        worst = max(worst, err)
        details.append(dict(world=b, analytic=ref.tolist(), simulated=got.tolist()))
    return dict(flip_time=worst), dict(flips=details)


def _check_body_torque(case, scene, time, xs, x0):
    body = _free_body(case, scene)
    m = scene.model
    # The actuator's generalized force on the free joint's rotational dofs is the body-frame torque.
    gear = sum((np.array(m.actuator_gear[a]) * float(case["ctrl"][a]) for a in range(m.nu)), np.zeros(6))
    e = 0.0
    for b in range(xs.shape[1]):
        ref = symmetric_torque_omega(body.inertia, x0[b, 10:13], gear[3:6], time)
        e = max(e, float(np.max(np.abs(xs[:, b, 10:13] - ref))))
    return dict(angvel=e), {}


def _check_energy(case, scene, time, xs, x0):
    e, _ = recorded_invariants(scene.model, x0, xs, time)
    return dict(energy_drift=e["max_abs_drift"]), dict(initial_energy=e["initial"], rel_drift=e["rel_drift"])


def _joint_angle_y(q):
    """Rotation angle about the y axis of quaternions q (..., 4) that rotate about y."""
    return 2 * np.arctan2(q[..., 2], q[..., 0])


def _check_ball_vs_hinge(case, scene, time, xs, x0):
    """A chain of ball joints moving in a plane against MuJoCo C running the same chain of hinges."""
    m = scene.model
    hinge = load_scene(case["params"]["hinge_xml"])
    nb = m.njnt
    ang0 = np.stack([_joint_angle_y(x0[:, 4 * j:4 * j + 4]) for j in range(nb)], -1)
    rate0 = x0[:, m.nq + 1:m.nq + m.nv:3]
    R = int(case.get("record_every", 1))
    ref = mujoco_peer_trajectory(hinge, np.concatenate([ang0, rate0], -1), len(time), R, float(case["dt"]), "RK4")
    q = xs[..., :m.nq].reshape(xs.shape[:2] + (nb, 4))
    w = xs[..., m.nq:m.nq + m.nv].reshape(xs.shape[:2] + (nb, 3))
    d_ang = np.abs(np.angle(np.exp(1j * (_joint_angle_y(q) - ref[..., :nb]))))
    return dict(angle=float(np.max(d_ang)), rate=float(np.max(np.abs(w[..., 1] - ref[..., nb:2 * nb]))),
                off_plane=float(max(np.max(np.abs(q[..., [1, 3]])), np.max(np.abs(w[..., [0, 2]]))))), {}


def _check_ou(case, scene, time, xs, x0):
    m = scene.model
    mass = float(m.body_mass[int(m.jnt_bodyid[0])])
    theta = float(m.dof_damping[0]) / mass
    sigma = float(case["noise"][0]["sigma"]) / mass
    v, x = xs[..., m.nq], xs[..., 0]
    mv, vv, _, vx = ou_moments(theta, sigma, float(x0[0, m.nq]), float(x0[0, 0]), time)
    N = xs.shape[1]
    errs = dict(mean_v=float(np.max(np.abs(v.mean(1) - mv))), var_v=float(np.max(np.abs(v.var(1, ddof=1) - vv))),
                var_x=float(np.max(np.abs(x.var(1, ddof=1) - vx))))
    # One standard error of each estimate at the time of its largest variance (for the tolerance's scale).
    se = dict(mean_v=float(np.sqrt(vv.max() / N)), var_v=float(vv.max() * np.sqrt(2 / (N - 1))),
              var_x=float(vx.max() * np.sqrt(2 / (N - 1))))
    return errs, dict(theta=theta, sigma=sigma, worlds=N, standard_error=se,
                      tolerance_in_se=case["params"].get("tolerance_in_se"))


CHECKS = {
    "rigid_symmetric": _check_rigid_symmetric,
    "euler_jacobi": _check_euler_jacobi,
    "flip_timing": _check_flip_timing,
    "body_torque": _check_body_torque,
    "energy": _check_energy,
    "ball_vs_hinge": _check_ball_vs_hinge,
    "ou_moments": _check_ou,
}
