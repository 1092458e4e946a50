"""Domain randomization (issue 31): per-world draws keyed by (seed, world, key), derived constants as
mj_setConst, on MuJoCo C and MJX, recorded in the result and the file, independent of the run's split."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import textwrap

import mujoco
import numpy as np
import pytest
from backend_common import c_trajectory

from mjharness.rollout import rollout
from mjharness.rollout.engine.randomize import parse_dist, randomized_params
from mjharness.rollout.errors import RolloutError
from mjharness.rollout.h5 import open_rollout

XML = """<mujoco model="randomized">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 .1"/>
    <body name="box" pos="0 0 0.06">
      <freejoint name="free"/>
      <geom name="boxg" type="box" size=".05 .05 .05" mass="1"/>
    </body>
    <body name="arm" pos="0.5 0 1">
      <joint name="h1" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom name="l1" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="arm2" pos="0.3 0 0">
        <joint name="h2" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom name="l2" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor name="m1" joint="h1"/></actuator>
</mujoco>"""
RANDOMIZE = {"body_mass:arm": "*uniform(0.5, 2)", "dof_damping:h2": "uniform(0.01, 0.5)",
             "geom_friction:boxg[0]": "uniform(0.3, 1.2)"}
QUIET = dict(progress=False, watchdog_s=0)
B = 16


def _run(backend, steps=200, **kw):
    kw = {"batch": B, "seed": 3, "randomize": RANDOMIZE, "perturb": 0.5, **kw}
    return rollout(XML, None, steps=steps, backend=backend, **QUIET, **kw)


def _world_model(params: dict, w: int) -> mujoco.MjModel:
    """The C reference of world w: the nominal model with the world's recorded randomized values, mj_setConst."""
    m = mujoco.MjModel.from_xml_string(XML)
    for f in ("body_mass", "dof_damping", "geom_friction"):
        getattr(m, f)[...] = params[f][w]
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return m


@pytest.fixture(scope="module")
def c_run():
    return _run("mujoco")


def test_mujoco_each_world_equals_mj_step_on_its_model(c_run):
    r = c_run
    assert set(RANDOMIZE) <= set(json.loads(json.dumps(RANDOMIZE)))
    worst = 0.0
    for w in range(B):
        ref = c_trajectory(_world_model(r.model_params, w), r.x0[w], 200)
        worst = max(worst, np.max(np.abs(r.x[:, w] - ref)))
    assert worst <= 1e-12, worst
    # the worlds really differ (and the box slides on its own friction)
    assert np.ptp(r.model_params["body_mass"][:, 2]) > 0.5 and np.ptp(r.model_params["dof_damping"][:, 7]) > 0.1


def test_draws_follow_the_distributions(c_run):
    p, m = c_run.model_params, mujoco.MjModel.from_xml_string(XML)
    arm = m.body("arm").id
    assert np.all((p["body_mass"][:, arm] >= 0.5 * m.body_mass[arm]) & (p["body_mass"][:, arm] <= 2 * m.body_mass[arm]))
    others = np.delete(p["body_mass"], arm, axis=1)
    np.testing.assert_array_equal(others, np.broadcast_to(np.delete(m.body_mass, arm), others.shape))
    f = p["geom_friction"][:, m.geom("boxg").id]
    assert np.all((f[:, 0] >= 0.3) & (f[:, 0] <= 1.2)) and np.all(f[:, 1:] == m.geom_friction[m.geom("boxg").id, 1:])


def test_derived_constants_in_the_mjx_model_the_run_used():
    """A mass scaled by *uniform: body_subtreemass / dof_invweight0 / body_invweight0 of the MJX model each
    world runs (the plan's per-world fields through MjScene.with_params) equal C's mj_setConst."""
    from mjharness.rollout.engine import RunSpec, make_plan

    plan = make_plan(XML, None, RunSpec.from_options(steps=2, batch=4, seed=3, randomize={
        "body_mass:arm2": "*uniform(0.5, 2)"}, backend="mjx", progress=False))
    assert {"body_subtreemass", "dof_invweight0", "body_invweight0", "dof_M0"} <= set(plan.params.fields)
    for w in range(4):
        mx = plan.physics.scene.with_params({k: v[w] for k, v in plan.params.fields.items()}).mjx_model
        m = mujoco.MjModel.from_xml_string(XML)
        m.body_mass[:] = plan.params.fields["body_mass"][w]
        mujoco.mj_setConst(m, mujoco.MjData(m))
        for f in ("body_subtreemass", "dof_invweight0", "body_invweight0", "dof_M0", "actuator_acc0"):
            ref = getattr(m, f)
            np.testing.assert_allclose(np.asarray(getattr(mx, f)), ref, rtol=1e-12, atol=0, err_msg=f)
        assert not np.allclose(m.body_subtreemass, mujoco.MjModel.from_xml_string(XML).body_subtreemass)


def test_mjx_within_ten_times_raw_mjx_step(c_run):
    import jax
    from mujoco import mjx

    r = _run("mjx", steps=50)
    np.testing.assert_array_equal(r.model_params["body_mass"], c_run.model_params["body_mass"])
    ours, raw = 0.0, 0.0
    for w in range(0, B, 5):
        m = _world_model(r.model_params, w)
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
        ref = c_trajectory(m, r.x0[w], 50)
        mx, d = mjx.put_model(m), mjx.make_data(m)
        d = d.replace(qpos=r.x0[w, :m.nq], qvel=r.x0[w, m.nq:m.nq + m.nv])
        step = jax.jit(mjx.step)
        xs = []
        for _ in range(50):
            d = step(mx, d)
            xs.append(np.concatenate([d.qpos, d.qvel]))
        raw = max(raw, np.max(np.abs(np.array(xs) - ref)))
        ours = max(ours, np.max(np.abs(r.x[:, w] - ref)))
    assert ours <= 10 * max(raw, 1e-14), (ours, raw)


def test_same_draws_whatever_the_chunk_and_seed(c_run):
    a = _run("mujoco", steps=20, chunk=10)
    b = _run("mujoco", steps=20, chunk=200)
    for k, v in c_run.model_params.items():
        np.testing.assert_array_equal(a.model_params[k], v)
        np.testing.assert_array_equal(b.model_params[k], v)
    np.testing.assert_array_equal(a.x, b.x)
    other = _run("mujoco", steps=2, seed=4)
    assert not np.array_equal(other.model_params["body_mass"], c_run.model_params["body_mass"])
    # world i's draw does not depend on the batch: a batch of 5 is the first 5 worlds of the 16
    five = _run("mujoco", steps=2, batch=5)
    np.testing.assert_array_equal(five.model_params["geom_friction"], c_run.model_params["geom_friction"][:5])


def test_file_records_values_and_distributions_and_resume_reuses_them(tmp_path):
    out = str(tmp_path / "r.h5")
    r = _run("mujoco", steps=20, out=out)
    with open_rollout(out) as f:
        for k, v in r.model_params.items():
            np.testing.assert_array_equal(f.model_params[k], v)
        assert json.loads(f.model_param_attrs["body_mass"]["randomize"]) == {"body_mass:arm": "*uniform(0.5, 2)"}
        a = f.attrs["randomize"]
        assert (json.loads(a) if isinstance(a, str) else a) == RANDOMIZE
    full = _run("mujoco", steps=40)
    resumed = rollout(XML, None, steps=40, resume=out, seed=3, backend="mujoco", **QUIET)
    np.testing.assert_array_equal(resumed.x, full.x)
    np.testing.assert_array_equal(resumed.model_params["body_mass"], r.model_params["body_mass"])
    with pytest.raises(RolloutError, match="randomized with"):
        rollout(XML, None, steps=60, resume=out, seed=3, backend="mujoco", randomize={"body_mass:arm": "uniform(1, 2)"},
                **QUIET)


def test_devices_do_not_change_the_draws(tmp_path):
    """1 vs 2 host devices (a subprocess with XLA's host device count): same values, same states."""
    code = textwrap.dedent(f"""
        import os, sys, json, numpy as np
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax; jax.config.update("jax_enable_x64", True)
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_randomize import _run
        r = _run("mujoco", steps=10, devices=int(sys.argv[1]), batch=5)
        np.savez(sys.argv[2], x=r.x, **r.model_params)
    """)
    for n in (1, 2):
        subprocess.run([sys.executable, "-c", code, str(n), str(tmp_path / f"d{n}.npz")], check=True)
    one, two = np.load(tmp_path / "d1.npz"), np.load(tmp_path / "d2.npz")
    assert set(one.files) == set(two.files) and "body_subtreemass" in one.files
    for k in one.files:
        np.testing.assert_array_equal(one[k], two[k], err_msg=k)


@pytest.mark.parametrize("text, match", [
    ("uniform(1)", "takes 2"), ("gauss(0, 1)", "unknown distribution"), ("uniform(2, 1)", "a <= b"),
    ("loguniform(0, 1)", "a > 0"), ("normal(0, -1)", "sigma"), ("uniform(a, 1)", "not numbers"), ("1.5", "not a dis"),
])
def test_bad_distributions_name_the_key(text, match):
    with pytest.raises(RolloutError, match=rf"randomize\['body_mass:arm'\].*{match}"):
        parse_dist("body_mass:arm", text)


@pytest.mark.parametrize("key, match", [
    ("body_mass:nobody", "no body named"), ("geom_size:boxg", "cannot be randomized"),
    ("jnt_type:h1", "not a floating field"), ("geom_friction:boxg[3]", "component"),
    ("body_subtreemass:arm", "derived"), ("nofield", "no field"),
])
def test_bad_keys_are_refused_at_resolution(key, match):
    with pytest.raises(RolloutError, match=match):
        randomized_params(mujoco.MjModel.from_xml_string(XML), {key: "uniform(0.5, 1)"}, 0, range(2))


def test_overlapping_keys_and_explicit_params_combine():
    m = mujoco.MjModel.from_xml_string(XML)
    with pytest.raises(RolloutError, match="both draw"):
        randomized_params(m, {"geom_friction:boxg": "uniform(0.5, 1)", "geom_friction:boxg[0]": "uniform(0, 1)"},
                          0, range(2))
    explicit = {"body_mass": np.stack([m.body_mass * 2, m.body_mass * 3])}
    p = randomized_params(m, {"body_mass:arm": "*uniform(1, 1)"}, 0, [0, 1], explicit)
    np.testing.assert_allclose(p["body_mass"], explicit["body_mass"])  # *1 on top of the explicit values
    np.testing.assert_allclose(p["body_subtreemass"][:, 0], [2 * m.body_subtreemass[0], 3 * m.body_subtreemass[0]])


def test_choice_and_add():
    m = mujoco.MjModel.from_xml_string(XML)
    p = randomized_params(m, {"opt.gravity[2]": "+choice(-1, 1)", "dof_damping:h1": "loguniform(1e-3, 1)"}, 0,
                          range(32))
    assert set(np.round(p["opt.gravity"][:, 2] - m.opt.gravity[2], 12)) == {-1.0, 1.0}
    assert np.all((p["dof_damping"][:, 6] >= 1e-3) & (p["dof_damping"][:, 6] <= 1))
    assert copy.copy(m).opt.gravity[2] == m.opt.gravity[2]  # the nominal model is untouched


def test_cli_randomize_and_show(tmp_path, capsys):
    from mjharness.rollout.cli import main

    xml = tmp_path / "scene.xml"
    xml.write_text(XML)
    out = str(tmp_path / "cli.h5")
    assert main(["run", str(xml), "--steps", "4", "--record-every", "2", "--batch", "3", "--seed", "3", "--out", out,
                 "--no-progress", "--backend", "mujoco", "--randomize", "body_mass:arm=*uniform(0.5, 2)",
                 "dof_damping:h2=uniform(0.01, 0.5)", "--randomize", "geom_friction:boxg[0]=uniform(0.3, 1.2)"]) == 0
    api = _run("mujoco", steps=2, batch=3)
    with open_rollout(out) as f:
        for k, v in api.model_params.items():
            np.testing.assert_array_equal(f.model_params[k], v, err_msg=k)
    capsys.readouterr()
    assert main(["show", out]) == 0
    text = capsys.readouterr().out
    lo, hi = api.model_params["body_mass"][:, 2].min(), api.model_params["body_mass"][:, 2].max()
    assert "body_mass:arm" in text and "*uniform(0.5, 2)" in text
    assert f"min {lo:.6g}" in text and f"max {hi:.6g}" in text
    assert "body_subtreemass" in text  # the derived fields are listed


@pytest.mark.timeout(600)
def test_two_processes_draw_the_worlds_of_one_process(tmp_path):
    """Each process draws its own worlds by global index: the joined file's values equal one process's."""
    (tmp_path / "scene.xml").write_text(XML)
    flags = ["scene.xml", "--batch", "5", "--steps", "4", "--record-every", "2", "--seed", "3", "--backend",
             "mujoco", "--no-progress", "--randomize", *(f"{k}={v}" for k, v in RANDOMIZE.items())]
    procs = [subprocess.Popen([sys.executable, "-m", "mjharness.rollout.cli", "run", *flags, *extra], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for extra in (["--local-processes", "2", "--out", "two.h5"], ["--out", "one.h5"])]
    logs = [p.communicate(timeout=500)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    with open_rollout(tmp_path / "two.h5") as f2, open_rollout(tmp_path / "one.h5") as f1:
        p2, p1 = f2.model_params, f1.model_params
        assert set(p2) == set(p1) and "body_subtreemass" in p1
        for k in p1:
            np.testing.assert_array_equal(p2[k], p1[k], err_msg=k)
        np.testing.assert_array_equal(f2.x, f1.x)


def test_fit_starts_from_the_recorded_draws(tmp_path):
    """start='file': each world starts at its recorded damping and one common scale is fitted; the file's own
    worlds give zero residuals, so the estimates stay the recorded values (per world)."""
    from mjharness.rollout.fit import fit

    out = str(tmp_path / "fit.h5")
    arm = XML[:XML.index("<geom name=\"floor\"")] + XML[XML.index("<body name=\"arm\""):]  # no contacts
    arm = arm.replace("<actuator>", '<option><flag contact="disable"/></option><actuator>')
    r = rollout(arm, None, steps=20, batch=3, seed=3, record_every=5, out=out, backend="mjx",
                randomize={"dof_damping:h1": "uniform(0.05, 0.5)"}, **QUIET)
    est = fit(out, ["dof_damping:h1"], start="file", iterations=2, progress=False)
    np.testing.assert_allclose(np.ravel(est.values["dof_damping:h1"]), r.model_params["dof_damping"][:, 0],
                               rtol=1e-6)
    assert est.history[0]["cost"] < 1e-20 and est.values["dof_damping:h1"].shape == (3,)


SENSED = XML.replace("</actuator>", '</actuator><sensor><subtreecom body="arm"/><framepos objtype="body" '
                                    'objname="box"/></sensor>')


def test_mujoco_outputs_read_each_worlds_own_model():
    """Recorded outputs on backend='mujoco' with per-world fields: each world's xpos, sensordata (a subtree COM,
    which moves with the masses) and energy equal MuJoCo C's mj_forward on that world's own MjModel (nominal
    model + the recorded /model_params + mj_setConst); the nominal model gives other values."""
    r = rollout(SENSED, None, steps=40, record_every=10, batch=6, seed=3, randomize=RANDOMIZE, perturb=0.5,
                backend="mujoco", outputs=("xpos", "sensordata", "energy"), **QUIET)
    nominal = mujoco.MjModel.from_xml_string(SENSED)
    worst, off = 0.0, 0.0
    for w in range(6):
        m = mujoco.MjModel.from_xml_string(SENSED)
        for f, v in r.model_params.items():
            np.copyto(getattr(m, f), v[w])
        mujoco.mj_setConst(m, mujoco.MjData(m))
        for j in range(len(r.time)):
            for model, own in ((m, True), (nominal, False)):
                d = mujoco.MjData(model)
                d.qpos[:], d.qvel[:], d.time = r.x[j, w, :m.nq], r.x[j, w, m.nq:m.nq + m.nv], r.time[j]
                mujoco.mj_forward(model, d)
                mujoco.mj_energyPos(model, d)
                mujoco.mj_energyVel(model, d)
                err = max(float(np.abs(r.outputs[k][j, w] - ref).max())
                          for k, ref in (("xpos", d.xpos), ("sensordata", d.sensordata), ("energy", d.energy)))
                worst, off = (max(worst, err), off) if own else (worst, max(off, err))
    assert worst <= 1e-12, worst
    assert off > 1e-3, off  # the worlds' own fields matter: the nominal model's outputs differ


def test_mujoco_declares_per_world_outputs():
    from mjharness.adapters.backends import get_backend

    assert get_backend("mujoco").caps.has("per_world_outputs")
    r = rollout(XML, None, steps=2, batch=2, seed=3, randomize=RANDOMIZE, outputs=("xpos",), backend="mujoco",
                **QUIET)
    assert r.outputs["xpos"].shape == (2, 2, 4, 3)


@pytest.mark.parametrize("key, dist, match", [
    ("body_mass:arm", "normal(0.1, 1)", r"1 drew body_mass\[2\] = -0.88.*a body's mass >= 0"),
    ("dof_damping:h2", "+normal(0, 1)", r"0 drew dof_damping\[7\] = -1.2.*joint damping >= 0"),
    ("geom_friction:boxg[0]", "normal(0, 1)", r"\d+ drew geom_friction\[1, 0\] = -0.1.*friction coefficient >= 0"),
    ("dof_armature:h1", "uniform(-1, 0)", r"\d+ drew dof_armature\[6\] = -.*armature"),
    ("dof_frictionloss:h1", "+uniform(-1, -0.5)", r"\d+ drew dof_frictionloss\[6\].*friction loss >= 0"),
    ("jnt_stiffness:h1", "uniform(-1, -0.5)", r"\d+ drew jnt_stiffness\[1\].*stiffness >= 0"),
    ("body_inertia:arm", "*uniform(0.2, 3)", r"0 drew body_inertia\[2, 0\].*'arm'.*A \+ B >= C"),
    ("body_mass:arm2", "uniform(0, 0)", r"\d+ drew body_mass\[3\] = 0: body 'arm2' moves.*mjMINVAL"),
])
def test_draws_that_make_a_model_invalid_are_refused(key, dist, match):
    with pytest.raises(RolloutError, match=rf"^randomize\[{re.escape(repr(key))}\]: world {match}.*not clipped"):
        randomized_params(mujoco.MjModel.from_xml_string(XML), {key: dist}, 3, range(16))


def test_an_invalid_draw_stops_the_run_before_the_file(tmp_path):
    out = tmp_path / "never.h5"
    with pytest.raises(RolloutError, match=r"randomize\['body_mass:arm'\]: world \d+ drew body_mass\[2\] = -"):
        _run("mujoco", steps=2, out=str(out), randomize={"body_mass:arm": "+normal(0, 5)"})
    assert not out.exists()


def test_valid_signs_pass():
    """A negative gear reverses an actuator (valid); a massless jointed body is fine while a child carries mass."""
    m = mujoco.MjModel.from_xml_string(XML)
    p = randomized_params(m, {"actuator_gear:m1[0]": "uniform(-2, -1)", "body_mass:arm": "uniform(0, 0)"}, 3,
                          range(4))
    assert np.all(p["actuator_gear"][:, 0, 0] < 0) and np.all(p["body_mass"][:, m.body("arm").id] == 0)


SYSTEM_RANDOMIZE = {"arm.body_mass:arm": "*uniform(0.5, 2)", "arm.dof_damping:h2": "uniform(0.01, 0.5)",
                    "arm.geom_friction:boxg[0]": "uniform(0.3, 1.2)"}


def _system(backend):
    from mjharness.adapters import DCMotor, MjScene
    from mjharness.adapters.system import System

    return System({"arm": MjScene(XML, backend=backend), "motor": DCMotor()})


def test_system_member_on_mujoco_equals_mj_step_on_each_worlds_model(tmp_path):
    """'arm.<field>:<name>' keys draw on the System's MjScene member: world w's arm (MuJoCo C member, rk4)
    equals MuJoCo C's RK4 mj_step on the MjModel with that world's recorded values and mj_setConst."""
    from backend_common import c_trajectories

    from mjharness.rollout.cli.show import param_lines

    system, out = _system("mujoco"), str(tmp_path / "system.h5")
    r = rollout(system, "rk4", dt=0.002, steps=50, batch=4, seed=3, perturb=0.5, randomize=SYSTEM_RANDOMIZE,
                out=out, **QUIET)
    assert {"arm.body_mass", "arm.dof_damping", "arm.geom_friction", "arm.body_subtreemass"} <= set(r.model_params)
    n, worst = system.members["arm"].layout.size, 0.0
    for w in range(4):
        m = mujoco.MjModel.from_xml_string(XML)
        for k in ("body_mass", "dof_damping", "geom_friction"):
            getattr(m, k)[...] = r.model_params[f"arm.{k}"][w]
        mujoco.mj_setConst(m, mujoco.MjData(m))
        np.testing.assert_allclose(r.model_params["arm.dof_invweight0"][w], m.dof_invweight0, rtol=1e-12, atol=0)
        ref = c_trajectories(m, "rk4", r.x0[w:w + 1, :n], np.zeros((1, m.nu)), 50)[:, 0]
        worst = max(worst, float(np.abs(r.x[:, w, :n] - ref).max()))
    assert worst <= 1e-12, worst
    assert np.ptp(r.model_params["arm.body_mass"][:, 2]) > 0.3
    with open_rollout(out) as f:
        for k, v in r.model_params.items():
            np.testing.assert_array_equal(f.model_params[k], v, err_msg=k)
        attrs = f.model_param_attrs["arm.body_mass"]
        assert json.loads(attrs["randomize"]) == {"arm.body_mass:arm": "*uniform(0.5, 2)"}
        text = "\n".join(param_lines(f))
    assert "arm.body_mass:arm" in text and "*uniform(0.5, 2)" in text


def test_system_member_on_mjx_equals_the_plain_scene_with_its_fields():
    """The MJX member: same draws as the C member (keyed by the full key), and its states equal a plain MjScene
    (MJX) run given the recorded fields as model_params; the motor member runs unchanged."""
    from mjharness.adapters import MjScene

    system = _system("mjx")
    r = rollout(system, "rk4", dt=0.002, steps=30, batch=4, seed=3, perturb=0.5, randomize=SYSTEM_RANDOMIZE,
                **QUIET)
    c = rollout(_system("mujoco"), "rk4", dt=0.002, steps=2, batch=4, seed=3, perturb=0.5,
                randomize=SYSTEM_RANDOMIZE, **QUIET)
    assert set(r.model_params) == set(c.model_params)
    for k, v in r.model_params.items():
        np.testing.assert_array_equal(v, c.model_params[k], err_msg=k)
    n = system.members["arm"].layout.size
    plain = rollout(MjScene(XML, backend="mjx"), "rk4", dt=0.002, steps=30, x0=r.x0[:, :n],
                    model_params={k.partition(".")[2]: v for k, v in r.model_params.items()}, **QUIET)
    assert np.max(np.abs(r.x[:, :, :n] - plain.x)) <= 1e-12
    nominal = rollout(MjScene(XML, backend="mjx"), "rk4", dt=0.002, steps=30, x0=r.x0[:, :n], **QUIET)
    assert np.max(np.abs(r.x[:, :, :n] - nominal.x)) > 1e-6  # the draws changed the arm


@pytest.mark.parametrize("key, match", [
    ("motor.R", "member 'motor' is a DCMotor, not an MjScene"), ("hand.body_mass:arm", "'<member>.<field>'"),
    ("body_mass:arm", "'<member>.<field>'"), ("arm.body_mass:nobody", "no body named"),
])
def test_system_keys_are_checked(key, match):
    with pytest.raises(RolloutError, match=match):
        rollout(_system("mjx"), "rk4", dt=0.002, steps=2, batch=2, randomize={key: "*uniform(0.5, 2)"}, **QUIET)


def test_member_keys_on_a_plain_scene_are_refused():
    with pytest.raises(RolloutError, match="'arm' is not a field of the model.*members of a System"):
        randomized_params(mujoco.MjModel.from_xml_string(XML), {"arm.body_mass:arm": "uniform(1, 2)"}, 0, range(2))
