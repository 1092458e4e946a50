"""Carried state: MuJoCo's warm start through the engine, the adaptive step size, the scene's own integrator.

The contact scene uses MJX-style solver budgets (Newton, 1 iteration), where the solver does not
converge and the warm start it starts from changes the answer: a harness that cold-starts every
evaluation drifts from MuJoCo C within a few steps, while raw ``mjx.step`` (which carries
``qacc_warmstart``) stays at round-off. The bar: ours within max(1e-12, 10 x raw mjx.step's
deviation) after 10 steps and max(1e-9, 10 x raw's) after 200.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from backend_common import c_trajectory
from mujoco import mjx

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, DormandPrince, Integrator
from mjharness.rollout import RolloutError, open_rollout, rollout

CONTACT = """
<mujoco model="carry_contacts">
  <option timestep="0.002" solver="Newton" iterations="1" ls_iterations="4" integrator="{integrator}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="box" pos="0 0 0.12">
      <freejoint/>
      <geom type="capsule" fromto="-0.08 0 0 0.08 0 0" size="0.05" mass="0.9"/>
      <geom type="sphere" pos="0 0.08 0" size="0.05" mass="0.4"/>
    </body>
    <body name="pair" pos="0.4 0 0.06">
      <freejoint/>
      <geom type="capsule" fromto="-0.1 0 0 0.1 0 0" size="0.05" mass="0.7"/>
      <body pos="0 0 0.1">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.3" range="-1 1"/>
        <geom type="capsule" fromto="0 0 0 0.15 0 0.05" size="0.04" mass="0.4"/>
      </body>
    </body>
  </worldbody>
  <actuator><velocity name="v" joint="hinge" kv="0.5"/></actuator>
</mujoco>
"""
SCHEMES = {"Euler": "semi_implicit_euler", "RK4": "rk4", "implicitfast": "implicit_fast"}


@functools.cache
def settled(scheme: str):
    """(scheme, MjScene, settled x0): the scene settled on the floor by 150 MuJoCo C steps."""
    m = mujoco.MjModel.from_xml_string(CONTACT.format(integrator=scheme))
    d = mujoco.MjData(m)
    d.qvel[:] = np.linspace(-0.3, 0.4, m.nv)
    for _ in range(150):
        mujoco.mj_step(m, d)
    x0 = np.concatenate([d.qpos, d.qvel, d.act])
    return scheme, MjScene(m, backend="mjx"), x0  # the MJX carry against raw mjx.step


@pytest.fixture(scope="module", params=list(SCHEMES))
def contact(request):
    return settled(request.param)


def raw_mjx_trajectory(m, x0, steps):
    mm = mjx.put_model(m)
    d = mjx.put_data(m, mujoco.MjData(m)).replace(qpos=jnp.asarray(x0[:m.nq]), qvel=jnp.asarray(x0[m.nq:m.nq + m.nv]))
    # put_data/step index dtypes differ (x64): the step's dtypes from its shapes alone (no compile of a step)
    d = jax.tree.map(lambda a, b: a.astype(b.dtype), d, jax.eval_shape(mjx.step, mm, d))

    @jax.jit
    def run(d):
        def f(d, _):
            d = mjx.step(mm, d)
            return d, jnp.concatenate([d.qpos, d.qvel])
        return jax.lax.scan(f, d, None, length=steps)[1]
    return np.asarray(run(d))


@functools.cache
def references(scheme: str):
    """(MuJoCo C, raw mjx.step) trajectories of 200 steps from the settled state: one raw MJX compile per scheme."""
    _, sc, x0 = settled(scheme)
    return c_trajectory(sc.model, x0, 200), raw_mjx_trajectory(sc.model, x0, 200)


def test_scene_own_integrator_with_the_carry_tracks_mujoco_c_as_raw_mjx_does(contact):
    scheme, sc, x0 = contact
    r = rollout(sc, steps=200, x0=x0[None], progress=False)  # integrator=None, dt=None: the scene's own
    assert r.integrator.name == SCHEMES[scheme] and r.stats["worlds_ok"] == 1
    ours = np.concatenate([r.qpos[:, 0], r.qvel[:, 0]], axis=1)
    ref, raw = references(scheme)
    for k, floor in ((10, 1e-12), (200, 1e-9)):
        dev_raw = np.abs(raw[k - 1] - ref[k - 1]).max()
        dev_ours = np.abs(ours[k - 1] - ref[k - 1]).max()
        assert dev_ours <= max(floor, 10 * dev_raw), (scheme, k, dev_ours, dev_raw)
    if scheme != "implicitfast":  # MJX's implicitfast differs from C's (see test_implicit); ours follows C
        assert np.abs(ours[9] - raw[9]).max() <= 1e-9  # MuJoCo's warm-start semantics, as raw mjx.step has them
    # The warm start matters here: cold-starting every evaluation (the carry-less path) gives other numbers.
    cold = rollout(sc, _Cold(r.integrator), steps=200, x0=x0[None], progress=False)
    assert np.abs(np.concatenate([cold.qpos[-1, 0], cold.qvel[-1, 0]]) - ours[-1]).max() > 1e-3


class _Cold(Integrator):
    """Wraps an integrator and hands it no carry: every evaluation cold-starts, the carry passes through."""

    def __init__(self, integ):
        self.integ = integ
        self.name = integ.name
        self.requires = integ.requires

    def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
        x_next, _, status = self.integ.integrate(model, t0, h, x, ctrl, None, key)
        return x_next, carry, status


def test_carry_is_in_the_file_and_resume_is_bit_identical(tmp_path):
    _, sc, x0 = settled("RK4")
    full = rollout(sc, steps=60, x0=x0[None], record_every=5, chunk=20, progress=False, out=tmp_path / "full.h5")
    part = tmp_path / "part.h5"
    rollout(sc, steps=30, x0=x0[None], record_every=5, chunk=20, progress=False, out=part)
    again = rollout(sc, steps=60, resume=part, record_every=5, chunk=20, progress=False)
    assert np.array_equal(again.x, full.x)
    with open_rollout(part) as f, open_rollout(tmp_path / "full.h5") as g:
        assert f.carry_layout == (("qacc_warmstart", sc.nv),)
        assert np.array_equal(f.carry, g.carry) and f.carry.shape == (12, 1, sc.nv)
        rows = [r for r in f.layout_table if r["update"].decode() == "carry"]
        assert [r["name"].decode() for r in rows] == ["qacc_warmstart"]
        assert f.h5.attrs["integrator_source"] == "scene"
        # The file reproduces its model: MuJoCo C replaying world 0 from /x0 with the file's model gives the
        # same numbers as with the model that ran, so /qpos is reproduced as well as the run itself.
        x0_file, model_file = f.x0[0], f.model()
        qpos_file = f.qpos[:, 0]
    replay = c_trajectory(model_file, x0_file, 60)[4::5, :sc.nq]
    assert np.array_equal(replay, c_trajectory(sc.model, x0, 60)[4::5, :sc.nq])
    assert np.abs(replay - qpos_file).max() <= max(1e-12, 10 * np.abs(
        references("RK4")[1][:60][4::5, :sc.nq] - replay).max())


def test_implicit_scene_integrator_is_refused_with_the_reason():
    m = mujoco.MjModel.from_xml_string(CONTACT.format(integrator="RK4"))
    sc = MjScene(m, backend="mjx")
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICIT
    with pytest.raises(RolloutError, match="implicit.*implicit_fast"):
        rollout(sc, steps=1, progress=False)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4


class Pendulum:
    """A smooth toy model (no MuJoCo): theta'' = -sin(theta)."""

    def __init__(self):
        from mjharness.integrators import StateRegistry, StateSpec

        reg = StateRegistry()
        reg.register("theta", StateSpec(shape=(1,)))
        reg.register("omega", StateSpec(shape=(1,)))
        self.layout = reg.finalize()

    def dynamics(self, t, x, ctrl=None):
        return jnp.stack([x[1], -jnp.sin(x[0])])

    def x0(self):
        return np.array([1.2, 0.0])


def test_adaptive_step_size_is_carried_between_output_intervals():
    """Interval 10x the natural step: restarting each interval from h0 re-discovers the step by rejections."""
    pend, integ = Pendulum(), DormandPrince(rtol=1e-9, atol=1e-12)
    interval, n = 0.5, 40
    x = jnp.asarray(pend.x0())
    # one compile for each form of h (None: restart), the interval's ends traced
    advance = jax.jit(lambda t0, xs, t1, h: integ.advance_info(pend, t0, xs, t1, h=h))
    counts = {}
    for mode in ("restart", "carried"):
        xs, h = x, None
        acc = rej = 0
        for j in range(n):
            xs, status, info = advance(jnp.float64(j * interval), xs, jnp.float64((j + 1) * interval),
                                       None if mode == "restart" or j == 0 else h)
            h = info["h"]
            acc, rej = acc + int(info["accepted"]), rej + int(info["rejected"])
            assert int(status) == 0
        counts[mode] = (acc, rej, np.asarray(xs))
    # Measured: 381 accepted + 116 rejected restarting, 380 + 39 carried (40 intervals).
    assert counts["carried"][1] < counts["restart"][1] / 2, counts
    assert counts["carried"][0] + counts["carried"][1] < counts["restart"][0] + counts["restart"][1]
    np.testing.assert_allclose(counts["carried"][2], counts["restart"][2], atol=1e-7)
    # The engine carries it: h_next is in the result's carry and the run equals the manual carried loop.
    r = rollout(pend, integ, dt=interval, steps=n, x0=pend.x0()[None], progress=False)
    assert set(r.carry) == {"h_next"} and 0 < r.carry["h_next"][0] < interval
    np.testing.assert_allclose(r.x[-1, 0], counts["carried"][2], rtol=0, atol=1e-12)


def test_an_integrator_that_ignores_the_carry_still_runs():
    sc = MjScene(mujoco.MjModel.from_xml_string(CONTACT.format(integrator="RK4")), backend="mjx")
    r = rollout(sc, _Cold(RK4()), dt=0.002, steps=3, batch=1, progress=False)
    # The carry passes through untouched: the scene's cold warm start, every step.
    assert set(r.carry) == {"qacc_warmstart"} and not np.any(r.carry["qacc_warmstart"])
    assert r.stats["worlds_ok"] == 1


if os.environ.get("MJHARNESS_CARRY_MEASURE"):  # pragma: no cover - the figures of the README
    def test_print_figures(contact):
        scheme, sc, x0 = contact
        r = rollout(sc, steps=200, x0=x0[None], progress=False)
        ours = np.concatenate([r.qpos[:, 0], r.qvel[:, 0]], axis=1)
        ref, raw = c_trajectory(sc.model, x0, 200), raw_mjx_trajectory(sc.model, x0, 200)
        for k in (10, 200):
            print(scheme, k, np.abs(ours[k - 1] - ref[k - 1]).max(), np.abs(raw[k - 1] - ref[k - 1]).max(),
              np.abs(ours[k - 1] - raw[k - 1]).max())
        cold = rollout(sc, _Cold(r.integrator), steps=k, x0=x0[None], progress=False)
        print("cold", np.abs(np.concatenate([cold.qpos[-1, 0], cold.qvel[-1, 0]]) - ref[k - 1]).max())
