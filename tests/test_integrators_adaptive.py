"""Adaptive embedded Runge–Kutta: error estimates, tolerance precedence, achieved accuracy against the
analytic torque-free body, status codes, and a poisoned world in a batch of 64 MuJoCo bricks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from integrators_common import ToyRigidBody, torque_free_omega

from mjharness.adapters import MjScene
from mjharness.integrators import (
    RKF45,
    STATUS_MAX_STEPS,
    STATUS_NONFINITE,
    STATUS_OK,
    STATUS_UNDERFLOW,
    BogackiShampine,
    DormandPrince,
    StateError,
    StateRegistry,
    StateSpec,
)

ADAPTIVE = [BogackiShampine, RKF45, DormandPrince]


# -- error estimate and error ratio ---------------------------------------------------------------

@pytest.mark.parametrize("policy", ["quaternion", "quaternion_qdot"])
@pytest.mark.parametrize("cls", ADAPTIVE, ids=lambda c: c.name)
def test_embedded_error_estimate_order(cls, policy):
    """|x_high - x_low| of one step scales as h^(order_low + 1)."""
    scene = ToyRigidBody(update=policy)
    integ = cls()
    x0 = jnp.asarray(scene.x0((0.4, 2.0, -1.0)))
    f = jax.jit(jax.vmap(lambda h: integ.step_with_error(scene, 0.0, x0, h)[1]))
    hs = np.array([0.04, 0.02, 0.01])
    errs = np.linalg.norm(np.asarray(f(jnp.asarray(hs))), axis=-1)
    p = np.log2(errs[:-1] / errs[1:])
    assert np.all(np.abs(p - (integ.tableau.order_low + 1)) < 0.3), (cls.name, p, errs)


def test_error_ratio_state_and_component_modes():
    reg = StateRegistry()
    reg.register("a", StateSpec((2,), error_control="state"), model="m")
    reg.register("b", StateSpec((2,), error_control="component"), model="m")
    layout = reg.finalize()
    integ = DormandPrince(rtol=0.1, atol=0.01, state_atol={"b": 0.5})
    x_high = jnp.asarray([3.0, 4.0, 1.0, -10.0])
    # state a: ||e|| / (atol + rtol ||x||) = 0.5 / (0.01 + 0.5) ; component b: max(0.3/(0.5+0.1), 1/(0.5+1))
    err = jnp.asarray([0.3, 0.4, 0.3, 1.0])
    ratio = float(integ.error_ratio(layout, err, x_high))
    np.testing.assert_allclose(ratio, max(0.5 / 0.51, 0.3 / 0.6, 1.0 / 1.5), rtol=1e-14)
    err = jnp.asarray([0.0, 0.0, 0.0, 3.0])
    np.testing.assert_allclose(float(integ.error_ratio(layout, err, x_high)), 2.0, rtol=1e-14)


# -- tolerance precedence -------------------------------------------------------------------------

def _two_model_layout():
    reg = StateRegistry()
    reg.register("arm/qpos", StateSpec((1,)), model="arm")
    reg.register("arm/qvel", StateSpec((1,)), model="arm")
    reg.register("ctl/integral", StateSpec((2,)), model="ctl")
    return reg.finalize()


def test_tolerance_precedence_resolution():
    layout = _two_model_layout()
    integ = DormandPrince(
        rtol=1e-6, atol=1e-9,
        state_rtol={"arm/qvel": 1e-7, "ctl/integral": 1e-3},
        state_atol={"arm/qvel": 1e-10},
        scene_rtol={("arm", "arm/qvel"): 1e-8, ("other_robot", "arm/qpos"): 1.0},
        scene_atol={("ctl", "ctl/integral"): 1e-4})
    tol = integ.resolve_tolerances(layout)
    assert tol["arm/qpos"] == (1e-6, 1e-9)            # defaults (other_robot's override ignored)
    assert tol["arm/qvel"] == (1e-8, 1e-10)           # (model, state) rtol beats the state-name rtol
    assert tol["ctl/integral"] == (1e-3, 1e-4)        # state-name rtol, (model, state) atol
    assert integ.config()["scene_atol"] == {"ctl:ctl/integral": 1e-4}


def test_tolerance_errors_name_the_state():
    layout = _two_model_layout()
    with pytest.raises(StateError, match="arm/qacc"):
        DormandPrince(state_rtol={"arm/qacc": 1e-3}).resolve_tolerances(layout)
    with pytest.raises(StateError, match="ctl/integral"):
        DormandPrince(scene_atol={("arm", "ctl/integral"): 1e-3}).resolve_tolerances(layout)
    with pytest.raises(StateError, match="resolve to 0"):
        DormandPrince(state_rtol={"arm/qpos": 0}, state_atol={"arm/qpos": 0}).resolve_tolerances(layout)
    with pytest.raises(ValueError, match="rtol"):
        DormandPrince(rtol=-1.0)
    with pytest.raises(ValueError, match=r"\(model, state\)"):
        DormandPrince(scene_rtol={"arm/qpos": 1e-3})
    with pytest.raises(ValueError, match="min_factor"):
        DormandPrince(min_factor=2.0)
    with pytest.raises(ValueError, match="no embedded"):
        from mjharness.integrators import tableaux as tb
        DormandPrince(tableau=tb.RK4)


def test_tolerance_precedence_changes_the_run():
    """A (model, state) override beats a state-name override: same program, same numbers."""
    scene = ToyRigidBody()
    x0 = jnp.asarray(scene.x0())

    def run(integ):
        x, status, info = jax.jit(lambda x: integ.advance_info(scene, 0.0, x, 1.0))(x0)
        return np.asarray(x), int(status), int(info["accepted"])

    loose = run(DormandPrince(rtol=1e-5, atol=1e-12))
    tight = run(DormandPrince(rtol=1e-5, atol=1e-12, state_rtol={"body/omega": 1e-10}))
    back = run(DormandPrince(rtol=1e-5, atol=1e-12, state_rtol={"body/omega": 1e-10},
                             scene_rtol={("toy", "body/omega"): 1e-5}))
    assert loose[1] == tight[1] == back[1] == STATUS_OK
    assert tight[2] > 2 * loose[2]
    np.testing.assert_array_equal(back[0], loose[0])
    assert back[2] == loose[2]


# -- achieved accuracy ------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["quaternion", "quaternion_qdot"])
@pytest.mark.parametrize("cls", ADAPTIVE, ids=lambda c: c.name)
def test_reaches_requested_rtol_toy(cls, policy):
    scene = ToyRigidBody(update=policy)
    x0 = scene.x0()
    ref = torque_free_omega(scene.inertia, x0[4:], 1.0)
    for rtol in (1e-6, 1e-9):
        integ = cls(rtol=rtol, atol=1e-14)
        x, _, status = jax.jit(lambda x, integ=integ: integ.integrate(scene, 0.0, 1.0, x))(jnp.asarray(x0))
        err = np.linalg.norm(np.asarray(x)[4:] - ref) / np.linalg.norm(ref)
        print(f"{cls.name}/{policy} rtol {rtol:.0e}: relative error {err:.2e}")
        assert int(status) == STATUS_OK
        assert err <= 10 * rtol
        assert abs(np.linalg.norm(np.asarray(x)[:4]) - 1) < 1e-13


# -- status codes ---------------------------------------------------------------------------------

class BlowUp:
    """y' = y^2, y(0) = 1: y = 1 / (1 - t) leaves every float before t = 1."""

    def __init__(self):
        reg = StateRegistry()
        reg.register("y", StateSpec((1,)))
        self.layout = reg.finalize()

    def dynamics(self, t, x, ctrl=None):
        return x * x


def test_underflow_keeps_the_interval_start():
    scene = BlowUp()
    integ = DormandPrince(rtol=1e-8, atol=1e-8, h_min=1e-10)
    f = jax.jit(lambda x, t0, t1: integ.integrate(scene, t0, t1 - t0, x)[::2])  # (x, status)
    x1, s1 = f(jnp.asarray([1.0]), 0.0, 0.5)  # fine: y(0.5) = 2
    assert int(s1) == STATUS_OK and abs(float(x1[0]) - 2.0) < 1e-7
    x2, s2 = f(x1, 0.5, 1.5)  # crosses the singularity
    assert int(s2) in (STATUS_UNDERFLOW, STATUS_NONFINITE)
    assert int(s2) == STATUS_UNDERFLOW  # the candidates stay finite; the step size collapses
    np.testing.assert_array_equal(np.asarray(x2), np.asarray(x1))


def test_max_steps_status():
    scene = ToyRigidBody()
    x0 = jnp.asarray(scene.x0())
    integ = DormandPrince(rtol=1e-10, atol=1e-12, max_steps=5)
    x, _, status = jax.jit(lambda x: integ.integrate(scene, 0.0, 1.0, x))(x0)
    assert int(status) == STATUS_MAX_STEPS
    np.testing.assert_array_equal(np.asarray(x), np.asarray(x0))


# -- the MuJoCo brick: batch of 64, one poisoned world --------------------------------------------

@pytest.fixture(scope="module")
def brick_batch():
    scene = MjScene("brick")  # exp-map quaternions, RKMK stages
    integ = DormandPrince(rtol=1e-8, atol=1e-12)
    run = jax.jit(jax.vmap(lambda x: integ.integrate(scene, 0.0, 1.0, x)[::2]))
    rng = np.random.default_rng(7)
    w = scene.model.key_qvel[0][3:] + np.concatenate([np.zeros((1, 3)), rng.normal(scale=0.3, size=(63, 3))])
    x0 = np.stack([scene.reset({"brick/angvel": wi}, keyframe=0) for wi in w])
    x, status = run(jnp.asarray(x0))
    return scene, run, x0, w, np.asarray(x), np.asarray(status)


def test_adaptive_brick_reaches_rtol(brick_batch):
    scene, _, x0, w, x, status = brick_batch
    assert np.all(status == STATUS_OK)
    inertia = scene.model.body_inertia[1]
    sl = scene.layout["brick/angvel"].value_slice
    errs = []
    for i in range(len(w)):
        ref = torque_free_omega(inertia, w[i], 1.0)
        errs.append(np.linalg.norm(x[i, sl] - ref) / np.linalg.norm(ref))
    print(f"brick DormandPrince rtol 1e-8: relative |w - analytic| max {max(errs):.2e}, median {np.median(errs):.2e}")
    assert max(errs) <= 10 * 1e-8


def test_poisoned_world_gets_status_1_others_unchanged(brick_batch):
    scene, run, x0, _, x_clean, _ = brick_batch
    bad = 17
    x0p = x0.copy()
    x0p[bad, scene.layout["brick/angvel"].offset] = np.nan
    x, status = run(jnp.asarray(x0p))
    x, status = np.asarray(x), np.asarray(status)
    assert status[bad] == STATUS_NONFINITE
    others = np.arange(64) != bad
    assert np.all(status[others] == STATUS_OK)
    np.testing.assert_array_equal(x[others], x_clean[others])  # bit for bit
    np.testing.assert_array_equal(x[bad], x0p[bad])  # kept its state from the interval start
