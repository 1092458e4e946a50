"""Adaptive explicit Runge–Kutta: an embedded pair estimates each step's error, a controller sizes the steps.

``EmbeddedRK.integrate(model, t0, h, x, ctrl, carry, key)`` integrates one output interval ``[t0, t0 + h]`` with as
many accepted steps as the tolerances need; its ``StepSizeController`` (``controller.py``: tolerances, error
ratio, next step size) decides. With a carry (the rollout engine threads one) the controller's proposal for the
next step size, ``h_next``, survives from one interval to the next, so an interval does not re-discover its step
by rejections; without one every interval starts from ``h0`` (default: the whole interval).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from . import policies
from . import tableaux as tb
from .base import Integrator, StepResult
from .contracts import Model, scene_part
from .controller import CONTROLLER_OPTIONS, StepSizeController
from .names import IntegratorKind
from .rk import _check_quaternion_stages, _transform, finish_step, rk_stages, rk_step_carry
from .state import StateLayout
from .status import STATUS_MAX_STEPS, STATUS_NONFINITE, STATUS_OK, STATUS_UNDERFLOW

__all__ = ["EmbeddedRK", "BogackiShampine", "RKF45", "DormandPrince", "StepSizeController", "value_difference"]


@dataclass(frozen=True, init=False)
class EmbeddedRK(Integrator):
    """Adaptive explicit Runge–Kutta with an embedded error estimate (``tableau.b_low``).

    ``EmbeddedRK(tableau, controller)``, or the controller's options as keywords (``DormandPrince(rtol=1e-8)``,
    ``get_integrator("rkf45", atol=1e-10)``): ``rtol``, ``atol``, ``state_rtol``, ``state_atol``,
    ``scene_rtol``, ``scene_atol``, ``safety``, ``min_factor``, ``max_factor``, ``h0``, ``h_min``,
    ``max_steps`` (``StepSizeController``). ``quaternion_stages`` as for the fixed-step methods.
    """

    tableau: tb.Tableau
    controller: StepSizeController
    quaternion_stages: str
    default_tableau: ClassVar[tb.Tableau] = tb.DORMAND_PRINCE
    # the keywords ``**options`` takes: a file's recorded configuration rebuilds with them (replay, rerun)
    option_names: ClassVar[tuple] = CONTROLLER_OPTIONS
    name: ClassVar[str] = "embedded_rk"
    kind: ClassVar[IntegratorKind] = IntegratorKind.ADAPTIVE

    def __init__(self, tableau: tb.Tableau | None = None, controller: StepSizeController | None = None, *,
                 quaternion_stages: str = "rkmk", **options):
        unknown = sorted(set(options) - set(CONTROLLER_OPTIONS))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword argument(s) {unknown}; the step-size "
                            f"controller's options are {', '.join(CONTROLLER_OPTIONS)}")
        if controller is not None and options:
            raise TypeError(f"{type(self).__name__}: give the controller or its options {sorted(options)}, not both")
        tableau = type(self).default_tableau if tableau is None else tableau
        _check_quaternion_stages(quaternion_stages)
        if not tableau.embedded:
            raise ValueError(f"tableau {tableau.name!r} has no embedded error estimate (b_low)")
        object.__setattr__(self, "tableau", tableau)
        object.__setattr__(self, "controller", controller if controller is not None else StepSizeController(**options))
        object.__setattr__(self, "quaternion_stages", quaternion_stages)

    @property
    def order(self) -> int:
        return self.tableau.order

    def config(self) -> dict:
        return dict(name=self.name, order=self.order, order_low=self.tableau.order_low, adaptive=True,
                    tableau=self.tableau.to_dict(), **self.controller.config(),
                    quaternion_stages=self.quaternion_stages)

    def resolve_tolerances(self, layout: StateLayout) -> dict[str, tuple[float, float]]:
        """``{state: (rtol, atol)}`` after the controller's precedence (``StepSizeController``)."""
        return self.controller.resolve_tolerances(layout)

    def error_ratio(self, layout: StateLayout, err: jax.Array, x_high: jax.Array) -> jax.Array:
        """Largest per-state error ratio of the value-space error ``err`` (one world)."""
        return self.controller.error_ratio(layout, err, x_high)

    # -- stepping -------------------------------------------------------------------------------
    def step_with_error(self, scene: Model, t: ArrayLike, x: ArrayLike, h: ArrayLike, ctrl: ArrayLike | None = None, *,
                        carry: dict | None = None) -> tuple:
        """(x_next before projection, x_high - x_low in value space, f(t, x)) for one world.

        With a scene ``carry`` (the scene's entries only) a fourth item: the last stage's carry proposal.
        """
        layout = scene.layout
        tab = self.tableau
        K, kept = rk_stages(scene, tab, t, x, h, ctrl, transform=_transform(self, scene), carry=carry)
        inc = h * (jnp.asarray(tab.b, dtype=K.dtype) @ K)
        assert tab.b_low is not None  # an embedded pair (checked when built)
        dinc = h * (jnp.asarray(np.subtract(tab.b, tab.b_low), dtype=K.dtype) @ K)
        x_high = policies.apply_increment(layout, x, inc)
        res = (x_high, value_difference(layout, x, x_high, inc, dinc), K[0])
        return res if carry is None else res + (kept,)

    def step(self, scene: Model, t: ArrayLike, x: ArrayLike, h: ArrayLike, ctrl: ArrayLike | None = None, *,
             carry: dict | None = None) -> Any:
        """One fixed step of the propagated (higher-order) solution, no error control; ``(x, carry)`` with a
        carry (the scene's entries are kept as the fixed methods keep them)."""
        x_next, carry_next = rk_step_carry(scene, self.tableau, t, x, h, ctrl, transform=_transform(self, scene),
                                           carry=carry)
        return x_next if carry is None else (x_next, carry_next)

    def advance(self, scene: Model, t: ArrayLike, x: ArrayLike, t_end: ArrayLike, ctrl: ArrayLike | None = None, *,
                carry: dict | None = None) -> Any:
        """Integrate one world from ``t`` to ``t_end`` (>= t): ``(x, status)``, or ``(x, status, carry)``."""
        x_out, carry_next, status = self._interval(scene, t, t_end, x, ctrl, carry)
        return (x_out, status) if carry is None else (x_out, status, carry_next)

    def carry_spec(self, model: Model) -> dict[str, tuple[int, ...]]:
        """An adaptive world keeps its controller's next step size from one output interval to the next."""
        return {"h_next": ()}

    def init_carry(self, model: Model, dt: float) -> dict:
        h0 = self.controller.h0
        return {"h_next": np.float64(dt if h0 is None else h0)}

    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        """Integrate one world over the output interval ``[t0, t0 + h]``: ``(x, carry, status)``.

        On status != 0 the world keeps ``x`` (its state at ``t0``); see ``Status``. With a carry the first
        trial step is ``carry["h_next"]`` (the previous interval's controller proposal) and the scene's entries
        follow the accepted steps.
        """
        return self._interval(model, t0, t0 + h, x, ctrl, carry)

    def _interval(self, model, t0, t_end, x, ctrl, carry) -> StepResult:
        """``integrate`` over ``[t0, t_end]`` (``advance`` gives ``t_end`` itself: no ``t0 + (t_end - t0)``)."""
        if carry is None:
            x_out, status, _ = self.advance_info(model, t0, x, t_end, ctrl)
            return x_out, None, status
        x_out, status, info = self.advance_info(model, t0, x, t_end, ctrl, h=carry["h_next"],
                                                carry=scene_part(model, carry))
        out = {**carry, **(info["carry"] or {})}
        out["h_next"] = jnp.where(status == STATUS_OK, info["h"], carry["h_next"]).astype(x_out.dtype)
        return x_out, out, status

    def advance_info(self, scene: Model, t: ArrayLike, x: ArrayLike, t_end: ArrayLike, ctrl: ArrayLike | None = None,
                     h: ArrayLike | None = None, carry: dict | None = None) -> tuple[jax.Array, jax.Array, dict]:
        """One interval ``[t, t_end]`` as ``(x, status, info)``; info: accepted, rejected, h (the next step size to
        try), carry (the scene carry after the last accepted step).

        ``h`` (optional, may be traced) overrides ``h0`` for this call, e.g. the previous call's
        ``info["h"]``. ``carry``: the scene's carry entries (read by every attempt; an accepted step
        keeps its last stage's proposal, a rejected one changes nothing).
        """
        ctl = self.controller
        ctl.resolve_tolerances(scene.layout)  # a bad override raises before tracing the loop
        x = jnp.asarray(x)
        t = jnp.asarray(t, x.dtype)
        t_end = jnp.asarray(t_end, x.dtype)
        attempt = self._attempt(scene, t_end, ctrl)

        def cond(c):
            t_, _, _, status, n, _, _, _ = c
            return (status == STATUS_OK) & (t_ < t_end) & (n < ctl.max_steps)

        def body(c):
            t_, x_, h_, status, n, acc, rej, cr = c
            t_next, x_next, h_next, status, cr, take = attempt(t_, x_, h_, cr)
            n = n + 1
            status = jnp.where((status == STATUS_OK) & (n >= ctl.max_steps) & (t_next < t_end),
                               STATUS_MAX_STEPS, status)
            return (t_next, x_next, h_next, status.astype(jnp.int32), n, acc + take, rej + ~take, cr)

        status0 = jnp.where(jnp.all(jnp.isfinite(x)), STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
        zero = jnp.zeros((), jnp.int32)
        init = (t, x, ctl.first_step(t, t_end, h), status0, zero, zero, zero, carry)
        _, x_fin, h_fin, status, n, acc, rej, c_fin = jax.lax.while_loop(cond, body, init)
        x_out = jnp.where(status == STATUS_OK, x_fin, x)
        return x_out, status, dict(accepted=acc, rejected=rej, h=h_fin, carry=c_fin)

    def _attempt(self, scene, t_end, ctrl):
        """One attempted step of an interval: ``(t, x, h, carry) -> (t, x, h_next, status, carry, taken)``."""
        ctl, layout = self.controller, scene.layout
        q = min(self.tableau.order, self.tableau.order_low)

        def attempt(t_, x_, h_, cr):
            rem = t_end - t_
            last = h_ >= rem
            h_try = jnp.where(last, rem, h_)
            res = self.step_with_error(scene, t_, x_, h_try, ctrl, carry=cr)
            x_high, err, k0 = res[:3]
            ratio = ctl.error_ratio(layout, err, x_high)
            finite = jnp.all(jnp.isfinite(x_high)) & jnp.isfinite(ratio)
            accept = finite & (ratio <= 1.0)
            t_new = jnp.where(last, t_end, t_ + h_try)
            h_next = ctl.next_step(h_try, h_, ratio, finite, accept, last, q)
            underflow = (~accept & (h_next < ctl.h_min)) | (accept & (t_new <= t_))
            status = jnp.where(~jnp.all(jnp.isfinite(k0)), STATUS_NONFINITE,
                               jnp.where(underflow, jnp.where(finite, STATUS_UNDERFLOW, STATUS_NONFINITE),
                                         STATUS_OK))
            take = accept & (status == STATUS_OK)
            x_next = jnp.where(take, finish_step(scene, x_high), x_)
            if cr is not None:
                cr = jax.tree.map(lambda new, old: jnp.where(take, new, old), res[3], cr)
            return jnp.where(take, t_new, t_), x_next, h_next, status, cr, take

        return attempt


def value_difference(layout: StateLayout, x0, x_high, inc, dinc):
    """x_high - x_low in value space, where x_low = x0 (+) (inc - dinc).

    Euclidean and quaternion_qdot states: exactly ``dinc`` (no cancellation against x0);
    ``quaternion`` states: the difference of the two exp-map updates (stored 4-vectors).
    """
    err = jnp.zeros_like(x0)
    for run in layout.runs:
        err = err.at[run.value_slice].set(dinc[run.deriv_slice])
    for r in layout.special:
        if r.update == "quaternion":
            q_low = policies.quat_integrate(x0[r.value_slice], (inc - dinc)[r.deriv_slice])
            err = err.at[r.value_slice].set(x_high[r.value_slice] - q_low)
        else:
            err = err.at[r.value_slice].set(dinc[r.deriv_slice])
    return err



class BogackiShampine(EmbeddedRK):
    """Bogacki–Shampine 3(2): third-order solution, second-order error estimate."""

    default_tableau: ClassVar[tb.Tableau] = tb.BOGACKI_SHAMPINE
    name: ClassVar[str] = "bogacki_shampine"


class RKF45(EmbeddedRK):
    """Runge–Kutta–Fehlberg 4(5), propagating the fifth-order solution."""

    default_tableau: ClassVar[tb.Tableau] = tb.RKF45
    name: ClassVar[str] = "rkf45"


class DormandPrince(EmbeddedRK):
    """Dormand–Prince 5(4)."""

    default_tableau: ClassVar[tb.Tableau] = tb.DORMAND_PRINCE
    name: ClassVar[str] = "dormand_prince"
