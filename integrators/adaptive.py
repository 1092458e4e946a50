"""Adaptive explicit Runge–Kutta: embedded pairs with per-state tolerances and a step-size controller.

Each ``advance`` call integrates one output interval with as many accepted steps as the tolerances
need. With a carry (the rollout engine threads one) the controller's proposal for the next step
size, ``h_next``, survives from one interval to the next, so an interval does not re-discover its
step by rejections; without one every call starts from ``h0`` (default: the whole interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from . import policies
from . import tableaux as tb
from .contracts import merged, scene_part, step_result
from .rk import _check_quaternion_stages, _transform, finish_step, rk_stages, rk_step_carry
from .state import StateError, StateLayout
from .status import STATUS_MAX_STEPS, STATUS_NONFINITE, STATUS_OK, STATUS_UNDERFLOW

# -- adaptive integrators --------------------------------------------------------------------------

def _tol_items(value, what: str, keyed_by_pair: bool) -> tuple:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    out = []
    for item in items:
        try:
            key, v = item
        except (TypeError, ValueError):
            raise ValueError(f"{what} entries are (key, tolerance) pairs, got {item!r}") from None
        if keyed_by_pair:
            if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(s, str) for s in key)):
                raise ValueError(f"{what} keys are (model, state) name pairs, got {key!r}")
        elif not isinstance(key, str):
            raise ValueError(f"{what} keys are state names, got {key!r}")
        out.append((key, _tol_value(v, f"{what}[{key!r}]")))
    keys = [k for k, _ in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what} repeats a key: {keys}")
    return tuple(sorted(out))


def _tol_value(v, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {v!r}") from None
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {v!r}")
    return f


@dataclass(frozen=True)
class EmbeddedRK:
    """Adaptive explicit Runge–Kutta with an embedded error estimate (``tableau.b_low``).

    Options (all resolved when the integrator is built, tolerances once per layout):

    - ``rtol``, ``atol``: global default tolerances.
    - ``state_rtol`` / ``state_atol``: ``{state name: tol}`` overrides.
    - ``scene_rtol`` / ``scene_atol``: ``{(model, state name): tol}`` overrides, ``model`` being the
      registry model group of the record (``layout[name].model``; MjScene: the MJCF model name).
      Precedence, separately for rtol and atol: (model, state) > state name > global default.
      A state name that the layout lacks is an error; a (model, state) pair whose model is not in
      the layout is ignored (one integrator may serve several scenes).
    - ``safety``, ``min_factor``, ``max_factor``: step-size controller
      ``h <- h * clip(safety * ratio^(-1/(q+1)), min_factor, max_factor)``, q the lower order; after a
      rejection the step never grows.
    - ``h0``: first trial step of each ``advance`` call (default: the whole interval).
    - ``h_min``: a rejected step that would shrink below ``h_min`` stops the world (status 2, or 1
      when the candidates were non-finite).
    - ``max_steps``: attempts (accepted + rejected) per ``advance`` call (status 3 when spent).

    Error ratio of a state (``error_control`` of its spec): ``"state"``:
    ``||x_high - x_low|| / (atol + rtol ||x_high||)`` (Frobenius norm over the stored value);
    ``"component"``: the largest ``|e_i| / (atol + rtol |x_high_i|)``. A step is accepted when the
    largest ratio over all states is <= 1.
    """

    tableau: tb.Tableau = tb.DORMAND_PRINCE
    rtol: float = 1e-6
    atol: float = 1e-9
    state_rtol: Mapping | tuple = ()
    state_atol: Mapping | tuple = ()
    scene_rtol: Mapping | tuple = ()
    scene_atol: Mapping | tuple = ()
    safety: float = 0.9
    min_factor: float = 0.2
    max_factor: float = 5.0
    h0: float | None = None
    h_min: float = 1e-12
    max_steps: int = 100_000
    quaternion_stages: str = "rkmk"
    name: ClassVar[str] = "embedded_rk"
    is_adaptive: ClassVar[bool] = True
    is_stochastic: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        _check_quaternion_stages(self.quaternion_stages)
        if not self.tableau.embedded:
            raise ValueError(f"tableau {self.tableau.name!r} has no embedded error estimate (b_low)")
        for f in ("rtol", "atol", "safety", "min_factor", "max_factor", "h_min"):
            object.__setattr__(self, f, _tol_value(getattr(self, f), f))
        if self.rtol == 0 and self.atol == 0:
            raise ValueError("rtol and atol cannot both be 0")
        if not 0 < self.safety <= 1:
            raise ValueError(f"safety must be in (0, 1], got {self.safety}")
        if not 0 < self.min_factor < 1 < self.max_factor:
            raise ValueError(f"need 0 < min_factor < 1 < max_factor, got {self.min_factor}, {self.max_factor}")
        if self.h0 is not None:
            h0 = _tol_value(self.h0, "h0")
            if h0 == 0:
                raise ValueError("h0 must be > 0 (or None for the whole interval)")
            object.__setattr__(self, "h0", h0)
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, (int, np.integer)) \
                or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {self.max_steps!r}")
        object.__setattr__(self, "max_steps", int(self.max_steps))
        object.__setattr__(self, "state_rtol", _tol_items(self.state_rtol, "state_rtol", False))
        object.__setattr__(self, "state_atol", _tol_items(self.state_atol, "state_atol", False))
        object.__setattr__(self, "scene_rtol", _tol_items(self.scene_rtol, "scene_rtol", True))
        object.__setattr__(self, "scene_atol", _tol_items(self.scene_atol, "scene_atol", True))

    @property
    def order(self) -> int:
        return self.tableau.order

    def config(self) -> dict:
        return dict(name=self.name, order=self.order, order_low=self.tableau.order_low, adaptive=True,
                    tableau=self.tableau.to_dict(), rtol=self.rtol, atol=self.atol,
                    state_rtol=dict(self.state_rtol), state_atol=dict(self.state_atol),
                    scene_rtol={f"{m}:{s}": v for (m, s), v in self.scene_rtol},
                    scene_atol={f"{m}:{s}": v for (m, s), v in self.scene_atol},
                    safety=self.safety, min_factor=self.min_factor, max_factor=self.max_factor,
                    h0=self.h0, h_min=self.h_min, max_steps=self.max_steps,
                    quaternion_stages=self.quaternion_stages)

    # -- tolerances ---------------------------------------------------------------------------
    def resolve_tolerances(self, layout: StateLayout) -> dict[str, tuple[float, float]]:
        """``{state: (rtol, atol)}`` after precedence: (model, state) > state name > default."""
        models = {r.model for r in layout}
        for what, items in (("state_rtol", self.state_rtol), ("state_atol", self.state_atol)):
            bad = [k for k, _ in items if k not in layout]
            if bad:
                raise StateError(f"{what} names unknown state(s) {bad}; states: {', '.join(layout.names)}")
        for what, items in (("scene_rtol", self.scene_rtol), ("scene_atol", self.scene_atol)):
            bad = [(m, s) for (m, s), _ in items if m in models and (s not in layout or layout[s].model != m)]
            if bad:
                raise StateError(f"{what} names state(s) {bad} that model(s) of this layout lack; "
                                 f"states: {', '.join(f'{r.model}:{r.name}' for r in layout)}")
        srt, sat = dict(self.state_rtol), dict(self.state_atol)
        prt, pat = dict(self.scene_rtol), dict(self.scene_atol)
        out = {}
        for r in layout:
            key = (r.model, r.name)
            rt = prt.get(key, srt.get(r.name, self.rtol))
            at = pat.get(key, sat.get(r.name, self.atol))
            if rt == 0 and at == 0:
                raise StateError(f"state {r.name!r}: rtol and atol resolve to 0 both")
            out[r.name] = (rt, at)
        return out

    def _error_plan(self, layout: StateLayout):
        """Static per-element arrays for the error ratio (built at trace time, constants in the program)."""
        tol = self.resolve_tolerances(layout)
        n = layout.size
        rt, at = np.zeros(n), np.zeros(n)
        comp = np.zeros(n, bool)
        seg, seg_rt, seg_at = [], [], []  # the states under error_control="norm": value slice, rtol, atol
        for r in layout:
            if not r.size:
                continue
            sl = r.value_slice
            rt[sl], at[sl] = tol[r.name]
            if r.spec.error_control == "component":
                comp[sl] = True
            else:
                seg.append(sl)
                seg_rt.append(tol[r.name][0])
                seg_at.append(tol[r.name][1])
        return rt, at, comp, seg, np.array(seg_rt), np.array(seg_at)

    def error_ratio(self, layout: StateLayout, err, x_high):
        """Largest per-state error ratio of the value-space error ``err`` (one world)."""
        rt, at, comp, seg, seg_rt, seg_at = self._error_plan(layout)
        ratios = []
        if comp.any():
            idx = np.flatnonzero(comp)
            ratios.append(jnp.max(_safe_div(jnp.abs(err[idx]), at[idx] + rt[idx] * jnp.abs(x_high[idx]))))
        if len(seg_rt):
            # One reduction per state (static slices): segment_sum's scatter-add would run as a loop over the
            # elements, per world under vmap (0.07 ms of a 1024-world humanoid stage on 2 cores).
            e2 = jnp.stack([jnp.sum(err[sl] ** 2) for sl in seg])
            x2 = jnp.stack([jnp.sum(x_high[sl] ** 2) for sl in seg])
            ratios.append(jnp.max(_safe_div(jnp.sqrt(e2), seg_at + seg_rt * jnp.sqrt(x2))))
        if not ratios:
            return jnp.zeros((), err.dtype)
        return ratios[0] if len(ratios) == 1 else jnp.maximum(*ratios)

    # -- stepping -----------------------------------------------------------------------------
    def step(self, scene, t, x, h, ctrl=None, *, carry=None):
        """One fixed step of the propagated (higher-order) solution."""
        return step_result(self.step_carry(scene, t, x, h, ctrl, carry=carry), carry)

    def step_carry(self, scene, t, x, h, ctrl=None, carry=None):
        """``step`` as ``(x_next, carry_next)`` always (carry_next None without a carry)."""
        return rk_step_carry(scene, self.tableau, t, x, h, ctrl, transform=_transform(self, scene), carry=carry)

    def step_with_error(self, scene, t, x, h, ctrl=None, *, carry=None):
        """(x_next before projection, x_high - x_low in value space, f(t, x)) for one world.

        With a scene ``carry`` (the scene's entries only) a fourth item: the last stage's carry proposal.
        """
        layout = scene.layout
        tab = self.tableau
        K, kept = rk_stages(scene, tab, t, x, h, ctrl, transform=_transform(self, scene), carry=carry)
        inc = h * (jnp.asarray(tab.b, dtype=K.dtype) @ K)
        dinc = h * (jnp.asarray(np.subtract(tab.b, tab.b_low), dtype=K.dtype) @ K)
        x_high = policies.apply_increment(layout, x, inc)
        res = (x_high, value_difference(layout, x, x_high, inc, dinc), K[0])
        return res if carry is None else res + (kept,)

    def carry_spec(self, scene) -> dict:
        """An adaptive world keeps its controller's next step size from one output interval to the next."""
        return {"h_next": ()}

    def init_carry(self, scene, dt) -> dict:
        return {"h_next": np.float64(dt if self.h0 is None else self.h0)}

    def advance(self, scene, t, x, t_end, ctrl=None, *, carry=None):
        """Integrate one world from ``t`` to ``t_end`` (>= t): ``(x, status)``, or ``(x, status, carry)``.

        On status != 0 the world keeps ``x`` (its state at ``t``); see ``Status``. With a carry the
        first trial step is ``carry["h_next"]`` (the previous interval's controller proposal) and the
        scene's entries follow the accepted steps.
        """
        x_out, status, out = self.advance_carry(scene, t, x, t_end, ctrl, carry=carry)
        return (x_out, status) if carry is None else (x_out, status, out)

    def advance_carry(self, scene, t, x, t_end, ctrl=None, carry=None):
        """``advance`` as ``(x, status, carry_next)`` always (carry_next None without a carry)."""
        if carry is None:
            x_out, status, _ = self.advance_info(scene, t, x, t_end, ctrl)
            return x_out, status, None
        x_out, status, info = self.advance_info(scene, t, x, t_end, ctrl, h=carry["h_next"],
                                                carry=scene_part(scene, carry))
        out = merged(carry, info["carry"])
        out["h_next"] = jnp.where(status == STATUS_OK, info["h"], carry["h_next"]).astype(x_out.dtype)
        return x_out, status, out

    def advance_info(self, scene, t, x, t_end, ctrl=None, h=None, carry=None):
        """Like ``advance``; also returns ``info`` (accepted, rejected, h: the next step size to try,
        carry: the scene carry after the last accepted step).

        ``h`` (optional, may be traced) overrides ``h0`` for this call, e.g. the previous call's
        ``info["h"]``. ``carry``: the scene's carry entries (read by every attempt; an accepted step
        keeps its last stage's proposal, a rejected one changes nothing).
        """
        layout = scene.layout
        self._error_plan(layout)  # resolve tolerances now: a bad override raises before tracing the loop
        x = jnp.asarray(x)
        dt = x.dtype
        t = jnp.asarray(t, dt)
        t_end = jnp.asarray(t_end, dt)
        if h is None:
            h = t_end - t if self.h0 is None else jnp.asarray(self.h0, dt)
        h = jnp.asarray(h, dt)
        q = min(self.tableau.order, self.tableau.order_low)
        expo = -1.0 / (q + 1)

        def cond(c):
            t_, _, _, status, n, _, _, _ = c
            return (status == STATUS_OK) & (t_ < t_end) & (n < self.max_steps)

        def body(c):
            t_, x_, h_, status, n, acc, rej, cr = c
            rem = t_end - t_
            last = h_ >= rem
            h_try = jnp.where(last, rem, h_)
            res = self.step_with_error(scene, t_, x_, h_try, ctrl, carry=cr)
            x_high, err, k0 = res[:3]
            ratio = self.error_ratio(layout, err, x_high)
            k0_ok = jnp.all(jnp.isfinite(k0))
            finite = jnp.all(jnp.isfinite(x_high)) & jnp.isfinite(ratio)
            accept = finite & (ratio <= 1.0)
            t_new = jnp.where(last, t_end, t_ + h_try)
            factor = jnp.where(ratio > 0, self.safety * jnp.where(ratio > 0, ratio, 1.0) ** expo,
                               self.max_factor)
            factor = jnp.clip(factor, self.min_factor, self.max_factor)
            factor = jnp.where(finite, factor, self.min_factor)
            factor = jnp.where(accept, factor, jnp.minimum(factor, 1.0))
            # Keep the controller's step when the interval end clipped an accepted step.
            h_next = jnp.where(accept & last, jnp.maximum(h_try * factor, h_), h_try * factor)
            underflow = (~accept & (h_next < self.h_min)) | (accept & (t_new <= t_))
            status = jnp.where(~k0_ok, STATUS_NONFINITE,
                               jnp.where(underflow, jnp.where(finite, STATUS_UNDERFLOW, STATUS_NONFINITE),
                                         STATUS_OK))
            take = accept & (status == STATUS_OK)
            x_next = jnp.where(take, finish_step(scene, x_high), x_)
            t_next = jnp.where(take, t_new, t_)
            if cr is not None:
                cr = jax.tree.map(lambda new, old: jnp.where(take, new, old), res[3], cr)
            n = n + 1
            status = jnp.where((status == STATUS_OK) & (n >= self.max_steps) & (t_next < t_end),
                               STATUS_MAX_STEPS, status)
            return (t_next, x_next, h_next, status.astype(jnp.int32), n, acc + take, rej + ~take, cr)

        status0 = jnp.where(jnp.all(jnp.isfinite(x)), STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
        zero = jnp.zeros((), jnp.int32)
        init = (t, x, h, status0, zero, zero, zero, carry)
        _, x_fin, h_fin, status, n, acc, rej, c_fin = jax.lax.while_loop(cond, body, init)
        x_out = jnp.where(status == STATUS_OK, x_fin, x)
        return x_out, status, dict(accepted=acc, rejected=rej, h=h_fin, carry=c_fin)


def _safe_div(num, den):
    """num / den with 0/0 -> 0 and x/0 -> inf (a zero tolerance demands an exact zero error)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.where(num > 0, jnp.inf, 0.0))


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


@dataclass(frozen=True)
class BogackiShampine(EmbeddedRK):
    """Bogacki–Shampine 3(2): third-order solution, second-order error estimate."""

    tableau: tb.Tableau = tb.BOGACKI_SHAMPINE
    name: ClassVar[str] = "bogacki_shampine"


@dataclass(frozen=True)
class RKF45(EmbeddedRK):
    """Runge–Kutta–Fehlberg 4(5), propagating the fifth-order solution."""

    tableau: tb.Tableau = tb.RKF45
    name: ClassVar[str] = "rkf45"


@dataclass(frozen=True)
class DormandPrince(EmbeddedRK):
    """Dormand–Prince 5(4)."""

    tableau: tb.Tableau = tb.DORMAND_PRINCE
    name: ClassVar[str] = "dormand_prince"
