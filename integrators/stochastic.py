"""Stochastic integrators for dx = f(t, x) dt + Σ_q g_q(t, x) dW_q.

``integ.integrate(model, t0, h, x, ctrl, carry, key) -> (x, carry, status)`` advances one world (``jax.vmap``
batches it; ``base.Integrator``). ``key``, the step's noise, is a PRNG key
(``integrators.prng.step_key(seed, world, step)``: dW is drawn per global slot, dZ only by methods that
need it) or prescribed ``Increments(dW, dZ)`` / ``{"dW": ..., "dZ": ...}`` (reproducible tests; one
Brownian path through two solvers).

``scene`` needs ``.layout``, ``.dynamics(t, x, ctrl)`` (derivative buffer) and
``.diffusion(t, x, ctrl)`` (packed diffusion buffer, ``layout.diffusion_size``). Optional:
``.drift_diffusion(t, x, ctrl) -> (f, g)`` to share work between the two at one point,
``.diffusion_time_dependent = False`` to let SRA1 skip its second diffusion evaluation, and
``.project(x)`` applied after the full step (after quaternion normalisation). A scene carry
(``contracts``) is read by every evaluation; the last evaluation's proposal is kept (MuJoCo's rule).

- ``EulerMaruyama`` (Itô): x + f h + g dW. Strong order 0.5 (1 for additive noise), weak 1.
- ``StochasticHeun`` (Stratonovich): predictor x̄ = x + f h + g dW, then
  x + ½(f + f̄) h + ½(g + ḡ) dW with f̄, ḡ at (t + h, x̄). Strong order 1 for commutative noise.
- ``SRA1`` (Rößler 2010, additive noise): strong order 1.5 using dZ. The diffusion is evaluated
  at the step's start state (at t and t + h); as in diffrax the stage uses g(t). On state-dependent
  noise it degrades to strong order 0.5.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
from jax.typing import ArrayLike

from .base import Integrator, StepResult, ok_status
from .contracts import ContractError, Model, evaluate, merged, scene_part
from .names import IntegratorKind
from .rk import finish_step
from .sde import Increments, apply_sde, check_diffusion, resolve, weight


def _check_scene(scene, who: str):
    if not callable(getattr(scene, "diffusion", None)):
        raise TypeError(f"{who} needs a scene with .diffusion(t, x, ctrl); {type(scene).__name__} has none")


def _drift_diffusion(scene, t, x, ctrl, carry=None):
    """(f, g, carry proposal) at (t, x); one shared evaluation where the scene offers drift_diffusion."""
    fn = getattr(scene, "drift_diffusion", None)
    if fn is not None:
        (f, g), out = evaluate(fn, t, x, ctrl=ctrl, carry=carry)
    else:
        f, out = evaluate(scene.dynamics, t, x, ctrl=ctrl, carry=carry)
        g = scene.diffusion(t, x, ctrl)
    return f, check_diffusion(scene.layout, g), out


def _done(scene, x_next, carry, out):
    return finish_step(scene, x_next), merged(carry, out)


class _Stochastic(Integrator):
    """Stochastic methods keep the carry proposal of their last evaluation, as MuJoCo's RK4 does."""

    kind: ClassVar[IntegratorKind] = IntegratorKind.STOCHASTIC
    requires: ClassVar[tuple[str, ...]] = ("diffusion",)
    name: ClassVar[str]
    interpretation: ClassVar[str]
    strong_order: ClassVar[float]
    weak_order: ClassVar[float]
    needs_dZ: ClassVar[bool] = False

    def config(self) -> dict:
        return dict(name=self.name, kind="stochastic", interpretation=self.interpretation,
                    strong_order=self.strong_order, weak_order=self.weak_order, needs_dZ=self.needs_dZ)

    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        """One step of size ``h`` driven by ``key`` (a PRNG key or increments): ``(x, carry, status)``."""
        if key is None:
            raise ContractError(f"{type(self).__name__} is stochastic: its step needs key= (a PRNG key, e.g. "
                                f"prng.step_key(seed, world, step), or Increments(dW, dZ))")
        x_next, carry_next = self.update(model, t0, x, h, key, ctrl, carry)
        return x_next, carry_next, ok_status()

    def step(self, scene: Model, t: ArrayLike, x: ArrayLike, h: ArrayLike, noise: Any = None,  # type: ignore[override]
             ctrl: ArrayLike | None = None, *, carry: dict | None = None) -> Any:
        """``x`` after one step of size ``h`` driven by ``noise`` (a key or increments); ``(x, carry)`` when a
        carry is given."""
        x_next, carry_next, _ = self.integrate(scene, t, h, x, ctrl, carry, noise)
        return x_next if carry is None else (x_next, carry_next)

    @abstractmethod
    def update(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, noise: Any, ctrl: ArrayLike | None,
               carry: dict | None) -> tuple[jax.Array, dict | None]:
        """``(x_next, carry_next)`` of one step (each method's own)."""

    def increments(self, noise, h, layout) -> Increments:
        """The increments this method uses for ``noise`` (a key or prescribed increments)."""
        return resolve(noise, h, layout, self.needs_dZ, type(self).__name__)


@dataclass(frozen=True)
class EulerMaruyama(_Stochastic):
    name: ClassVar[str] = "euler_maruyama"
    interpretation: ClassVar[str] = "ito"
    strong_order: ClassVar[float] = 0.5
    weak_order: ClassVar[float] = 1.0

    def update(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, noise: Any, ctrl: ArrayLike | None,
               carry: dict | None) -> tuple[jax.Array, dict | None]:
        _check_scene(scene, "EulerMaruyama")
        layout = scene.layout
        inc = self.increments(noise, h, layout)
        f, g, out = _drift_diffusion(scene, t, x, ctrl, scene_part(scene, carry))
        return _done(scene, apply_sde(layout, x, h * f, weight(layout, g, inc.dW)), carry, out)


@dataclass(frozen=True)
class StochasticHeun(_Stochastic):
    name: ClassVar[str] = "stochastic_heun"
    interpretation: ClassVar[str] = "stratonovich"
    strong_order: ClassVar[float] = 1.0  # commutative noise; 0.5 in general
    weak_order: ClassVar[float] = 1.0

    def update(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, noise: Any, ctrl: ArrayLike | None,
               carry: dict | None) -> tuple[jax.Array, dict | None]:
        _check_scene(scene, "StochasticHeun")
        layout = scene.layout
        inc = self.increments(noise, h, layout)
        sc = scene_part(scene, carry)
        f0, g0, _ = _drift_diffusion(scene, t, x, ctrl, sc)
        xb = apply_sde(layout, x, h * f0, weight(layout, g0, inc.dW))
        f1, g1, out = _drift_diffusion(scene, t + h, xb, ctrl, sc)
        x_next = apply_sde(layout, x, 0.5 * h * (f0 + f1), weight(layout, g0 + g1, 0.5 * inc.dW))
        return _done(scene, x_next, carry, out)


@dataclass(frozen=True)
class SRA1(_Stochastic):
    """Rößler's SRA1: c0 = (0, 3/4), A0 = [[0, 0], [3/4, 0]], B0 = [[0, 0], [3/2, 0]],
    α = (1/3, 2/3), β1 = (1, 0), β2 = (-1, 1), c1 = (1, 0)."""

    name: ClassVar[str] = "sra1"
    interpretation: ClassVar[str] = "ito"  # additive noise: Itô and Stratonovich coincide
    strong_order: ClassVar[float] = 1.5
    weak_order: ClassVar[float] = 2.0
    needs_dZ: ClassVar[bool] = True

    def update(self, scene: Any, t: ArrayLike, x: ArrayLike, h: ArrayLike, noise: Any, ctrl: ArrayLike | None,
               carry: dict | None) -> tuple[jax.Array, dict | None]:
        _check_scene(scene, "SRA1")
        layout = scene.layout
        inc = self.increments(noise, h, layout)
        assert inc.dZ is not None  # needs_dZ: resolve drew it
        i10 = inc.dZ / h  # I_(1,0) / h
        sc = scene_part(scene, carry)
        f1, g0, _ = _drift_diffusion(scene, t, x, ctrl, sc)
        if getattr(scene, "diffusion_time_dependent", True):
            g1 = check_diffusion(layout, scene.diffusion(t + h, x, ctrl))
        else:
            g1 = g0
        z2 = apply_sde(layout, x, 0.75 * h * f1, weight(layout, g0, 1.5 * i10))
        f2, out = evaluate(scene.dynamics, t + 0.75 * h, z2, ctrl=ctrl, carry=sc)
        drift = h * (f1 / 3.0 + 2.0 * f2 / 3.0)
        noise_t = weight(layout, g1, inc.dW - i10) + weight(layout, g0, i10)
        return _done(scene, apply_sde(layout, x, drift, noise_t), carry, out)


STOCHASTIC = {c.name: c for c in (EulerMaruyama, StochasticHeun, SRA1)}

__all__ = ["EulerMaruyama", "StochasticHeun", "SRA1", "Increments", "STOCHASTIC"]
