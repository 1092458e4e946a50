"""Cross-check: MJX free body vs the reference model and MuJoCo C over 10 s, file-vs-file comparison,
exact error location, sign-free quaternions, energy drift, refusals and the CLI.

Compile budget: one MJX rollout (a free body with offset COM, 10 s at 1 ms, RK4) and the reference
model's scan; every other test writes small rollout files directly from MuJoCo C trajectories.
"""

from __future__ import annotations

import json
import os

import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.rollout import crosscheck, h5
from mjharness.rollout.cli import main as cli_main
from mjharness.rollout.verify import CrossCheckError, mujoco_peer_trajectory
from mjharness.scenes import load_scene, scene_info

# A free body built from two geoms (COM off the body origin, inertia not diagonal in body axes) under
# a tilted gravity vector: the reference model reads it from the MJCF with its own formulas.
FREE_XML = """
<mujoco model="lumpy">
  <option timestep="0.001" gravity="0.4 -0.3 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="lump" pos="0 0 1">
      <freejoint name="lump"/>
      <geom type="box" size="0.2 0.1 0.05" density="1000"/>
      <geom type="sphere" size="0.06" pos="0.15 0.05 0.04" density="3000"/>
    </body>
  </worldbody>
</mujoco>
"""


def _x0_free(rng, B):
    q = rng.normal(size=(B, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.concatenate([rng.normal(size=(B, 3)), q, rng.normal(size=(B, 3)), 3 * rng.normal(size=(B, 3))], 1)


def write_file(path, xml, x0, xs, dt, R, status=None, complete=True, t0=0.0, scene=None):
    """A rollout file (format 1) holding the trajectory xs (T, B, n) from x0, as the engine writes it."""
    scene = scene or MjScene(load_scene(xml))
    T, B, n = xs.shape
    attrs = dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION, dt=dt, record_every=R, steps=T * R, batch=B,
                 seed=0, t0=t0, ctrl="none", integrator=json.dumps(dict(name="test")), created="now")
    h5.create_rollout_file(path, h5.FileSpec(
        attrs=attrs, mjcf=xml, compat_log=[], layout=h5.layout_table(scene.layout, scene.joint_of), x0=x0,
        model_params={}, samples=T, qpos=scene.qpos_segment, qvel=scene.qvel_segment, time_chunk=T))
    w = h5.RolloutWriter(path)
    st = np.zeros(B, np.int8) if status is None else np.asarray(status, np.int8)
    w.put(0, t0 + (np.arange(T) + 1) * R * dt, xs, st, np.where(st != 0, 3, -1))
    w.close(complete=complete)
    return path


@pytest.fixture(scope="module")
def mjx_free_file(tmp_path_factory):
    """MJX rollout of the free body with our RK4 (MuJoCo C's quaternion treatment), 10 s at 1 ms."""
    from mjharness.integrators import RK4
    from mjharness.rollout import rollout

    path = str(tmp_path_factory.mktemp("cc") / "free.h5")
    scene = MjScene(load_scene(FREE_XML), quaternion_update="quaternion_qdot")
    x0 = _x0_free(np.random.default_rng(3), 2)
    rollout(scene, RK4(), dt=1e-3, steps=10_000, x0=x0, record_every=10, out=path, progress=False, keep=False)
    return path


def test_mjx_free_body_agrees_with_reference_model_and_mujoco_c_over_10s(mjx_free_file, tmp_path):
    rep = crosscheck(mjx_free_file, tol=1e-8, out=str(tmp_path / "rep"))
    assert rep.passed and set(rep.fields) == {"lump/pos", "lump/quat", "lump/vel", "lump/angvel"}
    assert rep.time[-1] == pytest.approx(10.0) and len(rep.time) == 1000
    assert rep.max_abs <= 1e-8
    assert "MJCF" in rep.reference_info["inertia"]  # the MJCF reader, not MuJoCo's compiled inertia
    # Energy and world angular momentum about the COM are conserved by the motion: drift ~ rounding.
    assert rep.energy["rel_drift"] < 1e-10 and rep.momentum["rel_drift"] < 1e-9
    js = json.load(open(tmp_path / "rep.json"))
    assert js["passed"] and js["fields"]["lump/quat"]["max_abs"] == rep.fields["lump/quat"].max_abs
    assert len(js["fields"]["lump/vel"]["per_world_max"]) == 2 and os.path.getsize(tmp_path / "rep.png") > 1000

    peer = str(tmp_path / "peer.h5")
    rep_c = crosscheck(mjx_free_file, reference="mujoco", tol=1e-8, save_reference=peer, invariants=False)
    assert rep_c.passed and rep_c.max_abs <= 1e-8
    # The saved MuJoCo C peer is a rollout file; comparing against it gives the same numbers.
    rep_f = crosscheck(mjx_free_file, reference=peer, tol=1e-8, invariants=False)
    for k in rep_c.fields:
        assert rep_f.fields[k].max_abs == rep_c.fields[k].max_abs
    assert rep_f.reference_info["interpolation"].startswith("none")


def test_mujoco_c_free_body_agrees_with_reference_model(tmp_path):
    """MuJoCo C's own RK4 (not our integrator) against the reference model: an independent pair."""
    m = load_scene(FREE_XML)
    x0 = _x0_free(np.random.default_rng(5), 3)
    xs = mujoco_peer_trajectory(m, x0, 200, 10, 1e-3)    # 2 s
    path = write_file(str(tmp_path / "c.h5"), FREE_XML, x0, xs, 1e-3, 10)
    rep = crosscheck(path, tol=1e-9, invariants=False)
    assert rep.passed, rep.summary()
    # Quaternions compare up to sign: flipping stored signs changes nothing.
    xs2 = xs.copy()
    xs2[::3, :, 3:7] *= -1
    rep2 = crosscheck(write_file(str(tmp_path / "c2.h5"), FREE_XML, x0, xs2, 1e-3, 10), tol=1e-9, invariants=False)
    assert rep2.fields["lump/quat"].max_abs == rep.fields["lump/quat"].max_abs

    # A coarse file (4 ms): by default the reference takes 1 ms substeps and so sees MuJoCo's own
    # truncation error; with ref_dt=None it steps at 4 ms like the file and agrees much more closely.
    coarse = write_file(str(tmp_path / "c4.h5"), FREE_XML, x0, mujoco_peer_trajectory(m, x0, 50, 5, 4e-3), 4e-3, 5)
    fine = crosscheck(coarse, invariants=False)
    same = crosscheck(coarse, invariants=False, ref_dt=None)
    assert fine.reference_info["dt"] == pytest.approx(1e-3) and fine.reference_info["steps_per_sample"] == 20
    assert same.max_abs < 3e-10 and fine.max_abs > 1e-9  # measured 2.1e-10 and 1.8e-9


def test_error_location_tolerance_and_cli_exit(tmp_path, capsys):
    m = load_scene("double_pendulum")
    scene = MjScene(m)
    xml = scene_info(m).xml
    x0 = np.array([[1.2, -0.5, 0.0, 0.0], [0.3, 0.9, 1.0, -2.0]])
    xs = mujoco_peer_trajectory(m, x0, 50, 10, 1e-3)
    exact = write_file(str(tmp_path / "exact.h5"), xml, x0, xs, 1e-3, 10, scene=scene)
    rep = crosscheck(exact, reference="mujoco", tol=0.0)
    assert rep.passed and rep.max_abs == 0.0  # the same MuJoCo C computation, bit for bit
    assert set(rep.fields) == {"shoulder/qpos", "elbow/qpos", "shoulder/qvel", "elbow/qvel"}
    # Energy of a conservative pendulum under RK4 at 1 ms: tiny drift, measured with MuJoCo's energy.
    assert rep.energy["max_abs_drift"] < 1e-6 and rep.energy["max_abs_drift"] > 0

    bad = xs.copy()
    bad[37, 1, 1] += 2.5e-6        # elbow/qpos of world 1 at sample 37
    bad[12, 0, 2] -= 1e-9          # a smaller one elsewhere
    f = write_file(str(tmp_path / "bad.h5"), xml, x0, bad, 1e-3, 10, scene=scene)
    rep = crosscheck(f, reference="mujoco", tol={"elbow/qpos": 1e-6}, fields=["elbow/qpos", "shoulder/qvel"],
                     invariants=False)
    e = rep.fields["elbow/qpos"]
    assert e.max_abs == pytest.approx(2.5e-6, rel=1e-6) and e.world == 1 and e.time == pytest.approx(0.38)
    assert e.per_world_max[0] == 0.0 and not e.passed and not rep.passed
    assert rep.fields["shoulder/qvel"].max_abs == pytest.approx(1e-9, rel=1e-5)
    assert rep.fields["shoulder/qvel"].time == pytest.approx(0.13) and rep.fields["shoulder/qvel"].tol is None

    out = str(tmp_path / "cli")
    assert cli_main(["check", f, "--reference", "mujoco", "--tol", "1e-6", "--out", out, "--no-plot"]) == 1
    assert "FAIL" in capsys.readouterr().out and json.load(open(out + ".json"))["passed"] is False
    assert cli_main(["check", f, "--reference", "mujoco", "--tol", "1e-5", "--out", out, "--no-plot"]) == 0
    assert cli_main(["check", f, "--reference", "mujoco", "--tol", "elbow/qpos=1e-5", "shoulder/qvel=1e-10",
                     "--out", out, "--no-plot"]) == 1
    # The pendulum is not a single free body: the reference model refuses, naming why; exit status 2.
    with pytest.raises(CrossCheckError, match="single free body.*HINGE"):
        crosscheck(f)
    assert cli_main(["check", f, "--reference", "model", "--out", out]) == 2
    assert "single free body" in capsys.readouterr().err
    # Without --reference the CLI picks one that applies (MuJoCo C here) and says which (issue 40).
    assert cli_main(["check", f, "--out", out, "--no-plot"]) == 1
    said = capsys.readouterr().out
    assert said.startswith("reference: MuJoCo C (--reference mujoco), since") and "single free body" in said


def test_reference_file_interpolated_onto_other_times(tmp_path):
    m = load_scene("double_pendulum")
    xml = scene_info(m).xml
    scene = MjScene(m)
    x0 = np.array([[1.2, -0.5, 0.0, 0.0]])
    ours = write_file(str(tmp_path / "ours.h5"), xml, x0, mujoco_peer_trajectory(m, x0, 100, 10, 1e-3), 1e-3, 10,
                      scene=scene)
    # Reference sampled every 3 ms: 10 ms samples are not among its times -> cubic spline.
    ref3 = write_file(str(tmp_path / "ref3.h5"), xml, x0, mujoco_peer_trajectory(m, x0, 400, 3, 1e-3), 1e-3, 3,
                      scene=scene)
    rep = crosscheck(ours, reference=ref3, invariants=False)
    assert rep.reference_info["interpolation"] == "cubic spline" and rep.reference_info["x0_max_abs_diff"] == 0
    assert 0 < rep.max_abs < 1e-6
    # Every step recorded: all our times are reference samples -> exact.
    ref1 = write_file(str(tmp_path / "ref1.h5"), xml, x0, mujoco_peer_trajectory(m, x0, 1000, 1, 1e-3), 1e-3, 1,
                      scene=scene)
    rep = crosscheck(ours, reference=ref1, invariants=False)
    assert rep.max_abs == 0.0 and rep.reference_info["interpolated_samples"] == 0
    # A reference that ends before our last sample is refused.
    short = write_file(str(tmp_path / "short.h5"), xml, x0, mujoco_peer_trajectory(m, x0, 50, 10, 1e-3), 1e-3, 10,
                       scene=scene)
    with pytest.raises(CrossCheckError, match="must span"):
        crosscheck(ours, reference=short)


def test_energy_drift_failed_worlds_and_bad_requests(tmp_path):
    m = load_scene(FREE_XML.replace('gravity="0.4 -0.3 -9.81"', 'gravity="0 0 0"'))
    xml = scene_info(m).xml
    scene = MjScene(m)
    x0 = _x0_free(np.random.default_rng(9), 2)
    xs = mujoco_peer_trajectory(m, x0, 100, 10, 1e-3)
    eps = 1e-4
    bumped = xs.copy()
    bumped[60:, 0, 10:13] *= 1 + eps  # world 0 gains rotational energy from t = 0.61 s on
    f = write_file(str(tmp_path / "e.h5"), xml, x0, bumped, 1e-3, 10, status=[0, 1], scene=scene)
    rep = crosscheck(f, reference="mujoco", energy_tol=1e-3)
    # Expected: the jump of kinetic energy ½ m |v_c|² + ½ ω·I_c ω (v_c = v + R (ω × c)), computed here.
    R_i = np.zeros(9)
    mujoco.mju_quat2Mat(R_i, m.body_iquat[1])
    R_i = R_i.reshape(3, 3)
    I_c = R_i @ np.diag(m.body_inertia[1]) @ R_i.T
    c, mass = m.body_ipos[1], m.body_mass[1]

    def kinetic(x):
        R = np.zeros(9)
        mujoco.mju_quat2Mat(R, x[3:7] / np.linalg.norm(x[3:7]))
        vc = x[7:10] + R.reshape(3, 3) @ np.cross(x[10:13], c)
        return 0.5 * mass * vc @ vc + 0.5 * x[10:13] @ I_c @ x[10:13]

    jump = max(abs(kinetic(bumped[j, 0]) - kinetic(x0[0])) for j in range(60, 100))
    assert rep.energy["max_abs_drift"] == pytest.approx(jump, rel=1e-6)
    assert rep.energy["world"] == 0 and rep.energy["time"] >= 0.61 - 1e-12
    assert rep.failed_worlds == [1] and not rep.passed  # world 1 reports a failed rollout
    rep = crosscheck(f, reference="mujoco", fields=["lump/angvel"], invariants=False)
    assert rep.fields["lump/angvel"].max_abs == pytest.approx(eps * np.max(np.abs(xs[60:, 0, 10:13])), rel=1e-9)

    with pytest.raises(CrossCheckError, match="cannot be compared.*lump/pos"):
        crosscheck(f, reference="mujoco", fields=["nope"])
    with pytest.raises(CrossCheckError, match="unknown field"):
        crosscheck(f, reference="mujoco", tol={"nope": 1.0})
    with pytest.raises(CrossCheckError, match="not 'model', 'mujoco' or an existing"):
        crosscheck(f, reference=str(tmp_path / "missing.h5"))
    with pytest.raises(Exception, match="no such file"):
        crosscheck(str(tmp_path / "missing.h5"))
    partial = write_file(str(tmp_path / "p.h5"), xml, x0, xs, 1e-3, 10, complete=False, scene=scene)
    assert any("incomplete" in n for n in crosscheck(partial, reference="mujoco", invariants=False).notes)
