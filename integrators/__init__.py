"""Model-independent integration layer: state registry, update policies, integrators, their contracts.

Nothing here imports the rest of mjharness, and nothing here changes process-wide settings
(float64 and XLA flags are set by ``mjharness.scenes.settings``).

The names below load on first use (PEP 562): the integrators import JAX (~2 s), and the light modules
(``errors``, ``status``) must not pay for it, so ``mjharness --help`` and argument errors stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import lazy

if TYPE_CHECKING:  # the same names, for type checkers and readers; loaded lazily by __getattr__ below
    from .adaptive import RKF45, BogackiShampine, DormandPrince, EmbeddedRK
    from .base import Integrator
    from .contracts import ContractError, Model, check_pair, integrator_kind
    from .controller import StepSizeController
    from .implicit import ImplicitFast
    from .lie import CrouchGrossman3, dexpinv, rkmk_transform
    from .names import IntegratorKind
    from .registry import INTEGRATORS, get_integrator, integrator_names, register_integrator, resolve_integrator
    from .rk import RK4, RK38, Euler, ExplicitRK, Heun, Midpoint, SemiImplicitEuler
    from .sde import Increments
    from .state import (
        NoiseEndpoint,
        StateError,
        StateLayout,
        StateRecord,
        StateRegistry,
        StateSpec,
        UpdateRun,
    )
    from .status import (
        STATUS_MAX_STEPS,
        STATUS_NAMES,
        STATUS_NONFINITE,
        STATUS_NONFINITE_CTRL,
        STATUS_OK,
        STATUS_TERMINATED,
        STATUS_UNDERFLOW,
        Status,
    )
    from .stochastic import SRA1, EulerMaruyama, StochasticHeun
    from .tableaux import TABLEAUX, Tableau

__all__ = ["StateSpec", "StateRegistry", "StateLayout", "StateRecord", "StateError", "UpdateRun",
           "NoiseEndpoint",
           "Integrator", "IntegratorKind", "StepSizeController",
           "Tableau", "TABLEAUX", "ExplicitRK", "EmbeddedRK",
           "Euler", "SemiImplicitEuler", "ImplicitFast", "Heun", "Midpoint", "RK4", "RK38",
           "BogackiShampine", "RKF45", "DormandPrince", "CrouchGrossman3", "dexpinv", "rkmk_transform",
           "INTEGRATORS", "get_integrator", "register_integrator", "resolve_integrator", "integrator_names",
           "Status", "STATUS_OK", "STATUS_NONFINITE", "STATUS_UNDERFLOW", "STATUS_MAX_STEPS", "STATUS_TERMINATED",
           "STATUS_NONFINITE_CTRL",
           "STATUS_NAMES",
           "Model", "ContractError",
           "check_pair", "integrator_kind",
           "EulerMaruyama", "StochasticHeun", "SRA1", "Increments"]


__getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)
