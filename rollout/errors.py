"""Errors of the rollout layer, below every other rollout module (engine, h5, cli import from here)."""

from __future__ import annotations

from mjharness.integrators.errors import FaultError, MjHarnessError, UserError

__all__ = ["RolloutError", "RolloutFaultError", "MjHarnessError"]


class RolloutError(UserError, ValueError):
    """Bad rollout input (raised before anything is compiled or written); names the offending value."""


class RolloutFaultError(FaultError, RuntimeError):
    """A run stopped by a fault of the machine (write failure, lost peer); the file stays valid and resumable."""
