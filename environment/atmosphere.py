"""The U.S. Standard Atmosphere 1976 to 86 km, and the atmosphere-provider interface.

``us1976(alt)`` evaluates the standard's seven layers of linear temperature in geopotential altitude
(0 to 84.852 km geopotential = 86 km geometric; the first layer is extended down to −5 km as the standard's
tables are). Constants are the standard's own (NOAA/NASA/USAF, U.S. Standard Atmosphere 1976, NOAA-S/T 76-1562):
r0 = 6356766 m, g0 = 9.80665 m/s², R* = 8.31432 J/(mol K), M0 = 0.0289644 kg/mol, γ = 1.4,
sea level 288.15 K and 101325 Pa. Layer base pressures are computed from those equations (not the rounded
tabulated values) once at import. Beyond the range the end layers continue (below −5 km the first gradient,
above 86 km isothermal at 186.946 K): smooth and finite, but not the standard.

An *atmosphere provider* answers "what air is here, now": ``provider(t, r_ecef) -> AirState``.
``StandardAtmosphere1976`` is one; any callable of that form (another model, a table) plugs in the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .geodesy import geodetic_frame
from .planet import WGS84, Planet
from .wind import WindModel

R0 = 6356766.0  # effective Earth radius for geopotential altitude [m]
G0 = 9.80665  # [m/s²]
R_STAR = 8.31432  # the standard's universal gas constant [J/(mol K)] (not CODATA's 8.314462...)
M0 = 0.0289644  # sea-level mean molar mass of air [kg/mol]
GAMMA = 1.4  # ratio of specific heats of air
T0, P0 = 288.15, 101325.0  # sea-level temperature [K] and pressure [Pa]
ALTITUDE_RANGE = (-5000.0, 86000.0)  # geometric altitude where the model is the standard [m]

# Layer bases in geopotential altitude [m'] and temperature gradients [K/m'] (the standard's defining table).
# The last base, 84852 m' (86 km geometric is 84852.05 m'), starts the isothermal continuation above the range.
_BASE_H = (0.0, 11000.0, 20000.0, 32000.0, 47000.0, 51000.0, 71000.0, 84852.0)
_GRADIENT = (-6.5e-3, 0.0, 1.0e-3, 2.8e-3, 0.0, -2.8e-3, -2.0e-3, 0.0)
_GMR = G0 * M0 / R_STAR  # hydrostatic constant g0 M0 / R* [K/m']


def _layer_bases() -> tuple[np.ndarray, np.ndarray]:
    """Temperature and pressure at each layer base, integrated upward from sea level in float64."""
    temps, pressures = [T0], [P0]
    for i in range(len(_BASE_H) - 1):
        t_b, p_b, lapse, dh = temps[-1], pressures[-1], _GRADIENT[i], _BASE_H[i + 1] - _BASE_H[i]
        t_top = t_b + lapse * dh
        if lapse == 0.0:
            p_top = p_b * math.exp(-_GMR * dh / t_b)
        else:
            p_top = p_b * (t_b / t_top) ** (_GMR / lapse)
        temps.append(t_top)
        pressures.append(p_top)
    return np.array(temps), np.array(pressures)


_BASE_T, _BASE_P = _layer_bases()


class Air(NamedTuple):
    """State of the air at given altitudes: temperature [K], pressure [Pa], density [kg/m³], speed of sound [m/s]."""

    temperature: jax.Array
    pressure: jax.Array
    density: jax.Array
    speed_of_sound: jax.Array


def geopotential_altitude(alt: ArrayLike) -> jax.Array:
    """H = r0 Z / (r0 + Z): geopotential altitude [m'] of geometric altitude Z [m]."""
    z = jnp.asarray(alt)
    return R0 * z / (R0 + z)


def us1976(alt: ArrayLike) -> Air:
    """U.S. Standard Atmosphere 1976 at geometric altitudes ``alt`` [m] (any shape), −5 km to 86 km.

    Vectorized and traceable: the layer is found with ``searchsorted`` over the base table and both the
    gradient and the isothermal pressure laws are evaluated, the right one picked with ``where``.
    """
    h = geopotential_altitude(alt)
    base_h = jnp.asarray(_BASE_H)
    i = jnp.clip(jnp.searchsorted(base_h, h, side="right") - 1, 0, len(_BASE_H) - 1)
    h_b, t_b, p_b = base_h[i], jnp.asarray(_BASE_T)[i], jnp.asarray(_BASE_P)[i]
    lapse = jnp.asarray(_GRADIENT)[i]
    dh = h - h_b
    temperature = t_b + lapse * dh
    isothermal = lapse == 0.0
    # the unused branch must stay finite (where() differentiates both): a dummy gradient where it is 0
    safe_lapse = jnp.where(isothermal, 1.0, lapse)
    p_gradient = p_b * (t_b / jnp.where(isothermal, t_b, temperature)) ** (_GMR / safe_lapse)
    p_isothermal = p_b * jnp.exp(-_GMR * dh / t_b)
    pressure = jnp.where(isothermal, p_isothermal, p_gradient)
    density = pressure * M0 / (R_STAR * temperature)
    speed_of_sound = jnp.sqrt(GAMMA * R_STAR * temperature / M0)
    return Air(temperature, pressure, density, speed_of_sound)


class AirState(NamedTuple):
    """What an atmosphere provider returns for points ``(...)``: the ``Air`` fields and the wind.

    ``wind_ned`` ``(..., 3)`` [m/s] is the air's velocity relative to the rotating planet, in local NED.
    """

    density: jax.Array
    temperature: jax.Array
    pressure: jax.Array
    speed_of_sound: jax.Array
    wind_ned: jax.Array


class AtmosphereProvider(Protocol):
    """Any model of the air: time t [s] and planet-fixed positions ``r_ecef`` ``(..., 3)`` [m] → ``AirState``."""

    def __call__(self, t: ArrayLike, r_ecef: ArrayLike) -> AirState: ...


@dataclass(frozen=True)
class StandardAtmosphere1976:
    """``AtmosphereProvider`` of ``us1976`` at the geodetic altitude of each point, plus an optional wind.

    ``wind`` is a callable ``(t, alt) -> (..., 3)`` NED wind [m/s] (``ConstantWind``, ``WindProfile``, or
    your own); None is still air (moving with the planet).
    """

    wind: WindModel | None = None
    planet: Planet = field(default=WGS84)

    def __call__(self, t: ArrayLike, r_ecef: ArrayLike) -> AirState:
        alt = geodetic_frame(r_ecef, self.planet)[1]
        air = us1976(alt)
        if self.wind is None:
            wind_ned = jnp.zeros(jnp.shape(alt) + (3,), dtype=air.density.dtype)
        else:
            wind_ned = jnp.broadcast_to(self.wind(t, alt), jnp.shape(alt) + (3,))
        return AirState(air.density, air.temperature, air.pressure, air.speed_of_sound, wind_ned)
