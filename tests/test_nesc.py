"""NESC 2015 atmospheric check cases (rollout/verify/nesc.py): the case builder's initial state and forces by
hand, the comparison's angle handling, and Atmos_01 (dragless sphere, WGS-84 + J2, rotating Earth) and Atmos_06
(sphere with drag) over their whole 30 s with RK4 at 0.01 s on MuJoCo C inside the published tools' spread on
every compared column. Each case is one scene, one compiled chunk (about 5 s on 2 cores)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mjharness.environment import WGS84, j2_acceleration, us1976
from mjharness.rollout.cli import main as cli_main
from mjharness.rollout.verify.nesc import FLOORS, _column_figures, published, run_nesc
from mjharness.rollout.verify.nesc_case import (
    load_nesc,
    nesc_atmosphere,
    nesc_initial_state,
    nesc_planet,
    nesc_vehicle,
    nesc_wrench,
)

COLUMNS = ("lat", "lon", "alt", "v_north", "v_east", "v_down", "phi", "theta", "psi", "p", "q", "r",
           "airspeed", "mach", "qbar")


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
    w = np.asarray(nesc_wrench(case, planet, nesc_atmosphere(case, planet), vehicle)(np.zeros(1), None,
                                                                                    _Data(x[None])))
    assert w.shape == (1, 2, 6) and np.all(w[:, 0] == 0)
    # at rest in still air: no drag, gravity m g(r) only; a 100 m/s downward air-relative speed: drag up
    assert np.allclose(w[0, 1, :3], vehicle.mass * np.asarray(j2_acceleration(x[:3])), rtol=1e-15)
    x[7] -= 100.0
    w2 = np.asarray(nesc_wrench(case, planet, nesc_atmosphere(case, planet), vehicle)(np.zeros(1), None,
                                                                                     _Data(x[None])))
    drag = 0.5 * float(us1976(9144.0).density) * 100.0 ** 2 * 0.1 * vehicle.area
    assert np.allclose(w2[0, 1, :3] - w[0, 1, :3], [drag, 0, 0], rtol=1e-12) and np.all(w2[0, 1, 3:] == 0)


def test_comparison_wraps_angles_and_reads_published_units():
    tools = {"a": np.array([179.9, 179.95]), "b": np.array([-179.9, -179.95])}
    f = _column_figures(np.array([180.0, -180.0]), tools, True, FLOORS["deg"])
    assert f["deviation"] < 1e-9 and abs(f["spread"] - 0.2) < 1e-9 and f["tolerance"] == f["spread"]
    case = load_nesc("nesc_atmos_01")
    pub = published(case, np.array([0.0, 30.0]))
    assert set(pub) == set(COLUMNS) and pub["alt"][0] == "ft"
    assert all(abs(v[0] - 30000.0) < 1e-6 for v in pub["alt"][1].values()) and len(pub["alt"][1]) == 6
    assert set(pub["qbar"][1]) == {"sim_01", "sim_04", "sim_05", "sim_06"}   # sim_02/03 publish no qbar


@pytest.mark.parametrize("name, sharp", [
    # our largest deviation from the nearest tool (sim_04 or sim_05/06), a sharper figure than the spread
    ("nesc_atmos_01", dict(alt=1e-3, v_down=1e-4, airspeed=1e-3)),
    ("nesc_atmos_06", dict(alt=1e-4, v_down=1e-4, qbar=1e-3)),
])
def test_nesc_case_inside_the_tools_spread(name, sharp):
    r = run_nesc(name)
    assert r.gated and r.passed and r.duration == 30.0
    cols = r.details["columns"]
    assert set(cols) == set(COLUMNS)
    for c, f in cols.items():
        assert f["deviation"] <= max(f["spread"], f["floor"]), (c, f)
    for c, bound in sharp.items():
        assert cols[c]["nearest_deviation"] < bound, (c, cols[c]["per_tool"])


def test_cli_runs_a_nesc_case(capsys):
    assert cli_main(["cases", "nesc_atmos_04", "--duration", "2"]) == 0
    out = capsys.readouterr().out
    assert "nesc_atmos_04" in out and "tool spread" in out and "1 passed, 0 failed" in out
    assert cli_main(["cases", "--list"]) == 0
    assert "nesc_atmos_08" in capsys.readouterr().out
