"""What an integrator may ask of a model, and how the engine checks a pair before it traces anything.

A *model* (scene) is anything with a finalized ``layout`` and ``dynamics(t, x, ctrl=None)``; the rest
is optional and asked for by the integrators that need it (``Integrator.requires``):

- ``second_order``: (position state, velocity state) pairs (SemiImplicitEuler, ImplicitFast);
- ``diffusion(t, x, ctrl)`` and optionally ``drift_diffusion`` (stochastic methods);
- ``euler_dynamics(t, x, h, ctrl)`` (MuJoCo's implicit joint damping in Euler) and
  ``implicit_dynamics(t, x, h, ctrl)`` (implicit-in-velocity Euler);
- ``project(x)``: applied after every full step;
- ``unroll_stages`` (bool): the explicit Runge–Kutta stages are traced one by one instead of in a loop
  (``rk.rk_stages``), where a stage is cheap to trace: MjScene on MuJoCo C, whose stage is one host call;
- a **carry**: per-world values kept from one step to the next without being integrated (Drake's
  discrete state; MjScene keeps the constraint solver's warm start ``qacc_warmstart``).
  ``carry_spec`` maps names to shapes, ``init_carry()`` gives the cold values, and every evaluation
  accepts ``carry=`` and then returns ``(derivative, carry_out)``: what that evaluation proposes to
  keep. The integrator keeps the proposal of the last evaluation of the step (MuJoCo's rule).

The integrator's side is one base class, ``base.Integrator``, with one fixed-arity
``integrate(model, t0, h, x, ctrl, carry, key) -> (x, carry, status)`` for every kind. An integrator's own
carry (an adaptive method's next step size) sits in the same dict under names from its
``carry_spec(model)``.

``check_pair`` runs once when a rollout starts, so a missing piece is one clear error, not a
traceback from inside a trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .base import Integrator, Model
from .errors import UserError
from .names import IntegratorKind
from .state import StateLayout


class ContractError(UserError, TypeError):
    """A model or integrator lacks what the other needs; the message names both and the missing part."""


def integrator_kind(integ: object) -> IntegratorKind | None:
    """The kind of an ``Integrator`` (an instance or a class), or None when ``integ`` is no integrator."""
    if isinstance(integ, Integrator) or (isinstance(integ, type) and issubclass(integ, Integrator)):
        return IntegratorKind(integ.kind)
    return None


def check_model(scene) -> None:
    if not isinstance(scene, Model):
        missing = [a for a in ("layout", "dynamics") if not hasattr(scene, a)]
        raise ContractError(f"{type(scene).__name__} is not a model: it lacks {missing} (a model needs .layout, a "
                            f"StateLayout, and .dynamics(t, x, ctrl=None))")
    if not isinstance(scene.layout, StateLayout):
        raise ContractError(f"{type(scene).__name__}.layout is a {type(scene.layout).__name__}, not a StateLayout")


def check_pair(scene: object, integ: Integrator) -> IntegratorKind:
    """Raise ``ContractError`` unless ``integ`` can advance ``scene``; returns the integrator's kind."""
    check_model(scene)
    kind = integrator_kind(integ)
    if kind is None:
        raise ContractError(not_an_integrator(integ))
    needs = tuple(integ.requires)
    missing = [a for a in needs if getattr(scene, a, None) is None]
    if missing:
        raise ContractError(f"{type(integ).__name__} needs {type(scene).__name__}.{', .'.join(missing)}, which it "
                            f"does not have")
    spec = scene_carry_spec(scene)
    own = integrator_carry_spec(integ, scene)
    clash = sorted(set(spec) & set(own))
    if clash:
        raise ContractError(f"carry name(s) {clash} are used by both {type(scene).__name__} and {type(integ).__name__}")
    return kind


# -- the carry --------------------------------------------------------------------------------------

def scene_carry_spec(scene) -> dict[str, tuple[int, ...]]:
    return dict(getattr(scene, "carry_spec", None) or {})


def integrator_carry_spec(integ, scene) -> dict[str, tuple[int, ...]]:
    return dict(integ.carry_spec(scene) or {})


def not_an_integrator(obj) -> str:
    """Why ``obj`` cannot be used as an integrator (one message for every place that refuses one)."""
    return (f"{obj!r} is not an integrator: an integrator subclasses mjharness.integrators.Integrator and "
            f"writes integrate(model, t0, h, x, ctrl, carry, key) -> (x, carry, status) (docs/integrators.md)")


def scene_part(scene, carry: Mapping | None) -> dict | None:
    """The scene's entries of a full carry (None when the scene keeps none or no carry is threaded)."""
    if carry is None:
        return None
    names = scene_carry_spec(scene)
    return {k: carry[k] for k in names} if names else None


def evaluate(fn: Callable, *args, ctrl=None, carry: Mapping | None = None) -> tuple[Any, dict | None]:
    """``fn(*args, ctrl)`` as ``(derivative, carry_out)``; carry_out is None when no carry is threaded."""
    if carry is None:
        return fn(*args, ctrl), None
    out, carry_out = fn(*args, ctrl, carry=carry)
    return out, dict(carry_out)


def merged(carry: Mapping | None, update: Mapping | None) -> dict | None:
    """``carry`` with the entries of ``update`` replaced (None stays None)."""
    if carry is None:
        return None
    return {**carry, **(update or {})}
