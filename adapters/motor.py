"""A DC motor as a standalone (non-MuJoCo) model for ``System``: current ``i`` as its one state.

L di/dt = V - R i - k omega; the shaft torque is k i. ``omega`` is an input (a coupling writes it,
e.g. from a joint velocity); V is the motor's control (``ctrl`` (1,)) or the constant ``voltage``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mjharness.integrators import StateError, StateRegistry, StateSpec


@dataclass(frozen=True)
class DCMotor:
    inductance: float = 0.01      # L [H]
    resistance: float = 1.0       # R [ohm]
    k: float = 0.1                # torque / back-EMF constant [N m / A] = [V s]
    voltage: float = 1.0          # V when no ctrl is given [V]
    i0: float = 0.0               # initial current [A]

    def __post_init__(self):
        for f in ("inductance", "resistance", "k"):
            v = getattr(self, f)
            if not (np.isfinite(v) and v > 0):
                raise StateError(f"DCMotor.{f} must be a finite number > 0, got {v!r}")
        reg = StateRegistry()
        reg.register("i", StateSpec((1,)), model="motor")
        object.__setattr__(self, "_layout", reg.finalize())

    @property
    def layout(self):
        return self._layout

    inputs = {"omega": (1,)}
    nu = 0

    def x0(self) -> np.ndarray:
        return np.array([self.i0])

    def torque(self, i: ArrayLike) -> ArrayLike:
        return self.k * i

    def dynamics(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None, *,
                 inputs: dict | None = None) -> jax.Array:
        omega = jnp.zeros(1) if not inputs or "omega" not in inputs else jnp.reshape(inputs["omega"], (1,))
        v = self.voltage if ctrl is None else jnp.reshape(ctrl, (1,))
        return (v - self.resistance * x - self.k * omega) / self.inductance
