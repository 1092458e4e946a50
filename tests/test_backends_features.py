"""Issue 16 on MjScene(backend="mujoco"): recorded outputs come from MuJoCo C itself.

Live outputs equal mj_forward (+ mj_rnePostConstraint, the energy flag, mj_contactForce) on the recorded
states with the carried warm start; sampled ones equal what mj_step leaves in mjData; both to 1e-12.
At the same states they equal backend="mjx"'s outputs to MJX's own agreement with C; the file has /outputs.
"""

from __future__ import annotations

import h5py
import jax
import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.adapters.noise import velocity_blocks
from mjharness.adapters.outputs import evaluate_outputs, parse_outputs
from mjharness.rollout import rollout

# A free ball on a floor (one sphere-plane contact: touch, cfrc_ext, contact_force are non-zero) with a
# sprung, damped, actuated hinge arm; every sensor kind the issue names.
XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="ball" pos="0 0 0.1">
      <freejoint name="free"/>
      <geom name="ballg" type="sphere" size="0.1" mass="1"/>
      <site name="imu" pos="0 0 0.1"/>
      <site name="foot" type="box" size="0.11 0.11 0.02" pos="0 0 -0.1"/>
      <body name="arm" pos="0 0 0.1">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1" stiffness="2"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0.1" size="0.02" mass="0.2" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" name="m"/></actuator>
  <sensor>
    <accelerometer name="acc" site="imu"/>
    <gyro name="gyro" site="imu"/>
    <framepos name="fpos" objtype="site" objname="imu"/>
    <touch name="touch" site="foot"/>
    <jointpos name="jp" joint="hinge"/>
  </sensor>
</mujoco>"""

B, STEPS, R = 3, 20, 5
TOL = 1e-12
OUTS = ("sensordata", "sensor:acc", "xpos", "site_xmat", "cfrc_ext", "qacc", "actuator_force", "energy",
        "contact_force")


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(XML)


@pytest.fixture(scope="module")
def scene(model):
    return MjScene(model, backend="mujoco", threads=2)


@pytest.fixture(scope="module")
def ctrl():
    return np.random.default_rng(0).normal(size=(B, STEPS, 1)) * 0.3


@pytest.fixture(scope="module")
def live(scene, ctrl, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("out") / "live.h5")
    x0 = scene.reset(batch=B)
    x0[:, scene.qvel_segment] += np.random.default_rng(1).normal(size=(B, scene.nv)) * 0.2
    return rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, x0=x0, ctrl=ctrl, record_every=R, out=path,
                   progress=False, outputs=OUTS)


def _c_outputs(m, d) -> dict:
    """MuJoCo C's own values in ``d`` after mj_forward (energy via the flag, contact force per contact)."""
    mujoco.mj_rnePostConstraint(m, d)
    force, f6 = 0.0, np.zeros(6)
    for i in range(d.ncon):
        mujoco.mj_contactForce(m, d, i, f6)
        force += f6[0]
    return {"sensordata": d.sensordata.copy(), "sensor:acc": d.sensordata[:3].copy(), "xpos": d.xpos.copy(),
            "site_xmat": d.site_xmat.copy(), "cfrc_ext": d.cfrc_ext.copy(), "qacc": d.qacc.copy(),
            "actuator_force": d.actuator_force.copy(), "energy": d.energy.copy(), "contact_force": np.array([force])}


def _energy_model(m):
    m = mujoco.MjModel.from_xml_string(XML)
    m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    return m


def test_live_outputs_are_mujoco_c(model, live, ctrl):
    m = _energy_model(model)
    d = mujoco.MjData(m)
    with h5py.File(live.path, "r") as f:
        carry = f["carry"][()]  # qacc_warmstart after each recorded step: the live evaluation's warm start
    worst = {}
    for j in range(len(live.time)):
        for b in range(B):
            d.qpos[:], d.qvel[:], d.ctrl[:] = live.qpos[j, b], live.qvel[j, b], ctrl[b, (j + 1) * R - 1]
            d.qacc_warmstart[:], d.time = carry[j, b], live.time[j]
            mujoco.mj_forward(m, d)
            for k, ref in _c_outputs(m, d).items():
                worst[k] = max(worst.get(k, 0.0), float(np.abs(live.outputs[k][j, b] - ref.reshape(-1)
                                                               .reshape(live.outputs[k].shape[2:])).max()))
    assert all(v <= TOL for v in worst.values()), worst
    assert np.abs(live.outputs["cfrc_ext"]).max() > 1.0 and live.outputs["contact_force"].max() > 1.0


def test_sampled_outputs_are_mj_step(model, scene, ctrl, live):
    r = rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, x0=live.x0, ctrl=ctrl, record_every=R,
                progress=False, outputs=("sensordata", "energy"), output_semantics="sampled")
    m = _energy_model(model)
    d = mujoco.MjData(m)
    worst = 0.0
    for b in range(B):
        d.qpos[:], d.qvel[:] = live.x0[b, scene.qpos_segment], live.x0[b, scene.qvel_segment]
        for k in range(STEPS):
            d.ctrl[:] = ctrl[b, k]
            mujoco.mj_step(m, d)  # sensors and energy of the state before the step, as mj_step leaves them
            if (k + 1) % R == 0:
                j = (k + 1) // R - 1
                worst = max(worst, float(np.abs(r.outputs["sensordata"][j, b] - d.sensordata).max()),
                            float(np.abs(r.outputs["energy"][j, b] - d.energy).max()))
    assert worst <= TOL, worst


def test_outputs_equal_mjx_at_the_same_states(model, live, ctrl):
    """backend='mujoco' and backend='mjx' evaluations of the recorded states (measured: <= 3e-13 apart)."""
    specs = parse_outputs(model, OUTS)
    host, mjx_scene = MjScene(model, backend="mujoco", threads=1), MjScene(model)
    with h5py.File(live.path, "r") as f:
        ws = f["carry"][-1]
    t, x, u = live.time[-1], live.x[-1], ctrl[:, -1]

    def batch(sc):
        return jax.jit(jax.vmap(lambda x, u, w: evaluate_outputs(sc, specs, t, x, u, {"qacc_warmstart": w})))(x, u, ws)

    a, b = batch(host), batch(mjx_scene)
    for k in OUTS:
        np.testing.assert_array_equal(a[k], live.outputs[k][-1])  # the same host evaluation as the rollout's
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-10, err_msg=k)  # measured <= 3e-13


def test_file_has_outputs(live):
    with h5py.File(live.path, "r") as f:
        assert set(OUTS) <= set(f["outputs"])
        for k in OUTS:
            np.testing.assert_array_equal(f["outputs"][k][()], live.outputs[k])
        assert f["outputs/sensordata"].attrs["semantics"] == "live"
        assert list(f["sensors/table/name"].asstr()[()]) == ["acc", "gyro", "fpos", "touch", "jp"]


# -- joint noise on backend="mujoco": velocity diffusion M(q)^-1 b sigma by mj_solveM ----------------------

SIGMA = (0.3,)


def _noisy(model, backend):
    sc = MjScene(model, backend=backend, **({"threads": 2} if backend == "mujoco" else {}))
    sc.add_joint_noise("hinge", SIGMA)
    return sc


def test_joint_noise_diffusion_is_minv_b_sigma(model, live):
    """The packed diffusion on backend='mujoco' is M(q)^-1 e_hinge sigma (M from mj_fullM, numpy's solve)
    on the hinge's tree (free + hinge velocities), and equals backend='mjx''s at the same states."""
    host, mjx_scene = _noisy(model, "mujoco"), _noisy(model, "mjx")
    xs = live.x[-1]
    g_host = np.asarray(jax.jit(jax.vmap(lambda x: host.diffusion(0.0, x)))(xs))
    g_mjx = np.asarray(jax.jit(jax.vmap(lambda x: mjx_scene.diffusion(0.0, x)))(xs))
    d, M = mujoco.MjData(model), np.zeros((model.nv, model.nv))
    hinge = model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "hinge")]
    for b in range(B):
        d.qpos[:] = xs[b, host.qpos_segment]
        mujoco.mj_forward(model, d)
        mujoco.mj_fullM(model, d, M)
        ref = np.linalg.solve(M, np.eye(model.nv)[hinge] * SIGMA[0])
        got = np.zeros(model.nv)
        for state, dofs in velocity_blocks(host):  # unpack: each velocity state's slot of the shared source
            o = host.layout[state].diffusion_offsets[0]
            got[dofs] = g_host[b, o:o + dofs.size]
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(g_host, g_mjx, rtol=1e-13, atol=1e-12)  # measured 2e-13 on values <= 183


def test_joint_noise_rollout_equals_mjx(model, live):
    """Euler-Maruyama with the same seed: backend='mujoco' follows backend='mjx' to contact-solver rounding."""
    kw = dict(steps=10, x0=live.x[-1], seed=3, progress=False)
    a = rollout(_noisy(model, "mujoco"), "euler_maruyama", **kw).x
    b = rollout(_noisy(model, "mjx"), "euler_maruyama", **kw).x
    quiet = rollout(MjScene(model, backend="mujoco", threads=2), "semi_implicit_euler", **kw).x
    assert np.abs(a - quiet).max() > 1e-4  # the noise moves the worlds
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_body_noise_still_refused_on_mujoco(model):
    sc = MjScene(model, backend="mujoco", threads=1)
    with pytest.raises(Exception, match="add_body_noise.*backend='mujoco'"):
        sc.add_body_noise("ball", force_sigma=1.0)
