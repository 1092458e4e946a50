"""Aerodynamic forces and moments from air data, SI units (N, N m, Pa, m/s, kg/m³, m, m², rad/s).

Velocities are *air-relative* (the body's velocity minus the wind, both relative to the rotating planet:
``air_relative_velocity``). Body-axis moments follow the flight-mechanics convention: L (roll), M (pitch),
N (yaw) about body x, y, z; p, q, r the body rates. Every model is finite at zero airspeed, its gradient
too (no 0/0 from a velocity's direction or the rate terms' 1/V), which a batch of dropped bodies starting
at rest needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .geodesy import ecef_to_ned_matrix


def safe_norm(v: ArrayLike, axis: int = -1) -> jax.Array:
    """|v| along ``axis`` with value and gradient 0 (not NaN) at v = 0."""
    v = jnp.asarray(v)
    n2 = jnp.sum(v**2, axis=axis)
    positive = n2 > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, n2, 1.0)), 0.0)


def air_relative_velocity(v_ecef: ArrayLike, wind_ned: ArrayLike, lat: ArrayLike, lon: ArrayLike) -> jax.Array:
    """v − wind in ECEF axes ``(..., 3)``: the Earth-relative velocity ``v_ecef`` less the NED wind at (lat, lon)."""
    return subtract_wind(v_ecef, wind_ned, ecef_to_ned_matrix(lat, lon))


def subtract_wind(v_ecef: ArrayLike, wind_ned: ArrayLike, c_ned: ArrayLike) -> jax.Array:
    """``air_relative_velocity`` with the local frame given as its ECEF → NED matrix ``c_ned`` ``(..., 3, 3)``
    (``geodetic_frame``'s): v − Cᵀ wind, no trigonometric function."""
    # NED → ECEF is the transpose: wind_ecef_i = Σ_j C_ji wind_ned_j
    return jnp.asarray(v_ecef) - jnp.einsum("...ji,...j->...i", jnp.asarray(c_ned), jnp.asarray(wind_ned))


def dynamic_pressure(rho: ArrayLike, v: ArrayLike) -> jax.Array:
    """q̄ = ρ V² / 2 [Pa] of density ρ [kg/m³] and airspeed V [m/s] (a speed, not a vector: ``safe_norm``)."""
    return 0.5 * jnp.asarray(rho) * jnp.asarray(v) ** 2


def mach(v: ArrayLike, a: ArrayLike) -> jax.Array:
    """Mach number V / a of airspeed V [m/s] and speed of sound a [m/s]."""
    return jnp.asarray(v) / jnp.asarray(a)


def drag_force(v_air: ArrayLike, rho: ArrayLike, cd: ArrayLike, area: ArrayLike) -> jax.Array:
    """Drag −q̄ S C_D v̂ = −½ ρ C_D S |v| v [N], opposite the air-relative velocity ``v_air`` ``(..., 3)``.

    Written as |v| v rather than V² v̂, so it is 0 at rest with a zero (not NaN) gradient.
    """
    v = jnp.asarray(v_air)
    k = 0.5 * jnp.asarray(rho) * jnp.asarray(cd) * jnp.asarray(area) * safe_norm(v)
    return -k[..., None] * v


def rate_damping_moment(omega_body: ArrayLike, v: ArrayLike, rho: ArrayLike, s_ref: ArrayLike, b_ref: ArrayLike,
                        c_ref: ArrayLike, clp: ArrayLike, clr: ArrayLike, cmq: ArrayLike, cnp: ArrayLike,
                        cnr: ArrayLike) -> jax.Array:
    """Body-axis damping moment (L, M, N) ``(..., 3)`` [N m] of body rates ``omega_body`` = (p, q, r) [rad/s].

    L = q̄ S b (Clp p b/2V + Clr r b/2V), M = q̄ S c Cmq q c/2V, N = q̄ S b (Cnp p b/2V + Cnr r b/2V),
    the derivatives per radian of the nondimensional rates p b/2V, q c/2V, r b/2V; V the airspeed [m/s],
    S [m²], b (span) and c (chord) [m]. q̄ (1/2V) = ρ V / 4 cancels the 1/V, so the moment is exactly 0 at
    V = 0 and smooth there.
    """
    w = jnp.asarray(omega_body)
    p, q, r = w[..., 0], w[..., 1], w[..., 2]
    b, c = jnp.asarray(b_ref), jnp.asarray(c_ref)
    k = 0.25 * jnp.asarray(rho) * jnp.asarray(v) * jnp.asarray(s_ref)  # q̄ S / 2V
    roll = k * b**2 * (jnp.asarray(clp) * p + jnp.asarray(clr) * r)
    pitch = k * c**2 * jnp.asarray(cmq) * q
    yaw = k * b**2 * (jnp.asarray(cnp) * p + jnp.asarray(cnr) * r)
    return jnp.stack(jnp.broadcast_arrays(roll, pitch, yaw), axis=-1)


def constant_coefficients(qbar: ArrayLike, s_ref: ArrayLike, b_ref: ArrayLike, c_ref: ArrayLike,
                          cx: ArrayLike, cy: ArrayLike, cz: ArrayLike, cl: ArrayLike, cm: ArrayLike,
                          cn: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Body-axis force q̄ S (Cx, Cy, Cz) [N] and moment q̄ S (b Cl, c Cm, b Cn) [N m], each ``(..., 3)``.

    The coefficients are along and about the body axes x, y, z; q̄ [Pa], S [m²], b (span) and c (chord) [m].
    """
    qs = jnp.asarray(qbar) * jnp.asarray(s_ref)
    b, c = jnp.asarray(b_ref), jnp.asarray(c_ref)
    force = jnp.stack(jnp.broadcast_arrays(qs * jnp.asarray(cx), qs * jnp.asarray(cy), qs * jnp.asarray(cz)), axis=-1)
    moment = jnp.stack(jnp.broadcast_arrays(qs * b * jnp.asarray(cl), qs * c * jnp.asarray(cm),
                                            qs * b * jnp.asarray(cn)), axis=-1)
    return force, moment
