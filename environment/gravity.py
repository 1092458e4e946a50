"""Gravitational acceleration models [m/s²]: uniform, point mass, point mass + J2 zonal term.

The central-body models take positions ``(..., 3)`` [m] from the planet's centre in a frame whose z axis is
the spin axis (ECI and ECEF both qualify: J2 is symmetric about z) and return the acceleration in the same
axes. They are gravitation only: in a rotating frame the caller adds the centrifugal and Coriolis terms (or
integrates in ECI). Applied to a body as a force, multiply by its mass.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .planet import WGS84, Planet

STANDARD_GRAVITY = 9.80665  # g0 [m/s²], exact by definition (3rd CGPM, 1901)


def uniform_acceleration(g_vec: ArrayLike, r: ArrayLike | None = None) -> jax.Array:
    """A constant gravity vector ``g_vec`` [m/s²], e.g. ``(0, 0, -STANDARD_GRAVITY)`` for z up.

    Which axis is "down" is the caller's choice of frame. With positions ``r`` ``(..., 3)`` the vector is
    broadcast to their shape, so the call has the same form as the central-body models.
    """
    g = jnp.asarray(g_vec)
    return g if r is None else jnp.broadcast_to(g, jnp.shape(r))


def point_mass_potential(r: ArrayLike, planet: Planet = WGS84) -> jax.Array:
    """U = −GM / |r| [m²/s²] (acceleration = −∇U)."""
    r = jnp.asarray(r)
    return -planet.gm / jnp.linalg.norm(r, axis=-1)


def point_mass_acceleration(r: ArrayLike, planet: Planet = WGS84) -> jax.Array:
    """−GM r / |r|³: a spherical planet's gravitation at positions ``(..., 3)``."""
    r = jnp.asarray(r)
    r2 = jnp.sum(r**2, axis=-1, keepdims=True)
    return -planet.gm * r / (r2 * jnp.sqrt(r2))


def j2_potential(r: ArrayLike, planet: Planet = WGS84) -> jax.Array:
    """U = −GM/|r| [1 − J2 (a/|r|)² (3 sin²φ − 1)/2], φ the geocentric latitude (sin φ = z/|r|)."""
    r = jnp.asarray(r)
    rn = jnp.linalg.norm(r, axis=-1)
    sin2 = (r[..., 2] / rn) ** 2
    return -planet.gm / rn * (1.0 - planet.j2 * (planet.semi_major_axis / rn) ** 2 * (3.0 * sin2 - 1.0) / 2.0)


def j2_acceleration(r: ArrayLike, planet: Planet = WGS84) -> jax.Array:
    """−∇U of ``j2_potential``: point mass plus the J2 zonal term, at positions ``(..., 3)``.

    a_x,y = −GM x,y / r³ [1 + 3/2 J2 (a/r)² (1 − 5 z²/r²)],  a_z = −GM z / r³ [1 + 3/2 J2 (a/r)² (3 − 5 z²/r²)].
    """
    r = jnp.asarray(r)
    r2 = jnp.sum(r**2, axis=-1)
    k = 1.5 * planet.j2 * planet.semi_major_axis**2 / r2
    z2_r2 = r[..., 2] ** 2 / r2
    scale = -planet.gm / (r2 * jnp.sqrt(r2))
    equatorial = scale * (1.0 + k * (1.0 - 5.0 * z2_r2))
    polar = scale * (1.0 + k * (3.0 - 5.0 * z2_r2))
    return jnp.stack([equatorial * r[..., 0], equatorial * r[..., 1], polar * r[..., 2]], axis=-1)
