"""Update policies: how an increment in derivative (tangent) space moves a state.

- ``euclidean``: x + dx, fused over each contiguous run of Euclidean states.
- ``quaternion``: 4 stored, 3-component increment applied as q <- normalize(q) * exp(dx) (body
  frame), exactly MuJoCo's ``mju_quatIntegrate``; stays unit without renormalisation drift.
- ``quaternion_highorder``: 4-component increment added as an ordinary vector (stage values are
  not normalised); ``project`` normalises after the step.

Multi-stage methods on ``quaternion`` states feed the tableau dexp^-1-corrected stage derivatives
(RKMK, ``lie.py``); that, not the highorder policy, is what MuJoCo C 4.0's RK4 does.

All functions take flat ``(n,)`` buffers (vmap for batches) and a static ``StateLayout``; the
loops below run over layout records at trace time only.
"""

from __future__ import annotations

import jax.numpy as jnp

from .state import StateLayout


def quat_mul(p, q):
    """Hamilton product of quaternions stored [w, x, y, z] (trailing axis)."""
    pw, px, py, pz = p[..., 0], p[..., 1], p[..., 2], p[..., 3]
    qw, qx, qy, qz = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        pw * qw - px * qx - py * qy - pz * qz,
        pw * qx + px * qw + py * qz - pz * qy,
        pw * qy - px * qz + py * qw + pz * qx,
        pw * qz + px * qy - py * qx + pz * qw,
    ], axis=-1)


def quat_normalize(q):
    n = jnp.linalg.norm(q, axis=-1, keepdims=True)
    ident = jnp.zeros_like(q).at[..., 0].set(1.0)
    return jnp.where(n > 1e-15, q / jnp.where(n > 1e-15, n, 1.0), ident)


def quat_exp(v):
    """Unit quaternion of the rotation vector ``v`` (axis * angle), safe at v = 0 under autodiff."""
    angle2 = jnp.sum(v * v, axis=-1, keepdims=True)
    small = angle2 < 1e-30
    angle = jnp.sqrt(jnp.where(small, 1.0, angle2))
    half = 0.5 * angle
    s = jnp.where(small, 0.5, jnp.sin(half) / angle)
    c = jnp.where(small, 1.0, jnp.cos(half))
    return jnp.concatenate([c, s * v], axis=-1)


def quat_integrate(q, omega_dt):
    """MuJoCo's mju_quatIntegrate: normalize(q) * exp(omega_dt), rotation in the local frame."""
    return quat_mul(quat_normalize(q), quat_exp(omega_dt))


def quat_dot(q, omega):
    """q-dot = 1/2 q * [0, omega] (omega in the local frame)."""
    zero = jnp.zeros_like(omega[..., :1])
    return 0.5 * quat_mul(q, jnp.concatenate([zero, omega], axis=-1))


def apply_increment(layout: StateLayout, x, dx):
    """Move ``x`` by the derivative-space increment ``dx`` (already scaled by the step)."""
    pieces = []
    out = x
    for run in layout.runs:
        pieces.append((run.value_slice, x[run.value_slice] + dx[run.deriv_slice]))
    for r in layout.special:
        q = x[r.value_slice]
        d = dx[r.deriv_slice]
        pieces.append((r.value_slice, quat_integrate(q, d) if r.update == "quaternion" else q + d))
    for sl, v in pieces:
        out = out.at[sl].set(v)
    return out


def project(layout: StateLayout, x):
    """Project after a full step: normalise ``quaternion_highorder`` states."""
    out = x
    for r in layout.special:
        if r.update == "quaternion_highorder":
            out = out.at[r.value_slice].set(quat_normalize(x[r.value_slice]))
    return out


# -- RKMK (Lie-group) stage derivatives for exp-map states: see lie.py ---------------------------

def dexpinv(theta, omega):
    """theta' for q = q0 * exp(theta) moving with body angular velocity ``omega`` (trailing axis 3)."""
    a2 = jnp.sum(theta * theta, axis=-1, keepdims=True)
    small = a2 < 1e-2  # |theta| < 0.1: series to a^4; the next term ~ a^6 / 1.2e6 < 1e-12 relative
    a2s = jnp.where(small, 1.0, a2)
    a = jnp.sqrt(a2s)
    closed = 1.0 / a2s - (1.0 + jnp.cos(a)) / (2.0 * a * jnp.sin(a))
    series = 1.0 / 12.0 + a2 / 720.0 + a2 * a2 / 30240.0
    c = jnp.where(small, series, closed)
    txw = jnp.cross(theta, omega)
    return omega + 0.5 * txw + c * jnp.cross(theta, txw)


def rkmk_transform(layout: StateLayout, inc, k):
    """Replace each ``quaternion`` state's stage derivative by dexp^{-1}_theta(omega), theta = ``inc``."""
    out = k
    for r in layout.special:
        if r.update == "quaternion":
            out = out.at[r.deriv_slice].set(dexpinv(inc[r.deriv_slice], k[r.deriv_slice]))
    return out


def has_exp_map_states(layout: StateLayout) -> bool:
    return any(r.update == "quaternion" for r in layout.special)
