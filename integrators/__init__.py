"""Model-independent integration layer: state registry, update policies, integrators."""

from . import _config  # noqa: F401  (float64 and the compilation cache, before any array exists)
from .lie import CrouchGrossman3, dexpinv, rkmk_transform
from .rk import (
    INTEGRATORS,
    RK4,
    RK38,
    RKF45,
    STATUS_MAX_STEPS,
    STATUS_NAMES,
    STATUS_NONFINITE,
    STATUS_OK,
    STATUS_UNDERFLOW,
    BogackiShampine,
    DormandPrince,
    EmbeddedRK,
    Euler,
    ExplicitRK,
    Heun,
    Midpoint,
    SemiImplicitEuler,
    get_integrator,
    register_integrator,
)
from .state import (
    NoiseEndpoint,
    StateError,
    StateLayout,
    StateRecord,
    StateRegistry,
    StateSpec,
    UpdateRun,
)
from .stochastic import SRA1, EulerMaruyama, Increments, StochasticHeun  # also registers their names
from .tableaux import TABLEAUX, Tableau

__all__ = ["StateSpec", "StateRegistry", "StateLayout", "StateRecord", "StateError", "UpdateRun",
           "NoiseEndpoint",
           "Tableau", "TABLEAUX", "ExplicitRK", "EmbeddedRK",
           "Euler", "SemiImplicitEuler", "Heun", "Midpoint", "RK4", "RK38",
           "BogackiShampine", "RKF45", "DormandPrince", "CrouchGrossman3", "dexpinv", "rkmk_transform",
           "INTEGRATORS", "get_integrator", "register_integrator",
           "STATUS_OK", "STATUS_NONFINITE", "STATUS_UNDERFLOW", "STATUS_MAX_STEPS", "STATUS_NAMES",
           "EulerMaruyama", "StochasticHeun", "SRA1", "Increments"]
