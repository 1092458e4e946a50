"""The one integrator contract: ``Integrator.integrate(model, t0, h, x, ctrl, carry, key) -> (x, carry, status)``.

Every integrator, built-in or a user's, subclasses ``Integrator`` and writes that one method (as diffrax's
solvers write ``AbstractSolver.step``); the engine calls nothing else. The calls users make on one world are
derived from it, once, here: ``step(scene, t, x, h, ctrl=None) -> x_next`` (fixed),
``step(scene, t, x, h, noise, ctrl=None) -> x_next`` (stochastic) and ``advance(scene, t, x, t_end,
ctrl=None) -> (x, status)`` (adaptive); given ``carry=`` they also return the carry after the step.

The arguments and the result of ``integrate`` are the same for every kind:

- ``model``: the scene (``contracts.Model``: a ``layout`` and ``dynamics``); ``t0`` the time at the start;
- ``h``: the step (fixed and stochastic methods), or the output interval that an adaptive method fills with
  steps of its own size, chosen by its ``StepSizeController`` (``controller.py``);
- ``x``: one world's state buffer; ``ctrl``: its control (None when the scene has no actuators or no control);
- ``carry``: per-world values kept from one step to the next (the scene's warm start, an adaptive method's
  next step size) as a dict, or None when nothing is carried; the result's carry has the same keys;
- ``key``: the step's noise for stochastic methods (a PRNG key or prescribed ``sde.Increments``), else None;
- ``status``: an int32 ``Status`` code, 0 unless the step failed (an adaptive method's underflow, ...).

``kind`` (``IntegratorKind``) tells the engine what ``key`` and ``h`` are; ``requires`` names the model
attributes the method needs (checked once by ``contracts.check_pair``); ``carry_spec(model)`` /
``init_carry(model, dt)`` declare the integrator's own carry entries. Nothing is guessed from signatures.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol, runtime_checkable

import jax.numpy as jnp
from jax.typing import ArrayLike

from .names import IntegratorKind
from .state import StateLayout

__all__ = ["Integrator", "IntegratorKind", "Model", "StepResult", "ok_status"]

StepResult = tuple[Any, "dict | None", Any]  # (x, carry, status): arrays (traced under jit)


@runtime_checkable
class Model(Protocol):
    """The one thing every integrator needs of a model: a layout and the derivative buffer at (t, x)
    (``contracts`` lists what integrators may ask for besides)."""

    @property
    def layout(self) -> StateLayout: ...

    def dynamics(self, t: Any, x: Any, ctrl: Any = None) -> Any: ...


def ok_status():
    """The status of a step that did not fail (an int32 0, the type every kind returns)."""
    return jnp.zeros((), jnp.int32)


class Integrator(ABC):
    """Base class of every integrator: one fixed-arity ``integrate`` and a few declarations.

    Attributes:
        name: the registry name (``get_integrator``; the file's ``integrator`` attribute); default: the class
            name in lower case.
        kind: ``IntegratorKind.FIXED`` (default), ``STOCHASTIC`` (``key`` is the step's noise) or ``ADAPTIVE``
            (``h`` is an output interval).
        requires: model attributes the method needs, e.g. ``("second_order",)``; a model without them is
            refused before anything is traced.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[IntegratorKind] = IntegratorKind.FIXED
    requires: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.name:  # a user's class without a name (own or inherited): its class name
            cls.name = cls.__name__.lower()

    def step(self, scene: Model, t: ArrayLike, x: ArrayLike, h: ArrayLike, ctrl: ArrayLike | None = None, *,
             carry: dict | None = None) -> Any:
        """``x`` after one step of size ``h`` from ``t`` (one world); ``(x, carry)`` when a carry is given."""
        x_next, carry_next, _ = self.integrate(scene, t, h, x, ctrl, carry, None)
        return x_next if carry is None else (x_next, carry_next)

    @abstractmethod
    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        """Advance one world from ``t0`` to ``t0 + h``: ``(x, carry, status)`` (jit- and vmap-able)."""

    def carry_spec(self, model: Model) -> dict[str, tuple[int, ...]]:
        """The integrator's own carry entries, name -> shape (none by default)."""
        return {}

    def init_carry(self, model: Model, dt: float) -> dict:
        """The cold values of ``carry_spec``'s entries for a run of output interval ``dt``."""
        return {}

    def config(self) -> dict:
        """What the file records about the method (``integrator_config``): by default its name and kind, and a
        dataclass's repr (its settings; another object's repr would hold its address, which changes every run)."""
        out = dict(name=self.name, kind=str(self.kind))
        return {**out, "repr": repr(self)} if dataclasses.is_dataclass(self) else out
