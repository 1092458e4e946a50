"""Quaternions and rotations: the one math module for them (unit quaternions stored [w, x, y, z]).

Every function is written with ``jax.numpy`` on a trailing axis, so it takes numpy or JAX input, any
leading batch shape, traces under ``jit``/``vmap`` and returns a JAX array. A quaternion q maps body
to world (``quat_to_mat(q) @ v_body = v_world``); angular velocities are in the body (local) frame, as
in MuJoCo's free and ball joints.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["quat_mul", "quat_normalize", "quat_exp", "quat_integrate", "quat_dot", "quat_to_mat", "mat_to_quat",
           "hat", "rot", "dexpinv"]


def quat_mul(p, q):
    """Hamilton product p ⊗ q."""
    pw, px, py, pz = p[..., 0], p[..., 1], p[..., 2], p[..., 3]
    qw, qx, qy, qz = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        pw * qw - px * qx - py * qy - pz * qz,
        pw * qx + px * qw + py * qz - pz * qy,
        pw * qy - px * qz + py * qw + pz * qx,
        pw * qz + px * qy - py * qx + pz * qw,
    ], axis=-1)


def quat_normalize(q):
    """q / |q|; the identity where |q| is (numerically) zero, so a zero buffer stays harmless."""
    q = jnp.asarray(q)
    n = jnp.linalg.norm(q, axis=-1, keepdims=True)
    ident = jnp.zeros_like(q).at[..., 0].set(1.0)
    return jnp.where(n > 1e-15, q / jnp.where(n > 1e-15, n, 1.0), ident)


def quat_exp(v):
    """Unit quaternion of the rotation vector ``v`` (axis * angle), safe at v = 0 under autodiff."""
    v = jnp.asarray(v)
    angle2 = jnp.sum(v * v, axis=-1, keepdims=True)
    small = angle2 < 1e-30
    angle = jnp.sqrt(jnp.where(small, 1.0, angle2))
    half = 0.5 * angle
    s = jnp.where(small, 0.5, jnp.sin(half) / angle)
    c = jnp.where(small, 1.0, jnp.cos(half))
    return jnp.concatenate([c, s * v], axis=-1)


def quat_integrate(q, omega_dt):
    """MuJoCo's mju_quatIntegrate: normalize(q) ⊗ exp(omega_dt), rotation in the local frame."""
    return quat_mul(quat_normalize(q), quat_exp(omega_dt))


def quat_dot(q, omega):
    """q-dot = ½ q ⊗ [0, omega] (omega in the local frame)."""
    omega = jnp.asarray(omega)
    zero = jnp.zeros_like(omega[..., :1])
    return 0.5 * quat_mul(jnp.asarray(q), jnp.concatenate([zero, omega], axis=-1))


def quat_to_mat(q):
    """Rotation matrix (..., 3, 3) of the quaternion ``q`` (normalised first)."""
    q = quat_normalize(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def mat_to_quat(R):
    """Unit quaternion (..., 4) with w >= 0 of the rotation matrices ``R`` (..., 3, 3).

    Shepperd's method: of the four equivalent formulas (4w q, 4x q, 4y q, 4z q from sums and
    differences of entries) each world takes the one whose pivot 4 p^2 is largest, so no division
    by a small number occurs at any angle.
    """
    R = jnp.asarray(R)
    r = lambda i, j: R[..., i, j]  # noqa: E731
    tr = r(0, 0) + r(1, 1) + r(2, 2)
    cands = jnp.stack([
        jnp.stack([1 + tr, r(2, 1) - r(1, 2), r(0, 2) - r(2, 0), r(1, 0) - r(0, 1)], -1),
        jnp.stack([r(2, 1) - r(1, 2), 1 + r(0, 0) - r(1, 1) - r(2, 2), r(0, 1) + r(1, 0), r(0, 2) + r(2, 0)], -1),
        jnp.stack([r(0, 2) - r(2, 0), r(0, 1) + r(1, 0), 1 - r(0, 0) + r(1, 1) - r(2, 2), r(1, 2) + r(2, 1)], -1),
        jnp.stack([r(1, 0) - r(0, 1), r(0, 2) + r(2, 0), r(1, 2) + r(2, 1), 1 - r(0, 0) - r(1, 1) + r(2, 2)], -1),
    ], -2)
    pivot = jnp.argmax(jnp.stack([tr, r(0, 0), r(1, 1), r(2, 2)], -1), axis=-1)
    q = jnp.take_along_axis(cands, pivot[..., None, None], axis=-2)[..., 0, :]
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    return jnp.where(q[..., :1] < 0, -q, q)


def hat(v):
    """Skew matrix [v]x (..., 3, 3) with [v]x u = v x u."""
    v = jnp.asarray(v)
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = jnp.zeros_like(x)
    return jnp.stack([jnp.stack([o, -z, y], -1), jnp.stack([z, o, -x], -1), jnp.stack([-y, x, o], -1)], -2)


def rot(axis, angle):
    """Rotation matrices exp(angle [axis]x) (Rodrigues) for a unit ``axis`` (..., 3) and angles (...):
    shape broadcast(axis[..., 0], angle) + (3, 3)."""
    K = hat(axis)
    a = jnp.asarray(angle)[..., None, None]
    return jnp.eye(3) + jnp.sin(a) * K + (1 - jnp.cos(a)) * (K @ K)


def dexpinv(theta: jax.Array, omega: jax.Array) -> jax.Array:
    """theta' for q = q0 ⊗ exp(theta) moving with body angular velocity ``omega``: the inverse right
    Jacobian of SO(3) applied to omega (trailing axis 3; RKMK stage derivatives, see ``lie``)."""
    a2 = jnp.sum(theta * theta, axis=-1, keepdims=True)
    small = a2 < 1e-2  # |theta| < 0.1: series to a^4; the next term ~ a^6 / 1.2e6 < 1e-12 relative
    a2s = jnp.where(small, 1.0, a2)
    a = jnp.sqrt(a2s)
    closed = 1.0 / a2s - (1.0 + jnp.cos(a)) / (2.0 * a * jnp.sin(a))
    series = 1.0 / 12.0 + a2 / 720.0 + a2 * a2 / 30240.0
    c = jnp.where(small, series, closed)
    txw = jnp.cross(theta, omega)
    return omega + 0.5 * txw + c * jnp.cross(theta, txw)
