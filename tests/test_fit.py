"""fit(): recovers a link mass and a joint damping from 64 noisy trajectories, starting 50 % off."""

from __future__ import annotations

import h5py
import jax
import numpy as np
import pytest
from conftest import cached_scene  # noqa: E402

from mjharness.rollout import RolloutError, rollout
from mjharness.rollout.engine.plan import initial_states
from mjharness.rollout.fit import fit, resolve_param

jax.config.update("jax_enable_x64", True)

B, STEPS, R = 64, 40, 4
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
        f["x"][...] = f["x"][()] + 1e-3 * np.random.default_rng(0).standard_normal(f["x"].shape)
    return scene, path


def test_fit_recovers_mass_and_damping(noisy_file):
    scene, path = noisy_file
    start = {"body_mass:link1": 1.5 * MASS, "dof_damping:shoulder": 0.5 * DAMP}
    res = fit(path, list(start), scene=scene, integrator="rk4", iterations=200, lr=0.05, start=start)
    est = res["params"]
    mass, damp = (float(np.ravel(est[k])[0]) for k in start)
    assert abs(mass - MASS) / MASS < 0.01
    assert abs(damp - DAMP) / DAMP < 0.01
    assert res["history"][-1]["loss"] < res["history"][0]["loss"]


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
    """`mjharness fit` on the same file (its compiled step is the fit test's: persistent-cache hit)."""
    import json

    from mjharness.rollout.cli.app import main

    _, path = noisy_file
    out = tmp_path / "est.json"
    rc = main(["fit", str(path), "--params", "body_mass:link1", "dof_damping:shoulder", "--start",
               f"body_mass:link1={1.5 * MASS}", f"dof_damping:shoulder={0.5 * DAMP}", "--iterations", "3",
               "--integrator", "rk4", "--json-out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "iter    1  loss" in text and "body_mass:link1=" in text and f"-> {out}" in text
    res = json.loads(out.read_text())
    assert [h["iteration"] for h in res["history"]] == [1, 2, 3]
    assert set(res["params"]) == {"body_mass:link1", "dof_damping:shoulder"}
    assert res["history"][-1]["loss"] < res["history"][0]["loss"]


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
    res = fit(path, ["dof_damping:shoulder"], scene=scene, integrator="rk4", iterations=150, lr=0.05,
              start={"dof_damping:shoulder": 0.5 * DAMP}, target="outputs:xpos")
    assert abs(float(np.ravel(res["params"]["dof_damping:shoulder"])[0]) - DAMP) / DAMP < 0.01
    with pytest.raises(RolloutError, match="records no output 'sensordata'"):
        fit(path, ["dof_damping:shoulder"], scene=scene, iterations=1, target="outputs:sensordata")
    with pytest.raises(RolloutError, match="target must be"):
        fit(path, ["dof_damping:shoulder"], scene=scene, iterations=1, target="qpos")
