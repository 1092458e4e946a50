"""Flight quantities of a free body integrated in the inertial frame, as NASA's NESC 2015 check cases report them.

The state is what a MuJoCo free joint holds when the world frame is ECI (aligned with ECEF at t = 0): the
ECI position of the centre of mass, its ECI velocity, the attitude quaternion body → ECI in MuJoCo's
(w, x, y, z) order, and the angular velocity in **body** axes (MuJoCo's free-joint qvel: linear velocity in
the world frame, angular velocity in the body's local frame), which is the body rate w.r.t. the inertial
frame that the NESC calls (p, q, r). From it: geodetic latitude, longitude, altitude, the Earth-relative
velocity in local NED, the 3-2-1 Euler angles (φ, θ, ψ) of the body w.r.t. local NED, and the air data
(true airspeed, Mach, dynamic pressure) of an ``AtmosphereProvider`` with its wind. SI units, radians;
leading axes are points. ``inertial_state`` is the inverse, for initial conditions.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from mjharness.integrators.rotations import mat_to_quat, quat_to_mat

from .aero import dynamic_pressure, mach, safe_norm, subtract_wind
from .atmosphere import AtmosphereProvider, StandardAtmosphere1976
from .geodesy import (
    ecef_to_eci,
    ecef_to_geodetic,
    ecef_to_ned_matrix,
    eci_to_ecef,
    eci_to_ecef_matrix,
    geodetic_frame,
    geodetic_to_ecef,
)
from .planet import WGS84, Planet


class FlightState(NamedTuple):
    """The NESC's compared quantities at points ``(...)``, SI: rad, m, m/s, rad/s, Pa."""

    lat: jax.Array             # geodetic latitude [rad]
    lon: jax.Array             # longitude [rad]
    alt: jax.Array             # height above the ellipsoid [m]
    v_ned: jax.Array           # (..., 3) Earth-relative velocity in local NED [m/s]
    euler: jax.Array           # (..., 3) φ, θ, ψ: 3-2-1 Euler angles of the body w.r.t. local NED [rad]
    body_rates: jax.Array      # (..., 3) p, q, r: body rates w.r.t. the inertial frame, body axes [rad/s]
    airspeed: jax.Array        # true airspeed [m/s]
    mach: jax.Array            # Mach number
    qbar: jax.Array            # dynamic pressure [Pa]


def euler_321_matrix(phi: ArrayLike, theta: ArrayLike, psi: ArrayLike) -> jax.Array:
    """Rotation ``(..., 3, 3)`` body → NED of 3-2-1 Euler angles: R_z(ψ) R_y(θ) R_x(φ) (``v_ned = R @ v_body``)."""
    phi, theta, psi = jnp.asarray(phi), jnp.asarray(theta), jnp.asarray(psi)
    cf, sf, ct, st, cp, sp = jnp.cos(phi), jnp.sin(phi), jnp.cos(theta), jnp.sin(theta), jnp.cos(psi), jnp.sin(psi)
    return jnp.stack([
        jnp.stack([ct * cp, sf * st * cp - cf * sp, cf * st * cp + sf * sp], -1),
        jnp.stack([ct * sp, sf * st * sp + cf * cp, cf * st * sp - sf * cp], -1),
        jnp.stack([-st, sf * ct, cf * ct], -1),
    ], -2)


def euler_321(body_to_ned: ArrayLike) -> jax.Array:
    """(φ, θ, ψ) ``(..., 3)`` [rad] of a body → NED rotation ``(..., 3, 3)``: the inverse of ``euler_321_matrix``.

    φ, ψ in (−π, π], θ in [−π/2, π/2]; the clip keeps asin finite when rounding puts |sin θ| a hair above 1.
    """
    m = jnp.asarray(body_to_ned)
    phi = jnp.arctan2(m[..., 2, 1], m[..., 2, 2])
    theta = -jnp.arcsin(jnp.clip(m[..., 2, 0], -1.0, 1.0))
    psi = jnp.arctan2(m[..., 1, 0], m[..., 0, 0])
    return jnp.stack([phi, theta, psi], axis=-1)


def body_to_ned_matrix(t: ArrayLike, quat_eci: ArrayLike, lat: ArrayLike, lon: ArrayLike,
                       planet: Planet = WGS84) -> jax.Array:
    """Rotation ``(..., 3, 3)`` body → local NED of the attitude quaternion body → ECI (w, x, y, z) at time t."""
    eci_to_ned = ecef_to_ned_matrix(lat, lon) @ eci_to_ecef_matrix(t, planet)
    return eci_to_ned @ quat_to_mat(jnp.asarray(quat_eci))


def flight_state(t: ArrayLike, r_eci: ArrayLike, v_eci: ArrayLike, quat_eci: ArrayLike, omega_body: ArrayLike,
                 atmosphere: AtmosphereProvider | None = None, planet: Planet = WGS84) -> FlightState:
    """The NESC's compared quantities of free-body states in the inertial frame (module docstring).

    ``atmosphere`` (default: ``StandardAtmosphere1976`` in still air over ``planet``) gives the density, the
    speed of sound and the wind at the body's ECEF position; still air turns with the planet, so the airspeed
    is |v − ω × r − wind|.
    """
    atmosphere = atmosphere or StandardAtmosphere1976(planet=planet)
    r_ecef, v_ecef = eci_to_ecef(t, r_eci, v_eci, planet)   # v_ecef: Earth-relative, ECEF axes
    lat, lon, alt = ecef_to_geodetic(r_ecef, planet)
    c_ned, _ = geodetic_frame(r_ecef, planet)  # the same sines and cosines as lat, lon: merged under jit
    v_ned = jnp.einsum("...ij,...j->...i", c_ned, v_ecef)
    euler = euler_321(body_to_ned_matrix(t, quat_eci, lat, lon, planet))
    air = atmosphere(t, r_ecef)
    airspeed = safe_norm(subtract_wind(v_ecef, air.wind_ned, c_ned))
    return FlightState(lat, lon, alt, v_ned, euler, jnp.asarray(omega_body), airspeed,
                       mach(airspeed, air.speed_of_sound), dynamic_pressure(air.density, airspeed))


def inertial_state(lat: ArrayLike, lon: ArrayLike, alt: ArrayLike, v_ned: ArrayLike, euler: ArrayLike,
                   t: ArrayLike = 0.0, planet: Planet = WGS84) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(r_eci, v_eci, quat body → ECI) of a geodetic position, an Earth-relative NED velocity and 3-2-1 Euler
    angles ``(..., 3)`` w.r.t. local NED at time t: the inverse of ``flight_state``'s kinematics.

    Body rates need no conversion (both sides are body rates w.r.t. the inertial frame, in body axes).
    """
    c_ned = ecef_to_ned_matrix(lat, lon)                            # ECEF → NED
    r_ecef = geodetic_to_ecef(lat, lon, alt, planet)
    v_ecef = jnp.einsum("...ji,...j->...i", c_ned, jnp.asarray(v_ned))
    r_eci, v_eci = ecef_to_eci(t, r_ecef, v_ecef, planet)
    e = jnp.asarray(euler)
    ned_to_eci = jnp.swapaxes(c_ned @ eci_to_ecef_matrix(t, planet), -1, -2)
    body_to_eci = ned_to_eci @ euler_321_matrix(e[..., 0], e[..., 1], e[..., 2])
    return r_eci, v_eci, mat_to_quat(body_to_eci)
