"""Analytic solutions of rigid-body and stochastic motion, the independent answers of the check cases.

numpy and scipy (Jacobi elliptic functions); no MuJoCo and no integrator inside. Conventions are the
reference model's (``reference``): ``inertia`` is a ``SpatialInertia`` (or, where only rotation
matters, an inertia tensor about the centre of mass in body axes: (3,) diagonal, (6,) or (3, 3)); a
free-body state is MuJoCo's free joint ``[pos (3), quat (4), vel (3, world, body origin), angvel (3,
body)]``; angular velocities in and out are in body axes; ``t`` is an array of times from 0.

- ``rigid_symmetric``: torque-free axisymmetric (or isotropic) body under uniform gravity, any COM;
- ``symmetric_torque_omega``: axisymmetric body under a constant torque along its symmetry axis;
- ``euler_jacobi``, ``jacobi_flip_times``: torque-free asymmetric body (Landau & Lifshitz §37),
  and the times its intermediate-axis rate changes sign (Dzhanibekov flips);
- ``ou_moments``: mean and variance of an Ornstein–Uhlenbeck velocity and its integral.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ellipj, ellipk, ellipkinc

from mjharness.integrators.errors import UserError
from mjharness.integrators.rotations import mat_to_quat, quat_to_mat, rot

from .reference import SpatialInertia, _as_tensor, principal_axes

__all__ = ["AnalyticError", "principal_frame", "rigid_symmetric", "symmetric_torque_omega", "euler_jacobi",
           "jacobi_flip_times", "ou_moments"]


class AnalyticError(UserError, ValueError):
    """The analytic solution does not apply to the given body or initial state (says why)."""


def principal_frame(inertia) -> tuple[np.ndarray, np.ndarray]:
    """(moments ascending (3,), E (3, 3) body <- principal, right-handed) of an inertia about the COM."""
    tensor = inertia.inertia if isinstance(inertia, SpatialInertia) else _as_tensor(inertia)
    moments, E = principal_axes(tensor)
    return np.asarray(moments), np.asarray(E)


def _symmetry_axis(moments, rtol=1e-9) -> tuple[int, float, float]:
    """(s, I_perp, I_s): the symmetry axis of an axisymmetric (or isotropic) inertia."""
    d = np.asarray(moments)
    scale = np.max(d)
    for s in (2, 0, 1):
        i, j = [k for k in range(3) if k != s]
        if abs(d[i] - d[j]) <= rtol * scale:
            return s, float(d[i]), float(d[s])
    raise AnalyticError(f"principal moments {d.tolist()} are not axisymmetric (two equal)")


def _rot_apply(axis, angles, v):
    """exp(angle [axis]) v for every angle: (T, 3)."""
    return np.einsum("tij,j->ti", np.asarray(rot(axis, angles)), v)


# -- axisymmetric bodies -----------------------------------------------------------------------------

def rigid_symmetric(inertia: SpatialInertia, x0, t, gravity=(0.0, 0.0, 0.0)):
    """Exact free-body motion of an axisymmetric (or isotropic) body under uniform gravity, no torque.

    COM: p_c0 + v_c0 t + g t^2 / 2. Attitude (principal frame): R(t) = exp(Ω t [L̂]) R0 exp(-λ t [e_s]),
    Ω = |L| / I_perp, λ = (I_s - I_perp) / I_perp ω_s; body rate ω(t) = exp(λ t [e_s]) ω0.
    Returns (T, 13) free-joint states [pos, quat, vel (world), angvel (body)].
    """
    t = np.asarray(t, float)
    x0 = np.asarray(x0, float)
    g = np.asarray(gravity, float)
    c = np.asarray(inertia.com)
    moments, E = principal_frame(inertia)
    s, Ip, Is = _symmetry_axis(moments)
    Rb0 = np.asarray(quat_to_mat(x0[3:7]))
    pc0, vc0 = x0[:3] + Rb0 @ c, x0[7:10] + Rb0 @ np.cross(x0[10:13], c)
    Rp0 = Rb0 @ E
    w0 = E.T @ x0[10:13]
    e = np.eye(3)[s]
    Lw = Rp0 @ (moments * w0)
    lam = (Is - Ip) / Ip * w0[s]
    nL = np.linalg.norm(Lw)
    A = np.asarray(rot(Lw / nL, nL / Ip * t)) if nL > 0 else np.broadcast_to(np.eye(3), (len(t), 3, 3))
    Rb = A @ Rp0 @ np.asarray(rot(e, -lam * t)) @ E.T
    wb = _rot_apply(e, lam * t, w0) @ E.T
    pc = pc0 + vc0 * t[:, None] + 0.5 * g * t[:, None] ** 2
    vc = vc0 + g * t[:, None]
    p = pc - Rb @ c
    v = vc - np.einsum("tij,tj->ti", Rb, np.cross(wb, c))
    return np.concatenate([p, np.asarray(mat_to_quat(Rb)), v, wb], -1)


def symmetric_torque_omega(inertia, w0_body, torque_body, t):
    """Body angular velocity (T, 3) of an axisymmetric body under a constant body-frame torque along
    its symmetry axis: ω_s = ω_s0 + τ t / I_s, the transverse part turns by
    φ(t) = (I_s - I_perp) / I_perp (ω_s0 t + τ t^2 / (2 I_s))."""
    moments, E = principal_frame(inertia)
    s, Ip, Is = _symmetry_axis(moments)
    w0 = E.T @ np.asarray(w0_body, float)
    tau = E.T @ np.asarray(torque_body, float)
    off = np.delete(tau, s)
    if np.max(np.abs(off)) > 1e-12 * max(1.0, np.max(np.abs(tau))):
        raise AnalyticError(f"the torque {list(torque_body)} (body frame) is not along the symmetry axis")
    t = np.asarray(t, float)
    e = np.eye(3)[s]
    phi = (Is - Ip) / Ip * (w0[s] * t + tau[s] * t ** 2 / (2 * Is))
    wp = _rot_apply(e, phi, w0 - w0[s] * e) + np.outer(w0[s] + tau[s] * t / Is, e)
    return wp @ E.T


# -- asymmetric bodies: Jacobi elliptic functions ----------------------------------------------------------

def _ellipf(phi, m):
    """Incomplete elliptic integral F(phi | m) for any real phi (quasi-periodic continuation)."""
    n = np.round(phi / np.pi)
    return 2 * n * ellipk(m) + ellipkinc(phi - n * np.pi, m)


def _jacobi_params(Id, w):
    """(regime, amplitudes A, rate Ω, parameter m, sign, phase φ0) of the Jacobi solution for sorted
    moments Id (I1 < I2 < I3) and the body rate w in that principal frame."""
    I1, I2, I3 = Id
    if not (I1 < I2 < I3):
        raise AnalyticError(f"the Jacobi solution needs three distinct principal moments, got {Id.tolist()}")
    E2 = float(w @ (Id * w))
    M2 = float(np.sum((Id * w) ** 2))
    # M^2 >= 2 E I2: rotation about the major axis side, ω3 never vanishes (dn); else about the minor axis.
    major = M2 >= E2 * I2
    A = np.sqrt([(E2 * I3 - M2) / (I1 * (I3 - I1)),
                 (E2 * I3 - M2) / (I2 * (I3 - I2)) if major else (M2 - E2 * I1) / (I2 * (I2 - I1)),
                 (M2 - E2 * I1) / (I3 * (I3 - I1))])
    if major:
        Om = math.sqrt((I3 - I2) * (M2 - E2 * I1) / (I1 * I2 * I3))
        m = (I2 - I1) * (E2 * I3 - M2) / ((I3 - I2) * (M2 - E2 * I1))
    else:
        Om = math.sqrt((I2 - I1) * (E2 * I3 - M2) / (I1 * I2 * I3))
        m = (I3 - I2) * (M2 - E2 * I1) / ((I2 - I1) * (E2 * I3 - M2))
    if not 0 <= m < 1 - 1e-9:
        raise AnalyticError(f"rate {w.tolist()} lies on (or within 1e-9 of) the separatrix (m = {m}); the Jacobi "
                            "solution is ill-conditioned there")
    keep = 2 if major else 0   # the component that keeps its sign (dn)
    cn_axis = 0 if major else 2
    sgn = 1.0 if w[keep] >= 0 else -1.0
    cn0, sn0 = w[cn_axis] / (sgn * A[cn_axis]), w[1] / A[1]
    return "major" if major else "minor", A, Om, m, sgn, math.atan2(sn0, cn0)


def euler_jacobi(inertia, w0_body, t):
    """Body angular velocity (t.shape + (3,)) of a torque-free asymmetric body: Jacobi elliptic functions
    (Landau & Lifshitz §37; both regimes M^2 > 2 E I2 and M^2 < 2 E I2; phase from the initial rate)."""
    Id, E = principal_frame(inertia)
    w = E.T @ np.asarray(w0_body, float)
    regime, A, Om, m, sgn, phi0 = _jacobi_params(Id, w)
    sn, cn, dn, _ = ellipj(Om * np.asarray(t, float) + _ellipf(phi0, m), m)
    if regime == "major":
        ws = np.stack([sgn * A[0] * cn, A[1] * sn, sgn * A[2] * dn], -1)
    else:
        ws = np.stack([sgn * A[0] * dn, A[1] * sn, sgn * A[2] * cn], -1)
    return ws @ E.T


def jacobi_flip_times(inertia, w0_body, t_end):
    """Times in (0, t_end] at which the intermediate-axis rate changes sign (ω2 = A2 sn(Ωt + τ0) = 0)."""
    Id, E = principal_frame(inertia)
    _, _, Om, m, _, phi0 = _jacobi_params(Id, E.T @ np.asarray(w0_body, float))
    K = ellipk(m)
    tau0 = _ellipf(phi0, m)
    j = np.arange(math.floor(tau0 / (2 * K)) + 1, math.floor((Om * t_end + tau0) / (2 * K)) + 1)
    return (2 * j * K - tau0) / Om


# -- stochastic ----------------------------------------------------------------------------------------------

def ou_moments(theta, sigma, v0, x0, t):
    """Mean and variance of dv = -θ v dt + σ dW, dx = v dt from (x0, v0): (mean_v, var_v, mean_x, var_x)."""
    t = np.asarray(t, float)
    e1, e2 = np.exp(-theta * t), np.exp(-2 * theta * t)
    mean_v = v0 * e1
    var_v = sigma ** 2 / (2 * theta) * (1 - e2)
    mean_x = x0 + v0 * (1 - e1) / theta
    var_x = sigma ** 2 / theta ** 2 * (t - 2 * (1 - e1) / theta + (1 - e2) / (2 * theta))
    return mean_v, var_v, mean_x, var_x
