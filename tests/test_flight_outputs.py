"""Flight outputs (``scene.set_flight``, adapters/flight_outputs.py) on MuJoCo C and MJX: against
``environment.flight_state`` on the recorded states, and the geodetic position against pymap3d (ECI -> ECEF by the
planet's rotation, then pymap3d's ecef2geodetic).
"""

from __future__ import annotations

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pymap3d
import pytest

from mjharness.adapters import MjScene
from mjharness.adapters.output_eval import OutputError
from mjharness.environment import (
    WGS84,
    ConstantWind,
    StandardAtmosphere1976,
    flight_state,
    inertial_state,
    point_mass_acceleration,
)
from mjharness.rollout import open_rollout, rollout

XML = """<mujoco><option gravity="0 0 0"/><worldbody>
  <body name="ball"><freejoint name="ball"/><geom type="box" size="0.1 0.2 0.3" mass="2" contype="0"
   conaffinity="0"/></body></worldbody></mujoco>"""
OUTS = ("geodetic", "ned_velocity", "euler_ned", "body_rates", "airspeed", "mach", "qbar")
ATMOS = StandardAtmosphere1976(wind=ConstantWind([3.0, -2.0, 0.0]))


@jax.jit
def _gravity(q, mass):
    return mass * point_mass_acceleration(q[..., 0:3], WGS84)


def gravity(t, x, data):
    g = jnp.asarray(_gravity(data.qpos, 2.0))
    z = jnp.zeros_like(g)
    return jnp.stack([jnp.concatenate([z, z], -1), jnp.concatenate([g, z], -1)], -2)


def x0(scene):
    r, v, q = inertial_state(np.radians([40.0, -20.0]), np.radians([-75.0, 130.0]), np.array([1000.0, 8000.0]),
                             np.array([[10.0, 5.0, -3.0], [200.0, 0.0, 10.0]]), np.radians([[5.0, 10.0, 30.0],
                                                                                            [-40, 60.0, 170.0]]))
    x = np.repeat(scene.x0()[None], 2, axis=0)
    x[:, 0:3], x[:, 3:7], x[:, 7:10], x[:, 10:13] = r, q, v, [[0.1, -0.2, 0.3], [1.0, 0.5, -0.5]]
    return x


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("flight")
    out = {}
    for backend in ("mujoco", "mjx"):
        s = MjScene(XML, backend=backend)
        s.add_force(gravity, name="gravity")
        s.set_flight(atmosphere=ATMOS)
        path = str(d / f"{backend}.h5")
        out[backend] = (rollout(s, "rk4", dt=0.1, steps=20, x0=x0(s), progress=False, outputs=OUTS, out=path),
                        path)
    return out


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_outputs_are_flight_state_of_the_recorded_states(runs, backend):
    r, _ = runs[backend]
    x, t = np.asarray(r.x), np.broadcast_to(np.asarray(r.time)[:, None], r.x.shape[:2])
    fs = jax.jit(flight_state, static_argnums=(5, 6))(t, x[..., 0:3], x[..., 7:10], x[..., 3:7], x[..., 10:13],
                                                      ATMOS, WGS84)
    want = {"geodetic": np.stack([fs.lat, fs.lon, fs.alt], -1), "ned_velocity": fs.v_ned, "euler_ned": fs.euler,
            "body_rates": fs.body_rates, "airspeed": fs.airspeed[..., None], "mach": fs.mach[..., None],
            "qbar": fs.qbar[..., None]}
    for name, w in want.items():
        np.testing.assert_allclose(np.asarray(r.outputs[name]), np.asarray(w), rtol=1e-12, atol=1e-9,
                                   err_msg=name)
    assert np.ptp(np.asarray(r.outputs["geodetic"])[:, 0, 2]) > 10  # it moved: the values are not the initial ones


def test_geodetic_against_pymap3d(runs):
    r, _ = runs["mujoco"]
    x, t = np.asarray(r.x), np.asarray(r.time)
    ang = WGS84.rotation_rate * t[:, None]
    c, s = np.cos(ang), np.sin(ang)  # ECI -> ECEF: rotation by -w t about z
    xe = c * x[..., 0] + s * x[..., 1]
    ye = -s * x[..., 0] + c * x[..., 1]
    lat, lon, alt = pymap3d.ecef2geodetic(xe, ye, x[..., 2], ell=pymap3d.Ellipsoid.from_name("wgs84"), deg=False)
    g = np.asarray(r.outputs["geodetic"])
    np.testing.assert_allclose(g[..., 0], lat, atol=1e-11)
    np.testing.assert_allclose(g[..., 1], lon, atol=1e-11)
    np.testing.assert_allclose(g[..., 2], alt, atol=1e-5)


def test_same_on_both_backends_and_units_in_file(runs):
    (rc, pc), (rj, _) = runs["mujoco"], runs["mjx"]
    for name in OUTS:
        np.testing.assert_allclose(np.asarray(rc.outputs[name]), np.asarray(rj.outputs[name]), rtol=1e-9,
                                   atol=1e-9, err_msg=name)
    with h5py.File(pc, "r", locking=False) as f:
        assert f["outputs/euler_ned"].attrs["units"] == "rad"
        assert f["outputs/geodetic"].attrs["units"] == "rad | rad | m"
        assert "Euler" in f["outputs/euler_ned"].attrs["long_name"]
        assert f["outputs/qbar"].attrs["units"] == "Pa"
    np.testing.assert_array_equal(open_rollout(pc).output("geodetic"), np.asarray(rc.outputs["geodetic"]))


def test_needs_a_flight_frame():
    s = MjScene(XML, backend="mujoco")
    with pytest.raises(Exception, match="set_flight"):
        rollout(s, "rk4", dt=0.1, steps=2, progress=False, outputs=("geodetic",))
    with pytest.raises(OutputError, match="not a free joint"):
        s.set_flight(joint="nope")
