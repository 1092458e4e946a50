"""Explicit Runge–Kutta integrators over a state layout: fixed-step and adaptive (embedded pairs).

One generic stepper runs any ``Tableau``. Stage ``i`` builds its candidate from the step-entry
state ``x0`` and the stage derivatives, ``X_i = x0 (+) h sum_j a_ij k_j``, where ``(+)`` is each
state's update policy (``policies.apply_increment``: one fused add per run of adjacent Euclidean
states, exp map for ``quaternion`` states, plain addition for ``quaternion_highorder``), and
evaluates ``scene.dynamics`` there. Stages 1..s-1 run in a ``lax.fori_loop``, so a method costs one
traced ``dynamics`` (one ``mjx.forward``) in the compiled program whatever its stage count. After
the final combination ``policies.project`` normalises ``quaternion_highorder`` states and
``scene.project`` (if the scene has one; MjScene clamps limited activations) runs.

A scene is anything with ``.layout`` (a ``StateLayout``) and ``.dynamics(t, x, ctrl)`` returning the
derivative buffer. ``SemiImplicitEuler`` also needs to know which states are positions of which
velocities: ``scene.second_order`` (pairs ``(position_state, velocity_state)``), or, for MuJoCo
scenes, ``scene.joints`` (``JointStates`` with ``positions`` / ``velocities``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from . import policies
from . import tableaux as tb
from .policies import has_exp_map_states, rkmk_transform
from .state import StateError, StateLayout

# Status codes of an adaptive world (also the /status dataset of a rollout file).
STATUS_OK = 0
STATUS_NONFINITE = 1        # non-finite state, derivative or candidate (no step size helps)
STATUS_UNDERFLOW = 2        # step rejected below h_min, or no representable progress in t
STATUS_MAX_STEPS = 3        # max_steps attempts spent inside one advance() call
STATUS_NAMES = {0: "ok", 1: "non-finite", 2: "step-size underflow", 3: "max steps"}

Transform = Callable  # (layout, stage increment, stage derivative) -> derivative used by the tableau


# -- the generic stepper --------------------------------------------------------------------------

def _derivative(scene, t, x, ctrl):
    return scene.dynamics(t, x, ctrl)


def finish_step(scene, x):
    """Projections after a full step: normalise quaternion_highorder states, then the scene's own."""
    x = policies.project(scene.layout, x)
    proj = getattr(scene, "project", None)
    return proj(x) if callable(proj) else x


def rk_stages(scene, tab, t, x, h, ctrl=None, transform: Transform | None = None):
    """Stage derivatives ``K`` (s, m) of tableau ``tab`` from (t, x) with step ``h``; ``K[0]`` is f(t, x).

    ``tab`` is a ``Tableau`` or an ``(a, b, c)`` triple of arrays (possibly traced: one compiled
    program then serves every method with that stage count). ``transform`` (Lie-group methods) maps
    each stage's derivative given the increment that built the stage.
    """
    layout = scene.layout
    x = jnp.asarray(x)
    a, _, c = _arrays(tab, x.dtype)
    s = a.shape[0]

    def stage(i, K):
        inc = h * (a[i] @ K)
        xi = jnp.where(i == 0, x, policies.apply_increment(layout, x, inc))  # stage 0 is x itself
        k = _derivative(scene, t + c[i] * h, xi, ctrl)
        if transform is not None:
            k = transform(layout, inc, k)
        return K.at[i].set(k)

    if s == 1:
        k0 = _derivative(scene, t, x, ctrl)
        return k0[None]
    m = layout.deriv_size
    K = jnp.zeros((s, m), x.dtype)
    # One traced dynamics call whatever the stage count: compile time does not grow with s.
    return jax.lax.fori_loop(0, s, stage, K)


def _arrays(tab, dtype):
    if isinstance(tab, tb.Tableau):
        return (jnp.asarray(tab.a, dtype), jnp.asarray(tab.b, dtype), jnp.asarray(tab.c, dtype))
    a, b, c = tab
    return jnp.asarray(a, dtype), jnp.asarray(b, dtype), jnp.asarray(c, dtype)


def rk_step(scene, tab, t, x, h, ctrl=None, transform: Transform | None = None):
    """One step of ``tab`` (a ``Tableau`` or ``(a, b, c)`` arrays) for one world (jit-able)."""
    x = jnp.asarray(x)
    h = jnp.asarray(h, dtype=x.dtype)
    K = rk_stages(scene, tab, t, x, h, ctrl, transform=transform)
    inc = h * (_arrays(tab, x.dtype)[1] @ K)
    return finish_step(scene, policies.apply_increment(scene.layout, x, inc))


# -- fixed-step integrators ------------------------------------------------------------------------

@dataclass(frozen=True)
class ExplicitRK:
    """Fixed-step explicit Runge–Kutta method given by ``tableau`` (any ``Tableau``)."""

    tableau: tb.Tableau = tb.RK4
    quaternion_stages: str = "rkmk"
    name: ClassVar[str] = "explicit_rk"
    is_adaptive: ClassVar[bool] = False
    is_stochastic: ClassVar[bool] = False

    def __post_init__(self):
        _check_quaternion_stages(self.quaternion_stages)

    @property
    def order(self) -> int:
        return self.tableau.order

    def step(self, scene, t, x, h, ctrl=None):
        """``x`` after one step of size ``h`` from time ``t`` (one world)."""
        return rk_step(scene, self.tableau, t, x, h, ctrl, transform=_transform(self, scene))

    def config(self) -> dict:
        return dict(name=self.name, order=self.order, adaptive=False, quaternion_stages=self.quaternion_stages,
                    tableau=self.tableau.to_dict())


QUATERNION_STAGES = ("rkmk", "exp")


def _check_quaternion_stages(mode):
    if mode not in QUATERNION_STAGES:
        raise ValueError(f"quaternion_stages must be one of {QUATERNION_STAGES}, got {mode!r}")


def _transform(integ, scene) -> Transform | None:
    """RKMK stage derivatives for exp-map quaternion states (see ``lie``), unless asked for plain ``exp``."""
    if integ.quaternion_stages == "rkmk" and integ.tableau.stages > 1 and has_exp_map_states(scene.layout):
        return rkmk_transform
    return None


@dataclass(frozen=True)
class Euler(ExplicitRK):
    """Explicit (forward) Euler, order 1."""

    tableau: tb.Tableau = tb.EULER
    name: ClassVar[str] = "euler"


@dataclass(frozen=True)
class Heun(ExplicitRK):
    """Heun's method (explicit trapezoid), order 2."""

    tableau: tb.Tableau = tb.HEUN
    name: ClassVar[str] = "heun"


@dataclass(frozen=True)
class Midpoint(ExplicitRK):
    """Explicit midpoint, order 2."""

    tableau: tb.Tableau = tb.MIDPOINT
    name: ClassVar[str] = "midpoint"


@dataclass(frozen=True)
class RK4(ExplicitRK):
    """Classic fourth-order Runge–Kutta."""

    tableau: tb.Tableau = tb.RK4
    name: ClassVar[str] = "rk4"


@dataclass(frozen=True)
class RK38(ExplicitRK):
    """Kutta's 3/8-rule fourth-order method."""

    tableau: tb.Tableau = tb.RK38
    name: ClassVar[str] = "rk38"


# -- semi-implicit Euler ---------------------------------------------------------------------------

def second_order_pairs(scene) -> tuple[tuple[str, str], ...]:
    """(position state, velocity state) pairs of ``scene``: ``scene.second_order`` or MuJoCo joints."""
    pairs = getattr(scene, "second_order", None)
    if pairs is None and hasattr(scene, "joints"):
        pairs = tuple(p for js in scene.joints for p in zip(js.positions, js.velocities))
    if pairs is None:
        raise StateError("SemiImplicitEuler needs to know which states are positions of which velocities: "
                         f"give {type(scene).__name__} a `second_order` attribute of "
                         "(position_state, velocity_state) pairs")
    layout = scene.layout
    out = []
    for pair in pairs:
        try:
            pos, vel = pair
        except (TypeError, ValueError):
            raise StateError(f"second_order entries are (position, velocity) name pairs, got {pair!r}") from None
        rp, rv = layout[pos], layout[vel]
        want = 3 if rp.update != "euclidean" else rp.deriv_size
        if rv.spec.update != "euclidean" or rv.size != want:
            raise StateError(f"velocity state {vel!r} (size {rv.size}, {rv.update}) cannot drive position "
                             f"state {pos!r} ({rp.update}, needs a Euclidean velocity of size {want})")
        out.append((pos, vel))
    return tuple(out)


def _position_blocks(layout: StateLayout, pairs) -> tuple[tuple[slice, slice, slice], ...]:
    """Coalesced (position derivative, velocity value, velocity derivative) slices.

    Covers euclidean and ``quaternion`` positions (their derivative is the velocity value itself).
    In a MuJoCo scene with the exp-map policy the whole qpos-derivative block is exactly qvel, so this
    collapses to one copy.
    """
    blocks = []
    for pos, vel in pairs:
        rp, rv = layout[pos], layout[vel]
        if rp.update == "quaternion_highorder":
            continue
        d0, v0, w0, n = rp.deriv_offset, rv.offset, rv.deriv_offset, rp.deriv_size
        if blocks and all(blocks[-1][i] + blocks[-1][3] == o for i, o in enumerate((d0, v0, w0))):
            blocks[-1][3] += n
        else:
            blocks.append([d0, v0, w0, n])
    return tuple((slice(d, d + n), slice(v, v + n), slice(w, w + n)) for d, v, w, n in blocks)


@dataclass(frozen=True)
class SemiImplicitEuler:
    """MuJoCo's default scheme: velocities first, then positions with the new velocities. Order 1.

    The derivative comes from ``scene.euler_dynamics(t, x, h, ctrl)`` when the scene has it (MuJoCo's
    implicit joint damping), else ``scene.dynamics``. Velocity, activation and extra states take the
    plain Euler update ``x + h k``; each position state then moves with its velocity's new value
    (``quaternion``: exp map of ``h v_new``; ``quaternion_highorder``: ``h q_dot(q, v_new)``, then
    normalised). All derivatives are evaluated at the step-entry state, so this equals MuJoCo's
    mj_advance order (act, then qvel, then qpos).
    """

    name: ClassVar[str] = "semi_implicit_euler"
    is_adaptive: ClassVar[bool] = False
    is_stochastic: ClassVar[bool] = False
    order: ClassVar[int] = 1

    def step(self, scene, t, x, h, ctrl=None):
        layout = scene.layout
        pairs = second_order_pairs(scene)
        x = jnp.asarray(x)
        h = jnp.asarray(h, dtype=x.dtype)
        eul = getattr(scene, "euler_dynamics", None)
        k = eul(t, x, h, ctrl) if callable(eul) else scene.dynamics(t, x, ctrl)
        # Position derivatives := new velocities (read from the untouched velocity derivatives).
        kpos = k
        for dsl, vsl, wsl in _position_blocks(layout, pairs):
            kpos = kpos.at[dsl].set(x[vsl] + h * k[wsl])
        for pos, vel in pairs:
            rp, rv = layout[pos], layout[vel]
            if rp.update == "quaternion_highorder":
                v = x[rv.value_slice] + h * k[rv.deriv_slice]
                kpos = kpos.at[rp.deriv_slice].set(policies.quat_dot(x[rp.value_slice], v))
        return finish_step(scene, policies.apply_increment(layout, x, h * kpos))

    def config(self) -> dict:
        return dict(name=self.name, order=1, adaptive=False,
                    scheme="v += h a(t, x); q <- q (+) h v_new (MuJoCo Euler, semi-implicit)")


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
        seg = np.zeros(n, np.int32)
        seg_rt, seg_at = [], []
        for r in layout:
            if not r.size:
                continue
            sl = r.value_slice
            rt[sl], at[sl] = tol[r.name]
            if r.spec.error_control == "component":
                comp[sl] = True
            else:
                seg[sl] = len(seg_rt)
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
            idx = np.flatnonzero(~comp)
            ns = len(seg_rt)
            e2 = jax.ops.segment_sum(err[idx] ** 2, seg[idx], num_segments=ns, indices_are_sorted=True)
            x2 = jax.ops.segment_sum(x_high[idx] ** 2, seg[idx], num_segments=ns, indices_are_sorted=True)
            ratios.append(jnp.max(_safe_div(jnp.sqrt(e2), seg_at + seg_rt * jnp.sqrt(x2))))
        if not ratios:
            return jnp.zeros((), err.dtype)
        return ratios[0] if len(ratios) == 1 else jnp.maximum(*ratios)

    # -- stepping -----------------------------------------------------------------------------
    def step(self, scene, t, x, h, ctrl=None):
        """One fixed step of the propagated (higher-order) solution."""
        return rk_step(scene, self.tableau, t, x, h, ctrl, transform=_transform(self, scene))

    def step_with_error(self, scene, t, x, h, ctrl=None):
        """(x_next before projection, x_high - x_low in value space, f(t, x)) for one world."""
        layout = scene.layout
        tab = self.tableau
        K = rk_stages(scene, tab, t, x, h, ctrl, transform=_transform(self, scene))
        inc = h * (jnp.asarray(tab.b, dtype=K.dtype) @ K)
        dinc = h * (jnp.asarray(np.subtract(tab.b, tab.b_low), dtype=K.dtype) @ K)
        x_high = policies.apply_increment(layout, x, inc)
        return x_high, value_difference(layout, x, x_high, inc, dinc), K[0]

    def advance(self, scene, t, x, t_end, ctrl=None):
        """Integrate one world from ``t`` to ``t_end`` (>= t): ``(x, status)``.

        On status != 0 the world keeps ``x`` (its state at ``t``); see ``STATUS_NAMES``.
        """
        x_out, status, _ = self.advance_info(scene, t, x, t_end, ctrl)
        return x_out, status

    def advance_info(self, scene, t, x, t_end, ctrl=None, h=None):
        """Like ``advance``; also returns ``info`` (accepted, rejected, h: the next step size to try).

        ``h`` (optional, may be traced) overrides ``h0`` for this call, e.g. the previous call's
        ``info["h"]``.
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
            t_, _, _, status, n, _, _ = c
            return (status == STATUS_OK) & (t_ < t_end) & (n < self.max_steps)

        def body(c):
            t_, x_, h_, status, n, acc, rej = c
            rem = t_end - t_
            last = h_ >= rem
            h_try = jnp.where(last, rem, h_)
            x_high, err, k0 = self.step_with_error(scene, t_, x_, h_try, ctrl)
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
            n = n + 1
            status = jnp.where((status == STATUS_OK) & (n >= self.max_steps) & (t_next < t_end),
                               STATUS_MAX_STEPS, status)
            return (t_next, x_next, h_next, status.astype(jnp.int32), n, acc + take, rej + ~take)

        status0 = jnp.where(jnp.all(jnp.isfinite(x)), STATUS_OK, STATUS_NONFINITE).astype(jnp.int32)
        zero = jnp.zeros((), jnp.int32)
        init = (t, x, h, status0, zero, zero, zero)
        _, x_fin, h_fin, status, n, acc, rej = jax.lax.while_loop(cond, body, init)
        x_out = jnp.where(status == STATUS_OK, x_fin, x)
        return x_out, status, dict(accepted=acc, rejected=rej, h=h_fin)


def _safe_div(num, den):
    """num / den with 0/0 -> 0 and x/0 -> inf (a zero tolerance demands an exact zero error)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.where(num > 0, jnp.inf, 0.0))


def value_difference(layout: StateLayout, x0, x_high, inc, dinc):
    """x_high - x_low in value space, where x_low = x0 (+) (inc - dinc).

    Euclidean and quaternion_highorder states: exactly ``dinc`` (no cancellation against x0);
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


# -- name registry (CLI, HDF5 attrs) ---------------------------------------------------------------

INTEGRATORS: dict[str, type] = {}


def register_integrator(cls: type, name: str | None = None) -> type:
    """Make ``cls`` available to ``get_integrator`` under ``name`` (default ``cls.name``)."""
    key = (name or cls.name).lower()
    if key in INTEGRATORS and INTEGRATORS[key] is not cls:
        raise ValueError(f"integrator name {key!r} is already taken by {INTEGRATORS[key].__name__}")
    INTEGRATORS[key] = cls
    return cls


def get_integrator(name: str, **options):
    """An integrator by registry name (case-insensitive), built with ``options``."""
    key = str(name).lower().replace("-", "_")
    if key not in INTEGRATORS:
        raise KeyError(f"unknown integrator {name!r}; known: {', '.join(sorted(INTEGRATORS))}")
    cls = INTEGRATORS[key]
    try:
        return cls(**options)
    except TypeError as e:
        raise TypeError(f"integrator {key!r} ({cls.__name__}): {e}") from None


for _cls in (Euler, SemiImplicitEuler, Heun, Midpoint, RK4, RK38, BogackiShampine, RKF45, DormandPrince):
    register_integrator(_cls)
