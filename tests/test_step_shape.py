"""Integrators return one fixed shape to the engine (issue 27.5), as diffrax's ``AbstractSolver.step`` does.

``step_carry`` (fixed, stochastic) is always ``(x_next, carry_next)`` and ``advance_carry`` (adaptive) always
``(x, status, carry_next)``, carry_next None without a carry; ``step`` / ``advance`` keep DESIGN.md §4's
results over them. ``engine_step`` gives the fixed shape for any integrator, a user's included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.integrators import INTEGRATORS, RK4, StateRegistry, StateSpec, get_integrator
from mjharness.integrators.contracts import engine_step, integrator_kind

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


def _call(integ, x, carry):
    """One step of ``integ`` through ``engine_step``, and through its documented ``step`` / ``advance``."""
    f, kind, scene = engine_step(integ), integrator_kind(integ), Oscillator()
    if kind == "adaptive":
        return f(scene, 0.0, x, H, carry=carry), integ.advance(scene, 0.0, x, H, carry=carry)
    noise = (jax.random.key(0),) if kind == "stochastic" else ()
    return f(scene, 0.0, x, H, *noise, carry=carry), integ.step(scene, 0.0, x, H, *noise, carry=carry)


@pytest.mark.parametrize("name", sorted(INTEGRATORS))
def test_every_integrator_returns_one_shape_with_or_without_a_carry(name):
    integ = get_integrator(name)
    size = 3 if integrator_kind(integ) == "adaptive" else 2
    x = jnp.array([1.0, 0.0])
    carry = {"seen": jnp.zeros(2), **(integ.init_carry(Oscillator(), H) if hasattr(integ, "init_carry") else {})}
    cold, cold_documented = _call(integ, x, None)
    warm, warm_documented = _call(integ, x, carry)
    assert isinstance(cold, tuple) and isinstance(warm, tuple) and len(cold) == len(warm) == size
    assert cold[-1] is None and set(warm[-1]) == set(carry)
    # The carry is the last evaluation's proposal: the derivative at a state inside the step, not the cold zeros.
    assert np.any(np.asarray(warm[-1]["seen"]) != 0)
    # step / advance keep their documented results: x (or (x, status)) alone without a carry, else the tuple.
    np.testing.assert_array_equal(np.asarray(cold[0]), np.asarray(warm[0]))
    if size == 2:
        np.testing.assert_array_equal(np.asarray(cold_documented), np.asarray(cold[0]))
    else:
        assert len(cold_documented) == 2 and int(cold_documented[1]) == int(cold[1]) == 0
    assert len(warm_documented) == size


class _NoCarry:
    """A user's fixed-step integrator written before the carry existed."""

    name, is_adaptive, is_stochastic = "no_carry", False, False

    def step(self, scene, t, x, h, ctrl=None):
        return x + h * scene.dynamics(t, x, ctrl)


class _OldAdaptive:
    """A user's adaptive integrator with the varying-arity contract: (x, status[, carry])."""

    name, is_adaptive, is_stochastic = "old_adaptive", True, False

    def advance(self, scene, t, x, t_end, ctrl=None, *, carry=None):
        x = x + (t_end - t) * scene.dynamics(t, x, ctrl)
        return (x, jnp.int32(0)) if carry is None else (x, jnp.int32(0), {**carry, "n": carry["n"] + 1})


class _MyRK4(RK4):
    """A user's subclass that redefines step only: the engine must run that step, not RK4's step_carry."""

    def step(self, scene, t, x, h, ctrl=None, *, carry=None):
        return super().step(scene, t, x, 2 * h, ctrl, carry=carry)


def test_user_integrators_are_adapted_to_the_one_shape():
    scene, x = Oscillator(), jnp.array([1.0, 0.0])
    kept = {"seen": jnp.ones(2)}
    xn, c = engine_step(_NoCarry())(scene, 0.0, x, H, carry=kept)
    np.testing.assert_allclose(np.asarray(xn), [1.0, -H])
    assert c is kept  # it cannot update a carry: the carry passes through unchanged, as the engine always did
    assert engine_step(_NoCarry())(scene, 0.0, x, H)[1] is None
    xa, status, ca = engine_step(_OldAdaptive())(scene, 0.0, x, H, carry={"n": 0})
    assert int(status) == 0 and ca == {"n": 1}
    assert engine_step(_OldAdaptive())(scene, 0.0, x, H)[2] is None
    doubled, _ = engine_step(_MyRK4())(scene, 0.0, x, H / 2)
    np.testing.assert_array_equal(np.asarray(doubled), np.asarray(RK4().step(scene, 0.0, x, H)))
