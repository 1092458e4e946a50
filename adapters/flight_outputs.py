"""Flight outputs of a scene whose world frame is inertial (ECI): ``scene.set_flight(joint=..., planet=...,
atmosphere=...)`` names the free joint of the flying body, and ``rollout(..., outputs=("geodetic", "euler_ned",
...))`` records the quantities NASA's NESC check cases compare (``environment/flight.py``'s ``flight_state``).

The free joint's state is read as ``flight_state`` reads it: ``qpos[0:3]`` the ECI position of the body frame's
origin (the centre of mass for a body whose inertia is centred on its frame, as NESC vehicles are), ``qpos[3:7]`` the
attitude body → ECI, ``qvel[0:3]`` the ECI velocity, ``qvel[3:6]`` the body rates w.r.t. the inertial frame in body
axes. The world frame is ECI aligned with ECEF at t = 0 (the run's time is the time since then).

The outputs are functions of the recorded time and state only: they are computed in JAX from ``(t, x)`` on every
backend (traced into MJX's chunk; on MuJoCo C in the same compiled chunk, next to the host's own outputs), so MJX
and MuJoCo C record the same function of their states. The file stays SI with angles in **radians** (``units``
"rad"); NESC CSVs use degrees and feet, converted when compared (``rollout/verify/nesc.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import mujoco

from mjharness.environment import WGS84, Planet, StandardAtmosphere1976, flight_state

from .output_eval import OutputError

FIELD = "flight"  # OutputSpec.field of every flight output


@dataclass(frozen=True, eq=False)
class Flight:
    """A scene's flight frame: the free joint's offsets in the state ``x`` and the environment it flies in."""

    joint: str
    qpos: int        # offset of the joint's qpos (7) in x
    qvel: int        # offset of its qvel (6) in x
    planet: Planet
    atmosphere: Any  # an environment.AtmosphereProvider

    def state(self, t, x):
        """``FlightState`` of one world (or leading axes) at time ``t`` and state ``x``."""
        q, v = x[..., self.qpos:self.qpos + 7], x[..., self.qvel:self.qvel + 6]
        return flight_state(t, q[..., 0:3], v[..., 0:3], q[..., 3:7], v[..., 3:6], self.atmosphere, self.planet)


# name -> (components, units, long_name, value of a FlightState)
OUTPUTS: dict[str, tuple[tuple[str, ...], str, str, Any]] = {
    "geodetic": (("lat", "lon", "alt"), "rad | rad | m",
                 "geodetic latitude, longitude [rad] and height above the ellipsoid [m]",
                 lambda s: jnp.stack([s.lat, s.lon, s.alt], -1)),
    "ned_velocity": (("v_north", "v_east", "v_down"), "m/s", "Earth-relative velocity in local NED",
                     lambda s: s.v_ned),
    "euler_ned": (("phi", "theta", "psi"), "rad", "3-2-1 Euler angles (roll, pitch, yaw) of the body w.r.t. local NED",
                  lambda s: s.euler),
    "body_rates": (("p", "q", "r"), "rad/s", "body rates w.r.t. the inertial frame, body axes",
                   lambda s: s.body_rates),
    "airspeed": (("airspeed",), "m/s", "true airspeed (relative to the wind and the rotating air)",
                 lambda s: s.airspeed[..., None]),
    "mach": (("mach",), "1", "Mach number", lambda s: s.mach[..., None]),
    "qbar": (("qbar",), "Pa", "dynamic pressure", lambda s: s.qbar[..., None]),
}


def set_flight(scene, joint: str | None = None, planet: Planet = WGS84, atmosphere=None) -> Flight:
    """Declare ``scene``'s flight frame (module docstring): the free joint ``joint`` (default: the model's only free
    joint), the ``planet`` and the ``atmosphere`` (default: US 1976 in still air over ``planet``)."""
    m = scene.model
    free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}" for j in free]
    if joint is None:
        if len(free) != 1:
            raise OutputError(f"set_flight: the model has {len(free)} free joints {names}; name one with joint=")
        j, joint = free[0], names[0]
    elif joint in names:
        j = free[names.index(joint)]
    else:
        raise OutputError(f"set_flight: {joint!r} is not a free joint of the model; its free joints: {names}")
    if not isinstance(planet, Planet):
        raise OutputError(f"set_flight: planet must be an environment.Planet, got {type(planet).__name__}")
    atmosphere = atmosphere if atmosphere is not None else StandardAtmosphere1976(planet=planet)
    flight = Flight(joint, scene.qpos_segment.start + int(m.jnt_qposadr[j]),
                    scene.qvel_segment.start + int(m.jnt_dofadr[j]), planet, atmosphere)
    scene._flight = flight
    return flight


def parse_flight(scene, name) -> dict | None:
    """The ``OutputSpec`` fields of flight output ``name`` (``outputs.parse_outputs`` makes the spec: this module
    sits below it), None for other names; ``OutputError`` when the scene has no flight frame."""
    if not isinstance(name, str) or name not in OUTPUTS:
        return None
    flight = None if scene is None else scene.__dict__.get("_flight")
    if flight is None:
        raise OutputError(f"output {name!r} needs the scene's flight frame: scene.set_flight(joint=..., planet=..., "
                          f"atmosphere=...) (adapters/flight_outputs.py)")
    comps, units, long_name, _ = OUTPUTS[name]
    return dict(name=name, field=FIELD, shape=(len(comps),), units=units, comps=comps,
                frame=f"flight of free joint {flight.joint!r}: world = ECI aligned with ECEF at t = 0, "
                      f"planet {flight.planet.name}",
                extra=(("long_name", long_name), ("flight_output", name)))


def evaluate_flight(scene, specs, t, x) -> dict:
    """{name: value} of the flight outputs ``specs`` of one world at (t, x), in JAX (the scene's flight frame)."""
    if not specs:
        return {}
    state = scene.__dict__["_flight"].state(jnp.asarray(t), jnp.asarray(x))
    f = jnp.result_type(float)  # the run's float width
    return {s.name: jnp.reshape(jnp.asarray(OUTPUTS[s.name][3](state), f), s.shape) for s in specs}
