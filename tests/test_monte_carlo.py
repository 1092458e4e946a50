"""The Monte Carlo example (examples/monte_carlo_spheres.py, issue 43.5), run small on MuJoCo C and on MJX.

Checks: both backends draw the same worlds (masses, drag coefficients, winds, release states) and put them in the
file; every sphere lands and the impact points of the two backends agree; world trajectories match an independent
integration (SciPy's DOP853 at tight tolerances of the same physics written here from scratch: point-mass gravity,
US 1976 troposphere density, drag in air turning with the Earth plus the NED wind); the scatter PNG is written from
the file.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from mjharness.examples import monte_carlo_spheres as mc
from mjharness.rollout import open_rollout

WORLDS, ALT, SECONDS = 48, 150.0, 8.0     # a 150 m drop lands in about 6 s: every world lands within the run
GM, OMEGA = 3.986004418e14, 7.292115e-5   # WGS-84 GM [m3/s2] and spin [rad/s]
A_WGS, F_WGS = 6378137.0, 1 / 298.257223563


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mc")
    out = {}
    for backend in ("mujoco", "mjx"):
        out[backend] = str(d / f"{backend}.h5")
        mc.run(WORLDS, backend, out[backend], seed=3, seconds=SECONDS, alt=ALT, progress=False)
    return out


def test_same_draws_on_both_backends(files):
    c, j = open_rollout(files["mujoco"]), open_rollout(files["mjx"])
    assert c.attrs["backend"] == "mujoco" and j.attrs["backend"] == "mjx"
    pc, pj = c.model_params, j.model_params
    want = {"body_mass", "force:gravity.mass", "force:drag.CD", "force:drag.wind"}
    assert want <= set(pc) and set(pc) == set(pj)
    for k in want:
        np.testing.assert_array_equal(pc[k], pj[k], err_msg=k)
    np.testing.assert_array_equal(np.asarray(c.x0), np.asarray(j.x0))
    d = mc.draws(WORLDS, 3, ALT)
    np.testing.assert_array_equal(pc["body_mass"][:, 1], d["mass"])      # the dynamics' mass ...
    np.testing.assert_array_equal(pc["force:gravity.mass"], d["mass"])   # ... is the gravity provider's
    assert np.unique(pc["force:drag.CD"]).size == WORLDS                 # drawn per world
    assert np.all(pc["force:drag.wind"][:, 2] == 0.0)                    # only the horizontal wind is drawn
    # the release altitude of the draws, read back through the flight output
    np.testing.assert_allclose(np.asarray(c.output("geodetic"))[0, :, 2], d["alt"], atol=5.0)


def test_file_names_the_force_parameters(files):
    with h5py.File(files["mujoco"], "r") as f:
        ds = f["model_params/force:drag.CD"]
        assert ds.attrs["long_name"] == "force provider drag parameter CD, per world"
        assert ds.attrs["units"] == "1"
        assert f["model_params/force:drag.wind"].attrs["units"] == "m/s"
        assert f["model_params/force:gravity.mass"].attrs["units"] == "kg"
        assert f["model_params/body_mass"].attrs["units"] == "kg"


def _ground_m(a, b):
    """Distance [m] on the ground between (lat, lon) [rad] points ``a`` and ``b`` (locally flat, mean radius)."""
    dn = (a[:, 0] - b[:, 0]) * 6371e3
    de = (a[:, 1] - b[:, 1]) * 6371e3 * np.cos(a[:, 0])
    return np.hypot(dn, de)


def test_impact_points_agree_across_backends(files):
    pc = mc.impact_points(np.asarray(open_rollout(files["mujoco"]).output("geodetic")))
    pj = mc.impact_points(np.asarray(open_rollout(files["mjx"]).output("geodetic")))
    assert np.isfinite(pc).all() and np.isfinite(pj).all()              # every world landed on both
    spread = _ground_m(pc, np.nanmean(pc, 0)[None]).max()
    assert spread > 10.0                                                # the dispersion is real (metres)
    # Same equations, same integrator (our RK4), same draws: the backends differ only in floating-point rounding of
    # mj_forward vs MJX's forward (~1e-16 relative of ~6.4e6 m ECI positions, ~1e-9 m a step), summed over 160
    # steps: far below a micrometre on the ground.
    assert _ground_m(pc, pj).max() < 1e-6


def _density(h_geometric):
    """US 1976 density [kg/m3] below 11 km, from its defining constants (geopotential altitude, lapse rate)."""
    h = 6356766.0 * h_geometric / (6356766.0 + h_geometric)
    t = 288.15 - 0.0065 * h
    p = 101325.0 * (t / 288.15) ** (9.80665 * 0.0289644 / (8.31432 * 0.0065))
    return p / (8.31432 / 0.0289644 * t)


def _geodetic(r):
    """Latitude, longitude [rad], height [m] of ECEF ``r`` (Bowring's iteration, converged to machine precision)."""
    e2 = F_WGS * (2 - F_WGS)
    lon, p = np.arctan2(r[1], r[0]), np.hypot(r[0], r[1])
    lat = np.arctan2(r[2], p * (1 - e2))
    for _ in range(10):
        n = A_WGS / np.sqrt(1 - e2 * np.sin(lat) ** 2)
        h = p / np.cos(lat) - n
        lat = np.arctan2(r[2], p * (1 - e2 * n / (n + h)))
    return lat, lon, h


def _reference(x0, mass, cd, area, wind, times):
    """One world's ECI positions at ``times`` by DOP853 (rtol 1e-12; the flight goes on below ground, as the
    rollout's does), its geodetic rows there and its impact point (lat, lon) from an event on the height."""
    def rot(t):  # ECI -> ECEF: rotation by -OMEGA t about z
        c, s = np.cos(OMEGA * t), np.sin(OMEGA * t)
        return np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])

    def f(t, y):
        r, v = y[:3], y[3:]
        m = rot(t)
        r_e = m @ r
        v_air_e = m @ (v - np.cross([0.0, 0.0, OMEGA], r))            # Earth-relative velocity, ECEF axes
        lat, lon, h = _geodetic(r_e)
        sl, cl, so, co = np.sin(lat), np.cos(lat), np.sin(lon), np.cos(lon)
        ned = np.array([[-sl * co, -sl * so, cl], [-so, co, 0.0], [-cl * co, -cl * so, -sl]])  # rows N, E, D
        va = v_air_e - ned.T @ wind
        drag = -0.5 * _density(h) * cd * area * np.linalg.norm(va) * va
        acc = -GM * r / np.linalg.norm(r) ** 3 + m.T @ drag / mass
        return np.concatenate([v, acc])

    def ground(t, y):
        return _geodetic(rot(t) @ y[:3])[2]

    sol = solve_ivp(f, (0.0, times[-1]), np.concatenate([x0[0:3], x0[7:10]]), method="DOP853", rtol=1e-12,
                    atol=1e-9, events=ground, dense_output=True)
    r = np.array([sol.sol(t)[:3] for t in times])
    geo = np.array([_geodetic(rot(t) @ ri) for t, ri in zip(times, r)])
    te = sol.t_events[0][0]
    lat, lon, _ = _geodetic(rot(te) @ sol.sol(te)[:3])
    return r, geo, np.array([lat, lon])


@pytest.mark.parametrize("world", [0, 5, 17])
def test_world_matches_an_independent_integration(files, world):
    f = open_rollout(files["mujoco"])
    p = f.model_params
    t = np.asarray(f.time)
    r, geo, impact = _reference(np.asarray(f.x0)[world], p["force:gravity.mass"][world], p["force:drag.CD"][world],
                                np.pi * mc.RADIUS ** 2, p["force:drag.wind"][world], t)
    # RK4 at dt = 0.05 s on this smooth flight: a global error of ~1e-8 m (measured); 1e-6 m leaves room
    np.testing.assert_allclose(np.asarray(f.x)[:, world, 0:3], r, rtol=0, atol=1e-6)
    got = mc.impact_points(np.asarray(f.output("geodetic")))[world][None]
    # the example's interpolation between recorded rows, on the reference's own rows: the same point
    assert _ground_m(got, mc.impact_points(geo[:, None, :])) < 1e-6
    # and near the exact crossing: linear interpolation over rows 0.2 s apart misses the fall's curvature (the
    # wind still accelerating the sphere sideways, ~1 m/s2, 1/8 a dt^2 ~ 5 mm; measured up to 17 mm): 5 cm
    assert _ground_m(got, impact[None])[0] < 0.05


def test_scatter_png_from_the_file(files, tmp_path):
    png = tmp_path / "impact.png"
    pts = mc.plot(files["mujoco"], str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    np.testing.assert_array_equal(pts, mc.impact_points(np.asarray(open_rollout(files["mujoco"]).output("geodetic"))))
