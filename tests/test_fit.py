"""fit(): bounded least squares recovers a link mass and a joint damping from 64 noisy trajectories, starting 50 %
off, with 95 % intervals that hold the truth; a parameter the data do not touch is flagged unidentifiable."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import h5py
import jax
import mujoco
import numpy as np
import pytest
from conftest import cached_scene  # noqa: E402

from mjharness.rollout import RolloutError, rollout
from mjharness.rollout.engine.plan import initial_states
from mjharness.rollout.fit import fit, resolve_param

jax.config.update("jax_enable_x64", True)

B, STEPS, R = 64, 40, 4
ROOT = Path(__file__).resolve().parents[1]
MASS, DAMP = 1.3, 0.4


@pytest.fixture(scope="module")
def noisy_file(tmp_path_factory):
    scene = cached_scene("double_pendulum")
    m = scene.model
    link1 = m.body("link1").id
    mass = np.tile(m.body_mass, (B, 1))
    mass[:, link1] = MASS
    damp = np.tile(m.dof_damping, (B, 1))
    damp[:, m.jnt_dofadr[m.joint("shoulder").id]] = DAMP
    path = tmp_path_factory.mktemp("fit") / "noisy.h5"
    x0 = initial_states(scene, B, 0, 0.5)
    rollout(scene, "rk4", dt=0.01, steps=STEPS, x0=x0, record_every=R, out=path, progress=False,
            model_params={"body_mass": mass, "dof_damping": damp})
    with h5py.File(path, "r+") as f:
        f["clean"] = f["x"][()]  # the noise-free states, for the coverage test's own noise draws
        f["x"][...] = f["x"][()] + 1e-3 * np.random.default_rng(0).standard_normal(f["x"].shape)
    return scene, path


# One problem for the fits below (the compiled residual and Jacobian are shared): the mass and damping the data
# determine, and the friction of a geom of a scene without contacts, which they do not.
PARAMS = ["body_mass:link1", "dof_damping:shoulder", "geom_friction:link1"]
FRICTION = [f"geom_friction:link1[{i}]" for i in range(3)]


def test_fit_recovers_mass_and_damping(noisy_file):
    """Known noise (1e-3): the estimates within 0.2 %, each truth inside its 95 % interval, the reduced chi-square
    of the residuals near 1 (the noise model fits); the friction of a geom that touches nothing leaves every
    residual unchanged (a zero Jacobian column): flagged, with an infinite interval. With the noise estimated
    instead (each component weighted by its spread, the level from the residuals): the same estimates, intervals
    that still hold the truth."""
    scene, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    truth = {"body_mass:link1": MASS, "dof_damping:shoulder": DAMP}
    res = fit(path, PARAMS, scene=scene, integrator="rk4", start=start, noise=1e-3, progress=False)
    for k, v in truth.items():
        assert abs(res.values[k] - v) / v < 2e-3, (k, res.values[k])
        lo, hi = res.ci95[k]
        assert lo < v < hi, (k, lo, hi)
        assert 0 < res.stderr[k] < 0.01 * v
    assert res.unidentifiable == FRICTION and math.isinf(res.condition_number)
    assert np.all(np.isinf(res.stderr["geom_friction:link1"]))
    assert np.all(np.isinf(res.ci95["geom_friction:link1"][1]))
    assert abs(res.residuals["reduced_chi2"] - 1) < 0.1  # the residuals are the noise: the model fits
    assert res.residuals["chi2_p"] > 0.01  # and the goodness-of-fit test agrees (no warning: see below)
    assert res.iterations < 20 and res.history[-1]["cost"] < res.history[0]["cost"]
    assert res.correlation.shape == (5, 5) and np.allclose(np.diag(res.correlation)[:2], 1)
    assert np.all(np.isnan(res.correlation[2:]))
    est = fit(path, PARAMS, scene=scene, integrator="rk4", start=start, progress=False)
    for k in truth:
        assert abs(est.values[k] - res.values[k]) < 1e-3 * truth[k]
        lo, hi = est.ci95[k]
        assert lo < truth[k] < hi and np.isfinite(est.stderr[k])
    assert est.residuals["sigma2"] != 1.0 and est.unidentifiable == FRICTION
    assert est.residuals["chi2_p"] is None  # the noise estimated from the residuals: nothing to test


def test_a_fit_that_does_not_explain_its_data_says_so(noisy_file):
    """With known noise |r|² is chi-square with m - k degrees of freedom: a noise level given half the recorded one
    (reduced chi-square ~4, as a fit stuck on a wrong piece of a contact-rich cost also shows) fails the test, and
    fit warns, with the figures, and prints it in the summary; the true level passes (above)."""
    from scipy import stats

    from mjharness.rollout.fit_report import summary_lines
    from mjharness.rollout.fit_stats import uncertainty

    scene, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    with pytest.warns(UserWarning, match=r"larger than the given noise explains \(reduced chi2 [34]\.\d+ over"):
        res = fit(path, PARAMS[:2], scene=scene, integrator="rk4", start=start, noise=0.5e-3, progress=False)
    r = res.residuals
    assert 3.5 < r["reduced_chi2"] < 4.5 and r["chi2_p"] < 1e-100
    assert "the fit does not explain the data" in summary_lines(res)[-1]
    # the test itself against scipy on residuals that are the noise, and on ones 20 % too large
    rng = np.random.default_rng(0)
    jac, z = rng.standard_normal((4000, 3)), rng.standard_normal(4000)
    assert uncertainty(jac, z, True).chi2_p == pytest.approx(stats.chi2.sf(z @ z, 3997), rel=1e-12)
    assert uncertainty(jac, z, True).chi2_p > 0.01 > uncertainty(jac, 1.2 * z, True).chi2_p
    assert math.isnan(uncertainty(jac, z, False).chi2_p)


def test_mujoco_minimize_with_finite_differences_on_c_agrees(noisy_file):
    """The same problem solved independently: mujoco.minimize.least_squares with finite differences on residuals
    from mujoco.rollout (MuJoCo C's RK4; scripts/fit_vs_minimize.py) lands inside our intervals, within 1e-8."""
    import importlib.util

    scene, path = noisy_file
    spec = importlib.util.spec_from_file_location("fit_vs_minimize", ROOT / "scripts" / "fit_vs_minimize.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    ours = fit(path, list(start), scene=scene, integrator="rk4", start=start, noise=1e-3, progress=False)
    est, _ = script.theirs(str(path), np.array(list(start.values())), np.zeros(2), np.full(2, 1e30))
    for p, e in zip(start, est):
        lo, hi = ours.ci95[p]
        assert lo < e < hi and abs(e - ours.values[p]) < 1e-8 * ours.values[p], (p, e, ours.values[p])


def test_a_mujoco_c_scene_fits_by_finite_differences(noisy_file):
    """A scene on backend='mujoco' (no gradients) fits by finite differences of batched MuJoCo C rollouts: the same
    estimates as the exact Jacobian through MJX (to 1e-9), the same intervals (to 1e-4 relative). On a CPU,
    jacobian='auto' takes that path for the file's own model; jacobian='exact' asks for MJX."""
    from mjharness.adapters import MjScene

    scene, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    c = fit(path, list(start), scene=MjScene("double_pendulum", backend="mujoco"), integrator="rk4", start=start,
            noise=1e-3, progress=False)
    ours = fit(path, list(start), scene=scene, integrator="rk4", start=start, noise=1e-3, progress=False,
               jacobian="exact")
    assert c.jacobian == "differences (mujoco)" and ours.jacobian == "exact (mjx)"
    for k in start:
        assert abs(c.values[k] - ours.values[k]) < 1e-9 * ours.values[k], (k, c.values[k], ours.values[k])
        assert c.stderr[k] == pytest.approx(ours.stderr[k], rel=1e-4)
    auto = fit(path, list(start), integrator="rk4", start=start, noise=1e-3, progress=False)  # the file's model
    assert auto.jacobian == "differences (mujoco)"  # (this machine has no accelerator)
    assert auto.values == pytest.approx(c.values, rel=1e-12)
    with pytest.raises(RolloutError, match="jacobian='exact'"):
        fit(path, ["dof_damping:shoulder"], scene=MjScene("double_pendulum", backend="mujoco"), jacobian="exact",
            progress=False)
    with pytest.raises(RolloutError, match="jacobian must be one of auto, exact, differences"):
        fit(path, ["dof_damping:shoulder"], jacobian="fd", progress=False)


def test_bounds_hold_and_are_checked(noisy_file):
    """A bound below the truth stops the damping at the bound; bad bounds are refused before any compile."""
    scene, path = noisy_file
    res = fit(path, PARAMS, scene=scene, integrator="rk4", start={"dof_damping:shoulder": 0.5 * DAMP}, noise=1e-3,
              bounds={"dof_damping:shoulder": (0.1, 0.35)}, progress=False)
    assert res.values["dof_damping:shoulder"] == pytest.approx(0.35)  # the truth 0.4 is beyond the bound
    with pytest.raises(RolloutError, match="outside its bounds"):
        fit(path, ["dof_damping:shoulder"], scene=scene, start={"dof_damping:shoulder": 0.5},
            bounds={"dof_damping:shoulder": (0.0, 0.4)}, progress=False)
    with pytest.raises(RolloutError, match="not among the fitted parameters"):
        fit(path, ["dof_damping:shoulder"], scene=scene, bounds={"body_mass:link1": (0.0, 2.0)}, progress=False)
    with pytest.raises(RolloutError, match="lo must be below hi"):
        fit(path, ["dof_damping:shoulder"], scene=scene, bounds={"dof_damping:shoulder": (1.0, 0.0)}, progress=False)
    with pytest.raises(RolloutError, match="noise must be"):
        fit(path, ["dof_damping:shoulder"], scene=scene, noise=[1.0, 2.0], progress=False)


def test_a_window_fits_its_samples_only(noisy_file):
    """window=(0.2, 0.4): the residuals are the samples recorded at 0.2..0.4 s only (6 of 10, all worlds and
    components), simulated from x0; the truths stay inside the (wider) intervals. A window with no sample is
    refused before anything compiles."""
    scene, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    res = fit(path, PARAMS, scene=scene, integrator="rk4", start=start, noise=1e-3, window=(0.2, 0.4), progress=False)
    assert res.residuals["dof"] == 6 * B * scene.layout.size - 5
    for k, v in (("body_mass:link1", MASS), ("dof_damping:shoulder", DAMP)):
        lo, hi = res.ci95[k]
        assert lo < v < hi, (k, lo, hi)
    with pytest.raises(RolloutError, match="no recorded sample"):
        fit(path, PARAMS, scene=scene, window=(5.0, 6.0), progress=False)


def test_interval_coverage_over_noise_seeds(noisy_file, tmp_path):
    """Coverage of the 95 % intervals: 20 noise seeds on one set of trajectories (one compile: the data are
    arguments of the compiled Jacobian); both parameters' truths inside their intervals in 17 to 20 of them."""
    scene, path = noisy_file
    with h5py.File(path, "r") as f:
        clean = f["clean"][()]
    start = {"body_mass:link1": 1.2 * MASS, "dof_damping:shoulder": 0.8 * DAMP}
    hits = {k: 0 for k in start}
    for seed in range(20):
        p = tmp_path / f"seed{seed}.h5"
        shutil.copy(path, p)
        with h5py.File(p, "r+") as f:
            f["x"][...] = clean + 1e-3 * np.random.default_rng(100 + seed).standard_normal(clean.shape)
        res = fit(p, PARAMS, scene=scene, integrator="rk4", start=start, noise=1e-3, iterations=20, progress=False)
        for k, v in (("body_mass:link1", MASS), ("dof_damping:shoulder", DAMP)):
            lo, hi = res.ci95[k]
            hits[k] += lo < v < hi
    assert all(17 <= h <= 20 for h in hits.values()), hits


def test_two_files_share_the_mass_and_each_has_its_damping(noisy_file, tmp_path):
    """Model variants: a second file whose pendulum has another shoulder damping (0.25), fitted jointly with the
    first; the link mass is shared, the damping per file (``name@k``); every truth inside its interval; the
    shared mass is determined better than by one file. The same through the CLI (FILE... --per-file)."""
    scene, path = noisy_file
    m = scene.model
    damp = np.tile(m.dof_damping, (B, 1))
    damp[:, m.jnt_dofadr[m.joint("shoulder").id]] = 0.25
    mass = np.tile(m.body_mass, (B, 1))
    mass[:, m.body("link1").id] = MASS
    other = tmp_path / "other.h5"
    rollout(scene, "rk4", dt=0.01, steps=STEPS, x0=initial_states(scene, B, 1, 0.5), record_every=R, out=other,
            progress=False, model_params={"body_mass": mass, "dof_damping": damp})
    with h5py.File(other, "r+") as f:
        f["x"][...] = f["x"][()] + 1e-3 * np.random.default_rng(1).standard_normal(f["x"].shape)
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.3}
    both = fit([path, other], PARAMS, scene=scene, integrator="rk4", start=start, noise=1e-3,
               per_file=["dof_damping:shoulder"], progress=False)
    one = fit(path, PARAMS, scene=scene, integrator="rk4", start=start, noise=1e-3, progress=False)
    assert set(both.values) == {"body_mass:link1", "dof_damping:shoulder@0", "dof_damping:shoulder@1",
                                "geom_friction:link1"}
    for k, v in (("body_mass:link1", MASS), ("dof_damping:shoulder@0", DAMP), ("dof_damping:shoulder@1", 0.25)):
        lo, hi = both.ci95[k]
        assert lo < v < hi and abs(both.values[k] - v) < 5e-3 * v, (k, both.values[k], lo, hi)
    assert both.stderr["body_mass:link1"] < one.stderr["body_mass:link1"]
    assert both.unidentifiable == FRICTION and both.residuals["dof"] == 2 * one.residuals["dof"] + 4
    from mjharness.rollout.cli.app import main

    out = tmp_path / "both.json"
    assert main(["fit", str(path), str(other), "--params", *PARAMS, "--per-file", "dof_damping:shoulder",
                 "--start", f"body_mass:link1={1.5 * MASS}", "dof_damping:shoulder=0.3", "--noise", "1e-3",
                 "--integrator", "rk4", "--json-out", str(out)]) == 0
    got = json.loads(out.read_text())["values"]
    assert got["dof_damping:shoulder@1"] == pytest.approx(both.values["dof_damping:shoulder@1"], rel=1e-6)
    with pytest.raises(RolloutError, match="per_file names"):
        fit([path, other], PARAMS, scene=scene, per_file=["body_mass:nope"], progress=False)
    with pytest.raises(RolloutError, match="give one file"):
        fit([path, other], PARAMS, scene=scene, start="file", progress=False)


def test_sensor_gain_bias_and_delay(tmp_path):
    """A recorded sensor that reads 1.2 s(t - 0.04) + 0.05 (gain, bias and a delay of one recording interval) on
    a damped pendulum: fitting sensor_gain, sensor_bias, sensor_delay of that sensor with the damping recovers
    all four (noise-free data: to 1e-6); the other sensor is left as modelled. Sensor parameters need the
    sensordata target and a sensor of that name."""
    from mjharness.adapters import MjScene
    from mjharness.scenes import scene_path

    xml = open(scene_path("double_pendulum")).read().replace(
        "</worldbody>", '</worldbody><sensor><jointpos name="angle" joint="shoulder"/>'
                        '<framepos name="tip" objtype="body" objname="link2"/></sensor>')
    scene = MjScene(mujoco.MjModel.from_xml_string(xml))
    m = scene.model
    damp = np.tile(m.dof_damping, (8, 1))
    damp[:, 0] = DAMP
    path = tmp_path / "sensed.h5"
    rollout(scene, "rk4", dt=0.01, steps=STEPS, x0=initial_states(scene, 8, 0, 0.5), record_every=R, out=path,
            progress=False, model_params={"dof_damping": damp}, outputs=["sensordata"])
    with h5py.File(path, "r+") as f:
        y = f["outputs/sensordata"][()]
        y[1:, :, 0] = 1.2 * y[:-1, :, 0] + 0.05  # the angle sensor: one sample (0.04 s) late, gain and offset
        y[0, :, 0] = 1.2 * y[0, :, 0] + 0.05  # held at the first sample before it, as the fit's interpolation
        f["outputs/sensordata"][...] = y
    params = ["dof_damping:shoulder", "sensor_gain:angle", "sensor_bias:angle", "sensor_delay:angle"]
    res = fit(path, params, scene=scene, integrator="rk4", start={"dof_damping:shoulder": 0.5 * DAMP,
                                                                   "sensor_delay:angle": 0.02},
              target="outputs:sensordata", progress=False)
    want = {"dof_damping:shoulder": DAMP, "sensor_gain:angle": 1.2, "sensor_bias:angle": 0.05,
            "sensor_delay:angle": 0.04}
    for k, v in want.items():
        assert abs(res.values[k] - v) < 1e-6, (k, res.values[k])
    with pytest.raises(RolloutError, match="no sensor named 'nope'"):
        fit(path, ["sensor_gain:nope"], scene=scene, target="outputs:sensordata", progress=False)
    with pytest.raises(RolloutError, match="need target='outputs:sensordata'"):
        fit(path, ["sensor_gain:angle"], scene=scene, progress=False)


@pytest.mark.parametrize("spec, match", [
    ("body_mass:nope", "no body named 'nope'"),
    ("dof_damping:nope", "no joint named 'nope'"),
    ("jnt_type:shoulder", "not a floating field"),
    ("no_field:link1", "no field 'no_field'"),
])
def test_bad_param_names(spec, match):
    scene = cached_scene("double_pendulum")
    with pytest.raises(RolloutError, match=match):
        resolve_param(scene.model, scene.mjx_model, spec)


def test_cli_fit_prints_and_writes_json(noisy_file, tmp_path, capsys):
    """`mjharness fit` on the same file: per-iteration lines, the parameter table with intervals, the JSON."""
    from mjharness.rollout.cli.app import main

    _, path = noisy_file
    out = tmp_path / "est.json"
    rc = main(["fit", str(path), "--params", *PARAMS, "--start",
               f"body_mass:link1={1.5 * MASS}", f"dof_damping:shoulder={0.5 * DAMP}", "--noise", "1e-3",
               "--bounds", "dof_damping:shoulder=0:10", "--integrator", "rk4", "--json-out", str(out),
               "--report", str(tmp_path / "report")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "iter    1  cost" in text and "body_mass:link1=" in text and f"-> {out}" in text
    assert "95 % interval" in text and "condition number" in text and "reduced chi2" in text
    res = json.loads(out.read_text())
    assert [h["iteration"] for h in res["history"]] == list(range(1, len(res["history"]) + 1))
    assert set(res["values"]) == set(PARAMS) and "unidentifiable" in text
    lo, hi = res["ci95"]["body_mass:link1"]
    assert lo < MASS < hi and res["unidentifiable"] == FRICTION
    assert res["ci95"]["geom_friction:link1"][1] == [None] * 3  # infinite: null in the JSON
    rep = tmp_path / "report"
    assert {"fit.h5", "fit.json", "summary.txt", "parameters.png", "residuals.png", "prediction.png",
            "index.html"} <= set(os.listdir(rep))
    with h5py.File(rep / "fit.h5", "r") as f:  # the result and how it was obtained
        g = f["fit"]
        assert list(g["elements"].asstr()[()]) == ["body_mass:link1", "dof_damping:shoulder", *FRICTION]
        assert g["value"][0] == pytest.approx(res["values"]["body_mass:link1"])
        assert list(g["unidentifiable"][()]) == [False, False, True, True, True]
        assert json.loads(g.attrs["params"]) == PARAMS and g.attrs["noise"] == 1e-3
        assert json.loads(g.attrs["bounds"]) == {"dof_damping:shoulder": [0.0, 10.0]}
        assert g.attrs["file"] == os.path.abspath(path) and g.attrs["model_sha256"]
    page = (rep / "index.html").read_text()
    assert "95 % interval" in page and "prediction.png" in page
    assert main(["fit", str(path), "--params", "body_mass:link1", "--bounds", "body_mass:link1=oops"]) != 0


def test_fit_to_recorded_outputs(tmp_path):
    """target="outputs:xpos": the damping recovered from recorded body positions only (no states used)."""
    scene = cached_scene("double_pendulum")
    m = scene.model
    adr = int(m.jnt_dofadr[m.joint("shoulder").id])
    damp = np.tile(m.dof_damping, (8, 1))
    damp[:, adr] = DAMP
    path = tmp_path / "outs.h5"
    rollout(scene, "rk4", dt=0.01, steps=STEPS, x0=initial_states(scene, 8, 0, 0.5), record_every=R, out=path,
            progress=False, model_params={"dof_damping": damp}, outputs=["xpos"])
    with h5py.File(path, "r+") as f:
        f["x"][...] = 0.0  # the states are not used
    res = fit(path, ["dof_damping:shoulder"], scene=scene, integrator="rk4", start={"dof_damping:shoulder": 0.5 * DAMP},
              target="outputs:xpos", progress=False)
    assert abs(res.values["dof_damping:shoulder"] - DAMP) / DAMP < 1e-6  # noise-free outputs: exact
    with pytest.raises(RolloutError, match="records no output 'sensordata'"):
        fit(path, ["dof_damping:shoulder"], scene=scene, iterations=1, target="outputs:sensordata")
    with pytest.raises(RolloutError, match="target must be"):
        fit(path, ["dof_damping:shoulder"], scene=scene, iterations=1, target="qpos")


def test_a_trial_point_and_its_jacobian_in_one_run_equal_two_runs_bit_for_bit(noisy_file):
    """The differences path evaluates a solver's trial point with its forward-difference points in ONE batched run
    (``residual_and_jacobian``): the residuals equal ``residual`` alone and the Jacobian equals ``jacobian`` from
    those residuals, bit for bit (MuJoCo C's worlds do not depend on their batch)."""
    from mjharness.adapters import MjScene
    from mjharness.rollout import fit as fit_mod

    _, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    q = fit_mod._problem(path, list(start), MjScene("double_pendulum", backend="mujoco"), "rk4", start, 1e-3, "x",
                         jacobian="differences")
    z, lo, hi = np.array([1.1 * MASS, 0.9 * DAMP]), np.zeros(2), np.full(2, 1e30)
    r, jac = q.residual_and_jacobian(z, lo, hi)
    r1 = q.residual(z)
    assert np.array_equal(r, r1)
    assert np.array_equal(jac, q.jacobian(z, r1, False, lo, hi))


def test_switching_constraints_of_a_model():
    """``fit_host.switching`` names what makes a rollout piecewise smooth: the bundled double pendulum (contacts
    disabled, no limits, no friction loss) has none, so its fit runs the full horizon at once, unless it fits a
    friction loss (which counts even where it is 0); a ball over a plane can touch it; a limited hinge with
    friction loss."""
    from mjharness.rollout.fit_host import switching

    assert switching(cached_scene("double_pendulum").model) == []
    assert switching(cached_scene("double_pendulum").model, ["dof_frictionloss:shoulder"]) == ["friction loss"]
    ball = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body pos="0 0 1"><freejoint/>'
        '<geom type="sphere" size=".1"/></body></worldbody></mujoco>')
    assert switching(ball) == ["contacts"]
    arm = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><joint name="j" type="hinge" range="-1 1" frictionloss="0.1"/>'
        '<geom type="capsule" size=".05" fromto="0 0 0 1 0 0" contype="0" conaffinity="0"/></body></worldbody>'
        '</mujoco>')
    assert switching(arm) == ["limits", "friction loss"]
    free = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><joint name="j" type="hinge"/><geom type="capsule" size=".05" '
        'fromto="0 0 0 1 0 0"/><body pos="1 0 0"><joint type="hinge"/><geom type="capsule" size=".05" '
        'fromto="0 0 0 1 0 0"/></body></body></worldbody></mujoco>')
    assert switching(free) == []  # parent and child do not collide (MuJoCo's parent filter)
    assert switching(free, ["dof_frictionloss:j"]) == ["friction loss"]


def test_the_differences_path_runs_its_plan_again_with_the_same_bits_as_rollout(noisy_file):
    """The differences path plans a run of c copies of the batch once and runs it again with each call's model
    fields: every call (trial points, a Jacobian's points, alternating shapes, the first and later calls) equals
    ``rollout`` with the same arguments bit for bit."""
    from mjharness.adapters import MjScene
    from mjharness.rollout import fit as fit_mod

    _, path = noisy_file
    sc = MjScene("double_pendulum", backend="mujoco")
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    q = fit_mod._problem(path, list(start), sc, "rk4", start, 1e-3, "x", jacobian="differences")
    d = q.data
    rng = np.random.default_rng(1)
    for c in (1, 3, 1, 3, 4):
        z = np.array([MASS, DAMP])[:, None] * (1 + 0.2 * rng.standard_normal((2, c)))
        got = q.residual(z if c > 1 else z[:, 0])
        mass = np.tile(sc.model.body_mass, (B * c, 1))
        damp = np.tile(sc.model.dof_damping, (B * c, 1))
        for j in range(c):
            mass[j * B:(j + 1) * B, sc.model.body("link1").id] = z[0, j]
            damp[j * B:(j + 1) * B, sc.model.jnt_dofadr[sc.model.joint("shoulder").id]] = z[1, j]
        ref = rollout(sc, "rk4", dt=0.01, steps=STEPS, x0=np.tile(d["x0"], (c, 1)), record_every=R, progress=False,
                      model_params={"body_mass": mass, "dof_damping": damp})
        want = np.stack([((np.asarray(ref.x)[:, j * B:(j + 1) * B] - d["goal"]) / d["weight"]).ravel()
                         for j in range(c)], axis=1)
        assert np.array_equal(got, want[:, 0] if c == 1 else want), c


def _columns(f):
    """A residual of z (K,) or of points as columns (K, c), as the differences path's residuals are."""
    def residual(z):
        z = np.asarray(z, np.float64)
        return f(z) if z.ndim == 1 else np.stack([f(c) for c in z.T], axis=1)
    return residual


def test_secant_polish_crosses_a_staircase_whose_pieces_slope_back():
    """``fit._secant_polish`` on a cost shaped like a rollout's through switching constraints: every unit piece of
    ``a`` slopes back (its residuals grow with ``a`` inside it) and drops at its right edge, down to the truth's piece
    at 3, so a solver on local slopes stays at the left edge it started on (1.0). Differences over many standard
    errors see the drops: the polish reaches the truth's piece, every step lowers the cost, the parameter the data
    do not touch (``b``) stays where it was; on a smooth problem at its minimum it takes no step."""
    from mjharness.rollout.fit import _secant_polish

    rng = np.random.default_rng(0)
    c, e = rng.uniform(0.5, 1.5, 200), rng.standard_normal(200)

    def stairs(z):
        a = z[0]
        return c * (np.floor(a) - 0.3 * (a - np.floor(a)) - 3.0) + e  # b = z[1] does not enter

    residual = _columns(stairs)
    lo, hi = np.array([0.0, 0.0]), np.array([10.0, 10.0])
    z0 = np.array([1.0, 0.5])
    r0 = residual(z0)
    h = 1e-7  # the solver's last Jacobian: forward differences, inside the piece it stopped at
    jac = np.stack([(residual(z0 + [h, 0]) - r0) / h, (residual(z0 + [0, h]) - r0) / h], axis=1)
    assert np.allclose(jac[:, 0], -0.3 * c) and not jac[:, 1].any()
    seen: list = []
    z, r, n = _secant_polish(z0, r0, jac, residual, lo, hi, True, seen.append)
    assert 3.0 <= z[0] < 3.3 and z[1] == 0.5, z  # the truth's piece; b untouched
    assert np.array_equal(r, residual(z)) and n == len(seen) >= 1
    costs = [0.5 * float(r0 @ r0)] + [log.objective for log in seen]
    assert all(b < a for a, b in zip(costs, costs[1:])) and costs[-1] == pytest.approx(0.5 * float(r @ r), rel=1e-12)
    # a failed world (NaN residuals) at any point of an iteration ends the polish at the last point taken
    for band in ((1.5, 2.0), (-50.0, -20.0)):  # reached by trial steps / by the widest differences first
        holes = _columns(lambda z, b=band: np.full(200, np.nan) if b[0] < z[0] < b[1] else stairs(z))
        z, r, n = _secant_polish(z0, r0, jac, holes, np.array([-100.0, 0.0]), hi, True)
        assert np.all(np.isfinite(r)) and np.array_equal(r, holes(z)) and 0.5 * r @ r <= 0.5 * r0 @ r0
    # smooth (linear) residuals at their least-squares solution: nothing lower to find
    A, y = rng.standard_normal((50, 2)), rng.standard_normal(50)
    linear = _columns(lambda z: A @ z - y)
    best = np.linalg.lstsq(A, y, rcond=None)[0]
    z, r, n = _secant_polish(best, linear(best), None, linear, np.full(2, -np.inf), np.full(2, np.inf), True)
    assert n == 0 and np.array_equal(z, best)
