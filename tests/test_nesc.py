"""NESC 2015 atmospheric check cases (rollout/verify/nesc.py): the case builder's initial state and forces by
hand, the comparison's angle handling, the DAVE-ML reader, the vehicle's slide + ball layout against MuJoCo's free
joint, every bundled case (Atmos_01-10) with RK4 at 0.01 s on MuJoCo C inside the published tools' spread on
every compared column (3 s of each; Atmos_03, the damped brick, over its whole 30 s), Dormand-Prince at 1e-10
(Atmos_06, the case whose body rate p left the floor before the slide + ball layout), MJX float64 (Atmos_03 and
09, short), a case file in --cases-dir naming raw NASA CSVs, and malformed case files."""

from __future__ import annotations

import dataclasses
import json

import mujoco
import numpy as np
import pytest

from mjharness.environment import WGS84, j2_acceleration, us1976
from mjharness.rollout.cli import main as cli_main
from mjharness.rollout.verify.case_checks import CaseError
from mjharness.rollout.verify.daveml import daveml_aero
from mjharness.rollout.verify.nesc import FLOORS, NESC_CASES, _column_figures, published, run_nesc
from mjharness.rollout.verify.nesc_case import (
    NESC_DIR,
    load_nesc,
    nesc_atmosphere,
    nesc_initial_state,
    nesc_planet,
    nesc_vehicle,
    nesc_wrench,
    nesc_xml,
)

COLUMNS = ("lat", "lon", "alt", "v_north", "v_east", "v_down", "phi", "theta", "psi", "p", "q", "r",
           "airspeed", "mach", "qbar", "ecef_x", "ecef_y", "ecef_z", "eci_x", "eci_y", "eci_z")


class _Data:
    def __init__(self, x):
        self.qpos, self.qvel = x[..., :7], x[..., 7:]


def test_initial_state_and_forces_by_hand():
    case = load_nesc("nesc_atmos_06")
    planet, vehicle = nesc_planet(case), nesc_vehicle(case)
    assert planet == dataclasses.replace(WGS84, name=planet.name)
    assert vehicle.cd == 0.1 and vehicle.mass == 14.593902937206364
    x = nesc_initial_state(case, planet)
    r = WGS84.semi_major_axis + 9144.0          # 30,000 ft over (0, 0)
    # at rest on the rotating Earth: omega x r east (ECI +y); body x north (ECI +z), z down: -90 deg about y
    assert np.allclose(x[:3], [r, 0, 0], atol=1e-8) and np.allclose(x[7:10], [0, WGS84.rotation_rate * r, 0])
    assert np.allclose(x[3:7], [np.sqrt(0.5), 0, -np.sqrt(0.5), 0], atol=1e-15) and np.all(x[10:] == 0)
    provider = nesc_wrench(case, planet, nesc_atmosphere(case, planet), vehicle)
    w = np.asarray(provider(np.zeros(1), None, _Data(x[None]))["qfrc"])
    assert w.shape == (1, 6)
    # at rest in still air: no drag, gravity m g(r) only; a 100 m/s downward air-relative speed: drag up
    assert np.allclose(w[0, :3], vehicle.mass * np.asarray(j2_acceleration(x[:3])), rtol=1e-15)
    x[7] -= 100.0
    w2 = np.asarray(provider(np.zeros(1), None, _Data(x[None]))["qfrc"])
    drag = 0.5 * float(us1976(9144.0).density) * 100.0 ** 2 * 0.1 * vehicle.area
    assert np.allclose(w2[0, :3] - w[0, :3], [drag, 0, 0], rtol=1e-12) and np.all(w2[0, 3:] == 0)


def test_damping_from_the_dave_ml_file_and_its_airspeed_floor(tmp_path):
    aero = daveml_aero(NESC_DIR.joinpath("brick_aero.dml"))
    # brick_aero.dml Mod C: CLP/CMQ/CNR_DAMPING -1 /rad, CLR/CNP 0, CD 0.01, VRW minValue 0.5 ft/s
    assert aero == dict(CD=0.01, Clp=-1.0, Clr=0.0, Cmq=-1.0, Cnp=0.0, Cnr=-1.0, airspeed_min_m_s=0.5 * 0.3048)
    case = load_nesc("nesc_atmos_03")
    planet, vehicle = nesc_planet(case), nesc_vehicle(case)
    assert vehicle.cd == 0.0 and vehicle.damping == (-1.0, 0.0, -1.0, 0.0, -1.0)     # the case's CD = 0 wins
    x = nesc_initial_state(case, planet)
    provider = nesc_wrench(case, planet, nesc_atmosphere(case, planet), vehicle)
    rho = float(us1976(9144.0).density)
    for v_air in (10.0, 0.1):   # above and below the floor: L = q̄ S b Clp p b / (2 max(V, 0.1524 m/s))
        y = x.copy()
        y[7] -= v_air
        moment = np.asarray(provider(np.zeros(1), None, _Data(y[None]))["qfrc"])[0, 3:]
        qbar, (p, q, r) = 0.5 * rho * v_air ** 2, y[10:]
        span, chord, area, vf = vehicle.span, vehicle.chord, vehicle.area, max(v_air, 0.1524)
        expect = qbar * area * np.array([-span * p * span, -chord * q * chord, -span * r * span]) / (2 * vf)
        assert np.allclose(moment, expect, rtol=1e-12), (v_air, moment, expect)
    bad = tmp_path / "bad.dml"
    bad.write_text('<DAVEfunc xmlns="http://daveml.org/2010/DAVEML"><variableDef name="c" varID="CLP_DAMPING" '
                   'units="_rad"/></DAVEfunc>')
    with pytest.raises(CaseError, match="CLP_DAMPING is not a constant"):
        daveml_aero(bad)


def test_slide_ball_layout_is_the_free_body_without_its_rounding():
    """The vehicle's slides + ball give a free joint's accelerations; at 500 m/s the free joint's rotation picks
    up m|v|² rounding (torque-free sphere, isotropic: the exact angular acceleration is 0), the layout does not."""
    case = load_nesc("nesc_atmos_10")
    vehicle = nesc_vehicle(case)
    two = mujoco.MjModel.from_xml_string(nesc_xml(case, vehicle))
    inertia = " ".join(map(repr, vehicle.inertia))
    free = mujoco.MjModel.from_xml_string(
        f'<mujoco><option gravity="0 0 0"/><worldbody><body><freejoint/><inertial pos="0 0 0" '
        f'mass="{vehicle.mass!r}" diaginertia="{inertia}"/></body></worldbody></mujoco>')
    rng = np.random.default_rng(1)
    worst_free = 0.0
    for speed in (1.0, 500.0):
        for _ in range(20):
            datas = [mujoco.MjData(m) for m in (two, free)]
            q = rng.normal(size=4)
            qpos = np.concatenate([[6.4e6, 1e3, 2e3], q / np.linalg.norm(q)])
            qvel = np.concatenate([rng.normal(size=3) * speed, [7.29e-5, 0.0, 0.0]])
            frc = np.concatenate([rng.normal(size=3) * 150, [0.0, 0.0, 0.0]])
            for d in datas:
                d.qpos[:], d.qvel[:], d.qfrc_applied[:] = qpos, qvel, frc
            mujoco.mj_forward(two, datas[0])
            mujoco.mj_forward(free, datas[1])
            assert np.allclose(datas[0].qacc[:3], frc[:3] / vehicle.mass, rtol=1e-15, atol=0)
            assert np.all(np.abs(datas[0].qacc[3:]) < 1e-20)   # ω × Iω of an isotropic body: rounding of 1e-25
            assert np.allclose(datas[1].qacc[:3], datas[0].qacc[:3], rtol=1e-12)
            worst_free = max(worst_free, float(np.abs(datas[1].qacc[3:]).max()))
    assert worst_free > 1e-11        # the free joint's rounding the layout removes


def test_comparison_wraps_angles_and_reads_published_units():
    tools = {"a": np.array([179.9, 179.95]), "b": np.array([-179.9, -179.95])}
    f = _column_figures(np.array([180.0, -180.0]), tools, True, FLOORS["deg"])
    assert f["deviation"] < 1e-9 and abs(f["spread"] - 0.2) < 1e-9 and f["tolerance"] == f["spread"]
    case = load_nesc("nesc_atmos_01")
    pub = published(case, np.array([0.0, 30.0]))
    assert set(pub) == set(COLUMNS) and pub["alt"][0] == "ft"
    assert all(abs(v[0] - 30000.0) < 1e-6 for v in pub["alt"][1].values()) and len(pub["alt"][1]) == 6
    assert set(pub["qbar"][1]) == {"sim_01", "sim_04", "sim_05", "sim_06"}   # sim_02/03 publish no qbar


def _inside(r):
    assert r.gated and r.passed, r.details["columns"]
    cols = r.details["columns"]
    assert set(cols) == set(COLUMNS)
    for c, f in cols.items():
        assert f["deviation"] <= max(f["spread"], f["floor"]), (c, f)
    return cols


@pytest.mark.parametrize("name", sorted(set(NESC_CASES) - {"nesc_atmos_03"}))   # whole cases: docs/nesc.md
def test_every_bundled_case_inside_the_tools_spread_short(name):
    r = run_nesc(name, duration=1.0)
    assert r.duration == pytest.approx(1.0, abs=1e-9)
    _inside(r)


def test_damped_brick_whole_case_and_nearest_tool():
    """Atmos_03 over its 30 s: the damping read from brick_aero.dml; our body rates within 4e-4 deg/s of sim_04
    (the tools' spread: 0.03-0.07 deg/s)."""
    cols = _inside(run_nesc("nesc_atmos_03"))
    for c in ("p", "q", "r"):
        assert cols[c]["nearest_deviation"] < 4e-4 < cols[c]["spread"], (c, cols[c])
    assert cols["alt"]["nearest_deviation"] < 1e-6      # dragless: the fall is Atmos_02's


def test_adaptive_run_inside_the_spread_with_exact_zero_rates():
    """Dormand-Prince at rtol = atol = 1e-10 stepping to each 0.1 s: the torque-free sphere's p, q stay exactly
    0 as every tool prints them (they left the 1e-9 deg/s floor with the free joint's rounding)."""
    r = run_nesc("nesc_atmos_06", "dormand_prince", duration=5.0)
    assert r.integrator == "dormand_prince(rtol=1e-10)"
    cols = _inside(r)
    assert cols["p"]["deviation"] == 0.0 and cols["q"]["deviation"] == 0.0
    assert cols["alt"]["nearest_deviation"] < 1e-4


@pytest.mark.slow   # 7.5 s with the JAX compile cache warm; a cold cache traces and compiles MJX's step
@pytest.mark.parametrize("name", ["nesc_atmos_03"])      # the damped brick: DAVE-ML damping traced into MJX
def test_mjx_float64_matches_c_and_the_tools(name):
    mjx = run_nesc(name, duration=1.0, backend="mjx")
    c = run_nesc(name, duration=1.0)
    _inside(mjx)
    for col, f in mjx.details["columns"].items():
        g = c.details["columns"][col]
        assert abs(f["deviation"] - g["deviation"]) <= 1e-6 * max(g["spread"], g["floor"]), (col, f, g)


def _held_out(tmp_path, **changes):
    """A case file in tmp_path built like acceptance's: Atmos_07's definition naming NASA-format CSVs."""
    case = json.loads(NESC_DIR.joinpath("atmos_07.json").read_text())
    refs = {}
    for sim, rec in case["bundled"]["tools"].items():   # the bundled CSVs keep NASA's own header names
        (tmp_path / f"raw_{sim}.csv").write_text(NESC_DIR.joinpath(rec["file"]).read_text())
        refs[sim] = f"raw_{sim}.csv"
    for k in ("bundled", "columns", "units", "column_dictionary", "compared_columns"):
        del case[k]
    case["references"] = refs
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = case
        for k in path:
            node = node[k]
        if value is None:
            del node[last]
        else:
            node[last] = value
    (tmp_path / "held_out.json").write_text(json.dumps(case))
    return tmp_path


def test_case_file_in_cases_dir_with_raw_nasa_csvs(tmp_path, capsys):
    d = str(_held_out(tmp_path))
    r = run_nesc("held_out", duration=2.0, cases_dir=d)
    _inside(r)
    assert cli_main(["cases", "--cases-dir", d, "held_out", "--duration", "1"]) == 0
    out = capsys.readouterr().out
    assert "held_out" in out and "2 passed, 0 failed" in out      # RK4 and Dormand-Prince


@pytest.mark.parametrize("change, message", [
    ({"vehicle.mass_kg": None}, "field 'vehicle.mass_kg' must be a number (missing)"),
    ({"initial_conditions.v_ned_m_s": [0, 0]}, "field 'initial_conditions.v_ned_m_s' must be list of 3 numbers"),
    ({"atmosphere.wind.type": "gusts"}, "field 'atmosphere.wind.type' is 'gusts'"),
    ({"atmosphere.wind.wind_ned_m_s": None}, "field 'atmosphere.wind.wind_ned_m_s'"),
    ({"references": {"sim_01": "nowhere.csv"}}, "tool sim_01's CSV .*nowhere.csv: unreadable"),
    ({"initial_conditions.body_rates_wrt_inertial_rad_s": {"p": 0, "q": 0}},
     r"field 'initial_conditions.body_rates_wrt_\*_rad_s.r' must be a number"),
])
def test_malformed_case_file_is_one_error_naming_file_and_field(tmp_path, change, message):
    d = str(_held_out(tmp_path, **change))
    with pytest.raises(CaseError, match="held_out.json: " + message.replace("(", r"\(").replace(")", r"\)")):
        run_nesc("held_out", duration=1.0, cases_dir=d)


def test_cli_runs_a_nesc_case(capsys):
    assert cli_main(["cases", "nesc_atmos_04", "--duration", "2"]) == 0
    out = capsys.readouterr().out
    assert "nesc_atmos_04" in out and "tool spread" in out and "2 passed, 0 failed" in out
    assert cli_main(["cases", "--list"]) == 0
    assert "nesc_atmos_10" in capsys.readouterr().out
