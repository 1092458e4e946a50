"""Per-world force provider parameters (``add_force(fn, name, params=...)``; adapters/forces.py,
rollout/engine/force_params.py): explicit and drawn per world, the same draws and trajectories on MuJoCo C and MJX.

Reference: each world run alone with a provider whose parameters are that world's values as plain constants (the
provider without per-world parameters, which tests/test_forces.py checks against hand-written MuJoCo C loops).
"""

from __future__ import annotations

import json

import h5py
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.adapters.forces import ForceError
from mjharness.rollout import RolloutError, open_rollout, rollout

BALL = """<mujoco><option gravity="0 0 -9.81"/><worldbody>
  <body name="ball" pos="0 0 100"><freejoint/><geom type="sphere" size="0.1" mass="0.5"/></body>
</worldbody></mujoco>"""
NOMINAL = {"CD": 0.47, "area": 0.0314, "wind": [0.0, 0.0, 0.0]}
RANDOMIZE = {"force:drag.CD": "*uniform(0.5, 2)", "force:drag.wind[0]": "normal(0, 3)",
             "body_mass:ball": "*uniform(0.9, 1.1)"}
B, DT, STEPS = 4, 0.05, 30


def drag_of(xp, fixed=None):
    """Drag of air at 1.225 kg/m³ moving at ``wind`` on body 1, leading axes free; ``fixed``: constant parameters
    (a provider without per-world parameters, the reference)."""
    def drag(t, x, data, p=None):
        p = fixed if fixed is not None else p
        v = data.qvel[..., 0:3] - xp.asarray(p["wind"])
        k = 0.5 * 1.225 * xp.asarray(p["CD"]) * xp.asarray(p["area"]) * xp.sqrt(xp.sum(v ** 2, -1))
        f = -k[..., None] * v
        z = xp.zeros_like(f)
        return xp.stack([xp.concatenate([z, z], -1), xp.concatenate([f, z], -1)], -2)

    if fixed is not None:
        return lambda t, x, data: drag(t, x, data)
    return drag


def ball(backend, xp, fixed=None):
    s = MjScene(BALL, backend=backend)
    s.add_force(drag_of(xp, fixed), name="drag", params=None if fixed is not None else NOMINAL)
    return s


def x0():
    s = MjScene(BALL, backend="mujoco")
    x = np.repeat(s.x0()[None], B, axis=0)
    x[:, 7:10] = np.array([[3.0, -1.0, 2.0]]) * np.arange(1, B + 1)[:, None]  # distinct initial velocities
    return x


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fp")
    out = {}
    for backend, xp in (("mujoco", np), ("mjx", jnp)):
        path = str(d / f"{backend}.h5")
        r = rollout(ball(backend, xp), "rk4", dt=DT, steps=STEPS, x0=x0(), progress=False, out=path, seed=7,
                    randomize=RANDOMIZE, model_params={"force:drag.area": np.linspace(0.02, 0.04, B)},
                    outputs=["applied_wrench"])
        out[backend] = (r, open_rollout(path))
    return out


def test_draws_recorded_and_equal_on_both_backends(runs):
    (rc, fc), (rj, fj) = runs["mujoco"], runs["mjx"]
    for name in ("force:drag.CD", "force:drag.wind", "force:drag.area", "body_mass"):
        np.testing.assert_array_equal(fc.model_params[name], fj.model_params[name])
        np.testing.assert_array_equal(np.asarray(rc.model_params[name]), fc.model_params[name])
    cd, wind = fc.model_params["force:drag.CD"], fc.model_params["force:drag.wind"]
    assert cd.shape == (B,) and wind.shape == (B, 3)
    assert np.all((cd >= 0.5 * 0.47) & (cd <= 2 * 0.47)) and len(set(cd.tolist())) == B
    assert np.all(wind[:, 1:] == 0) and len(set(wind[:, 0].tolist())) == B  # only component 0 drawn
    np.testing.assert_array_equal(fc.model_params["force:drag.area"], np.linspace(0.02, 0.04, B))
    assert "force:drag.CD" in fc.attrs["randomize"]
    np.testing.assert_allclose(np.asarray(rc.x), np.asarray(rj.x), rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(rc.outputs["applied_wrench"]), np.asarray(rj.outputs["applied_wrench"]),
                               rtol=0, atol=1e-10)


def test_each_world_runs_its_own_parameters(runs):
    """World w of the batched run equals a run of w alone with w's values as the provider's constants."""
    rc, fc = runs["mujoco"]
    mp = fc.model_params
    for w in range(B):
        fixed = {"CD": mp["force:drag.CD"][w], "area": mp["force:drag.area"][w], "wind": mp["force:drag.wind"][w]}
        s = ball("mujoco", np, fixed)
        r = rollout(s, "rk4", dt=DT, steps=STEPS, x0=x0()[w:w + 1], progress=False,
                    model_params={k: mp[k][w:w + 1] for k in mp if not k.startswith("force:")})
        np.testing.assert_allclose(np.asarray(rc.x)[:, w], np.asarray(r.x)[:, 0], rtol=0, atol=1e-12)
    # drag differs between worlds: the parameters reached the provider
    assert np.ptp(np.asarray(rc.x)[-1, :, 9]) > 0.1


@pytest.mark.parametrize("kw, match", [
    (dict(randomize={"force:drag.Cd": "uniform(0, 1)"}), "'force:drag.Cd' is not a force provider parameter"),
    (dict(randomize={"force:wind.CD": "uniform(0, 1)"}), "force:drag.CD"),
    (dict(randomize={"force:drag.wind[3]": "uniform(0, 1)"}), r"component \[3\]"),
    (dict(model_params={"force:drag.CD": np.ones(3)}), r"must have shape \(2,\)"),
    (dict(model_params={"force:drag.wind": np.ones(2)}), r"must have shape \(2, 3\)"),
])
def test_bad_keys_refused_before_running(kw, match):
    s = ball("mujoco", np)
    with pytest.raises(RolloutError, match=match):
        rollout(s, "rk4", dt=DT, steps=2, batch=2, progress=False, **kw)


def test_bad_params_refused_when_added():
    s = MjScene(BALL, backend="mujoco")
    with pytest.raises(ForceError, match="parameter 'CD' must be a number"):
        s.add_force(drag_of(np), name="drag", params={"CD": "big"})
    with pytest.raises(ForceError, match="identifiers"):
        s.add_force(drag_of(np), name="drag", params={"C D": 1.0})
    with pytest.raises(ForceError, match="may not contain '.'"):
        s.add_force(drag_of(np), name="a.b", params={"CD": 1.0})


def test_file_long_names_and_declared_units(tmp_path):
    s = MjScene(BALL, backend="mujoco")
    s.add_force(drag_of(np), name="drag", params=NOMINAL, param_units={"CD": "1", "wind": "m/s"})
    path = str(tmp_path / "u.h5")
    rollout(s, "rk4", dt=DT, steps=2, batch=2, progress=False, out=path, randomize={"force:drag.CD": "*uniform(1, 2)"},
            model_params={"force:drag.wind": np.zeros((2, 3)), "force:drag.area": np.full(2, 0.03)})
    with h5py.File(path, "r") as f:
        g = f["model_params"]
        assert g["force:drag.CD"].attrs["long_name"] == "force provider drag parameter CD, per world"
        assert g["force:drag.CD"].attrs["units"] == "1"
        assert json.loads(g["force:drag.CD"].attrs["randomize"]) == {"force:drag.CD": "*uniform(1, 2)"}
        assert g["force:drag.wind"].attrs["units"] == "m/s"
        assert g["force:drag.area"].attrs["units"] == "unknown"  # not declared: the harness cannot know
        assert g["force:drag.area"].attrs["long_name"] == "force provider drag parameter area, per world"


def test_bad_param_units_refused_when_added():
    s = MjScene(BALL, backend="mujoco")
    with pytest.raises(ForceError, match=r"param_units names \['Cd'\].*\['CD', 'area', 'wind'\]"):
        s.add_force(drag_of(np), name="drag", params=NOMINAL, param_units={"Cd": "1"})
    with pytest.raises(ForceError, match="param_units must be a dict"):
        s.add_force(drag_of(np), name="drag", params=NOMINAL, param_units={"CD": 1})
    assert s.add_force(drag_of(np), name="drag", params=NOMINAL, param_units={"area": " m2 "}).units == {"area": "m2"}


def test_vectorized_draws_are_numpy_default_rng_per_world():
    """randomize.draw_worlds (every world's PCG64 state computed at once) gives the bits of draw(), i.e. of
    numpy.random.default_rng([seed, world, crc32(key)]) per world, for every distribution; entropy words beyond
    32 bits (seed or world index >= 2**32) take numpy's own path."""
    from mjharness.rollout.engine.randomize import Target, _pcg64_states, draw, draw_worlds, parse_dist

    worlds = np.array([0, 1, 2, 7, 4095, 123456, 2**31, 2**32 - 1])
    for seed in (0, 3, 2**32 - 1):
        for (st, inc), w in zip(_pcg64_states(seed, worlds, 12345), worlds.tolist()):
            ref = np.random.PCG64(np.random.SeedSequence([seed, w, 12345])).state["state"]
            assert (st, inc) == (ref["state"], ref["inc"])
    for key, dist in (("force:drag.CD", "normal(0.47, 0.03)"), ("force:drag.wind[1]", "*uniform(0.9, 1.1)"),
                      ("body_mass", "loguniform(1e-3, 1)"), ("x", "choice(1, 2, 4)"), ("y", "+normal(0, 2)")):
        for k in (1, 3):
            t = Target(key, key, np.arange(k), parse_dist(key, dist))
            for seed, ws in ((0, worlds), (2**32 - 1, worlds), (2**32, worlds), (5, np.array([3, 2**32 + 1]))):
                want = np.stack([draw(t, seed, w) for w in ws.tolist()])
                np.testing.assert_array_equal(draw_worlds(t, seed, ws), want, err_msg=f"{key} {k} {seed}")
    assert draw_worlds(t, 0, np.zeros(0, int)).shape == (0, 3)
