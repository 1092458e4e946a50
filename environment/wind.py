"""Wind models: callables ``(t, alt) -> (..., 3)`` giving the air's velocity [m/s] in local NED.

The wind is relative to the rotating planet (still air turns with it). ``alt`` [m] may have any shape
``(...)``; the result has shape ``(..., 3)``. Both models ignore ``t``; it is there so that gusts or a
time-varying wind fit the same slot.
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


class WindModel(Protocol):
    """Time t [s] and geometric altitude [m] ``(...)`` → NED wind ``(..., 3)`` [m/s]."""

    def __call__(self, t: ArrayLike, alt: ArrayLike) -> jax.Array: ...


class ConstantWind:
    """The same NED wind ``ned`` (north, east, down) [m/s] everywhere and always."""

    def __init__(self, ned: ArrayLike) -> None:
        self.ned = np.asarray(ned, dtype=float)
        if self.ned.shape != (3,):
            raise ValueError(f"ConstantWind: ned must be 3 numbers (north, east, down), got shape {self.ned.shape}")

    def __call__(self, t: ArrayLike, alt: ArrayLike) -> jax.Array:
        return jnp.broadcast_to(jnp.asarray(self.ned), jnp.shape(alt) + (3,))

    def __repr__(self) -> str:
        return f"ConstantWind(ned={self.ned.tolist()})"


class WindProfile:
    """Wind shear: NED wind piecewise-linear in geometric altitude, held at the end values outside the table.

    ``altitudes`` ``(n,)`` [m], strictly increasing; ``ned_values`` ``(n, 3)`` [m/s], the wind at each.
    """

    def __init__(self, altitudes: ArrayLike, ned_values: ArrayLike) -> None:
        self.altitudes = np.asarray(altitudes, dtype=float)
        self.ned_values = np.asarray(ned_values, dtype=float)
        n = self.altitudes.shape[0] if self.altitudes.ndim == 1 else 0
        if n < 1 or self.ned_values.shape != (n, 3):
            raise ValueError(f"WindProfile: need altitudes (n,) and ned_values (n, 3), got "
                             f"{self.altitudes.shape} and {self.ned_values.shape}")
        if np.any(np.diff(self.altitudes) <= 0):
            raise ValueError("WindProfile: altitudes must be strictly increasing")

    def __call__(self, t: ArrayLike, alt: ArrayLike) -> jax.Array:
        alt = jnp.asarray(alt)
        xp = jnp.asarray(self.altitudes)
        # jnp.interp holds the end values outside [xp[0], xp[-1]], which is the documented behaviour
        return jnp.stack([jnp.interp(alt, xp, jnp.asarray(self.ned_values[:, k])) for k in range(3)], axis=-1)

    def __repr__(self) -> str:
        return f"WindProfile(altitudes={self.altitudes.tolist()}, ned_values={self.ned_values.tolist()})"
