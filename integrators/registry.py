"""The one table of integrator names (CLI, HDF5 ``integrator`` attribute, ``rollout(..., "rk4")``).

Built-in methods are listed here explicitly, so the table does not depend on which modules happen to
have been imported; ``register_integrator`` adds a user's own.
"""

from __future__ import annotations

import inspect
from typing import Any

from .adaptive import RKF45, BogackiShampine, DormandPrince
from .base import Integrator
from .contracts import ContractError, integrator_kind, not_an_integrator
from .implicit import ImplicitFast
from .lie import CrouchGrossman3
from .rk import RK4, RK38, Euler, Heun, Midpoint, SemiImplicitEuler
from .stochastic import SRA1, EulerMaruyama, StochasticHeun

BUILTIN = (Euler, SemiImplicitEuler, ImplicitFast, Heun, Midpoint, RK4, RK38, CrouchGrossman3,
           BogackiShampine, RKF45, DormandPrince,
           EulerMaruyama, StochasticHeun, SRA1)

INTEGRATORS: dict[str, type[Integrator]] = {cls.name: cls for cls in BUILTIN}


def _key(name) -> str:
    return str(name).lower().replace("-", "_")


def register_integrator(cls: type[Integrator], name: str | None = None) -> type[Integrator]:
    """Make ``cls`` available to ``get_integrator`` under ``name`` (default ``cls.name``)."""
    key = _key(name or cls.name)
    if key in INTEGRATORS and INTEGRATORS[key] is not cls:
        raise ValueError(f"integrator name {key!r} is already taken by {INTEGRATORS[key].__name__}")
    if integrator_kind(cls) is None:
        raise ContractError(not_an_integrator(cls))
    INTEGRATORS[key] = cls
    return cls


def integrator_names() -> list[str]:
    return sorted(INTEGRATORS)


def get_integrator(name: str, **options: Any) -> Integrator:
    """An integrator by registry name (case-insensitive, '-' or '_'), built with ``options``."""
    key = _key(name)
    if key not in INTEGRATORS:
        raise KeyError(f"unknown integrator {name!r}; known: {', '.join(integrator_names())}")
    cls = INTEGRATORS[key]
    try:
        return cls(**options)
    except TypeError as e:
        raise TypeError(f"integrator {key!r} ({cls.__name__}): {e}") from None


def resolve_integrator(integ: Any) -> Integrator:
    """An integrator object from an object, a class or a registered name; ``ContractError`` otherwise."""
    if isinstance(integ, str):
        try:
            integ = get_integrator(integ)
        except KeyError as e:
            raise ContractError(e.args[0]) from None
    if inspect.isclass(integ):
        integ = integ()
    if integrator_kind(integ) is None:
        raise ContractError(not_an_integrator(integ))
    return integ
