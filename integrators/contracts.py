"""What an integrator may ask of a model, and what the engine may ask of an integrator.

A *model* (scene) is anything with a finalized ``layout`` and ``dynamics(t, x, ctrl=None)``; the rest
is optional and asked for by the integrators that need it:

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

Integrators come in three kinds, told apart by ``is_adaptive`` / ``is_stochastic``:
``step(model, t, x, h, ctrl=None, *, carry=None)``, ``step(model, t, x, h, noise, ctrl=None, *,
carry=None)`` and ``advance(model, t, x, t_end, ctrl=None, *, carry=None)``. With ``carry=None``
they return what they always did (``x`` / ``(x, status)``); with a carry dict they also return the
carry after the step. An integrator's own carry (an adaptive method's next step size) sits in the same
dict under names from its ``carry_spec(model)``.

That varying arity is for callers; the engine needs one shape (as diffrax's ``AbstractSolver.step``
always returns the same tuple). Ours have ``step_carry`` (fixed and stochastic: always
``(x_next, carry_next)``) and ``advance_carry`` (adaptive: always ``(x, status, carry_next)``), with
``carry_next`` None when no carry is passed; ``step`` / ``advance`` are thin wrappers over them.
``engine_step(integ)`` gives that shape for any integrator, a user's written to the contract above included.

``check_pair`` runs once when a rollout starts, so a missing piece is one clear error, not a
traceback from inside a trace.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from .errors import UserError
from .state import StateLayout


@runtime_checkable
class Model(Protocol):
    """The one thing every integrator needs: a layout and the derivative buffer at (t, x)."""

    @property
    def layout(self) -> StateLayout: ...

    def dynamics(self, t, x, ctrl=None): ...


@runtime_checkable
class FixedIntegrator(Protocol):
    name: str
    is_adaptive: bool
    is_stochastic: bool

    def step(self, scene, t, x, h, ctrl=None, *, carry=None): ...


@runtime_checkable
class StochasticIntegrator(Protocol):
    name: str
    is_adaptive: bool
    is_stochastic: bool

    def step(self, scene, t, x, h, noise, ctrl=None, *, carry=None): ...


@runtime_checkable
class AdaptiveIntegrator(Protocol):
    name: str
    is_adaptive: bool
    is_stochastic: bool

    def advance(self, scene, t, x, t_end, ctrl=None, *, carry=None): ...


class ContractError(UserError, TypeError):
    """A model or integrator lacks what the other needs; the message names both and the missing part."""


KINDS = ("fixed", "stochastic", "adaptive")


def integrator_kind(integ) -> str | None:
    """"fixed", "stochastic" or "adaptive", or None when ``integ`` is no integrator."""
    if getattr(integ, "is_adaptive", False):
        return "adaptive" if callable(getattr(integ, "advance", None)) else None
    if not callable(getattr(integ, "step", None)):
        return None
    return "stochastic" if getattr(integ, "is_stochastic", False) else "fixed"


def check_model(scene) -> None:
    if not isinstance(scene, Model):
        missing = [a for a in ("layout", "dynamics") if not hasattr(scene, a)]
        raise ContractError(f"{type(scene).__name__} is not a model: it lacks {missing} (a model needs .layout, a "
                            f"StateLayout, and .dynamics(t, x, ctrl=None))")
    if not isinstance(scene.layout, StateLayout):
        raise ContractError(f"{type(scene).__name__}.layout is a {type(scene.layout).__name__}, not a StateLayout")


def check_pair(scene, integ) -> str:
    """Raise ``ContractError`` unless ``integ`` can advance ``scene``; returns the integrator's kind."""
    check_model(scene)
    kind = integrator_kind(integ)
    if kind is None:
        raise ContractError(f"{integ!r} is not an integrator: it needs step(scene, t, x, h, ...) or, with "
                            f"is_adaptive, advance(scene, t, x, t_end, ...)")
    needs = tuple(getattr(integ, "requires", ()))
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
    fn = getattr(integ, "carry_spec", None)
    return dict(fn(scene) or {}) if callable(fn) else {}


def accepts_carry(integ) -> bool:
    """Whether ``integ``'s step/advance takes ``carry=`` (a user's integrator may predate the carry: it
    then runs with cold scene evaluations, as before)."""
    fn = getattr(integ, "advance" if getattr(integ, "is_adaptive", False) else "step", None)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "carry" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


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


# -- one shape for the engine -----------------------------------------------------------------------

def step_result(pair: tuple, carry: Mapping | None):
    """``step``'s documented result from ``step_carry``'s ``(x_next, carry_next)``: ``x_next`` alone when
    no carry was passed (docs/integrators.md), else the pair."""
    return pair[0] if carry is None else pair


def engine_step(integ) -> Callable:
    """``integ``'s step in one fixed shape: fixed and stochastic ``f(scene, t, x, h[, noise], ctrl=None,
    carry=None) -> (x_next, carry_next)``, adaptive ``f(scene, t, x, t_end, ctrl=None, carry=None) ->
    (x, status, carry_next)``; ``carry_next`` is None when ``carry`` is None.

    Ours have it as ``step_carry`` / ``advance_carry``. An integrator without those, or one whose
    ``step`` / ``advance`` overrides them further down its classes (a user's subclass of ``RK4`` that
    redefines ``step``), is adapted: with ``carry=`` in its signature it returns the longer tuple when given
    a carry; without, it runs cold and the carry passes through unchanged (what the engine always did).
    """
    adaptive = integrator_kind(integ) == "adaptive"
    name, fixed_name = ("advance", "advance_carry") if adaptive else ("step", "step_carry")
    own, base = (next((c for c in type(integ).__mro__ if n in vars(c)), None) for n in (fixed_name, name))
    if own is not None and base is not None and issubclass(own, base):
        return getattr(integ, fixed_name)
    call = getattr(integ, name)
    takes_carry = accepts_carry(integ)

    def step(*args, ctrl=None, carry=None):
        if carry is not None and takes_carry:
            return call(*args, ctrl=ctrl, carry=carry)
        out = call(*args, ctrl=ctrl)
        return (*out, carry) if adaptive else (out, carry)

    return step
