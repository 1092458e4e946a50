"""Regenerate ``data/nesc/`` from a local copy of NASA's simupy-flight repository.

    python scripts/nesc_extract.py SIMUPY_FLIGHT [--out data/nesc] [--period 0.1] [--commit HASH]

SIMUPY_FLIGHT is a checkout of https://github.com/nasa/simupy-flight (a work tree, or a bare git
directory, read with ``git show``). The script reads the NESC 2015 atmospheric check-case trajectories
mirrored there under ``NESC_data/Atmospheric_checkcases/`` (NASA/TM-2015-218675, public data), keeps
only the columns a comparison needs, copies their text verbatim (no re-rounding), keeps every k-th row
so that each tool is sampled every ``--period`` seconds, and writes one CSV per case and tool plus one
JSON per case with the case definition (planet, atmosphere, vehicle, initial conditions, column map).

The case definitions below were read from the NESC models (``NESC_data/All_models/*.dml``), from the
case descriptions, and checked against the published trajectories (see ``checks_against_data`` in each
JSON). No simupy-flight code is used or copied. Needs only the Python standard library (and git for a
bare repository).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

REPO_URL = "https://github.com/nasa/simupy-flight"
DATA_SITE = "https://nescacademy.nasa.gov/flightsim"
REPORT = (
    "NASA/TM-2015-218675 (NESC-RP-12-00770), 'Check-Cases for Verification of 6-Degree-of-Freedom "
    "Flight Vehicle Simulations', D. G. Murri, E. B. Jackson, R. O. Shelton, January 2015"
)
CHECKCASE_DIR = "NESC_data/Atmospheric_checkcases"
MODEL_DIR = "NESC_data/All_models"

# exact conversion factors to SI
FT = 0.3048  # m per international foot
SLUG = 14.593902937206364  # kg per slug (= lbf s^2/ft)
LBF = 4.4482216152605  # N per pound-force
KNOT = 1852.0 / 3600.0  # m/s per knot (nmi/h)
DEG = math.pi / 180.0

UNIT_TO_SI = {
    "s": ("s", 1.0),
    "ft": ("m", FT),
    "deg": ("rad", DEG),
    "ft/s": ("m/s", FT),
    "deg/s": ("rad/s", DEG),
    "nmi/h": ("m/s", KNOT),
    "1": ("1", 1.0),
    "lbf/ft^2": ("Pa", LBF / FT**2),
}

# (original NESC column, canonical name, unit, meaning); the order here is only for documentation,
# the CSVs keep each tool's own column order.
COLUMNS = [
    ("time", "time", "s", "simulation time"),
    ("gePosition_ft_X", "ecef_x", "ft", "position in the Earth-centred Earth-fixed frame, X (equator, prime meridian)"),
    ("gePosition_ft_Y", "ecef_y", "ft", "position in the Earth-centred Earth-fixed frame, Y (equator, 90 deg E)"),
    ("gePosition_ft_Z", "ecef_z", "ft", "position in the Earth-centred Earth-fixed frame, Z (north pole)"),
    ("eiPosition_ft_X", "eci_x", "ft", "position in the Earth-centred inertial frame (coincides with ECEF at t=0), X"),
    ("eiPosition_ft_Y", "eci_y", "ft", "position in the Earth-centred inertial frame, Y"),
    ("eiPosition_ft_Z", "eci_z", "ft", "position in the Earth-centred inertial frame, Z"),
    ("latitude_deg", "lat", "deg", "geodetic latitude"),
    ("longitude_deg", "lon", "deg", "longitude"),
    ("altitudeMsl_ft", "alt", "ft", "height above the reference ellipsoid/sphere (MSL)"),
    ("feVelocity_ft_s_X", "v_north", "ft/s", "Earth-relative velocity in local NED axes, north"),
    ("feVelocity_ft_s_Y", "v_east", "ft/s", "Earth-relative velocity in local NED axes, east"),
    ("feVelocity_ft_s_Z", "v_down", "ft/s", "Earth-relative velocity in local NED axes, down"),
    ("eulerAngle_deg_Roll", "phi", "deg", "roll Euler angle of the body w.r.t. local NED (3-2-1 sequence)"),
    ("eulerAngle_deg_Pitch", "theta", "deg", "pitch Euler angle of the body w.r.t. local NED (3-2-1 sequence)"),
    ("eulerAngle_deg_Yaw", "psi", "deg", "yaw Euler angle of the body w.r.t. local NED (3-2-1 sequence)"),
    ("bodyAngularRateWrtEi_deg_s_Roll", "p", "deg/s", "body angular rate w.r.t. the inertial frame, body x"),
    ("bodyAngularRateWrtEi_deg_s_Pitch", "q", "deg/s", "body angular rate w.r.t. the inertial frame, body y"),
    ("bodyAngularRateWrtEi_deg_s_Yaw", "r", "deg/s", "body angular rate w.r.t. the inertial frame, body z"),
    ("trueAirspeed_nmi_h", "airspeed", "nmi/h", "true airspeed (knots)"),
    ("mach", "mach", "1", "Mach number"),
    ("dynamicPressure_lbf_ft2", "qbar", "lbf/ft^2", "dynamic pressure"),
]
KEEP = {orig: (canon, unit, meaning) for orig, canon, unit, meaning in COLUMNS}
COMPARED = [
    "lat",
    "lon",
    "alt",
    "v_north",
    "v_east",
    "v_down",
    "phi",
    "theta",
    "psi",
    "p",
    "q",
    "r",
    "airspeed",
    "mach",
    "qbar",
    "ecef_x",
    "ecef_y",
    "ecef_z",
    "eci_x",
    "eci_y",
    "eci_z",
]


def si(value: float, unit: str) -> float:
    """`value` in `unit` converted to SI, rounded to 15 significant digits (hides binary noise only)."""
    return float(f"{value * UNIT_TO_SI[unit][1]:.15g}")


def both(name: str, value: float, unit: str, si_unit_tag: str, tag: str) -> dict:
    return {f"{name}_{tag}": value, f"{name}_{si_unit_tag}": si(value, unit)}


# ----------------------------------------------------------------------------------------------------
# planets, atmosphere, vehicles, initial conditions
# ----------------------------------------------------------------------------------------------------
GM_SI = 3.986004418e14  # m^3/s^2, WGS-84
OMEGA = 7.292115e-5  # rad/s, WGS-84
A_WGS84 = 6378137.0  # m
INV_F_WGS84 = 298.257223563
J2_WGS84 = 1.082629821313e-3  # = -sqrt(5) * C20bar of WGS-84 (NIMA TR8350.2)
R_ROUND = 6371007.1809  # m, the round-Earth radius the tools used (20902254.5305 ft)


def _gravitation_j2() -> dict:
    return {
        "model": "J2 (second zonal harmonic) about the WGS-84 ellipsoid, as a function of geocentric position",
        "GM_m3_s2": GM_SI,
        "GM_ft3_s2": float(f"{GM_SI / FT**3:.15g}"),
        "J2": J2_WGS84,
        "reference_radius_m": A_WGS84,
        "reference_radius_ft": float(f"{A_WGS84 / FT:.15g}"),
        "evidence": (
            "every tool's localGravity_ft_s2 at t=0 (lat 0, 30000 ft) equals GM/r^2 (1 + 1.5 J2 (a/r)^2) "
            "with these constants: sim_05 to 0 (exactly), sims 04/06 to 1e-10 ft/s^2; localGravity is the "
            "gravitational attraction only (no centrifugal term). J2 = 1.08262982e-3 also fits; the EGM96 "
            "value 1.08262998905e-3 misses by 8e-9 ft/s^2."
        ),
    }


def _gravitation_point_mass() -> dict:
    return {
        "model": "point mass, g = GM/r^2 (the case's '1/R^2' gravitation)",
        "GM_m3_s2": GM_SI,
        "GM_ft3_s2": float(f"{GM_SI / FT**3:.15g}"),
        "J2": 0.0,
        "evidence": (
            "localGravity_ft_s2 at t=0 times r0^2 gives 1.40764417572e16 ft^3/s^2 = 3.986004418e14 m^3/s^2 "
            "(WGS-84 GM) in sims 04, 05, 06"
        ),
    }


def planet_wgs84() -> dict:
    return {
        "name": "WGS-84 rotating ellipsoidal Earth",
        "shape": "ellipsoid",
        "equatorial_radius_m": A_WGS84,
        "equatorial_radius_ft": float(f"{A_WGS84 / FT:.15g}"),
        "inverse_flattening": INV_F_WGS84,
        "flattening": 1.0 / INV_F_WGS84,
        "rotation_rate_rad_s": OMEGA,
        "rotation_rate_deg_s": float(f"{OMEGA / DEG:.15g}"),
        "gravitation": _gravitation_j2(),
        "evidence": (
            "t=0 ECEF/ECI X - 30000 ft = 20925646.3255 ft = 6378137 m; eiVelocity_Y/eiPosition_X at t=0 = "
            "7.292115e-5 rad/s (sims 04, 05, 06)"
        ),
    }


def planet_round(rotating: bool) -> dict:
    return {
        "name": "spherical Earth, " + ("rotating" if rotating else "non-rotating"),
        "shape": "sphere",
        "radius_m": R_ROUND,
        "radius_ft": float(f"{R_ROUND / FT:.15g}"),
        "rotation_rate_rad_s": OMEGA if rotating else 0.0,
        "rotation_rate_deg_s": float(f"{OMEGA / DEG:.15g}") if rotating else 0.0,
        "gravitation": _gravitation_point_mass(),
        "evidence": (
            "every tool starts at r0 = 20932254.5305 ft = radius + 30000 ft, i.e. radius 20902254.5305 ft = "
            "6371007.1809 m (simupy-flight's case script writes 20902255.199 ft, which is 6371007.1809 m times "
            "3.28084 ft/m and does not match the data). Geodetic latitude equals geocentric latitude. "
            + (
                "Rotation: eiVelocity_Y/eiPosition_X at t=0 = 7.292115e-5 rad/s."
                if rotating
                else "No rotation: eiVelocity is zero at t=0."
            )
        ),
    }


US1976 = "US Standard Atmosphere 1976 (density, pressure, temperature, speed of sound at the altitude MSL)"


def atmosphere(wind: dict) -> dict:
    return {
        "model": US1976,
        "wind": wind,
        "note": (
            "the tools' own 1976 implementations differ slightly: at 30000 ft airDensity is "
            "about 8.9069e-4 slug/ft^3 in sims 03-06, 8.90951e-4 in sim_02 and 8.91300e-4 in sim_01 "
            "(+0.07 %); speed of sound at 15600 ft differs by 0.4 ft/s in sim_03"
        ),
    }


NO_WIND = {"type": "none", "description": "still air (the atmosphere rotates with the Earth)"}

WIND_SHEAR = {
    "type": "altitude_profile",
    "description": (
        "horizontal wind toward the east (NED +E; air moving east, a westerly at altitude) varying "
        "linearly with altitude MSL: +70 ft/s at 30000 ft, -20 ft/s (toward the west) at 0 ft; "
        "north and down components zero"
    ),
    "interpolation": "linear in altitudeMsl (extrapolate linearly outside the table)",
    "alt_ft": [0.0, 30000.0],
    "alt_m": [0.0, si(30000.0, "ft")],
    "wind_north_ft_s": [0.0, 0.0],
    "wind_east_ft_s": [-20.0, 70.0],
    "wind_down_ft_s": [0.0, 0.0],
    "wind_north_m_s": [0.0, 0.0],
    "wind_east_m_s": [si(-20.0, "ft/s"), si(70.0, "ft/s")],
    "wind_down_m_s": [0.0, 0.0],
    "gradient_per_s": 0.003,
    "evidence": (
        "wind recovered from the published data as v_east + sqrt(V_tas^2 - v_north^2 - v_down^2): "
        "sim_04 (V_tas = mach * speedOfSound) matches this profile to 2e-7 ft/s over the whole case, "
        "sim_05 to 1e-3 ft/s (its air data are single precision); at t=0 sims 01/02/04/05 report "
        "V_tas = 41.4739 kn = 70.0 ft/s"
    ),
}


def _inertia(ixx: float, iyy: float, izz: float) -> dict:
    names = {"Ixx": ixx, "Iyy": iyy, "Izz": izz, "Ixy": 0.0, "Iyz": 0.0, "Izx": 0.0}
    return {
        "inertia_slug_ft2": names,
        "inertia_kg_m2": {k: float(f"{v * SLUG * FT**2:.15g}") for k, v in names.items()},
        "inertia_note": "about the centre of mass, body axes; products of inertia zero",
    }


def sphere(cd: float, note: str) -> dict:
    return {
        "name": "sphere (NESC 'cannonball': 1 slug, 6 in diameter)",
        "model_files": [f"{MODEL_DIR}/cannonball_inertia.dml", f"{MODEL_DIR}/cannonball_aero.dml"],
        "mass_slug": 1.0,
        "mass_kg": SLUG,
        **_inertia(3.6, 3.6, 3.6),
        "cm_wrt_mrc_ft": [0.0, 0.0, 0.0],
        "reference_area_ft2": 0.1963495,
        "reference_area_m2": float(f"{0.1963495 * FT**2:.15g}"),
        "aero": {
            "CD": cd,
            "CL": 0.0,
            "CY": 0.0,
            "Cl": 0.0,
            "Cm": 0.0,
            "Cn": 0.0,
            "CD_in_model_file": 0.1,
            "drag": "D = qbar * S * CD, opposite the air-relative velocity; qbar = rho V^2 / 2",
            "note": note,
        },
    }


def brick() -> dict:
    return {
        "name": "tumbling brick (US face brick 8 x 4 x 2.25 in, 5 lbm)",
        "model_files": [f"{MODEL_DIR}/brick_inertia.dml", f"{MODEL_DIR}/brick_aero.dml"],
        "mass_slug": 0.155404754,
        "mass_kg": float(f"{0.155404754 * SLUG:.15g}"),
        **_inertia(0.00189422, 0.006211019, 0.007194665),
        "cm_wrt_mrc_ft": [0.0, 0.0, 0.0],
        "reference_area_ft2": 0.22222,
        "reference_area_m2": float(f"{0.22222 * FT**2:.15g}"),
        "reference_span_ft": 0.33333,
        "reference_span_m": si(0.33333, "ft"),
        "reference_chord_ft": 0.66667,
        "reference_chord_m": si(0.66667, "ft"),
        "aero": {
            "in_this_case": "none: Atmos_02 sets drag and all damping to zero (torque-free, drag-free)",
            "CD": 0.0,
            "Clp": 0.0,
            "Clr": 0.0,
            "Cmq": 0.0,
            "Cnp": 0.0,
            "Cnr": 0.0,
            "model_file_values": {
                "CD": 0.01,
                "CL": 0.0,
                "CY": 0.0,
                "Clp_per_rad": -1.0,
                "Clr_per_rad": 0.0,
                "Cmq_per_rad": -1.0,
                "Cnp_per_rad": 0.0,
                "Cnr_per_rad": -1.0,
                "Cl": "Clp * p*b/(2V) + Clr * r*b/(2V)",
                "Cm": "Cmq * q*c/(2V)",
                "Cn": "Cnp * p*b/(2V) + Cnr * r*b/(2V)",
                "V": "true airspeed (ft/s), minValue 0.5 ft/s in the model file",
                "rates": "body-axis p, q, r in rad/s",
                "used_by": "Atmos_03 (tumbling brick with dynamic damping; its drag is also set to zero)",
                "file_version": "brick_aero.dml Mod C, 2013-04-19 (damping raised a hundred-fold in Mod B)",
            },
        },
    }


def brick_damped() -> dict:
    """Atmos_03's brick: the rate damping of brick_aero.dml (read from the file at run time), drag zero."""
    v = brick()
    v["aero"] = {
        "in_this_case": "rate damping from the DAVE-ML model (Clp, Clr, Cmq, Cnp, Cnr and its airspeed floor); "
        "drag set to zero (the case's 'Drag coefficient set to zero')",
        "dave_ml": "brick_aero.dml",
        "dave_ml_source": f"{MODEL_DIR}/brick_aero.dml",
        "CD": 0.0,
        "model_file_values": v["aero"]["model_file_values"],
    }
    return v


def steady_wind(east_ft_s: float) -> dict:
    return {
        "type": "constant",
        "description": f"steady wind toward the east (from due west) of {east_ft_s:g} ft/s at every altitude",
        "wind_ned_ft_s": [0.0, east_ft_s, 0.0],
        "wind_ned_m_s": [0.0, si(east_ft_s, "ft/s"), 0.0],
    }


def initial_conditions(rates_deg_s: tuple[float, float, float], note: str = "", alt_ft: float = 30000.0,
                       v_ned_ft_s: tuple[float, float, float] = (0.0, 0.0, 0.0),
                       euler_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> dict:
    ic = {
        "frame_note": (
            "geodetic position; Earth-relative velocity in local NED; Euler angles (3-2-1: yaw, pitch, "
            "roll) of the body w.r.t. local NED"
            + (", i.e. body x north, y east, z down" if not any(euler_deg) else "")
            + "; body angular rates w.r.t. the inertial frame, in body axes"
        ),
        "lat_deg": 0.0,
        "lat_rad": 0.0,
        "lon_deg": 0.0,
        "lon_rad": 0.0,
        "alt_ft": alt_ft,
        "alt_m": si(alt_ft, "ft"),
        "v_ned_ft_s": list(v_ned_ft_s),
        "v_ned_m_s": [si(v, "ft/s") for v in v_ned_ft_s],
        "euler_deg": dict(zip(("phi", "theta", "psi"), euler_deg)),
        "euler_rad": {k: si(v, "deg") for k, v in zip(("phi", "theta", "psi"), euler_deg)},
        "body_rates_wrt_inertial_deg_s": {"p": rates_deg_s[0], "q": rates_deg_s[1], "r": rates_deg_s[2]},
        "body_rates_wrt_inertial_rad_s": {k: si(v, "deg/s") for k, v in zip("pqr", rates_deg_s)},
    }
    if note:
        ic["note"] = note
    return ic


ZERO_INERTIAL_RATE = (
    "zero inertial rotation; relative to the rotating Earth/NED frame the body rolls at "
    "-0.004178073 deg/s (the NESC table states the Earth-relative rate [-0.004178073, 0, 0] "
    "deg/s), which is why every tool's roll angle reaches about -0.1254 deg at 30 s"
)

RUN = {
    "duration_s": 30.0,
    "published_output_interval_s": 0.1,
    "integration_step_s": None,
    "integration_note": (
        "the published data do not state an integrator or step: each tool used its own. "
        "Outputs are at 0.1 s (sim_05: 0.01 s with single-precision time stamps)."
    ),
}

SPHERE_DRAG_NOTE = "constant CD from cannonball_aero.dml; no lift, side force or moments"

CASES: dict[str, dict] = {
    "01": {
        "title": "Dropped sphere with no drag",
        "description": (
            "A dragless sphere dropped from 30000 ft above the Equator/prime-meridian intersection "
            "(initially at rest relative to the rotating Earth, zero inertial rotation) falls for "
            "30 s under J2 gravitation over the rotating WGS-84 Earth. Verifies gravitation and "
            "the translational equations of motion."
        ),
        "verifies": "gravitation, translational EOM",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.0, "CD set to zero for this case (dragless); mass properties are irrelevant"),
        "ic": lambda: initial_conditions((0.0, 0.0, 0.0), ZERO_INERTIAL_RATE),
        "oddities": [
            "the issue/brief called Atmos_01 a non-rotating spherical Earth: it is not, it is the rotating "
            "WGS-84 ellipsoid with J2 (the round non-rotating drop with drag is Atmos_04)",
        ],
    },
    "02": {
        "title": "Tumbling brick with no damping or drag",
        "description": (
            "A brick dropped from 30000 ft with initial inertial body rates of 10, 20, 30 deg/s "
            "(roll, pitch, yaw) and no aerodynamic force or moment: torque-free rotation of an "
            "asymmetric body while it falls. Verifies the rotational equations of motion."
        ),
        "verifies": "rotational EOM",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": brick,
        "ic": lambda: initial_conditions((10.0, 20.0, 30.0)),
        "oddities": [
            "no sim_03 file (that tool published no attitude)",
            "sims 01/04/05 agree to 1e-4 deg in Euler angles and 5e-5 deg/s in body rates over the whole case; "
            "sim_06 is off them by up to 0.01 deg and 5e-3 deg/s; sim_02's Euler angles drift by up to 3.7 deg "
            "(roll -59.86 vs -56.15 deg at 30 s) while its body rates stay within 1.2e-3 deg/s",
        ],
    },
    "04": {
        "title": "Dropped sphere over non-rotating, spherical Earth",
        "description": (
            "A sphere with constant CD dropped from 30000 ft over a non-rotating spherical Earth "
            "with 1/R^2 gravitation and the 1976 atmosphere. Verifies gravitation and integration "
            "with drag."
        ),
        "verifies": "gravitation, integration (with drag)",
        "planet": lambda: planet_round(False),
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions(
            (10.0, 20.0, 30.0),
            "the sphere spins at 10, 20, 30 deg/s (inertial); isotropic inertia keeps the "
            "rates constant and the spin does not affect the trajectory",
        ),
        "oddities": [
            "only sims 02, 04, 05, 06 published this case",
            "sim_02 is an outlier: it starts with v_north = 0.01 ft/s (not 0) and ends 18 ft higher (16249.4 vs "
            "16231.3 ft), v_down 1.07 ft/s and airspeed 0.62 kn off, Euler angles up to 5.2 deg off; sims "
            "04/05/06 agree to 0.006 ft, 7e-4 ft/s and 1e-8 deg",
        ],
    },
    "05": {
        "title": "Dropped sphere over rotating, spherical Earth",
        "description": (
            "Atmos_04 with the spherical Earth rotating at the WGS-84 rate: the sphere starts at "
            "rest relative to the rotating Earth. Verifies the Earth-rotation terms."
        ),
        "verifies": "Earth rotation",
        "planet": lambda: planet_round(True),
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions((10.0, 20.0, 30.0), "spin as in Atmos_04"),
        "oddities": [
            "only sims 02, 04, 05, 06 published this case",
            "sim_02 is an outlier as in Atmos_04 (v_north = 0.01 ft/s at t=0, 18 ft high at 30 s, Euler angles "
            "up to 5.2 deg off); sims 04/05/06 agree to 0.006 ft",
        ],
    },
    "06": {
        "title": "Dropped sphere over rotating, ellipsoidal Earth",
        "description": (
            "The sphere with constant CD dropped from 30000 ft over the rotating WGS-84 ellipsoid "
            "with J2 gravitation, still air. Verifies the ellipsoidal geodesy."
        ),
        "verifies": "ellipsoidal Earth (WGS-84)",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions((0.0, 0.0, 0.0), ZERO_INERTIAL_RATE),
        "oddities": [
            "altitude spread: sims 04/05/06 agree to 0.006 ft; sim_02, sim_01 and sim_03 are off their median "
            "by up to 0.13, 0.27 and 0.62 ft (v_down by 0.016, 0.04, 0.10 ft/s), following their atmosphere "
            "models (see atmosphere.note)",
        ],
    },
    "08": {
        "title": "Sphere dropped through a varying wind field (2D wind shear)",
        "description": (
            "The sphere with constant CD dropped from 30000 ft over the rotating WGS-84 ellipsoid "
            "through an eastward wind that varies linearly with altitude (70 ft/s at 30000 ft, "
            "-20 ft/s at sea level). Verifies wind handling and wind shear."
        ),
        "verifies": "2D winds / wind shear",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(WIND_SHEAR),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions(
            (0.0, 0.0, 0.0),
            ZERO_INERTIAL_RATE + "; the sphere starts at rest relative to the ground, so "
            "the 70 ft/s wind acts from t=0",
        ),
        "oddities": [
            "sim_06's t=0 row reports airspeed, Mach and dynamic pressure 0 although the wind is 70 ft/s "
            "(its later rows are consistent); skip t=0 when comparing its air data",
            "altitude spread as in Atmos_06: sims 04/05/06 within 0.006 ft, sims 02/01/03 off by up to 0.13, "
            "0.28, 0.62 ft",
        ],
    },
}

EARTH_RATE_DEG_S = float(f"{OMEGA / DEG:.15g}")
LAUNCH_NOTE = (
    "launched from the surface at sqrt(2000) ft/s, 45 deg above the horizon; zero angular rate relative to "
    "the launch platform, so the inertial body rate is the Earth's rotation in body axes (every tool's t=0 row)"
)
CASES.update({
    "03": {
        "title": "Tumbling brick with dynamic damping, no drag",
        "description": (
            "Atmos_02's brick (initial inertial body rates 10, 20, 30 deg/s) with the rate damping of the "
            "brick aero model (Clp, Cmq, Cnr) and no drag, dropped from 30000 ft over the rotating WGS-84 Earth "
            "with J2. Verifies the inertial coupling with a dynamic damping model."
        ),
        "verifies": "inertial coupling, dynamic damping",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": brick_damped,
        "ic": lambda: initial_conditions((10.0, 20.0, 30.0)),
        "oddities": ["only sims 01, 02, 04, 05, 06 published this case"],
    },
    "07": {
        "title": "Sphere dropped through a steady wind field",
        "description": (
            "The sphere with constant CD dropped from 30000 ft over the rotating WGS-84 ellipsoid with J2 "
            "through a steady 20 ft/s wind from due west. Verifies wind effects."
        ),
        "verifies": "steady wind",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(steady_wind(20.0)),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions((0.0, 0.0, 0.0), ZERO_INERTIAL_RATE + "; at rest relative to the "
                                         "ground, so the 20 ft/s wind acts from t=0"),
        "oddities": [
            "sim_06's t=0 row reports airspeed, Mach and dynamic pressure 0 although the wind already blows",
        ],
    },
    "09": {
        "title": "Sphere launched ballistically eastward along the Equator",
        "description": (
            "The sphere with constant CD launched from sea level at (0, 0) eastward, sqrt(2000) ft/s at 45 deg "
            "(1000 ft/s east, 1000 ft/s up), over the rotating WGS-84 ellipsoid with J2, still air. Verifies "
            "the translational equations of motion over the rotating Earth."
        ),
        "verifies": "translational EOM, Earth rotation",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions((0.0, -EARTH_RATE_DEG_S, 0.0), LAUNCH_NOTE + " (heading east: body x "
                                         "east, y south, so q = -omega)", alt_ft=0.0,
                                         v_ned_ft_s=(0.0, 1000.0, -1000.0), euler_deg=(0.0, 0.0, 90.0)),
        "oddities": [
            "tools round the Earth rate in their initial q: sim_04 -0.00417807, sim_02 -0.0041768623 deg/s",
        ],
    },
    "10": {
        "title": "Sphere launched ballistically northward along the prime meridian",
        "description": (
            "As Atmos_09 but launched northward (1000 ft/s north, 1000 ft/s up) along the prime meridian. "
            "Verifies the Coriolis terms."
        ),
        "verifies": "Coriolis",
        "planet": planet_wgs84,
        "atmosphere": lambda: atmosphere(NO_WIND),
        "vehicle": lambda: sphere(0.1, SPHERE_DRAG_NOTE),
        "ic": lambda: initial_conditions((EARTH_RATE_DEG_S, 0.0, 0.0), LAUNCH_NOTE + " (heading north: body x "
                                         "north, so p = +omega)", alt_ft=0.0, v_ned_ft_s=(1000.0, 0.0, -1000.0)),
        "oddities": [
            "tools round the Earth rate in their initial p: sim_01 0.00417807, sim_02 0.0041768623 deg/s",
        ],
    },
})
CASES = dict(sorted(CASES.items()))

# (tools the remark concerns, remark): added to a case's oddities when one of those tools published it
COMMON_ODDITIES = [
    (
        {"05"},
        "sim_05 (0.01 s output) repeats feVelocity_ft_s_Z as its last column (identical values); the copy is "
        "dropped here. Its time stamps and air data are single precision (t = 0.30000001..., up to 7.6e-7 s off "
        "the 0.1 s grid after decimation; airspeed/Mach/qbar good to ~1e-7 relative)",
    ),
    (
        {"06"},
        "sim_06's trueAirspeed_nmi_h uses 1 kn = 1.687830292 ft/s (exact: 1.687809857), so its airspeed is "
        "1.2e-5 relative below |v| and its own mach * speedOfSound; compare airspeed with that in mind",
    ),
    (
        {"01", "02", "03", "04"},
        "tools publish different column sets: sim_02 has no ECEF/ECI position and no dynamic pressure; "
        "sim_03 has no attitude, body rates or air data; sim_04 has no true airspeed; sim_01/sim_03 give ECEF "
        "(gePosition) only and sim_04 ECI (eiPosition) only; sims 05/06 give both",
    ),
    (
        {"01"},
        "sim_01's dynamic pressure is up to 0.6 lbf/ft^2 (0.09 %) above the others', following its 0.07 % "
        "higher air density",
    ),
    (
        {"01", "02", "03", "04", "05", "06"},
        "angles are in degrees; yaw and roll can wrap at +/-180 deg: compare angle differences modulo 360",
    ),
]

NOT_BUNDLED = {
    "11": "Subsonic F-16 trimmed flight across the Earth (10000 ft over KFFA, 45 deg course, 335.15 KTAS)",
    "12": "Supersonic F-16 trimmed flight across the Earth",
    "13": "F-16 with a simple autopilot: 13.1 altitude +100 ft, 13.2 airspeed -5 KEAS, 13.3 heading +15 deg, "
    "13.4 2000-ft lateral offset",
    "14": "no data in the simupy-flight mirror; not identified from the sources read here",
    "15": "Circular F-16 flight around the North Pole (geodetic transforms near the pole)",
    "16": "Circular F-16 flight around the Equator/dateline intersection (sign changes in lat/lon)",
    "17": "Two-stage rocket to orbit (data for sims 04, 05, 06 in the mirror's Atmos_17 folder)",
}


# ----------------------------------------------------------------------------------------------------
# reading the repository (work tree or bare git directory)
# ----------------------------------------------------------------------------------------------------
class Source:
    def __init__(self, root: Path, commit: str | None) -> None:
        self.root = root
        self.worktree = (root / CHECKCASE_DIR).is_dir()
        is_git = (root / ".git").exists() or self._git("rev-parse", "--is-bare-repository").strip() == "true"
        self.commit = commit or (self._git("rev-parse", "HEAD").strip() if is_git else "") or "unknown"
        if not self.worktree and self.commit == "unknown":
            sys.exit(f"{root}: neither a simupy-flight work tree nor a git directory")

    def _git(self, *args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(self.root), *args], check=True, capture_output=True, text=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""

    def list(self, folder: str) -> list[str]:
        if self.worktree:
            return sorted(str(p.relative_to(self.root)) for p in (self.root / folder).rglob("*") if p.is_file())
        return sorted(self._git("ls-tree", "-r", "--name-only", "HEAD", "--", folder).split())

    def read(self, path: str) -> str:
        if self.worktree:
            return (self.root / path).read_text()
        text = self._git("show", f"HEAD:{path}")
        if not text:
            sys.exit(f"cannot read {path} from {self.root}")
        return text


# ----------------------------------------------------------------------------------------------------
# extraction
# ----------------------------------------------------------------------------------------------------
def extract_tool(text: str, period: float) -> tuple[list[str], list[list[str]], dict]:
    """Keep the wanted columns (verbatim text) and every k-th row; returns header, rows and a record."""
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    header, body = [h.strip() for h in rows[0]], rows[1:]
    dropped = []
    keep = []
    for i, name in enumerate(header):
        if name not in KEEP:
            continue
        first = header.index(name)
        if first != i:  # repeated column: must repeat the first one exactly
            if any(r[i] != r[first] for r in body):
                sys.exit(f"column {name} repeated with different values")
            dropped.append(f"{name} (column {i}, repeat of column {first})")
            continue
        keep.append(i)
    times = [float(r[0]) for r in body]
    dt = statistics.median(b - a for a, b in zip(times, times[1:]))
    k = max(1, round(period / dt))
    out = [[r[i].strip() for i in keep] for r in body[::k]]
    record = {
        "source_rows": len(body),
        "source_output_interval_s": round(dt, 6),
        "keep_every": k,
        "rows": len(out),
        "t_first_s": float(out[0][0]),
        "t_last_s": float(out[-1][0]),
    }
    if dropped:
        record["dropped_repeated_columns"] = dropped
    return [header[i] for i in keep], out, record


def checks(case: dict, sim05: dict) -> dict:
    """Planet constants of the case against sim_05's published t=0 state (position, rotation, gravity)."""
    planet = case["planet"]
    r0 = sim05["eiPosition_ft_X"] * FT
    out: dict = {"tool": "sim_05", "t": 0.0}
    surface = planet.get("equatorial_radius_m", planet.get("radius_m"))
    out["r0_m_published"] = r0
    out["r0_m_from_case"] = surface + case["initial_conditions"]["alt_m"]
    omega = sim05["eiVelocity_ft_s_Y"] * FT / r0
    out["rotation_rate_rad_s_published"] = omega
    gm, j2 = planet["gravitation"]["GM_m3_s2"], planet["gravitation"]["J2"]
    a = planet.get("equatorial_radius_m", surface)
    g_case = gm / r0**2 * (1 + 1.5 * j2 * (a / r0) ** 2)  # radial gravitation at the equator
    out["gravity_m_s2_published"] = sim05["localGravity_ft_s2"] * FT
    out["gravity_m_s2_from_case"] = g_case
    out["gravity_relative_residual"] = float(f"{out['gravity_m_s2_published'] / g_case - 1:.3g}")
    return out


def build(source: Source, out_dir: Path, period: float) -> list[Path]:
    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    index: dict = {
        "description": "NESC 2015 atmospheric check cases: published trajectories of six simulation tools",
        "report": REPORT,
        "repository": REPO_URL,
        "commit": source.commit,
        "period_s": period,
        "bundled": {},
        "not_bundled": {f"Atmos_{num}": text for num, text in NOT_BUNDLED.items()},
    }
    files = source.list(CHECKCASE_DIR)
    for num, spec in CASES.items():
        paths = [p for p in files if Path(p).name.startswith(f"Atmos_{num}_sim_") and p.endswith(".csv")]
        folder = Path(paths[0]).parent.name
        case = {
            "case": f"Atmos_{num}",
            "nesc_folder": folder,
            "title": spec["title"],
            "description": spec["description"],
            "verifies": spec["verifies"],
            "source": {
                "report": REPORT,
                "data_site": DATA_SITE,
                "repository": REPO_URL,
                "commit": source.commit,
                "files": {},
                "licence": (
                    "NASA public data (US Government work; the trajectories and models are published "
                    "for anyone to compare against). simupy-flight's code (NASA Open Source Agreement "
                    "1.3) is not used here."
                ),
                "note": "simupy-flight's NESC_data/README.rst: data accessed from the NESC site in summer 2020",
            },
            "planet": spec["planet"](),
            "atmosphere": spec["atmosphere"](),
            "vehicle": spec["vehicle"](),
            "initial_conditions": spec["ic"](),
            "run": dict(RUN),
            "bundled": {
                "period_s": period,
                "format": (
                    "one CSV per tool: a header row of the tool's original column names, then data rows; "
                    "the text of every value is copied verbatim from the source"
                ),
                "tools": {},
            },
            "units": {unit: {"si_unit": s, "to_si_factor": f} for unit, (s, f) in UNIT_TO_SI.items()},
            "compared_columns": COMPARED,
            "column_dictionary": {
                canon: {"nesc_column": orig, "unit": unit, "meaning": meaning} for orig, canon, unit, meaning in COLUMNS
            },
            "columns": {},
            "oddities": list(spec["oddities"]),
        }
        sim05 = None
        for path in paths:
            sim = Path(path).stem.split("_sim_")[1]
            header, rows, record = extract_tool(source.read(path), period)
            name = f"atmos_{num}_sim_{sim}.csv"
            with open(out_dir / name, "w", newline="") as fh:
                fh.write(",".join(header) + "\n")
                fh.writelines(",".join(r) + "\n" for r in rows)
            written.append(out_dir / name)
            record["file"] = name
            case["source"]["files"][f"sim_{sim}"] = path
            case["bundled"]["tools"][f"sim_{sim}"] = record
            names = {KEEP[h][0]: {"column": h, "unit": KEEP[h][1]} for h in header}
            names["missing"] = [c for c in COMPARED if c not in names]
            case["columns"][f"sim_{sim}"] = names
            if sim == "05":
                full = [r for r in csv.reader(io.StringIO(source.read(path))) if r]
                sim05 = dict(zip(full[0], (float(x) for x in full[1])))
        present = {sim[4:] for sim in case["bundled"]["tools"]}
        case["oddities"] += [text for tools, text in COMMON_ODDITIES if tools & present]
        if sim05 is not None:
            case["checks_against_data"] = checks(case, sim05)
        dml = case["vehicle"]["aero"].get("dave_ml_source")
        if dml:  # the aero model the runner reads (rollout/verify/daveml.py), copied verbatim
            (out_dir / case["vehicle"]["aero"]["dave_ml"]).write_text(source.read(dml))
            written.append(out_dir / case["vehicle"]["aero"]["dave_ml"])
            case["source"]["files"]["dave_ml"] = dml
        json_path = out_dir / f"atmos_{num}.json"
        json_path.write_text(json.dumps(case, indent=1) + "\n")
        written.append(json_path)
        index["bundled"][case["case"]] = {
            "title": case["title"],
            "json": json_path.name,
            "csv": {sim: rec["file"] for sim, rec in case["bundled"]["tools"].items()},
        }
    index_path = out_dir / "index.json"
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    written.append(index_path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("simupy_flight", type=Path, help="simupy-flight checkout (work tree or bare git dir)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "data" / "nesc")
    parser.add_argument("--period", type=float, default=0.1, help="output period kept, s (default 0.1)")
    parser.add_argument("--commit", help="commit hash to record when the checkout is not a git repository")
    args = parser.parse_args(argv)
    source = Source(args.simupy_flight, args.commit)
    written = build(source, args.out, args.period)
    total = sum(p.stat().st_size for p in written)
    print(f"{len(written)} files, {total / 1e6:.2f} MB, from {REPO_URL} @ {source.commit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
