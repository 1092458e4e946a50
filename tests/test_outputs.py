"""Recorded outputs (issue 15): live outputs equal MuJoCo C's mj_forward on the recorded state, sampled
ones what mj_step leaves in mjData; the file is readable by plain h5py; bad names write nothing; resume
continues the outputs."""

import h5py
import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.rollout import RolloutError, open_rollout, rollout
from mjharness.rollout.h5.format import array_attr
from mjharness.rollout.h5.tables import read_table

# The smallest scene that exercises every output: one free ball on a floor (one sphere-plane contact, so
# touch, force, cfrc_ext and contact_force are non-zero) carrying a hinge arm that collides with nothing
# (fewer collision functions to compile: the compile is this file's whole cost).
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
        <site name="ft" pos="0 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" name="m"/></actuator>
  <sensor>
    <accelerometer name="acc" site="imu"/>
    <gyro name="gyro" site="imu"/>
    <force name="force" site="ft"/>
    <torque name="torque" site="ft"/>
    <framepos name="fpos" objtype="site" objname="imu"/>
    <touch name="touch" site="foot"/>
    <jointpos name="jp" joint="hinge"/>
  </sensor>
</mujoco>"""

B, STEPS, R = 2, 20, 5
OUTS = ("sensordata", "xpos", "site_xpos", "cfrc_ext", "energy", "contact_force", "sensor:acc")


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_string(XML)


@pytest.fixture(scope="module")
def scene(model):
    return MjScene(model, backend="mjx")  # MJX's outputs against MuJoCo C (C's own: test_backends_features.py)


@pytest.fixture(scope="module")
def ctrl():
    return np.random.default_rng(0).normal(size=(B, STEPS, 1)) * 0.3


@pytest.fixture(scope="module")
def live(scene, ctrl, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("out") / "live.h5")
    return rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, ctrl=ctrl, record_every=R, out=path,
                   progress=False, outputs=OUTS)


def test_live_outputs_equal_mj_forward(model, live, ctrl):
    d = mujoco.MjData(model)
    with h5py.File(live.path, "r") as f:
        carry = f["carry"][()]  # qacc_warmstart after each recorded step (the live evaluation's warm start)
    worst = {}
    for j in range(len(live.time)):
        for b in range(B):
            d.qpos[:], d.qvel[:], d.ctrl[:] = live.qpos[j, b], live.qvel[j, b], ctrl[b, (j + 1) * R - 1]
            d.qacc_warmstart[:] = carry[j, b]
            d.time = live.time[j]
            mujoco.mj_forward(model, d)
            mujoco.mj_rnePostConstraint(model, d)
            for k, ref in (("sensordata", d.sensordata), ("xpos", d.xpos), ("site_xpos", d.site_xpos),
                           ("cfrc_ext", d.cfrc_ext), ("sensor:acc", d.sensordata[:3])):
                worst[k] = max(worst.get(k, 0.0), float(np.abs(live.outputs[k][j, b] - ref).max()))
    assert all(v <= 1e-9 for v in worst.values()), worst
    assert np.abs(live.outputs["cfrc_ext"]).max() > 1.0  # the ball rests on the floor: contacts are in it
    touch = model.sensor_adr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, "touch")]
    assert live.outputs["sensordata"][..., touch].max(axis=0).min() > 0  # every world's foot site touches


def test_energy_equals_mujoco(model, live, ctrl):
    m = mujoco.MjModel.from_xml_string(XML.replace('<option timestep="0.002"/>',
                                                   '<option timestep="0.002"><flag energy="enable"/></option>'))
    d = mujoco.MjData(m)
    for j in range(len(live.time)):
        for b in range(B):
            d.qpos[:], d.qvel[:] = live.qpos[j, b], live.qvel[j, b]
            mujoco.mj_forward(m, d)
            np.testing.assert_allclose(live.outputs["energy"][j, b], d.energy, rtol=0, atol=1e-9)


def test_contact_force_table(model, live):
    with h5py.File(live.path, "r") as f:
        ds = f["outputs/contact_force"]
        pairs = [tuple(p) for p in array_attr(ds, "pair_geom").tolist()]  # (npair, 2) geom ids
    floor, box = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor"), \
        mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "ballg")
    i = pairs.index((min(floor, box), max(floor, box)))
    weight = (model.body_mass.sum()) * 9.81
    # the resting ball: its floor contact carries about the weight (bouncing settles within a factor 2)
    assert 0.5 * weight < live.outputs["contact_force"][-1, :, i].mean() < 2 * weight


def test_sampled_equals_mj_step(model, scene, ctrl, live):
    r = rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, x0=live.x0, ctrl=ctrl, record_every=R,
                progress=False, outputs=("sensordata",), output_semantics="sampled")
    d = mujoco.MjData(model)
    for b in range(B):
        mujoco.mj_resetData(model, d)
        d.qpos[:], d.qvel[:] = live.x0[b, scene.qpos_segment], live.x0[b, scene.qvel_segment]
        for k in range(STEPS):
            d.ctrl[:] = ctrl[b, k]
            mujoco.mj_step(model, d)
            if (k + 1) % R == 0:
                j = (k + 1) // R - 1
                np.testing.assert_allclose(r.outputs["sensordata"][j, b], d.sensordata, rtol=0, atol=1e-9)


def test_plain_h5py_sensors(model, live):
    with h5py.File(live.path, "r") as f:
        assert list(f["sensors/table/name"].asstr()[()]) == ["acc", "gyro", "force", "torque", "fpos", "touch", "jp"]
        table = read_table(f["sensors/table"])
        assert [n.decode() for n in table["name"]] == ["acc", "gyro", "force", "torque", "fpos", "touch", "jp"]
        sd = f["outputs/sensordata"][()]
        assert f["outputs/sensordata"].attrs["semantics"] == "live"
        for row in table:
            v = f["sensors"][row["name"].decode()][()]
            assert v.shape == (len(live.time), B, row["dim"])
            np.testing.assert_array_equal(v, sd[:, :, row["adr"]:row["adr"] + row["dim"]])
        assert f["outputs/xpos"].dims[0][0].name == "/outputs/time"  # a view of /time: xarray's group= sees it
        np.testing.assert_array_equal(f["outputs/time"][()], f["time"][()])


def test_reader(live):
    from mjharness.rollout import open_rollout

    with open_rollout(live.path) as f:
        np.testing.assert_array_equal(f.output("xpos"), live.outputs["xpos"])
        np.testing.assert_array_equal(f.sensor("gyro"), live.outputs["sensordata"][..., 3:6])
        with pytest.raises(KeyError, match="nope"):
            f.sensor("nope")


@pytest.mark.parametrize("bad,match", [("xpoz", "unknown output 'xpoz'"), ("sensor:nope", "no sensor named 'nope'"),
                                       (("xpos", "xpos"), "asked twice")])
def test_bad_names_write_nothing(scene, tmp_path, bad, match):
    path = tmp_path / "bad.h5"
    with pytest.raises(RolloutError, match=match):
        rollout(scene, steps=4, batch=1, out=str(path), progress=False,
                outputs=bad if isinstance(bad, tuple) else (bad,))
    assert not path.exists()


def test_resume_continues_outputs(scene, ctrl, live, tmp_path):
    import shutil

    path = str(tmp_path / "part.h5")
    shutil.copy(live.path, path)
    with h5py.File(path, "r+") as f:  # cut the file back to its first 2 samples, as a killed run leaves it
        f.attrs["samples"] = 2
        f.attrs["complete"] = False
        if "progress" in f:  # the SWMR readers' truth: [samples flushed, complete]
            f["progress"][...] = [2, 0]
    with open_rollout(path) as f:
        assert f.samples == 2 and not f.complete  # a resume really continues from sample 2
    r = rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, ctrl=ctrl, record_every=R, resume=path,
                progress=False, outputs=OUTS)
    for k in OUTS:
        np.testing.assert_array_equal(r.outputs[k], live.outputs[k])


@pytest.mark.parametrize("outputs,semantics,match", [(("xpos",), "live", "outputs: file"),
                                                    (OUTS, "sampled", "output_semantics: file"),
                                                    ((), "live", "outputs: file")])
def test_resume_with_other_outputs_refused(scene, ctrl, live, tmp_path, outputs, semantics, match):
    import shutil

    path = str(tmp_path / "part.h5")
    shutil.copy(live.path, path)
    before = open(path, "rb").read()
    with pytest.raises(RolloutError, match=match):  # checked by the plan: before any compile or write
        rollout(scene, "semi_implicit_euler", steps=STEPS, batch=B, ctrl=ctrl, record_every=R, resume=path,
                progress=False, outputs=outputs, output_semantics=semantics)
    assert open(path, "rb").read() == before


def test_show_plots_outputs(live, tmp_path, capsys):
    from mjharness.rollout.cli.app import main

    png = tmp_path / "p.png"
    assert main(["show", live.path, "--plot", "sensor:acc", "sensor:touch", "xpos:arm", "energy",
                 "--png", str(png)]) == 0
    assert png.stat().st_size > 1000 and "plot:" in capsys.readouterr().out
    assert main(["show", live.path, "--plot", "xpos:nobody", "--png", str(png)]) == 2
    assert "has no row 'nobody'" in capsys.readouterr().err


def test_xarray_opens_outputs(live):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    root = xr.open_dataset(live.path, engine="h5netcdf", phony_dims="access")
    assert root["x"].dims[:2] == ("time", "world")
    ds = xr.open_dataset(live.path, engine="h5netcdf", group="outputs", phony_dims="access")
    np.testing.assert_array_equal(ds["xpos"].sel(_xpos_2="arm").values, live.outputs["xpos"][:, :, 2])
    assert ds["sensordata"].dims[:2] == ("time", "world")


def test_contact_pairs_are_labelled_by_geom_names(tmp_path):
    """Generic readers see contact pairs by name (issue 29.9); the ids stay in the pair_geom attribute."""
    path = tmp_path / "cf.h5"
    rollout("box_on_plane", steps=20, batch=2, record_every=10, outputs=["contact_force"], out=path, progress=False)
    with h5py.File(path, "r") as f:
        ds = f["outputs/contact_force"]
        labels = [v.decode() if isinstance(v, bytes) else str(v) for v in ds.dims[2][0][()]]
        assert labels == ["floor-box"] and [list(p) for p in array_attr(ds, "pair_geom")] == [[0, 1]]
