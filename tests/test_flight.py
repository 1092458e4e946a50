"""mjharness.environment.flight: the NESC's compared quantities of a free body's inertial state, against hand
computations, scipy's Euler angles and pymap3d's geodesy (conftest.py has configured float64)."""

from __future__ import annotations

import jax
import numpy as np
import pymap3d
from scipy.spatial.transform import Rotation

from mjharness.environment import (
    WGS84,
    ConstantWind,
    StandardAtmosphere1976,
    euler_321,
    euler_321_matrix,
    flight_state,
    inertial_state,
    us1976,
)

W = WGS84.rotation_rate
RNG = np.random.default_rng(43)


def _quat(axis, angle):
    """MuJoCo (w, x, y, z) quaternion of a rotation by ``angle`` about a unit ``axis``."""
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * np.asarray(axis, float)])


def _qmul(p, q):
    return np.concatenate([[p[0] * q[0] - p[1:] @ q[1:]], p[0] * q[1:] + q[0] * p[1:] + np.cross(p[1:], q[1:])])


# body x north, y east, z down at latitude 0, longitude 0, t = 0: -90 deg about ECI y (north = ECI z, down = -x)
LEVEL = _quat([0, 1, 0], -np.pi / 2)
R0 = np.array([WGS84.semi_major_axis + 9144.0, 0.0, 0.0])


def test_euler_321_matches_scipy_and_inverts():
    n = 200
    e = np.stack([RNG.uniform(-np.pi, np.pi, n), RNG.uniform(-1.5, 1.5, n), RNG.uniform(-np.pi, np.pi, n)], -1)
    m = np.asarray(euler_321_matrix(e[:, 0], e[:, 1], e[:, 2]))
    ref = Rotation.from_euler("ZYX", e[:, ::-1]).as_matrix()        # intrinsic yaw, pitch, roll: body -> NED
    assert np.max(np.abs(m - ref)) < 1e-15
    assert np.max(np.abs(np.asarray(euler_321(m)) - e)) < 1e-12


def test_hand_cases_heading_and_earth_rotation():
    # a turn about the local up axis (ECI +x here) by a: the nose swings from north toward west, psi = -a
    a = 0.3
    fs = flight_state(0.0, R0, np.zeros(3), _qmul(_quat([1, 0, 0], a), LEVEL), np.zeros(3))
    assert np.allclose(np.asarray(fs.euler), [0.0, 0.0, -a], atol=1e-15)
    # zero inertial rotation: relative to the turning NED frame the body rolls at -omega (the NESC's Atmos_01
    # note: -0.004178 deg/s); the body stays put in ECI while the Earth turns under it
    t = 30.0
    r_t = np.array([np.cos(W * t), np.sin(W * t), 0.0]) * R0[0]
    fs = flight_state(t, r_t, np.array([-np.sin(W * t), np.cos(W * t), 0.0]) * W * R0[0], LEVEL, np.zeros(3))
    assert np.allclose(np.asarray(fs.euler), [-W * t, 0.0, 0.0], atol=1e-15)
    assert np.allclose(np.asarray(fs.v_ned), 0.0, atol=1e-9) and abs(float(fs.alt) - 9144.0) < 1e-8
    # body rates are MuJoCo's free-joint angular velocity (body axes, w.r.t. inertial) as they are
    rates = flight_state(0.0, R0, np.zeros(3), LEVEL, np.array([0.1, -0.2, 0.3])).body_rates
    assert np.array_equal(np.asarray(rates), [0.1, -0.2, 0.3])


def test_geodetic_and_ned_velocity_match_pymap3d():
    n = 50
    lat, lon = RNG.uniform(-1.4, 1.4, n), RNG.uniform(-np.pi, np.pi, n)
    alt, t = RNG.uniform(0.0, 30000.0, n), RNG.uniform(0.0, 600.0, n)
    r_ecef = np.stack(pymap3d.geodetic2ecef(lat, lon, alt, deg=False), -1)
    c = np.cos(W * t)[:, None], np.sin(W * t)[:, None]
    r_eci = np.concatenate([c[0] * r_ecef[:, :1] - c[1] * r_ecef[:, 1:2],
                            c[1] * r_ecef[:, :1] + c[0] * r_ecef[:, 1:2], r_ecef[:, 2:]], -1)
    v_eci = RNG.normal(0.0, 200.0, (n, 3))
    fs = flight_state(t, r_eci, v_eci, np.tile(LEVEL, (n, 1)), np.zeros((n, 3)))
    # Earth-relative velocity by hand: v - w x r in ECI, then rotated by -w t into ECEF
    rel = v_eci - np.cross([0.0, 0.0, W], r_eci)
    rel_ecef = np.concatenate([c[0] * rel[:, :1] + c[1] * rel[:, 1:2],
                               -c[1] * rel[:, :1] + c[0] * rel[:, 1:2], rel[:, 2:]], -1)
    ref_ned = np.stack(pymap3d.ecef2nedv(rel_ecef[:, 0], rel_ecef[:, 1], rel_ecef[:, 2], lat, lon, deg=False), -1)
    assert np.max(np.abs(np.asarray(fs.lat) - lat)) < 1e-12 and np.max(np.abs(np.asarray(fs.alt) - alt)) < 1e-6
    assert np.max(np.abs(np.angle(np.exp(1j * (np.asarray(fs.lon) - lon))))) < 1e-12
    assert np.max(np.abs(np.asarray(fs.v_ned) - ref_ned)) < 1e-9


def test_air_data_by_hand():
    # at rest on the rotating Earth in a 10 m/s north wind: airspeed 10, Mach and qbar from us1976 at 9144 m
    atmosphere = StandardAtmosphere1976(wind=ConstantWind([10.0, 0.0, 0.0]))
    r, v, q = inertial_state(0.0, 0.0, 9144.0, np.zeros(3), np.zeros(3))
    fs = flight_state(0.0, r, v, q, np.zeros(3), atmosphere)
    air = us1976(9144.0)
    assert abs(float(fs.airspeed) - 10.0) < 1e-9
    assert abs(float(fs.mach) - 10.0 / float(air.speed_of_sound)) < 1e-12
    assert abs(float(fs.qbar) - 50.0 * float(air.density)) < 1e-9
    # flying east at 50 m/s with a 20 m/s east wind: 30 m/s of air
    atmosphere = StandardAtmosphere1976(wind=ConstantWind([0.0, 20.0, 0.0]))
    r, v, q = inertial_state(0.4, 1.0, 9144.0, np.array([0.0, 50.0, 0.0]), np.zeros(3), t=7.0)
    assert abs(float(flight_state(7.0, r, v, q, np.zeros(3), atmosphere).airspeed) - 30.0) < 1e-8


def test_inertial_state_inverts_flight_state_and_traces():
    n = 40
    lat, lon, alt = RNG.uniform(-1.4, 1.4, n), RNG.uniform(-3.0, 3.0, n), RNG.uniform(0.0, 2e4, n)
    v_ned = RNG.normal(0.0, 100.0, (n, 3))
    e = np.stack([RNG.uniform(-3.0, 3.0, n), RNG.uniform(-1.5, 1.5, n), RNG.uniform(-3.0, 3.0, n)], -1)
    t = RNG.uniform(0.0, 100.0, n)
    r, v, q = inertial_state(lat, lon, alt, v_ned, e, t)
    fs = jax.jit(flight_state)(t, r, v, q, np.zeros((n, 3)))
    assert np.max(np.abs(np.asarray(fs.lat) - lat)) < 1e-12 and np.max(np.abs(np.asarray(fs.lon) - lon)) < 1e-12
    assert np.max(np.abs(np.asarray(fs.alt) - alt)) < 1e-6
    assert np.max(np.abs(np.asarray(fs.v_ned) - v_ned)) < 1e-9
    assert np.max(np.abs(np.asarray(fs.euler) - e)) < 1e-10
