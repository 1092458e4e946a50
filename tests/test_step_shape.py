"""One integrator contract for every kind (integrators/base.py), as diffrax's ``AbstractSolver.step``:
``integrate(model, t0, h, x, ctrl, carry, key) -> (x, carry, status)``, with nothing guessed from signatures;
the one-world calls of DESIGN §4 (``step``, ``advance``) are derived from it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.integrators import (
    INTEGRATORS,
    RK4,
    ContractError,
    DormandPrince,
    Integrator,
    IntegratorKind,
    StateRegistry,
    StateSpec,
    StepSizeController,
    check_pair,
    get_integrator,
    resolve_integrator,
)

H = 0.01


class Oscillator:
    """q'' = -q with a carry ("seen": the last derivative evaluated, as a solver warm start would be) and
    additive noise on v: every integrator kind runs on it (second_order, implicit_dynamics, diffusion)."""

    carry_spec = {"seen": (2,)}
    second_order = (("q", "v"),)

    def __init__(self):
        reg = StateRegistry()
        reg.register("q", StateSpec((1,)))
        reg.register("v", StateSpec((1,), noise_count=1))
        self.layout = reg.finalize()

    def init_carry(self):
        return {"seen": np.zeros(2)}

    def _with(self, k, carry):
        return k if carry is None else (k, {"seen": k})

    def dynamics(self, t, x, ctrl=None, *, carry=None):
        return self._with(jnp.stack([x[1], -x[0]]), carry)

    def implicit_dynamics(self, t, x, h, ctrl=None, *, carry=None):
        return self._with(jnp.stack([x[1], -(x[0] + h * x[1]) / (1 + h * h)]), carry)

    def diffusion(self, t, x, ctrl=None):
        return jnp.full((1,), 0.1)


def _key(integ):
    return jax.random.key(0) if integ.kind == IntegratorKind.STOCHASTIC else None


@pytest.mark.parametrize("name", sorted(INTEGRATORS))
def test_every_integrator_returns_x_carry_status_with_or_without_a_carry(name):
    integ, scene, x = get_integrator(name), Oscillator(), jnp.array([1.0, 0.0])
    assert isinstance(integ, Integrator) and check_pair(scene, integ) is integ.kind
    carry = {"seen": jnp.zeros(2), **integ.init_carry(scene, H)}
    assert set(carry) == {"seen", *integ.carry_spec(scene)}
    x_cold, c_cold, s_cold = integ.integrate(scene, 0.0, H, x, None, None, _key(integ))
    x_warm, c_warm, s_warm = integ.integrate(scene, 0.0, H, x, None, carry, _key(integ))
    assert c_cold is None and set(c_warm) == set(carry)
    assert jnp.asarray(s_cold).dtype == jnp.int32 and int(s_cold) == int(s_warm) == 0
    # The carry is the last evaluation's proposal: the derivative at a state inside the step, not the cold zeros.
    assert np.any(np.asarray(c_warm["seen"]) != 0)
    np.testing.assert_array_equal(np.asarray(x_cold), np.asarray(x_warm))  # the oscillator's carry is a record only
    if integ.kind == IntegratorKind.FIXED:  # the step really is one step of size h (order >= 1)
        np.testing.assert_allclose(np.asarray(x_cold), [np.cos(H), -np.sin(H)], atol=H * H)


@pytest.mark.parametrize("name", sorted(INTEGRATORS))
def test_the_one_world_calls_of_design_4_are_integrate(name):
    """DESIGN §4's calls: fixed ``step(scene, t, x, h, ctrl=None) -> x_next``, stochastic ``step(scene, t, x, h,
    noise, ctrl=None)``, adaptive ``advance(scene, t, x, t_end, ctrl=None) -> (x, status)``; with ``carry=`` the
    carry comes back too. The same numbers as ``integrate``."""
    integ, scene, x = get_integrator(name), Oscillator(), jnp.array([1.0, 0.0])
    carry = {"seen": jnp.zeros(2), **integ.init_carry(scene, H)}
    x_ref, c_ref, s_ref = integ.integrate(scene, 0.0, H, x, None, carry, _key(integ))
    if integ.kind == IntegratorKind.ADAPTIVE:
        xa, status = integ.advance(scene, 0.0, x, H)
        np.testing.assert_array_equal(np.asarray(xa), np.asarray(integ.integrate(scene, 0.0, H, x)[0]))
        xa, status, ca = integ.advance(scene, 0.0, x, H, carry=carry)
        assert int(status) == int(s_ref) == 0
    else:
        noise = (_key(integ),) if integ.kind == IntegratorKind.STOCHASTIC else ()
        xa = integ.step(scene, 0.0, x, H, *noise)
        np.testing.assert_array_equal(np.asarray(xa), np.asarray(x_ref))
        xa, ca = integ.step(scene, 0.0, x, H, *noise, carry=carry)
    np.testing.assert_array_equal(np.asarray(xa), np.asarray(x_ref))
    assert set(ca) == set(c_ref) and all(np.array_equal(ca[k], c_ref[k]) for k in ca)


def test_a_stochastic_step_without_its_noise_is_refused():
    em = get_integrator("euler_maruyama")
    with pytest.raises(ContractError, match="key="):
        em.integrate(Oscillator(), 0.0, H, jnp.array([1.0, 0.0]))


class _MyRK4(RK4):
    """A user's subclass that redefines step: the engine runs that step (no other method is looked for)."""

    def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
        return super().integrate(model, t0, 2 * h, x, ctrl, carry, key)


def test_a_users_subclass_step_is_the_step_that_runs():
    assert _MyRK4.name == "rk4"  # inherited: a subclass keeps its parent's name unless it sets one
    assert type("Ralston", (RK4,), {"name": "ralston"}).name == "ralston"

    class Plain(Integrator):
        def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
            return x, carry, jnp.int32(0)

    assert Plain.name == "plain" and Plain().config() == {"name": "plain", "kind": "fixed"}  # no address in files
    scene, x = Oscillator(), jnp.array([1.0, 0.0])
    doubled = _MyRK4().integrate(scene, 0.0, H / 2, x)[0]
    np.testing.assert_array_equal(np.asarray(doubled), np.asarray(RK4().integrate(scene, 0.0, H, x)[0]))


class _DuckTyped:
    """An object with the old duck-typed ``step`` and no base class: refused by name, not guessed at."""

    name = "duck"

    def step(self, scene, t, x, h, ctrl=None):
        return x


def test_objects_that_are_not_integrators_are_refused_with_the_contract():
    with pytest.raises(ContractError, match=r"subclasses mjharness.integrators.Integrator.*integrate\(model, t0, h, x"):
        resolve_integrator(_DuckTyped())
    with pytest.raises(ContractError, match="not an integrator"):
        check_pair(Oscillator(), _DuckTyped())
    with pytest.raises(TypeError):  # the one abstract method must be written
        type("NoStep", (Integrator,), {"name": "no_step"})()


def test_the_step_size_controller_is_its_own_object():
    ctl = StepSizeController(rtol=1e-9, atol=1e-12, max_steps=50)
    a, b = DormandPrince(controller=ctl), get_integrator("dormand_prince", rtol=1e-9, atol=1e-12, max_steps=50)
    assert a == b and hash(a) == hash(b) and a.controller is ctl
    assert a.config() == b.config() and a.config()["rtol"] == 1e-9 and a.config()["max_steps"] == 50
    with pytest.raises(TypeError, match="not both"):
        DormandPrince(controller=ctl, rtol=1e-3)
    with pytest.raises(TypeError, match="rtl"):
        DormandPrince(rtl=1e-3)
    # h is the output interval: the controller fills it with steps of its own size.
    scene, x = Oscillator(), jnp.array([1.0, 0.0])
    x1, carry, status = a.integrate(scene, 0.0, 1.0, x, None, {"seen": jnp.zeros(2), **a.init_carry(scene, 1.0)})
    assert int(status) == 0 and 0 < float(carry["h_next"]) < 1.0
    np.testing.assert_allclose(np.asarray(x1), [np.cos(1.0), -np.sin(1.0)], rtol=0, atol=1e-7)
