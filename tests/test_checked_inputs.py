"""Mistakes a new user makes, each refused before anything runs with a message naming the argument, and no
file touched: wrong types that used to be coerced (a string for a bool, a float seed), options that cannot
take effect, a termination rule returning a float, unphysical per-world model fields, a resume of another
scene; ``verify`` calls a file whose run never wrote a sample incomplete."""

from __future__ import annotations

import hashlib

import jax
import numpy as np
import pytest
from conftest import cached_scene

from mjharness.rollout import Controller, RolloutError, rollout
from mjharness.rollout.h5.integrity import verify


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def existing(tmp_path):
    path = tmp_path / "exists.h5"
    path.write_bytes(b"data the user keeps\n" * 50)
    return path


@pytest.mark.parametrize("kw, named", [
    (dict(overwrite="no"), "overwrite"), (dict(overwrite=1), "overwrite"), (dict(keep="false"), "keep"),
    (dict(progress="no"), "progress"), (dict(seed=2**70), "seed"), (dict(seed=1.5), "seed"), (dict(seed=-1), "seed"),
    (dict(batch=2.5), "batch"), (dict(steps=20, record_every=7), "record_every"), (dict(steps="10"), "steps"),
    (dict(outputs={"contacts": {"max": 3}}), "outputs"), (dict(randomize=["body_mass"]), "randomize"),
    (dict(backend="MJX"), "backend"), (dict(chunk=0), "chunk"), (dict(compression="zip"), "compression"),
    (dict(devices="cpu"), "devices"), (dict(reset_to="start"), "reset_to"), (dict(unsupported_contact="exclude"),
                                                                             "unsupported_contacts"),
    (dict(x0="0 0 0"), "x0"), (dict(x0=[[0.0, 1.0], [0.0]]), "x0"), (dict(ctrl="zeros"), "ctrl"),
])
def test_a_mistake_is_refused_naming_it_and_the_file_stays(existing, kw, named):
    before = _digest(existing)
    args = dict(steps=10, batch=2, out=str(existing), overwrite=True, progress=False)
    args.update(kw)
    with pytest.raises(RolloutError, match=named):
        rollout("box_on_plane", **args)
    assert _digest(existing) == before


def test_a_single_output_name_is_one_output_not_its_letters():
    r = rollout(cached_scene("box_on_plane"), steps=4, batch=1, outputs="energy", backend="mujoco", progress=False)
    assert tuple(r.outputs) == ("energy",) and r.outputs["energy"].shape == (4, 1, 2)


def test_array_likes_are_arrays():
    scene = cached_scene("box_on_plane")
    x0 = rollout(scene, steps=1, batch=1, backend="mujoco", progress=False, perturb=0.0).x0
    r = rollout(scene, steps=2, x0=x0.tolist(), backend="mujoco", progress=False)  # a list of lists
    assert np.array_equal(r.x0, x0)


def test_a_termination_rule_must_return_a_bool():
    with pytest.raises(RolloutError, match="terminate.*must return a bool"):
        rollout(cached_scene("box_on_plane"), steps=4, batch=1, terminate=lambda t, x: t - 0.005, progress=False)
    r = rollout(cached_scene("box_on_plane"), steps=4, batch=1, terminate=lambda t, x: t > 1.0, backend="mujoco",
                progress=False)
    assert r.stats["worlds_terminated"] == 0


def test_unphysical_or_unhonoured_model_fields_are_refused():
    scene = cached_scene("double_pendulum")
    m = scene.model
    damp = np.tile(m.dof_damping, (2, 1))
    damp[1, 0] = -0.5
    with pytest.raises(RolloutError, match=r"model_params\['dof_damping'\]: world 1 .*-0.5.*>= 0"):
        rollout(scene, steps=2, batch=2, model_params={"dof_damping": damp}, progress=False)
    mass = np.tile(m.body_mass, (2, 1))
    mass[:, 0] = 1.0  # the world body
    with pytest.raises(RolloutError, match=r"model_params\['body_mass'\].*world body"):
        rollout(scene, steps=2, batch=2, model_params={"body_mass": mass}, progress=False)
    with pytest.raises(RolloutError, match=r"model_params\['opt.timestep'\].*dt"):
        rollout(scene, steps=2, batch=2, model_params={"opt.timestep": np.full((2,), 0.01)}, progress=False)


def test_a_stochastic_integrator_without_noise_says_so():
    with pytest.warns(UserWarning, match="no noise source"):
        rollout(cached_scene("double_pendulum"), "euler_maruyama", steps=2, batch=1, backend="mjx", progress=False)


def test_a_resume_of_another_scene_names_both(tmp_path):
    path = tmp_path / "a.h5"
    rollout(cached_scene("box_on_plane"), steps=4, batch=1, out=path, backend="mujoco", progress=False)
    before = _digest(path)
    with pytest.raises(RolloutError, match=r"box_on_plane.*double_pendulum|double_pendulum.*box_on_plane"):
        rollout("double_pendulum", steps=8, resume=path, progress=False)
    assert _digest(path) == before


def test_verify_calls_a_file_without_samples_incomplete(tmp_path):
    """A run stopped before its first chunk was written (Ctrl-C at the first controller call of the run)."""
    calls = []

    def step(t, x, c, nu):
        if isinstance(x, jax.core.Tracer):  # the plan asks whether it traces: not a call of the run
            raise TypeError("a NumPy controller")
        calls.append(t)
        if len(calls) > 1:  # the first call is the check on world 0 before the run
            raise KeyboardInterrupt
        return np.zeros(nu), c

    scene = cached_scene("arm")
    path = tmp_path / "stopped.h5"
    with pytest.raises(KeyboardInterrupt):
        rollout(scene, steps=10, batch=1, out=path, backend="mujoco", progress=False,
                ctrl=Controller(lambda x0: {}, lambda t, x, c: step(t, x, c, scene.model.nu)))
    rep = verify(path)
    assert rep.status == "intact" and rep.written == (0, 10), rep.summary()
    assert "INCOMPLETE: 0 of 10 samples written" in rep.summary() and "never wrote its first chunk" in rep.summary()


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_a_non_finite_control_stops_its_world_with_its_own_status(backend):
    """A policy that returns NaN is not run with zeros (what mj_step does with a bad control): its world stops at
    that step with status NONFINITE_CTRL, named in the result; the other worlds run on."""
    import jax.numpy as jnp

    from mjharness.integrators import STATUS_NONFINITE_CTRL
    from mjharness.integrators.status import status_name

    scene = cached_scene("arm")
    nu, dt = scene.model.nu, scene.model.opt.timestep

    def policy(t, x, world):
        return jnp.where((world == 1) & (t > 4.5 * dt), jnp.nan, 0.1) * jnp.ones(nu)

    def step(t, x, c):  # a NumPy Controller: every world goes bad
        return (np.full(nu, np.nan) if t > 4.5 * dt else np.full(nu, 0.1)), c

    r = rollout(scene, steps=10, batch=2, ctrl=policy, backend=backend, progress=False)
    assert r.status.tolist() == [0, STATUS_NONFINITE_CTRL] and r.status_step[1] == 5, (r.status, r.status_step)
    assert np.isfinite(r.x).all() and status_name(r.status[1]) == "non-finite control"
    assert r.stats["worlds_failed"] == 1
    r = rollout(scene, steps=10, batch=2, ctrl=Controller(lambda x0: {}, step), backend=backend, progress=False)
    assert r.status.tolist() == [STATUS_NONFINITE_CTRL] * 2 and r.status_step.tolist() == [5, 5]
    assert np.isfinite(r.x).all()
