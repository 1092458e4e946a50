"""Explicit Runge–Kutta integrators over a state layout: the generic stepper and the fixed-step methods.

One generic stepper runs any ``Tableau``. Stage ``i`` builds its candidate from the step-entry
state ``x0`` and the stage derivatives, ``X_i = x0 (+) h sum_j a_ij k_j``, where ``(+)`` is each
state's update policy (``policies.apply_increment``: one fused add per run of adjacent Euclidean
states, exp map for ``quaternion`` states, plain addition for ``quaternion_qdot``), and
evaluates ``scene.dynamics`` there. Stages 1..s-1 run in a ``lax.fori_loop``, so a method costs one
traced ``dynamics`` (one ``mjx.forward``) in the compiled program whatever its stage count. After
the final combination ``policies.project`` normalises ``quaternion_qdot`` states and
``scene.project`` (if the scene has one; MjScene clamps limited activations) runs.

A scene is anything with ``.layout`` (a ``StateLayout``) and ``.dynamics(t, x, ctrl)`` returning the
derivative buffer (``contracts``). ``SemiImplicitEuler`` also needs to know which states are
positions of which velocities: ``scene.second_order`` (pairs ``(position_state, velocity_state)``).
A scene carry (``contracts``) is read by every stage of a step; the last stage's proposal is kept
after it (MuJoCo's rule: ``qacc_warmstart`` := the qacc of the step's last forward pass).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from . import policies
from . import tableaux as tb
from .base import Integrator, StepResult, ok_status
from .contracts import Model, evaluate, merged, scene_part
from .policies import has_exp_map_states, rkmk_transform
from .state import StateError, StateLayout

Transform = Callable  # (layout, stage increment, stage derivative) -> derivative used by the tableau


# -- the generic stepper --------------------------------------------------------------------------

def finish_step(scene, x):
    """Projections after a full step: normalise quaternion_qdot states, then the scene's own."""
    x = policies.project(scene.layout, x)
    proj = getattr(scene, "project", None)
    return proj(x) if callable(proj) else x


def rk_stages(scene, tab, t, x, h, ctrl=None, transform: Transform | None = None, carry=None):
    """Stage derivatives ``K`` (s, m) of tableau ``tab`` from (t, x) with step ``h``; ``K[0]`` is f(t, x).

    ``tab`` is a ``Tableau`` or an ``(a, b, c)`` triple of arrays (possibly traced: one compiled
    program then serves every method with that stage count). ``transform`` (Lie-group methods) maps
    each stage's derivative given the increment that built the stage. Returns ``(K, carry_out)``. With
    a scene ``carry`` every stage reads that step-entry carry and carry_out is what the last stage
    proposed (None without a carry): MuJoCo C's ``mj_RungeKutta`` and MJX's ``rungekutta4`` solve every stage from
    the step-entry ``qacc_warmstart`` and save the last stage's qacc (measured: 0 difference).
    """
    layout = scene.layout
    x = jnp.asarray(x)
    a, _, c = _arrays(tab, x.dtype)
    s = a.shape[0]
    if s == 1:
        k0, out = evaluate(scene.dynamics, t, x, ctrl=ctrl, carry=carry)
        return k0[None], out
    if getattr(scene, "unroll_stages", False):
        return _unrolled_stages(scene, (a, c), t, x, h, ctrl, transform, carry)

    def stage(i, state):
        K, kept = state
        inc = h * (a[i] @ K)
        xi = jnp.where(i == 0, x, policies.apply_increment(layout, x, inc))  # stage 0 is x itself
        k, out = evaluate(scene.dynamics, t + c[i] * h, xi, ctrl=ctrl, carry=carry)
        k = k.astype(x.dtype)  # K in x's width: a float32 derivative (MJWarp's) joins float64 combinations
        if transform is not None:
            k = transform(layout, inc, k)
        if out is not None:
            kept = jax.tree.map(lambda new, old: jnp.where(i == s - 1, new, old), out, kept)
        # A plain update in place: .at[i].set would lower to a bounds-checked scatter that XLA rewrites
        # as a select over the whole K, copying all s rows every stage.
        return jax.lax.dynamic_update_index_in_dim(K, k, i, 0), kept

    K = jnp.zeros((s, layout.deriv_size), x.dtype)
    # One traced dynamics call whatever the stage count: compile time does not grow with s.
    return jax.lax.fori_loop(0, s, stage, (K, carry))


def _unrolled_stages(scene, ac, t, x, h, ctrl, transform, carry):
    """``rk_stages`` with the stages traced one by one, for scenes whose ``dynamics`` is cheap to trace (a host
    call: ``scene.unroll_stages``). Stage i combines only the i derivatives it has, and no stacked K is updated in
    place per stage: on MuJoCo C that loop's XLA work was a tenth of a humanoid stage (scripts/profile_c_stages.py).
    The same values as the loop: the same combinations, stage 0 at x itself, the last stage's carry proposal."""
    layout = scene.layout
    a, c = ac
    ks, kept = [], carry
    for i in range(a.shape[0]):
        inc = h * (a[i, :i] @ jnp.stack(ks)) if i else jnp.zeros(layout.deriv_size, x.dtype)
        xi = policies.apply_increment(layout, x, inc) if i else x
        k, kept = evaluate(scene.dynamics, t + c[i] * h, xi, ctrl=ctrl, carry=carry)
        k = k.astype(x.dtype)  # as the loop's
        ks.append(k if transform is None else transform(layout, inc, k))
    return jnp.stack(ks), kept


def _arrays(tab, dtype):
    if isinstance(tab, tb.Tableau):
        return (jnp.asarray(tab.a, dtype), jnp.asarray(tab.b, dtype), jnp.asarray(tab.c, dtype))
    a, b, c = tab
    return jnp.asarray(a, dtype), jnp.asarray(b, dtype), jnp.asarray(c, dtype)


def rk_step_carry(scene, tab, t, x, h, ctrl=None, transform: Transform | None = None, carry=None):
    """One step of ``tab`` (a ``Tableau`` or ``(a, b, c)`` arrays) for one world (jit-able):
    ``(x_next, carry_next)``, carry_next None when no (full) ``carry`` dict is given."""
    x = jnp.asarray(x)
    h = jnp.asarray(h, dtype=x.dtype)
    K, kept = rk_stages(scene, tab, t, x, h, ctrl, transform=transform, carry=scene_part(scene, carry))
    inc = h * (_arrays(tab, x.dtype)[1] @ K)
    x_next = finish_step(scene, policies.apply_increment(scene.layout, x, inc))
    return x_next, merged(carry, kept)


# -- fixed-step integrators ------------------------------------------------------------------------

@dataclass(frozen=True)
class ExplicitRK(Integrator):
    """Fixed-step explicit Runge–Kutta method given by ``tableau`` (any ``Tableau``)."""

    tableau: tb.Tableau = tb.RK4
    quaternion_stages: str = "rkmk"
    name: ClassVar[str] = "explicit_rk"

    def __post_init__(self):
        _check_quaternion_stages(self.quaternion_stages)

    @property
    def order(self) -> int:
        return self.tableau.order

    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        """One step of size ``h`` from time ``t0`` (one world): ``(x, carry, status)``."""
        x_next, carry_next = rk_step_carry(model, self.tableau, t0, x, h, ctrl, transform=_transform(self, model),
                                           carry=carry)
        return x_next, carry_next, ok_status()

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
    """(position state, velocity state) pairs of ``scene`` (``scene.second_order``), checked."""
    pairs = getattr(scene, "second_order", None)
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
    blocks: list[list[int]] = []
    for pos, vel in pairs:
        rp, rv = layout[pos], layout[vel]
        if rp.update == "quaternion_qdot":
            continue
        d0, v0, w0, n = rp.deriv_offset, rv.offset, rv.deriv_offset, rp.deriv_size
        if blocks and all(blocks[-1][i] + blocks[-1][3] == o for i, o in enumerate((d0, v0, w0))):
            blocks[-1][3] += n
        else:
            blocks.append([d0, v0, w0, n])
    return tuple((slice(d, d + n), slice(v, v + n), slice(w, w + n)) for d, v, w, n in blocks)


def semi_implicit_update(scene, x, h, k):
    """``x`` moved by derivative ``k`` with positions following the *new* velocities (MuJoCo's mj_advance).

    Velocity, activation and extra states: ``x + h k``. Each position state of ``scene.second_order``
    moves with its velocity's new value (``quaternion``: exp map of ``h v_new``;
    ``quaternion_qdot``: ``h q_dot(q, v_new)``, then normalised); then ``finish_step``.
    """
    layout = scene.layout
    pairs = second_order_pairs(scene)
    # Position derivatives := new velocities (read from the untouched velocity derivatives), in x's width: a float32
    # derivative (MJWarp's) would otherwise round the float64 new velocity the positions follow.
    kpos = k.astype(x.dtype)
    for dsl, vsl, wsl in _position_blocks(layout, pairs):
        kpos = kpos.at[dsl].set(x[vsl] + h * k[wsl])
    for pos, vel in pairs:
        rp, rv = layout[pos], layout[vel]
        if rp.update == "quaternion_qdot":
            v = x[rv.value_slice] + h * k[rv.deriv_slice]
            kpos = kpos.at[rp.deriv_slice].set(policies.quat_dot(x[rp.value_slice], v))
    return finish_step(scene, policies.apply_increment(layout, x, h * kpos))


@dataclass(frozen=True)
class SemiImplicitEuler(Integrator):
    """MuJoCo's default scheme: velocities first, then positions with the new velocities. Order 1.

    The derivative comes from ``scene.euler_dynamics(t, x, h, ctrl)`` when the scene has it (MuJoCo's
    implicit joint damping), else ``scene.dynamics``. Velocity, activation and extra states take the
    plain Euler update ``x + h k``; each position state then moves with its velocity's new value
    (``quaternion``: exp map of ``h v_new``; ``quaternion_qdot``: ``h q_dot(q, v_new)``, then
    normalised). All derivatives are evaluated at the step-entry state, so this equals MuJoCo's
    mj_advance order (act, then qvel, then qpos).
    """

    name: ClassVar[str] = "semi_implicit_euler"
    order: ClassVar[int] = 1
    requires: ClassVar[tuple[str, ...]] = ("second_order",)

    def integrate(self, model: Model, t0: ArrayLike, h: ArrayLike, x: ArrayLike, ctrl: ArrayLike | None = None,
             carry: dict | None = None, key: Any = None) -> StepResult:
        x = jnp.asarray(x)
        h = jnp.asarray(h, dtype=x.dtype)
        eul = getattr(model, "euler_dynamics", None)
        sc = scene_part(model, carry)
        if callable(eul):
            k, out = evaluate(eul, t0, x, h, ctrl=ctrl, carry=sc)
        else:
            k, out = evaluate(model.dynamics, t0, x, ctrl=ctrl, carry=sc)
        return semi_implicit_update(model, x, h, k), merged(carry, out), ok_status()

    def config(self) -> dict:
        return dict(name=self.name, order=1, adaptive=False,
                    scheme="v += h a(t, x); q <- q (+) h v_new (MuJoCo Euler, semi-implicit)")
