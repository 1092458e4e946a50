"""Environment models for flight simulation: planet, geodesy, gravity, atmosphere, wind, aerodynamics.

Small pure functions over arrays written with ``jax.numpy``: they trace inside ``jax.jit``/``vmap``/``grad``
(MJX runs them) and accept NumPy arrays too. SI units throughout (m, s, kg, K, Pa, rad); points on leading
axes, vectors ``(..., 3)``. Every function that needs a constant takes a ``Planet`` (default ``WGS84``), so a
case that specifies its own constants (NASA's NESC 2015 check cases) passes them. Call
``mjharness.adapters.configure()`` (float64) before making arrays. Guide: docs/environment.md.

- ``geodesy``: geodetic ↔ ECEF, the local NED frame, ECI ↔ ECEF and the Earth-relative velocity.
- ``gravity``: uniform, point mass, point mass + J2.
- ``atmosphere``: U.S. Standard Atmosphere 1976 (−5 to 86 km) and the ``AtmosphereProvider`` interface.
- ``wind``: constant NED wind and a piecewise-linear altitude profile.
- ``aero``: drag, dynamic pressure, Mach, rate-damping moments, constant-coefficient force and moment.
- ``flight``: a free body's inertial state → geodetic position, NED velocity, Euler angles w.r.t. NED, body
  rates, air data (the NESC check cases' compared quantities), and back for initial conditions.
"""

from .aero import (
    air_relative_velocity,
    constant_coefficients,
    drag_force,
    dynamic_pressure,
    mach,
    rate_damping_moment,
    safe_norm,
    subtract_wind,
)
from .atmosphere import Air, AirState, AtmosphereProvider, StandardAtmosphere1976, geopotential_altitude, us1976
from .flight import FlightState, body_to_ned_matrix, euler_321, euler_321_matrix, flight_state, inertial_state
from .geodesy import (
    earth_rate,
    earth_relative_velocity,
    ecef_to_eci,
    ecef_to_geodetic,
    ecef_to_ned_matrix,
    eci_to_ecef,
    eci_to_ecef_matrix,
    geodetic_frame,
    geodetic_to_ecef,
    ned_velocity,
)
from .gravity import (
    STANDARD_GRAVITY,
    j2_acceleration,
    j2_potential,
    point_mass_acceleration,
    point_mass_potential,
    uniform_acceleration,
)
from .planet import WGS84, Planet
from .wind import ConstantWind, WindModel, WindProfile

__all__ = [
    "Planet", "WGS84",
    "geodetic_to_ecef", "ecef_to_geodetic", "ecef_to_ned_matrix", "geodetic_frame", "eci_to_ecef_matrix", "earth_rate",
    "earth_relative_velocity", "eci_to_ecef", "ecef_to_eci", "ned_velocity",
    "STANDARD_GRAVITY", "uniform_acceleration", "point_mass_potential", "point_mass_acceleration", "j2_potential",
    "j2_acceleration",
    "Air", "AirState", "AtmosphereProvider", "StandardAtmosphere1976", "geopotential_altitude", "us1976",
    "WindModel", "ConstantWind", "WindProfile",
    "safe_norm", "air_relative_velocity", "subtract_wind", "dynamic_pressure", "mach", "drag_force",
    "rate_damping_moment",
    "constant_coefficients",
    "FlightState", "flight_state", "inertial_state", "euler_321", "euler_321_matrix", "body_to_ned_matrix",
]
