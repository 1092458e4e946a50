"""mjharness.environment against independent references: pymap3d (WGS-84 geodesy), fluids (U.S. Standard
Atmosphere 1976), finite differences of the J2 potential, and hand computations for the aerodynamics.

Inputs are NumPy arrays (the functions take them as well as JAX arrays); one test runs the whole chain under
``jax.jit(jax.vmap(...))`` and checks gradients at zero airspeed. conftest.py has configured float64.
"""

from __future__ import annotations

import dataclasses

import fluids
import jax
import jax.numpy as jnp
import numpy as np
import pymap3d
import pytest

from mjharness.environment import (
    STANDARD_GRAVITY,
    WGS84,
    AtmosphereProvider,
    ConstantWind,
    Planet,
    StandardAtmosphere1976,
    WindProfile,
    air_relative_velocity,
    constant_coefficients,
    drag_force,
    dynamic_pressure,
    earth_rate,
    earth_relative_velocity,
    ecef_to_eci,
    ecef_to_geodetic,
    ecef_to_ned_matrix,
    eci_to_ecef,
    eci_to_ecef_matrix,
    geodetic_frame,
    geodetic_to_ecef,
    j2_acceleration,
    j2_potential,
    mach,
    ned_velocity,
    point_mass_acceleration,
    rate_damping_moment,
    safe_norm,
    subtract_wind,
    uniform_acceleration,
    us1976,
)

RNG_SEED = 20150501  # NASA/TM-2015-218675's year; any fixed seed
# One batch size for the eager checks: JAX compiles each primitive once per shape, so one shape keeps the file fast.
N = 4000


def random_geodetic(n: int, alt_low: float, alt_high: float, seed: int = RNG_SEED):
    """n points: latitudes uniform in sin (area), the poles, the equator and near-pole rows included."""
    rng = np.random.default_rng(seed)
    lat = np.arcsin(rng.uniform(-1.0, 1.0, n))
    lat[:6] = [np.pi / 2, -np.pi / 2, 0.0, np.pi / 2 - 1e-9, -np.pi / 2 + 1e-12, 1e-12]
    lon = rng.uniform(-np.pi, np.pi, n)
    alt = rng.uniform(alt_low, alt_high, n)
    alt[6:8] = [alt_low, alt_high]
    return lat, lon, alt


def wrapped(angle):
    return np.angle(np.exp(1j * np.asarray(angle)))


# ---------------------------------------------------------------- planet and geodesy


def test_wgs84_constants():
    assert (WGS84.semi_major_axis, 1 / WGS84.flattening) == (6378137.0, 298.257223563)
    assert (WGS84.rotation_rate, WGS84.gm, WGS84.j2) == (7.292115e-5, 3.986004418e14, 1.082629821313e-3)
    ell = pymap3d.Ellipsoid.from_name("wgs84")
    assert WGS84.semi_minor_axis == pytest.approx(ell.semiminor_axis, rel=1e-15)
    assert WGS84.eccentricity_squared == pytest.approx(6.69437999014e-3, rel=1e-11)  # TR8350.2's e²
    sphere = Planet(flattening=0.0, j2=0.0)
    assert sphere.semi_minor_axis == sphere.semi_major_axis and sphere.eccentricity_squared == 0.0


def test_geodetic_to_ecef_matches_pymap3d():
    lat, lon, alt = random_geodetic(N, -5000.0, 1.0e7)
    ours = np.asarray(geodetic_to_ecef(lat, lon, alt))
    ref = np.stack(pymap3d.geodetic2ecef(lat, lon, alt, deg=False), axis=-1)
    assert ours.shape == (N, 3)
    assert np.max(np.abs(ours - ref)) < 2e-8  # m: rounding of 1e7 m coordinates


def test_ecef_to_geodetic_matches_pymap3d_to_100km():
    # pymap3d's ecef2geodetic (You 2000, one correction step) loses accuracy above ~100 km (1e-9 rad at 1000 km,
    # 2e-6 rad at 40,000 km), so it is the reference up to 100 km; above, the exact round trip below is.
    lat, lon, alt = random_geodetic(N, -5000.0, 1.0e5)
    r = np.stack(pymap3d.geodetic2ecef(lat, lon, alt, deg=False), axis=-1)
    ref_lat, ref_lon, ref_alt = pymap3d.ecef2geodetic(r[:, 0], r[:, 1], r[:, 2], deg=False)
    our_lat, our_lon, our_alt = (np.asarray(a) for a in ecef_to_geodetic(r))
    assert np.max(np.abs(our_lat - ref_lat)) < 1e-12
    assert np.max(np.abs(our_alt - ref_alt)) < 1e-7
    off_axis = np.abs(np.cos(lat)) > 1e-6  # longitude is undefined on the spin axis
    assert np.max(np.abs(wrapped(our_lon - ref_lon))[off_axis]) < 1e-13


@pytest.mark.parametrize("alt_low, alt_high", [(-5000.0, 1.0e5), (1.0e5, 4.0e7)])
def test_geodetic_round_trip(alt_low, alt_high):
    lat, lon, alt = random_geodetic(N, alt_low, alt_high)
    back_lat, back_lon, back_alt = (np.asarray(a) for a in ecef_to_geodetic(geodetic_to_ecef(lat, lon, alt)))
    assert np.max(np.abs(back_lat - lat)) < 1e-14  # rad (the brief's bar: 1e-9)
    assert np.max(np.abs(back_alt - alt)) < 3e-8 * max(1.0, alt_high / 1e7)  # m (bar: 1e-6); rounding of |r|
    off_axis = np.abs(np.cos(lat)) > 1e-6
    assert np.max(np.abs(wrapped(back_lon - lon))[off_axis]) < 1e-14


def test_poles_and_spin_axis_exact():
    b = WGS84.semi_minor_axis
    lat, lon, alt = (np.asarray(a) for a in ecef_to_geodetic(np.array([[0.0, 0.0, b + 1000.0], [0.0, 0.0, -b]])))
    np.testing.assert_allclose(lat, [np.pi / 2, -np.pi / 2], rtol=0, atol=1e-15)
    np.testing.assert_allclose(alt, [1000.0, 0.0], rtol=0, atol=1e-8)
    assert np.all(lon == 0.0)
    # a spherical planet: geodetic latitude is geocentric, height is |r| - a
    sphere = Planet(flattening=0.0)
    r = np.array([3.0e6, 4.0e6, 5.0e6])
    s_lat, _, s_alt = ecef_to_geodetic(r, sphere)
    assert float(s_lat) == pytest.approx(np.arcsin(5.0 / np.sqrt(50.0)), abs=1e-15)
    assert float(s_alt) == pytest.approx(np.linalg.norm(r) - sphere.semi_major_axis, abs=1e-8)


def test_geodetic_frame_equals_the_angle_route():
    # geodetic_frame (sines and cosines, no angle formed) against ecef_to_geodetic + ecef_to_ned_matrix, from 5 km
    # below the surface to geostationary height, the poles and the spin axis included
    lat, lon, alt = random_geodetic(N, -5000.0, 4.0e7)
    r = np.concatenate([np.asarray(geodetic_to_ecef(lat, lon, alt)),
                        [[0.0, 0.0, WGS84.semi_minor_axis + 100.0], [0.0, 0.0, -WGS84.semi_minor_axis]]])
    c, h = (np.asarray(a) for a in geodetic_frame(r))
    want_lat, want_lon, want_h = (np.asarray(a) for a in ecef_to_geodetic(r))
    assert np.max(np.abs(c - np.asarray(ecef_to_ned_matrix(want_lat, want_lon)))) < 1e-15
    np.testing.assert_array_equal(h, want_h)  # the same expression of the same sines and cosines
    np.testing.assert_allclose(c[-2:, 2], [[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]], atol=1e-16)  # down at the poles
    # the planet's centre (where a provider's shape check evaluates it) is finite, not 0/0
    centre = (*geodetic_frame(np.zeros(3)), *ecef_to_geodetic(np.zeros(3)))
    assert all(np.all(np.isfinite(np.asarray(a))) for a in centre)
    v, wind = np.random.default_rng(3).normal(size=(2, len(r), 3))
    np.testing.assert_allclose(subtract_wind(v, wind, c), air_relative_velocity(v, wind, want_lat, want_lon),
                               rtol=0, atol=1e-14)


def test_ned_matrix_matches_pymap3d():
    lat, lon, _ = random_geodetic(N, 0.0, 1.0)
    rng = np.random.default_rng(RNG_SEED + 1)
    v = rng.normal(size=(N, 3)) * 100.0
    c = np.asarray(ecef_to_ned_matrix(lat, lon))
    ours = np.einsum("nij,nj->ni", c, v)
    ref = np.stack(pymap3d.ecef2nedv(v[:, 0], v[:, 1], v[:, 2], lat, lon, deg=False), axis=-1)
    assert np.max(np.abs(ours - ref)) < 1e-12
    np.testing.assert_allclose(np.einsum("nij,nkj->nik", c, c), np.broadcast_to(np.eye(3), c.shape), atol=1e-15)
    np.testing.assert_allclose(np.linalg.det(c), 1.0, atol=1e-15)
    # down is the ellipsoid normal: raising a point moves it along -D
    up = np.asarray(geodetic_to_ecef(lat, lon, 1000.0) - geodetic_to_ecef(lat, lon, 0.0)) / 1000.0
    np.testing.assert_allclose(up, -c[:, 2, :], atol=1e-12)
    # pymap3d's ecef2ned (a point, relative to an origin) agrees through the same matrix
    r0, r1 = geodetic_to_ecef(lat[7], lon[7], 100.0), geodetic_to_ecef(lat[7] + 1e-4, lon[7] - 2e-4, 900.0)
    ref_ned = pymap3d.ecef2ned(*np.asarray(r1), lat[7], lon[7], 100.0, deg=False)
    np.testing.assert_allclose(c[7] @ np.asarray(r1 - r0), ref_ned, atol=1e-8)


def test_eci_ecef_rotation_and_transport():
    assert np.array_equal(np.asarray(eci_to_ecef_matrix(0.0)), np.eye(3))
    w = WGS84.rotation_rate
    t = 3600.0
    c = np.asarray(eci_to_ecef_matrix(t))
    # a point fixed in ECI at +x appears at longitude -ω t in ECEF
    _, lon, _ = ecef_to_geodetic(c @ np.array([7.0e6, 0.0, 0.0]))
    assert float(lon) == pytest.approx(wrapped(-w * t), abs=1e-15)
    # a point at rest on the rotating Earth: inertial velocity ω × r, Earth-relative velocity 0
    r_eci = np.array([4.0e6, 3.0e6, 2.0e6])
    v_eci = np.cross(np.asarray(earth_rate()), r_eci)
    r_ecef, v_ecef = eci_to_ecef(t, r_eci, v_eci)
    np.testing.assert_allclose(v_ecef, 0.0, atol=1e-12)
    np.testing.assert_allclose(earth_relative_velocity(r_eci, v_eci), 0.0, atol=1e-12)
    # round trip, and d/dt (C(t) r_eci(t)) = C (v - ω × r) by central difference along a straight inertial path
    v_eci = np.array([100.0, -200.0, 50.0])
    r_ecef, v_ecef = eci_to_ecef(t, r_eci, v_eci)
    back_r, back_v = ecef_to_eci(t, r_ecef, v_ecef)
    np.testing.assert_allclose(back_r, r_eci, rtol=0, atol=1e-8)
    np.testing.assert_allclose(back_v, v_eci, rtol=0, atol=1e-11)
    h = 1e-2
    fd = (np.asarray(eci_to_ecef(t + h, r_eci + h * v_eci, v_eci)[0])
          - np.asarray(eci_to_ecef(t - h, r_eci - h * v_eci, v_eci)[0])) / (2 * h)
    np.testing.assert_allclose(fd, v_ecef, rtol=0, atol=1e-6)


def test_ned_velocity():
    lat, lon = 0.6, -1.9
    r = geodetic_to_ecef(lat, lon, 2000.0)
    v_ned = np.array([10.0, -20.0, 5.0])
    v_ecef = np.asarray(ecef_to_ned_matrix(lat, lon)).T @ v_ned
    np.testing.assert_allclose(ned_velocity(r, v_ecef), v_ned, atol=1e-12)


# ---------------------------------------------------------------- gravity


def test_point_mass_gravity():
    rng = np.random.default_rng(RNG_SEED + 2)
    r = rng.normal(size=(100, 3)) * 7.0e6
    g = np.asarray(point_mass_acceleration(r))
    rn = np.linalg.norm(r, axis=-1)
    np.testing.assert_allclose(np.linalg.norm(g, axis=-1), WGS84.gm / rn**2, rtol=1e-14)
    np.testing.assert_allclose(np.einsum("ni,ni->n", g, r) / (np.linalg.norm(g, axis=-1) * rn), -1.0, atol=1e-14)
    np.testing.assert_allclose(uniform_acceleration([0.0, 0.0, -STANDARD_GRAVITY], r)[5], [0, 0, -9.80665])


def test_j2_against_potential_gradient():
    lat, lon, alt = random_geodetic(N, -5000.0, 2.0e6)
    r = np.asarray(geodetic_to_ecef(lat, lon, alt))
    a = np.asarray(j2_acceleration(r))
    h = 10.0  # m: central-difference truncation ~1e-14, rounding ~1e-10 of |g| at this step
    fd = np.stack([-(np.asarray(j2_potential(r + h * e)) - np.asarray(j2_potential(r - h * e))) / (2 * h)
                   for e in np.eye(3)], axis=-1)
    rel = np.max(np.linalg.norm(a - fd, axis=-1) / np.linalg.norm(a, axis=-1))
    assert rel < 1e-8
    # the J2 part alone (vs point mass) is ~1e-3 of g: check it to 1e-6 of itself
    j2_part, fd_part = a - np.asarray(point_mass_acceleration(r)), fd - np.asarray(point_mass_acceleration(r))
    assert np.max(np.linalg.norm(j2_part - fd_part, axis=-1) / np.linalg.norm(j2_part, axis=-1)) < 1e-5
    # closed forms on the equator and at the pole
    ae, pole = WGS84.semi_major_axis, 7.0e6
    gx = float(j2_acceleration(np.array([ae, 0.0, 0.0]))[0])
    assert gx == pytest.approx(-WGS84.gm / ae**2 * (1 + 1.5 * WGS84.j2), rel=1e-15)
    gz = float(j2_acceleration(np.array([0.0, 0.0, pole]))[2])
    assert gz == pytest.approx(-WGS84.gm / pole**2 * (1 - 3 * WGS84.j2 * (ae / pole) ** 2), rel=1e-15)


# ---------------------------------------------------------------- atmosphere and wind


def test_us1976_matches_fluids():
    base_z = np.array([0.0, 11019.1, 20063.1, 32161.9, 47350.1, 51412.5, 71802.0, 86000.0])  # layer bases
    z = np.concatenate([np.linspace(-5000.0, 86000.0, 2001), base_z - 0.5, base_z + 0.5])
    z = z[(z >= -5000.0) & (z <= 86000.0)]
    air = us1976(z)
    ref = {"temperature": "T", "pressure": "P", "density": "rho", "speed_of_sound": "v_sonic"}
    atm = [fluids.ATMOSPHERE_1976(float(zi)) for zi in z]
    for ours, theirs in ref.items():
        rel = np.max(np.abs(np.asarray(getattr(air, ours)) / np.array([getattr(a, theirs) for a in atm]) - 1.0))
        assert rel < 1e-12, (ours, rel)  # same equations and constants: rounding only (measured 7e-15)
    # the standard's own sea-level row
    sea = us1976(0.0)
    assert (float(sea.temperature), float(sea.pressure)) == (288.15, 101325.0)
    assert float(sea.density) == pytest.approx(1.2250, abs=5e-5)
    assert float(sea.speed_of_sound) == pytest.approx(340.294, abs=5e-4)


def test_wind_models():
    assert ConstantWind([1.0, 2.0, 3.0])(0.0, np.zeros((4, 2))).shape == (4, 2, 3)
    profile = WindProfile([0.0, 1000.0, 3000.0], [[0.0, 0.0, 0.0], [10.0, -4.0, 0.0], [20.0, 0.0, 1.0]])
    got = np.asarray(profile(5.0, np.array([-100.0, 0.0, 500.0, 2000.0, 3000.0, 9000.0])))
    want = [[0, 0, 0], [0, 0, 0], [5, -2, 0], [15, -2, 0.5], [20, 0, 1], [20, 0, 1]]
    np.testing.assert_allclose(got, want, atol=1e-12)
    with pytest.raises(ValueError, match="increasing"):
        WindProfile([0.0, 0.0], [[0, 0, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match="ned_values"):
        WindProfile([0.0, 1.0], [[0, 0, 0]])
    with pytest.raises(ValueError, match="3 numbers"):
        ConstantWind([1.0, 2.0])


def test_standard_atmosphere_provider():
    lat, lon, alt = random_geodetic(N, -1000.0, 80000.0)
    r = geodetic_to_ecef(lat, lon, alt)
    profile = WindProfile([0.0, 10000.0], [[0.0, 0.0, 0.0], [30.0, 10.0, 0.0]])
    provider: AtmosphereProvider = StandardAtmosphere1976(wind=profile)
    state = provider(1.0, r)
    air = us1976(alt)
    np.testing.assert_allclose(state.density, air.density, rtol=1e-12)
    np.testing.assert_allclose(state.speed_of_sound, air.speed_of_sound, rtol=1e-12)
    np.testing.assert_allclose(state.wind_ned, profile(1.0, alt), atol=1e-9)
    still = StandardAtmosphere1976()(0.0, r[0])
    assert still.wind_ned.shape == (3,) and not np.any(np.asarray(still.wind_ned))
    # another planet's altitude: the same point is higher above a smaller sphere
    sphere = Planet(semi_major_axis=6.0e6, flattening=0.0)
    up = StandardAtmosphere1976(planet=sphere)(0.0, np.array([6.01e6, 0.0, 0.0]))
    assert float(up.temperature) == pytest.approx(float(us1976(10000.0).temperature), rel=1e-12)


# ---------------------------------------------------------------- aerodynamics


def test_drag_and_air_data_by_hand():
    force = np.asarray(drag_force(np.array([3.0, 4.0, 0.0]), 1.2, 0.5, 2.0))
    # q̄ = ½ 1.2 5² = 15 Pa; |F| = q̄ S CD = 15 N, opposite (0.6, 0.8, 0)
    np.testing.assert_allclose(force, [-9.0, -12.0, 0.0], rtol=1e-15)
    assert float(dynamic_pressure(1.2, 5.0)) == pytest.approx(15.0, rel=1e-15)
    assert float(mach(680.0, 340.0)) == 2.0
    batch = np.asarray(drag_force(np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]), np.array([1.2, 1.0]), 0.5, 2.0))
    np.testing.assert_allclose(batch, [[-9.0, -12.0, 0.0], [0.0, 0.0, 0.0]], rtol=1e-15)
    # a 10 m/s north wind at lat 0, lon 0 (north is ECEF +z): a body at rest moves at -10 m/s along z in the air
    np.testing.assert_allclose(air_relative_velocity(np.zeros(3), [10.0, 0.0, 0.0], 0.0, 0.0), [0, 0, -10.0],
                               atol=1e-15)


def test_rate_damping_and_coefficients_by_hand():
    rho, v, s, b, c = 1.1, 50.0, 0.3, 2.0, 0.4
    p, q, r = 0.5, -0.2, 0.1
    clp, clr, cmq, cnp, cnr = -0.4, 0.05, -8.0, -0.02, -0.3
    qbar = 0.5 * rho * v**2
    want = [qbar * s * b * (clp * p * b / (2 * v) + clr * r * b / (2 * v)),
            qbar * s * c * cmq * q * c / (2 * v),
            qbar * s * b * (cnp * p * b / (2 * v) + cnr * r * b / (2 * v))]
    got = rate_damping_moment(np.array([p, q, r]), v, rho, s, b, c, clp, clr, cmq, cnp, cnr)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    assert not np.any(np.asarray(rate_damping_moment(np.array([p, q, r]), 0.0, rho, s, b, c, clp, clr, cmq, cnp,
                                                     cnr)))
    force, moment = constant_coefficients(100.0, 0.5, 2.0, 0.3, -0.8, 0.1, -0.2, 0.01, -0.05, 0.02)
    np.testing.assert_allclose(force, [-40.0, 5.0, -10.0], rtol=1e-15)
    np.testing.assert_allclose(moment, [1.0, -0.75, 2.0], rtol=1e-15)


# ---------------------------------------------------------------- traced: jit, vmap, grad


def _chain(lat, lon, alt, v_ecef, omega_body):
    """The whole per-body environment evaluation of a dropped, tumbling body (what a force provider traces)."""
    planet = dataclasses.replace(WGS84, name="traced")
    r = geodetic_to_ecef(lat, lon, alt, planet)
    air = StandardAtmosphere1976(wind=ConstantWind([5.0, -3.0, 0.0]), planet=planet)(0.0, r)
    back = ecef_to_geodetic(r, planet)
    v_air = air_relative_velocity(v_ecef, air.wind_ned, back[0], back[1])
    speed = jnp.sqrt(jnp.sum(v_air**2))
    drag = drag_force(v_air, air.density, 0.47, 0.01)
    damping = rate_damping_moment(omega_body, speed, air.density, 0.1, 0.3, 0.1, -0.4, 0.0, -0.5, 0.0, -0.4)
    gravity = j2_acceleration(eci_to_ecef_matrix(10.0, planet).T @ r, planet)
    return jnp.concatenate([jnp.stack(back), drag, damping, gravity, ned_velocity(r, v_ecef, planet),
                            jnp.atleast_1d(mach(speed, air.speed_of_sound))])


def test_jit_vmap_and_gradients_at_rest():
    lat, lon, alt = random_geodetic(8, 0.0, 30000.0)
    rng = np.random.default_rng(RNG_SEED + 3)
    v, w = rng.normal(size=(8, 3)) * 30.0, rng.normal(size=(8, 3))
    traced = np.asarray(jax.jit(jax.vmap(_chain))(lat, lon, alt, v, w))
    eager = np.stack([np.asarray(_chain(lat[i], lon[i], alt[i], v[i], w[i])) for i in range(1)])
    assert traced.shape == (8, 16) and np.all(np.isfinite(traced))
    np.testing.assert_allclose(traced[:1], eager, rtol=1e-12, atol=1e-9)
    # zero airspeed: drag and damping and their gradients are 0, not NaN
    zero = np.zeros(3)
    g_drag = jax.grad(lambda u: jnp.sum(drag_force(u, 1.2, 0.5, 2.0)))(zero)
    assert np.array_equal(np.asarray(g_drag), zero)
    jac = jax.jacfwd(lambda u: drag_force(u, 1.2, 0.5, 2.0))(zero)
    assert np.array_equal(np.asarray(jac), np.zeros((3, 3)))
    damping = lambda speed, om: jnp.sum(rate_damping_moment(om, speed, 1.2, 0.1, 0.3, 0.1, -0.4, 0.1, -0.5, 0.1, -0.4))
    g_speed, g_omega = jax.grad(damping, argnums=(0, 1))(0.0, np.array([1.0, 2.0, 3.0]))
    assert np.isfinite(float(g_speed)) and np.array_equal(np.asarray(g_omega), zero)
    # through the airspeed's norm too (air at rest relative to the body)
    g_v = jax.grad(lambda u: damping(safe_norm(u), np.ones(3)))(zero)
    assert np.array_equal(np.asarray(g_v), zero)
    # altitude's gradient on the spin axis is the axis direction
    pole = np.array([0.0, 0.0, WGS84.semi_minor_axis + 5.0e4])
    g_alt = jax.grad(lambda r: ecef_to_geodetic(r)[2])(pole)
    assert np.all(np.isfinite(jax.jacfwd(lambda r: geodetic_frame(r)[0])(pole)))
    np.testing.assert_allclose(g_alt, [0.0, 0.0, 1.0], atol=1e-12)
    # density's gradient is finite at every layer base (where() evaluates both pressure laws)
    g_rho = jax.vmap(jax.grad(lambda z: us1976(z).density))(np.array([0.0, 11019.1, 20063.1, 47350.1, 86000.0]))
    assert np.all(np.isfinite(np.asarray(g_rho))) and np.all(np.asarray(g_rho) < 0)
