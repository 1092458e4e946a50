"""A NESC 2015 atmospheric check case (data/nesc/atmos_NN.json, or a case file of one's own) as a MuJoCo scene.

The world frame is ECI, aligned with ECEF at t = 0; the vehicle is a rigid body about its centre of mass (three
world-axis slides for the centre of mass, a ball joint for the attitude: ``nesc_xml`` says why not one free
joint); MuJoCo's own gravity is 0 and gravitation (J2 or point mass, as the case says) and aerodynamics (drag on
the air-relative velocity in the rotating atmosphere with the case's wind; rate damping, from the case or its
DAVE-ML model) are one force provider evaluated at every stage. ``load_nesc`` validates a case file against
``REQUIRED`` (docs/nesc.md, "Case files"), one ``CaseError`` naming the file and field. Everything here is SI:
the case JSON's ``*_m``, ``*_kg``, ``*_rad`` fields are read, never its English ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.environment import (
    ConstantWind,
    Planet,
    StandardAtmosphere1976,
    WindProfile,
    drag_force,
    eci_to_ecef,
    eci_to_ecef_matrix,
    flight_state,
    geodetic_frame,
    inertial_state,
    j2_acceleration,
    point_mass_acceleration,
    rate_damping_moment,
    safe_norm,
    subtract_wind,
)
from mjharness.integrators.rotations import quat_to_mat

from .case_checks import CaseError
from .daveml import daveml_aero

NESC_DIR = resources.files("mjharness.data").joinpath("nesc")
# `mjharness cases` name -> the bundled case file
NESC_CASES = {f"nesc_atmos_{n}": f"atmos_{n}.json" for n in ("01", "02", "03", "04", "05", "06", "07", "08", "09",
                                                               "10")}
_DAMPING = ("Clp", "Clr", "Cmq", "Cnp", "Cnr")
_NUMBER = (int, float)
_VEC3 = "list of 3 numbers"
# The case-file schema: (dotted field, what it must be) for every required field (docs/nesc.md "Case files").
# Alternatives ("a|b") need one of them; a field of the wind or the body rates is checked by _require_variant.
REQUIRED: tuple[tuple[str, Any], ...] = (
    ("case", str), ("planet.rotation_rate_rad_s", _NUMBER), ("planet.gravitation.model", str),
    ("planet.gravitation.GM_m3_s2", _NUMBER), ("planet.equatorial_radius_m|planet.radius_m", _NUMBER),
    ("atmosphere.wind.type", str), ("vehicle.mass_kg", _NUMBER), ("vehicle.inertia_kg_m2.Ixx", _NUMBER),
    ("vehicle.inertia_kg_m2.Iyy", _NUMBER), ("vehicle.inertia_kg_m2.Izz", _NUMBER),
    ("vehicle.reference_area_m2", _NUMBER), ("vehicle.aero", dict), ("initial_conditions.lat_rad", _NUMBER),
    ("initial_conditions.lon_rad", _NUMBER), ("initial_conditions.alt_m", _NUMBER),
    ("initial_conditions.v_ned_m_s", _VEC3), ("initial_conditions.euler_rad.phi", _NUMBER),
    ("initial_conditions.euler_rad.theta", _NUMBER), ("initial_conditions.euler_rad.psi", _NUMBER),
    ("initial_conditions.body_rates_wrt_inertial_rad_s|initial_conditions.body_rates_wrt_earth_rad_s", dict),
    ("run.duration_s", _NUMBER),
)
WIND_FIELDS: dict[str, tuple[tuple[str, Any], ...]] = {"none": (), "constant": (("wind_ned_m_s", _VEC3),),
               "altitude_profile": (("alt_m", list), ("wind_north_m_s", list), ("wind_east_m_s", list),
                                    ("wind_down_m_s", list))}
GRAVITATION = {"J2": "j2", "point mass": "point_mass"}       # model text starts with -> gravitation


def _get(case: dict, dotted: str):
    node = case
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node


def _is(value, kind) -> bool:
    if kind == _VEC3:
        return isinstance(value, list) and len(value) == 3 and all(_is(v, _NUMBER) for v in value)
    if kind is _NUMBER:
        return isinstance(value, _NUMBER) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind_name(kind) -> str:
    return "a number" if kind is _NUMBER else kind if isinstance(kind, str) else f"a {kind.__name__}"


def validate_nesc(case, where: str) -> dict:
    """``case`` if it follows the case-file schema (``REQUIRED``, docs/nesc.md), else one ``CaseError`` naming
    ``where`` (the file) and the first offending field."""
    if not isinstance(case, dict):
        raise CaseError(f"{where}: a NESC case file holds one JSON object")

    def bad(field, kind, found):
        raise CaseError(f"{where}: field {field!r} must be {_kind_name(kind)}"
                        + (" (missing)" if found is None else f", got {found!r}"))

    for dotted, kind in REQUIRED:
        options = dotted.split("|")
        found = next((_get(case, o) for o in options if _get(case, o) is not None), None)
        if not _is(found, kind):
            bad(" or ".join(options), kind, found)
    wind = case["atmosphere"]["wind"]
    if wind["type"] not in WIND_FIELDS:
        raise CaseError(f"{where}: field 'atmosphere.wind.type' is {wind['type']!r}; known: {sorted(WIND_FIELDS)}")
    for field, kind in WIND_FIELDS[wind["type"]]:
        if not _is(wind.get(field), kind):
            bad(f"atmosphere.wind.{field}", kind, wind.get(field))
    model = case["planet"]["gravitation"]["model"]
    if not any(model.startswith(k) for k in GRAVITATION):
        raise CaseError(f"{where}: field 'planet.gravitation.model' is {model!r}; it must start with one of "
                        f"{sorted(GRAVITATION)}")
    ic = case["initial_conditions"]
    rates = ic.get("body_rates_wrt_inertial_rad_s", ic.get("body_rates_wrt_earth_rad_s"))
    for k in "pqr":
        if not _is(rates.get(k), _NUMBER):
            bad(f"initial_conditions.body_rates_wrt_*_rad_s.{k}", _NUMBER, rates.get(k))
    if not isinstance(_tool_files(case), dict) or not _tool_files(case):
        raise CaseError(f"{where}: field 'references' (or 'bundled.tools') must name at least one tool's CSV")
    for sim, f in _tool_files(case).items():
        if not isinstance(f, str):
            bad(f"references.{sim}", str, f)
    return case


def _tool_files(case: dict) -> dict:
    """{sim: CSV path as written in the case} from ``references`` or the bundled ``bundled.tools[sim].file``."""
    if "references" in case:
        return case["references"]
    tools = _get(case, "bundled.tools")
    return {s: t.get("file") for s, t in tools.items()} if isinstance(tools, dict) else {}


def nesc_path(name: str, cases_dir: str | None = None) -> Path | None:
    """The case file of ``name``: ``cases_dir/name.json`` when there, else the bundled ``nesc_atmos_NN``; None."""
    if cases_dir is not None:
        p = Path(cases_dir) / (name if name.endswith(".json") else f"{name}.json")
        if p.is_file() and _is_nesc_file(p):
            return p
    key = name if name.startswith("nesc_") else f"nesc_{name}"
    return Path(str(NESC_DIR.joinpath(NESC_CASES[key]))) if key in NESC_CASES else None


def _is_nesc_file(path: Path) -> bool:
    """A case file is a NESC case when it has ``initial_conditions`` (data/cases files have ``scene``)."""
    try:
        return "initial_conditions" in json.loads(path.read_text())
    except ValueError:
        return True      # not JSON: load_nesc says so, naming the file


def load_nesc(name: str, cases_dir: str | None = None) -> dict:
    """The validated case of ``nesc_atmos_NN`` (or ``atmos_NN``), or of ``cases_dir/name.json``.

    The dict gets ``_file`` (its path): tool CSVs and a DAVE-ML model are read relative to it.
    """
    path = nesc_path(name, cases_dir)
    if path is None:
        raise CaseError(f"no NESC case {name!r}" + (f" in {cases_dir}" if cases_dir else "")
                        + f"; bundled: {', '.join(NESC_CASES)}")
    try:
        case = json.loads(path.read_text())
    except ValueError as e:
        raise CaseError(f"{path}: not valid JSON ({e})") from None
    validate_nesc(case, str(path))
    case["_file"] = str(path)
    return case


def case_file(case: dict, relative: str) -> Path:
    """A file a case names (a tool CSV, a DAVE-ML model): absolute, or relative to the case file."""
    p = Path(relative)
    return p if p.is_absolute() else Path(case.get("_file", str(NESC_DIR.joinpath("x")))).parent / p


def nesc_planet(case: dict) -> Planet:
    """The case's planet: WGS-84 or the round Earth of Atmos_04/05, its spin and gravitation constants."""
    p = case["planet"]
    g = p["gravitation"]
    return Planet(semi_major_axis=p.get("equatorial_radius_m", p.get("radius_m")),
                  flattening=p.get("flattening", 0.0), rotation_rate=p["rotation_rate_rad_s"],
                  gm=g["GM_m3_s2"], j2=g.get("J2", 0.0), name=p.get("name", case["case"]))


def nesc_atmosphere(case: dict, planet: Planet) -> StandardAtmosphere1976:
    """US 1976 with the case's wind: none, a steady NED wind, or NED wind piecewise-linear in altitude."""
    w = case["atmosphere"]["wind"]
    winds = {
        "none": lambda: None,
        "constant": lambda: ConstantWind(w["wind_ned_m_s"]),
        "altitude_profile": lambda: WindProfile(
            w["alt_m"], np.stack([w["wind_north_m_s"], w["wind_east_m_s"], w["wind_down_m_s"]], axis=-1)),
    }
    return StandardAtmosphere1976(wind=winds[w["type"]](), planet=planet)


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
    airspeed_min: float = 0.0               # [m/s] the V that p b/2V divides by is at least this (DAVE-ML VRW)


def nesc_vehicle(case: dict) -> Vehicle:
    """The case's vehicle; aero coefficients from ``vehicle.aero`` over those of its ``dave_ml`` model file."""
    v = case["vehicle"]
    inertia = v["inertia_kg_m2"]
    if any(inertia.get(k, 0.0) for k in ("Ixy", "Iyz", "Izx")):
        raise CaseError(f"{case.get('_file', case['case'])}: field 'vehicle.inertia_kg_m2': products of inertia "
                        "are not supported (the NESC sphere and brick have none)")
    aero = dict(v["aero"])
    if "dave_ml" in aero:        # the model file's constants, then the case's own values (Atmos_03: CD = 0)
        aero = {**daveml_aero(case_file(case, aero["dave_ml"])), **{k: x for k, x in aero.items()
                                                                    if isinstance(x, (int, float))}}
    return Vehicle(mass=v["mass_kg"], inertia=(inertia["Ixx"], inertia["Iyy"], inertia["Izz"]),
                   area=v["reference_area_m2"], span=v.get("reference_span_m", 0.0),
                   chord=v.get("reference_chord_m", 0.0), cd=float(aero.get("CD", 0.0)),
                   damping=tuple(float(aero.get(k, 0.0)) for k in _DAMPING),
                   airspeed_min=float(aero.get("airspeed_min_m_s", 0.0)))


def nesc_xml(case: dict, vehicle: Vehicle) -> str:
    """The vehicle as two root bodies: its centre of mass on three world-axis slides, its attitude on a ball joint.

    The state is laid out as a free joint's (qpos: ECI position, quaternion; qvel: ECI velocity, body-axis
    angular velocity) and the dynamics are the same (a rigid body whose centre of mass is the reference point),
    but MuJoCo's recursive Newton-Euler never meets the 465-1000 m/s translational velocity in the rotation's
    bias force: in one free body its m v × v term (zero, computed as a difference of ~m|v|² products) rounds to
    ~m|v|² 1e-16 N m, a spurious angular acceleration of up to 5e-10 rad/s² on the sphere at 500 m/s that the
    torque-free cases' tools print as 0. No geometry (no contacts, no fluid model), MuJoCo's gravity off: the
    provider does it all.
    """
    inertia = " ".join(repr(float(i)) for i in vehicle.inertia)
    slides = "".join(f'<joint name="{a}" type="slide" axis="{v}"/>' for a, v in
                     (("x", "1 0 0"), ("y", "0 1 0"), ("z", "0 0 1")))
    return (f'<mujoco model="{case["case"]}"><option gravity="0 0 0"><flag contact="disable"/></option>'
            f'<worldbody><body name="centre_of_mass">{slides}'
            f'<inertial pos="0 0 0" mass="{vehicle.mass!r}" diaginertia="{inertia}"/></body>'
            f'<body name="vehicle"><joint name="attitude" type="ball"/>'
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
    if "body_rates_wrt_inertial_rad_s" in ic:
        w = np.array([ic["body_rates_wrt_inertial_rad_s"][k] for k in "pqr"], float)
    else:   # rates w.r.t. the Earth: add the Earth's spin (ECEF z = ECI z at t = 0) in body axes
        spin = np.array([0.0, 0.0, planet.rotation_rate])
        w = np.array([ic["body_rates_wrt_earth_rad_s"][k] for k in "pqr"], float)
        w = w + np.asarray(quat_to_mat(jnp.asarray(q))).T @ spin
    return np.concatenate([np.asarray(r), np.asarray(q), np.asarray(v), w])


def _gravity(case: dict):
    model = case["planet"]["gravitation"]["model"]
    kind = next(v for k, v in GRAVITATION.items() if model.startswith(k))
    return {"j2": j2_acceleration, "point_mass": point_mass_acceleration}[kind]


def nesc_wrench(case: dict, planet: Planet, atmosphere, vehicle: Vehicle):
    """The case's force provider ``fn(t, x, data) -> {"qfrc": (..., 6)}``: gravitation, drag and rate damping.

    Returned as the free joint's generalized force, not as a wrench at the centre of mass: the joint's dofs are
    the world-frame velocity of the body origin (= the centre of mass here) and the body-frame angular velocity,
    so Jᵀ is exactly [force; body-axis moment]. Through ``xfrc_applied`` MuJoCo forms Jᵀ from differences of
    6.4e6 m coordinates (centre of mass, subtree centre, joint anchor), whose rounding gives the force a
    spurious moment arm of ~1e-9 m: a roll rate of ~5e-12 rad/s that the torque-free sphere's tools print as
    0, and that an adaptive method's thousands of extra stages grew past 1e-9 deg/s. Written on leading axes
    and jitted: one call per stage on MuJoCo C's whole batch, traced into MJX's step alike.
    """
    gravity = _gravity(case)

    @jax.jit
    def wrench(t, qpos, qvel):
        r, v, omega = qpos[..., 0:3], qvel[..., 0:3], qvel[..., 3:6]
        r_ecef, v_ecef = eci_to_ecef(t, r, v, planet)
        c_ned, _ = geodetic_frame(r_ecef, planet)  # the atmosphere's height: the same ops, merged by XLA
        air = atmosphere(t, r_ecef)
        v_air = subtract_wind(v_ecef, air.wind_ned, c_ned)
        drag_ecef = drag_force(v_air, air.density, vehicle.cd, vehicle.area)
        drag = jnp.einsum("...ji,...j->...i", eci_to_ecef_matrix(t, planet), drag_ecef)   # back to ECI
        speed = safe_norm(v_air)
        # the model's V floor (brick_aero.dml: 0.5 ft/s): q̄ S b Clp p b/(2 max(V, V_min)) is
        # rate_damping_moment at the speed V² / max(V, V_min) (= V above the floor)
        v_eff = speed * speed / jnp.maximum(speed, vehicle.airspeed_min) if vehicle.airspeed_min > 0 else speed
        moment_body = rate_damping_moment(omega, v_eff, air.density, vehicle.area, vehicle.span, vehicle.chord,
                                          *vehicle.damping)
        return jnp.concatenate([vehicle.mass * gravity(r, planet) + drag, moment_body], axis=-1)

    def nesc_environment(t, x, data):
        return {"qfrc": wrench(t, data.qpos, data.qvel)}

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
    r_ecef = np.asarray(jax.jit(eci_to_ecef, static_argnums=(3,))(time, qpos[..., 0:3], qvel[..., 0:3], planet)[0])
    for i, axis in enumerate("xyz"):      # positions: the tools' gePosition (ECEF) and eiPosition (ECI)
        columns[f"ecef_{axis}"], columns[f"eci_{axis}"] = r_ecef[..., i], qpos[..., i]
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

    key = (case.get("_file", case["case"]), backend)
    if key not in _SCENES:
        planet, vehicle = nesc_planet(case), nesc_vehicle(case)
        atmosphere = nesc_atmosphere(case, planet)
        scene = MjScene(nesc_xml(case, vehicle), backend=backend)
        scene.add_force(nesc_wrench(case, planet, atmosphere, vehicle), name="nesc_environment")
        _SCENES[key] = (scene, planet, atmosphere)
    return _SCENES[key]


def nesc_integrator(method: str, rtol: float | None = None, atol: float | None = None):
    """The integrator of a NESC run: a registered name; an adaptive one takes ``rtol`` / ``atol`` (default 1e-10:
    far below the tools' spread, DESIGN's habit of stating the tolerance a figure was taken at)."""
    from mjharness.integrators import INTEGRATORS, IntegratorKind, get_integrator

    try:
        cls = INTEGRATORS[method.lower().replace("-", "_")]
    except KeyError:
        raise CaseError(f"NESC run: unknown integrator {method!r}; known: {', '.join(INTEGRATORS)}") from None
    if cls.kind == IntegratorKind.ADAPTIVE:
        return get_integrator(method, rtol=rtol or 1e-10, atol=atol or 1e-10)
    if rtol is not None or atol is not None:
        raise CaseError(f"NESC run: rtol/atol are for adaptive methods; {method!r} is {cls.kind.value}")
    if cls.kind != IntegratorKind.FIXED:
        raise CaseError(f"NESC run: {method!r} is {cls.kind.value}; the NESC cases are deterministic")
    return get_integrator(method)


def simulate_nesc(case: dict, method: str = "rk4", dt: float = 0.01, record_every: int = 10,
                  duration: float | None = None, backend: str = "mujoco", rtol: float | None = None,
                  atol: float | None = None) -> NescRun:
    """Run a case from its initial conditions; its flight quantities every ``record_every`` steps of ``dt``.

    An adaptive method steps to every output time ``dt * record_every`` itself (rollout's ``dt`` is its output
    interval), so its states there are its own, not interpolated.
    """
    from mjharness.integrators import IntegratorKind
    from mjharness.rollout import rollout

    integ = nesc_integrator(method, rtol, atol)
    if integ.kind == IntegratorKind.ADAPTIVE:
        dt, record_every = dt * record_every, 1
    scene, planet, atmosphere = nesc_scene(case, backend)
    x0 = scene.x0()[None].copy()
    s0 = nesc_initial_state(case, planet)
    x0[:, scene.qpos_segment], x0[:, scene.qvel_segment] = s0[:7], s0[7:]
    dur = float(duration if duration is not None else case["run"]["duration_s"])
    samples = int(round(dur / (dt * record_every)))
    if samples < 1:
        raise CaseError(f"{case['case']}: duration {dur} s is shorter than one output interval "
                        f"({dt * record_every} s)")
    res = rollout(scene, integ, dt=dt, steps=samples * record_every, x0=x0, record_every=record_every,
                  progress=False)
    xs = np.concatenate([x0[None], np.asarray(res.x)], axis=0)           # (T, B, n), t = 0 included
    time = np.concatenate([[0.0], np.asarray(res.time)])
    if np.any(np.asarray(res.status)):
        raise CaseError(f"{case['case']}: the rollout stopped (status {np.asarray(res.status).tolist()})")
    flight = nesc_flight(time[:, None], xs[..., scene.qpos_segment], xs[..., scene.qvel_segment], atmosphere, planet)
    return NescRun(time=time, flight=flight, wall_s=float(res.stats["wall_s"]))
