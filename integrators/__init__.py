"""Model-independent integration layer: state registry, update policies, integrators."""

from . import _config  # noqa: F401  (float64 and the compilation cache, before any array exists)
from .state import (
    NoiseEndpoint,
    StateError,
    StateLayout,
    StateRecord,
    StateRegistry,
    StateSpec,
    UpdateRun,
)

__all__ = ["StateSpec", "StateRegistry", "StateLayout", "StateRecord", "StateError", "UpdateRun",
           "NoiseEndpoint"]
