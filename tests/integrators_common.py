"""Shared references for the integrator tests: the analytic torque-free rigid body and a pure-JAX
scene of it (cheap to compile; plugs into the integrators through the generic scene contract)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from scipy.special import ellipj, ellipkinc

from mjharness.integrators import StateRegistry, StateSpec
from mjharness.integrators.policies import quat_dot


def torque_free_omega(inertia, w0, t):
    """Body angular velocity of a torque-free rigid body (Euler's equations, principal axes).

    Jacobi elliptic solution (Landau & Lifshitz §37) for I1 < I2 < I3, any initial ``w0``; ``t`` any
    shape, result ``t.shape + (3,)``.
    """
    I1, I2, I3 = inertia
    if not I1 < I2 < I3:
        raise ValueError(f"need I1 < I2 < I3, got {inertia}")
    E2, L2 = np.sum(inertia * w0**2), np.sum((inertia * w0) ** 2)
    t = np.asarray(t, float)
    if L2 < E2 * I2:  # tumbling about the minor axis 1: omega_1 keeps its sign (dn)
        A = np.sqrt([(E2 * I3 - L2) / (I1 * (I3 - I1)), (L2 - E2 * I1) / (I2 * (I2 - I1)),
                     (L2 - E2 * I1) / (I3 * (I3 - I1))])
        m = (I3 - I2) * (L2 - E2 * I1) / ((I2 - I1) * (E2 * I3 - L2))
        s, iw, ic = np.sign(w0[0]), 0, 2
    else:  # about the major axis 3
        A = np.sqrt([(E2 * I3 - L2) / (I1 * (I3 - I1)), (E2 * I3 - L2) / (I2 * (I3 - I2)),
                     (L2 - E2 * I1) / (I3 * (I3 - I1))])
        m = (I2 - I1) * (E2 * I3 - L2) / ((I3 - I2) * (L2 - E2 * I1))
        s, iw, ic = np.sign(w0[2]), 2, 0
    rate = s * (I3 - I1) * A[0] * A[2] / (I2 * A[1])  # d(elliptic argument)/dt, from I2 w2' = (I3-I1) w3 w1
    u0 = ellipkinc(np.arctan2(w0[1] / A[1], w0[ic] / A[ic]), m)
    sn, cn, dn, _ = ellipj(u0 + rate * t, m)
    out = np.empty(t.shape + (3,))
    out[..., iw] = s * A[iw] * dn
    out[..., 1] = A[1] * sn
    out[..., ic] = A[ic] * cn
    return out


def quat_to_mat(q):
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def world_angular_momentum(quat, omega, inertia):
    """R(q) I omega for (..., 4) unit quaternions and (..., 3) body rates (principal body frame)."""
    return np.einsum("...ij,...j->...i", quat_to_mat(quat / np.linalg.norm(quat, axis=-1, keepdims=True)),
                     inertia * omega)


class ToyRigidBody:
    """Torque-free rigid body as a plain scene: states "body/quat" and "body/omega" (body frame).

    ``update`` picks the attitude policy; ``extra`` adds a Euclidean state "body/angle" with
    derivative |omega| (so the layout has a Euclidean run after the quaternion).
    """

    def __init__(self, inertia=(1 / 30, 0.34 / 3, 0.4 / 3), update="quaternion", error_control="state"):
        self.inertia = np.asarray(inertia, float)
        reg = StateRegistry()
        reg.register("body/quat", StateSpec((4,), update=update, error_control=error_control), model="toy")
        reg.register("body/omega", StateSpec((3,), error_control=error_control), model="toy")
        self.layout = reg.finalize()
        self.update = update
        self.second_order = (("body/quat", "body/omega"),)

    def x0(self, omega=(0.2, 3.0, 0.1)):
        return np.concatenate([[1.0, 0, 0, 0], np.asarray(omega, float)])

    def dynamics(self, t, x, ctrl=None):
        q, w = x[:4], x[4:7]
        inertia = jnp.asarray(self.inertia)
        wdot = jnp.cross(inertia * w, w) / inertia
        qd = w if self.update == "quaternion" else quat_dot(q, w)
        return jnp.concatenate([qd, wdot])
