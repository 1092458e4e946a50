"""Shared references for the integrator tests: the analytic torque-free rigid body and a pure-JAX
scene of it (cheap to compile; plugs into the integrators through the generic scene contract)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from mjharness.adapters.analytic import euler_jacobi as torque_free_omega  # noqa: F401
from mjharness.integrators import StateRegistry, StateSpec
from mjharness.integrators.rotations import quat_dot, quat_to_mat


def world_angular_momentum(quat, omega, inertia):
    """R(q) I omega for (..., 4) unit quaternions and (..., 3) body rates (principal body frame)."""
    return np.einsum("...ij,...j->...i", np.asarray(quat_to_mat(quat)), inertia * omega)


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
