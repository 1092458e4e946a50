"""``ImplicitFast``: MuJoCo's implicit-in-velocity Euler without the RNE derivative (``implicitfast``).

One evaluation per step: ``scene.implicit_dynamics(t, x, h, ctrl)`` returns the derivative buffer
whose velocity part is the implicit acceleration, the solution of
``(M - h D) qacc = qfrc_smooth + qfrc_constraint`` (``D`` the velocity derivative of the smooth
forces without Coriolis/centripetal terms; the scene decides which terms, ``MjScene`` follows MuJoCo
C). The state then moves exactly as in ``SemiImplicitEuler`` (``rk.semi_implicit_update``):
velocities, activations and extra states by ``x + h k``, positions with the *new* velocities, then
the scene's projection (MjScene clamps limited activations): MuJoCo's ``mj_advance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
from jax.typing import ArrayLike

from .base import Integrator, StepResult, ok_status
from .contracts import ContractError, Model, evaluate, merged, scene_part
from .rk import semi_implicit_update


@dataclass(frozen=True)
class ImplicitFast(Integrator):
    """MuJoCo's ``implicitfast`` integrator, order 1, fixed step; needs ``scene.implicit_dynamics``."""

    name: ClassVar[str] = "implicit_fast"
    order: ClassVar[int] = 1
    requires: ClassVar[tuple[str, ...]] = ("second_order", "implicit_dynamics")

    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        """One step of size ``h`` (one world): ``(x, carry, status)``."""
        imp = getattr(model, "implicit_dynamics", None)
        if not callable(imp):
            raise ContractError(f"ImplicitFast needs {type(model).__name__}.implicit_dynamics(t, x, h, ctrl) (the "
                                f"derivative with the implicit velocity update at step h), which it does not have; "
                                f"MjScene has it, or use semi_implicit_euler or an explicit method")
        x = jnp.asarray(x)
        h = jnp.asarray(h, dtype=x.dtype)
        k, out = evaluate(imp, t0, x, h, ctrl=ctrl, carry=scene_part(model, carry))
        return semi_implicit_update(model, x, h, k), merged(carry, out), ok_status()

    def config(self) -> dict:
        return dict(name=self.name, order=1, adaptive=False,
                    scheme="(M - h D) a = f(t, x); v += h a; q <- q (+) h v_new (MuJoCo implicitfast)")
