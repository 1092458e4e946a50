"""A NESC 2015 atmospheric check case (data/nesc/atmos_NN.json) as a MuJoCo scene with force providers.

The world frame is ECI, aligned with ECEF at t = 0; the vehicle is one free body with the case's mass and
inertia at its centre of mass; MuJoCo's own gravity is 0 and gravitation (J2 or point mass, as the case says)
and aerodynamics (drag on the air-relative velocity in the rotating atmosphere with the case's wind; the
brick's rate damping where its coefficients are non-zero) are force providers evaluated at every stage.
Everything here is SI: the case JSON's ``*_m``, ``*_kg``, ``*_rad`` fields are read, never its English ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.environment import (
    Planet,
    StandardAtmosphere1976,
    WindProfile,
    air_relative_velocity,
    drag_force,
    ecef_to_geodetic,
    eci_to_ecef,
    eci_to_ecef_matrix,
    flight_state,
    inertial_state,
    j2_acceleration,
    point_mass_acceleration,
    rate_damping_moment,
    safe_norm,
)
from mjharness.integrators.rotations import quat_to_mat

NESC_DIR = resources.files("mjharness.data").joinpath("nesc")
# `mjharness cases` name -> the bundled case file
NESC_CASES = {f"nesc_atmos_{n}": f"atmos_{n}.json" for n in ("01", "02", "04", "05", "06", "08")}
_DAMPING = ("Clp", "Clr", "Cmq", "Cnp", "Cnr")


def load_nesc(name: str) -> dict:
    """The case JSON of ``nesc_atmos_NN`` (or ``atmos_NN``)."""
    key = name if name.startswith("nesc_") else f"nesc_{name}"
    if key not in NESC_CASES:
        raise KeyError(f"no NESC case {name!r}; known: {', '.join(NESC_CASES)}")
    return json.loads(NESC_DIR.joinpath(NESC_CASES[key]).read_text())


def nesc_planet(case: dict) -> Planet:
    """The case's planet: WGS-84 or the round Earth of Atmos_04/05, its spin and gravitation constants."""
    p = case["planet"]
    g = p["gravitation"]
    return Planet(semi_major_axis=p.get("equatorial_radius_m", p.get("radius_m")),
                  flattening=p.get("flattening", 0.0), rotation_rate=p["rotation_rate_rad_s"],
                  gm=g["GM_m3_s2"], j2=g.get("J2", 0.0), name=p["name"])


def nesc_atmosphere(case: dict, planet: Planet) -> StandardAtmosphere1976:
    """US 1976 with the case's wind (none, or NED wind piecewise-linear in altitude)."""
    w = case["atmosphere"]["wind"]
    if w["type"] == "none":
        return StandardAtmosphere1976(planet=planet)
    ned = np.stack([w["wind_north_m_s"], w["wind_east_m_s"], w["wind_down_m_s"]], axis=-1)
    return StandardAtmosphere1976(wind=WindProfile(w["alt_m"], ned), planet=planet)


@dataclass(frozen=True)
class Vehicle:
    """Mass properties and aerodynamics of a case's vehicle, SI."""

    mass: float
    inertia: tuple[float, float, float]     # Ixx, Iyy, Izz about the centre of mass, body axes [kg m²]
    area: float                             # S [m²]
    span: float                             # b [m]
    chord: float                            # c̄ [m]
    cd: float
    damping: tuple[float, ...]              # Clp, Clr, Cmq, Cnp, Cnr [1/rad]


def nesc_vehicle(case: dict) -> Vehicle:
    v = case["vehicle"]
    aero, inertia = v["aero"], v["inertia_kg_m2"]
    if any(inertia[k] for k in ("Ixy", "Iyz", "Izx")):
        raise ValueError(f"{case['case']}: products of inertia are not supported")
    area = v["reference_area_m2"]
    return Vehicle(mass=v["mass_kg"], inertia=(inertia["Ixx"], inertia["Iyy"], inertia["Izz"]), area=area,
                   span=v.get("reference_span_m", 0.0), chord=v.get("reference_chord_m", 0.0),
                   cd=float(aero.get("CD", 0.0)), damping=tuple(float(aero.get(k, 0.0)) for k in _DAMPING))


def nesc_xml(case: dict, vehicle: Vehicle) -> str:
    """One free body, no geometry (no contacts, no fluid model), MuJoCo's gravity off: providers do it all."""
    inertia = " ".join(repr(float(i)) for i in vehicle.inertia)
    return (f'<mujoco model="{case["case"]}"><option gravity="0 0 0"><flag contact="disable"/></option>'
            f'<worldbody><body name="vehicle"><freejoint name="vehicle"/>'
            f'<inertial pos="0 0 0" mass="{vehicle.mass!r}" diaginertia="{inertia}"/></body></worldbody></mujoco>')


def nesc_initial_state(case: dict, planet: Planet) -> np.ndarray:
    """Free-joint (qpos, qvel) ``(13,)`` at t = 0 from the case's geodetic initial conditions.

    Velocity: the Earth-relative NED velocity plus ω × r (a body at rest on the rotating Earth moves in ECI);
    attitude from the Euler angles w.r.t. local NED; the body rates are already w.r.t. inertial, body axes,
    as MuJoCo's free-joint angular velocity is.
    """
    ic = case["initial_conditions"]
    euler = [ic["euler_rad"][k] for k in ("phi", "theta", "psi")]
    r, v, q = inertial_state(ic["lat_rad"], ic["lon_rad"], ic["alt_m"], np.asarray(ic["v_ned_m_s"]),
                             np.asarray(euler), 0.0, planet)
    w = [ic["body_rates_wrt_inertial_rad_s"][k] for k in ("p", "q", "r")]
    return np.concatenate([np.asarray(r), np.asarray(q), np.asarray(v), w])


def _gravity(case: dict):
    return j2_acceleration if case["planet"]["gravitation"]["model"].startswith("J2") else point_mass_acceleration


def nesc_wrench(case: dict, planet: Planet, atmosphere, vehicle: Vehicle):
    """The case's force provider ``fn(t, x, data) -> (..., 2, 6)``: gravitation, drag and rate damping on body 1.

    Written on leading axes and jitted, so it is one call per stage on MuJoCo C's whole batch and traces into
    MJX's step alike.
    """
    gravity = _gravity(case)

    @jax.jit
    def wrench(t, qpos, qvel):
        r, quat, v, omega = qpos[..., 0:3], qpos[..., 3:7], qvel[..., 0:3], qvel[..., 3:6]
        r_ecef, v_ecef = eci_to_ecef(t, r, v, planet)
        lat, lon, _ = ecef_to_geodetic(r_ecef, planet)
        air = atmosphere(t, r_ecef)
        v_air = air_relative_velocity(v_ecef, air.wind_ned, lat, lon)
        drag_ecef = drag_force(v_air, air.density, vehicle.cd, vehicle.area)
        drag = jnp.einsum("...ji,...j->...i", eci_to_ecef_matrix(t, planet), drag_ecef)   # back to ECI
        moment_body = rate_damping_moment(omega, safe_norm(v_air), air.density, vehicle.area, vehicle.span,
                                          vehicle.chord, *vehicle.damping)
        moment = jnp.einsum("...ij,...j->...i", quat_to_mat(quat), moment_body)           # body -> world
        body = jnp.concatenate([vehicle.mass * gravity(r, planet) + drag, moment], axis=-1)
        return jnp.stack([jnp.zeros_like(body), body], axis=-2)                           # row 0: world

    def nesc_environment(t, x, data):
        return wrench(t, data.qpos, data.qvel)

    return nesc_environment


@dataclass
class NescRun:
    """A simulated case: times ``(T,)`` from 0 and the flight quantities there (SI), per world ``(T, B, ...)``."""

    time: np.ndarray
    flight: dict
    wall_s: float


def nesc_flight(time, qpos, qvel, atmosphere, planet: Planet) -> dict:
    """Canonical NESC columns (SI) of free-joint states ``(..., 7)``, ``(..., 6)`` at times ``(...)``."""
    # jitted: eager jax compiles each small op for the trajectory's shape, ~40x slower than one compile
    fs = jax.jit(flight_state, static_argnums=(5, 6))(time, qpos[..., 0:3], qvel[..., 0:3], qpos[..., 3:7],
                                                      qvel[..., 3:6], atmosphere, planet)
    columns = dict(lat=fs.lat, lon=fs.lon, alt=fs.alt, airspeed=fs.airspeed, mach=fs.mach, qbar=fs.qbar)
    for i, k in enumerate(("v_north", "v_east", "v_down")):
        columns[k] = fs.v_ned[..., i]
    for i, k in enumerate(("phi", "theta", "psi")):
        columns[k] = fs.euler[..., i]
    for i, k in enumerate(("p", "q", "r")):
        columns[k] = fs.body_rates[..., i]
    return {k: np.asarray(v) for k, v in columns.items()}


_SCENES: dict = {}   # one scene per (case, backend): a scene with providers reuses its compiled chunks


def nesc_scene(case: dict, backend: str = "mujoco"):
    """(scene, planet, atmosphere) of a case; cached per case and backend."""
    from mjharness.adapters import MjScene

    key = (case["case"], backend)
    if key not in _SCENES:
        planet, vehicle = nesc_planet(case), nesc_vehicle(case)
        atmosphere = nesc_atmosphere(case, planet)
        scene = MjScene(nesc_xml(case, vehicle), backend=backend)
        scene.add_force(nesc_wrench(case, planet, atmosphere, vehicle), name="nesc_environment")
        _SCENES[key] = (scene, planet, atmosphere)
    return _SCENES[key]


def simulate_nesc(case: dict, method: str = "rk4", dt: float = 0.01, record_every: int = 10,
                  duration: float | None = None, backend: str = "mujoco") -> NescRun:
    """Run a case from its initial conditions and return its flight quantities every ``record_every`` steps."""
    from mjharness.rollout import rollout

    scene, planet, atmosphere = nesc_scene(case, backend)
    x0 = scene.x0()[None].copy()
    s0 = nesc_initial_state(case, planet)
    x0[:, scene.qpos_segment], x0[:, scene.qvel_segment] = s0[:7], s0[7:]
    dur = float(duration if duration is not None else case["run"]["duration_s"])
    samples = int(round(dur / (dt * record_every)))
    res = rollout(scene, method, dt=dt, steps=samples * record_every, x0=x0, record_every=record_every,
                  progress=False)
    xs = np.concatenate([x0[None], np.asarray(res.x)], axis=0)           # (T, B, n), t = 0 included
    time = np.concatenate([[0.0], np.asarray(res.time)])
    if np.any(np.asarray(res.status)):
        raise RuntimeError(f"{case['case']}: the rollout stopped (status {np.asarray(res.status).tolist()})")
    flight = nesc_flight(time[:, None], xs[..., scene.qpos_segment], xs[..., scene.qvel_segment], atmosphere, planet)
    return NescRun(time=time, flight=flight, wall_s=float(res.stats["wall_s"]))
