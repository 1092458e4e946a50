"""System identification: fit named model parameters to a rollout HDF5 file by bounded nonlinear least squares.

Parameters are named ``field:name`` (``body_mass:link1``, ``dof_damping:shoulder``, ``geom_friction:floor``,
``actuator_gear:motor``) or a bare field (``opt.gravity``): the name is looked up among the MuJoCo
model's bodies, joints (``jnt_*`` and, through ``jnt_dofadr``, ``dof_*``), geoms, sites and actuators.

The residuals are the differences between ``simulate`` from the file's x0 and the file's states
(``target="x"``) or one of its recorded outputs (``target="outputs:<name>"``, e.g. ``outputs:sensordata``: the
output evaluated on the simulated states, live semantics), every recorded sample, world and component, each
divided by its noise: ``noise`` (the measurement's standard deviation, a number or one per component) or, by
default, the component's standard deviation over the data (then the noise level is estimated from the fit).
MuJoCo's own box-constrained Levenberg-Marquardt (``mujoco.minimize.least_squares``) minimizes ½|r|² with the
exact Jacobian, forward-mode through the MJX rollout (reverse mode where parameters outnumber residuals), and
``fit_stats`` turns the Jacobian at the optimum into standard errors, 95 % intervals, correlations and the
parameters the data cannot determine.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from mjharness.integrators.names import OutputSemantics
from mjharness.scenes.settings import configure

from . import fit_sensors
from .engine.params import field_value, resolve_param
from .engine.simulate import check_param_fields, simulate
from .errors import RolloutError
from .fit_host import differences, exact, host_residual, stencil, switching
from .fit_result import FitResult, assemble, element_labels, iteration_reporter
from .fit_stats import FIT_P, chi2_p, uncertainty
from .h5.format import is_output

if TYPE_CHECKING:
    from mjharness.adapters import MjScene
    from mjharness.adapters.outputs import OutputSpec

    from .engine.arguments import IntegratorLike, PathLike, SceneLike

# fit's ``start``: {parameter: starting value}, "file" (each world's recorded value), or None (the file's model's)
Start: TypeAlias = "Mapping[str, ArrayLike] | Literal['file'] | None"


def _output_target(f, scene, target: str):
    """(recorded output (T, B, ...), OutputSpec) of ``target`` = ``outputs:<name>``, checked."""
    from mjharness.adapters.outputs import OutputError, parse_outputs

    name = target.partition(":")[2]
    have = [n for n in f.h5["outputs"] if is_output(n)] if "outputs" in f.h5 else []  # not the axis datasets
    have = [k for k in have if not k.startswith("_")]
    if name not in have:
        raise RolloutError(f"target={target!r}: the file records no output {name!r} (it has {have or 'none'})")
    ds = f.h5["outputs"][name]
    sem = ds.attrs.get("semantics", OutputSemantics.LIVE.value)
    sem = sem.decode() if isinstance(sem, bytes) else str(sem)
    if sem != OutputSemantics.LIVE:
        raise RolloutError(f"target={target!r}: the output was recorded with {sem!r} semantics; fit supports 'live'")
    try:
        (spec,) = parse_outputs(scene.model, [name])
    except OutputError as e:
        raise RolloutError(f"target={target!r}: {e}") from None
    return np.asarray(ds[: f.samples], np.float64), spec


JACOBIANS = ("auto", "exact", "differences")


def _controls(f, attrs: dict, path) -> np.ndarray | None:
    """The controls the run was given, (B, steps, nu) from ``/inputs/ctrl``, or None (the run had none): the fit
    simulates every candidate with them. Controls from a function or a Controller depend on the simulated state,
    which a candidate changes: refused."""
    kind = str(attrs.get("ctrl") or "none")
    if kind == "none":
        return None
    if kind.startswith("array") and "inputs/ctrl" in f.h5:
        return np.asarray(f.h5["inputs/ctrl"][()], np.float64)
    raise RolloutError(f"fit: {path} was driven by {kind.split(' sha256')[0]!r} controls; fit replays controls "
                       f"given as an array (recorded in /inputs/ctrl) only")


def _read(path: PathLike, scene: SceneLike | None, target: str, jacobian: str = "auto"
          ) -> tuple[np.ndarray, np.ndarray, dict, dict, MjScene, np.ndarray | None, OutputSpec | None,
                     np.ndarray | None]:
    """(states (T, B, n), x0 (B, n), root attributes, per-world model fields, the scene resolved for gradients
    (default: the file's model), the recorded output ``target`` or None for ``"x"``, its OutputSpec or None, the
    run's array controls (B, steps, nu) or None).
    ``jacobian="exact"`` asks for a backend with gradients (MJX); "auto" and "differences" take the backend the
    scene asks for, else the run default (MJX on an accelerator, MuJoCo C on a CPU)."""
    from mjharness.adapters import MjScene
    from mjharness.adapters.backends import BackendError

    from .engine.plan import resolve_scene
    from .h5 import open_rollout

    with open_rollout(path) as f:
        xs_file, x0, attrs, file_params = np.asarray(f.x), np.asarray(f.x0), dict(f.attrs), f.model_params
        model = f.model()
        src = model if scene is None else scene
        try:
            sc = resolve_scene(src, needs={"differentiable": "fit(jacobian='exact')"} if jacobian == "exact" else None)
        except BackendError as e:  # the scene names a backend without gradients (MuJoCo C)
            raise RolloutError(f"fit(jacobian='exact'): {e}; jacobian='differences' (or 'auto') fits on it by "
                               f"finite differences") from None
        if not isinstance(sc, MjScene):
            raise RolloutError(f"fit: the scene must be a MuJoCo scene (an MjScene), not a {type(sc).__name__}")
        out_file, spec = _output_target(f, sc, target) if target != "x" else (None, None)
        ctrl = _controls(f, attrs, path)
    return xs_file, x0, attrs, file_params, sc, out_file, spec, ctrl


def _starting_values(path: PathLike, scene: MjScene, params: Sequence[str], start: Start, file_params: dict, B: int,
                     target: str = "x") -> tuple[dict[str, np.ndarray], list[tuple[str, tuple]], list[np.ndarray],
                                                 bool]:
    """(every fitted field's values, each parameter's (field, index), its starting value, whether the fields
    are per world)."""
    mjx_model = scene.mjx_model if exact(scene) else None  # MuJoCo C: the fields of the MjModel
    resolved = [fit_sensors.resolve_sensor(scene.model, p, target) if fit_sensors.is_sensor_param(p)
                else resolve_param(scene.model, mjx_model, p) for p in params]
    if start == "file" and any(fit_sensors.is_sensor_param(p) for p in params):
        raise RolloutError("start='file' scales per-world model fields; sensor parameters cannot take it")
    model_fields = [(f, idx) for f, idx in resolved if f not in fit_sensors.SENSOR_FIELDS]
    owner = scene.model if mjx_model is None else mjx_model
    base = {field: np.asarray(field_value(owner, field), np.float64) for field, _ in model_fields}
    if start == "file" and not file_params:
        raise RolloutError(f"start='file': {path} records no per-world model fields (/model_params)")
    per_world = bool(file_params)
    if per_world:  # every world as it ran: the nominal fields broadcast, the file's per-world fields over them
        base = {k: np.broadcast_to(v, (B,) + v.shape).copy() for k, v in base.items()}
        base.update({k: np.asarray(v, np.float64) for k, v in file_params.items()})
        resolved = [(field, idx if field in fit_sensors.SENSOR_FIELDS else (slice(None),) + idx)
                    for field, idx in resolved]
    given: Mapping[str, ArrayLike] = start if isinstance(start, Mapping) else {}
    s0 = []
    for p, (field, idx) in zip(params, resolved):
        mine = start is None or start == "file" or p not in start
        if field in fit_sensors.SENSOR_FIELDS:
            s0.append(fit_sensors.start_value(field, idx[1]) if mine else np.asarray(given[p], np.float64))
            continue
        v = np.asarray(base[field][idx] if mine else given[p], np.float64)
        if per_world and start != "file" and mine:
            v = v[0]  # one starting value: world 0's (the nominal one unless the file varies it)
        s0.append(v)
    return base, resolved, s0, per_world


# Fields whose values cannot be negative: their default lower bound is 0 (others are unbounded).
NONNEGATIVE = ("body_mass", "body_inertia", "dof_damping", "dof_armature", "dof_frictionloss", "geom_friction",
               "jnt_stiffness", "geom_size", "geom_solref", "tendon_damping", "tendon_stiffness", "sensor_delay")
_BIG = 1e30  # mujoco.minimize wants finite bounds: "unbounded" is this far


def _bounds(params: Sequence[str], resolved: list, names: list[str], which: list[int], z0: np.ndarray,
            sizes: list[int], bounds: Mapping[str, tuple[float, float]] | None) -> tuple[np.ndarray, np.ndarray]:
    """Flat (lower, upper), finite, for the blocks ``names`` (of parameters ``which``): the given ones, else 0 below
    for NONNEGATIVE fields; checked against z0."""
    bounds = dict(bounds or {})
    unknown = sorted(set(bounds) - set(params))
    if unknown:
        raise RolloutError(f"bounds name {unknown}, which are not among the fitted parameters {list(params)}")
    lo, hi = [], []
    for i, n in zip(which, sizes):
        p, (fld, _) = params[i], resolved[i]
        b = bounds.get(p, (0.0 if fld in NONNEGATIVE else -_BIG, _BIG))
        try:
            a, c = (float(v) for v in b)
        except (TypeError, ValueError):
            raise RolloutError(f"bounds[{p!r}] must be (lo, hi) numbers, got {b!r}") from None
        if not a < c:
            raise RolloutError(f"bounds[{p!r}] = {b!r}: lo must be below hi")
        lo += [max(a, -_BIG)] * n
        hi += [min(c, _BIG)] * n
    lo_a, hi_a = np.asarray(lo), np.asarray(hi)
    out = np.flatnonzero((z0 < lo_a) | (z0 > hi_a))
    if out.size:
        labels = element_labels(names, sizes)
        i = out[0]
        raise RolloutError(f"the starting value of {labels[i]} ({z0[i]:g}) is outside its bounds "
                           f"[{lo_a[i]:g}, {hi_a[i]:g}]")
    return lo_a, hi_a


_COMPILED: dict = {}  # the problem's statics -> (residual, Jacobian), jitted: fits of one problem compile once
_KEEP = 8


def _compiled(key, residual: Callable, data: dict, z0: np.ndarray) -> tuple[Any, Any]:
    """The jitted residual and Jacobian of ``residual(z, data)`` for ``key`` (None: not reusable)."""
    import jax

    got = None if key is None else _COMPILED.get(key)
    if got is None:
        res_fn = jax.jit(residual)
        m = jax.eval_shape(res_fn, z0, data).shape[0]
        # forward mode (one JVP per parameter) unless parameters outnumber residuals
        got = res_fn, jax.jit(jax.jacfwd(residual) if z0.size <= m else jax.jacrev(residual))
        if key is not None:
            if len(_COMPILED) >= _KEEP:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[key] = got
    return got


# Gauss-Newton's stopping rules besides mujoco.minimize's own, both on the Newton decrement g' H^-1 g over the free
# parameters (the cost decrease a full step promises, twice; it is also |J step|^2, the step's squared length in
# standard errors times the noise variance):
# - DECREMENT_RTOL: below this fraction of r'r the remaining decrease is below the residuals' rounding: without the
#   rule, a Jacobian by differences (its error ~1e-7 relative) turns the last steps into a long series of rejected
#   trial points (each a rollout) while the solver's regularizer climbs to its limit.
# - DECREMENT_STAT: below this fraction of the noise variance sigma^2 (1 with known noise, else r'r/(m-k)) the step
#   is below 1e-6 of a standard error in every direction (its Mahalanobis length is sqrt(DECREMENT_STAT)): the
#   estimate is determined far below its uncertainty (and equals mujoco.minimize's to ~1e-8 relative, a test). The
#   same bound stops the solver at a trial point that close to the current one: on a piecewise-smooth cost
#   (contacts, stick/slip) a full step that crosses an event is rejected, and the regularizer then only shrinks the
#   step.
# - STAGE_STAT: the same for a stage of the differences path's growing horizon (``HORIZONS``), whose estimate only
#   starts the next stage: 1e-4 of that stage's standard error. Where full precision is asked (DECREMENT_STAT), a
#   decrement below STAGE_STAT ends the solver with that last Gauss-Newton step taken without a new Jacobian (in
#   the quadratic regime it lands far below 1e-6 of a standard error from the minimum; kept unless the cost rises
#   there): one rollout instead of an iteration's K + 1, and the intervals use the Jacobian of the point before.
DECREMENT_RTOL = 1e-14
DECREMENT_STAT = 1e-12
STAGE_STAT = 1e-8
# The Levenberg-Marquardt regularizer's factor on a rejected trial point (and its first division on an accepted
# one): Marquardt's 10. mujoco.minimize's default 10^0.1 climbs from its floor 1e-6 to the scale of J'J (1e5-1e7
# for residuals in noise units) through ~100 rejected trial points, each a rollout; 10 takes ~12.
MU_FACTOR = 10.0


class _Converged(Exception):
    def __init__(self, x: np.ndarray, last_step: np.ndarray | None = None):
        self.x, self.last_step = x, last_step


def newton_decrement(jac: np.ndarray, r: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """g' H^-1 g (g = J'r, H = J'J) over the parameters not held at a bound by the gradient (pseudo-inverse: an
    unidentifiable direction promises nothing)."""
    return gauss_newton_step(jac, r, x, lo, hi)[0]


def gauss_newton_step(jac: np.ndarray, r: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
                      ) -> tuple[float, np.ndarray]:
    """(Newton decrement, the Gauss-Newton step -H^-1 g over the free parameters, 0 for the others)."""
    g = jac.T @ r
    free = ~(((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)))
    delta = np.zeros_like(x)
    if not free.any():
        return 0.0, delta
    jf = jac[:, free]
    step = np.linalg.lstsq(jf, r, rcond=None)[0]  # H^-1 g without forming J'J
    delta[free] = -step
    return float(g[free] @ step), delta


def noise_variance(r: np.ndarray, k: int, known_noise: bool) -> float:
    """sigma^2 of the residuals ``r`` of a fit of ``k`` parameters: 1 (they are in units of the given noise) or
    r'r/(m-k) (``fit_stats.uncertainty``'s estimate)."""
    return 1.0 if known_noise else float(r @ r) / max(r.size - k, 1)


@dataclass
class _Solved:
    """What ``_solve`` ends with: the estimate, the solver's iterations, its last Jacobian (at the estimate, or at
    the point before the solver's last step where it ended on its own criteria) and the residuals at the estimate
    where it has them (else None)."""

    z: np.ndarray
    iterations: int
    jac: np.ndarray | None = None
    r: np.ndarray | None = None
    near: bool = False  # jac is at the point one last Gauss-Newton step (below 1e-4 standard error) before z


def _solve(residual: Callable[[np.ndarray], np.ndarray], jacobian: Callable[[np.ndarray, np.ndarray], np.ndarray],
           z0: np.ndarray, lo: np.ndarray, hi: np.ndarray, iterations: int, on_iteration: Callable[[Any], None],
           label: str, progress: bool, known_noise: bool = False, stat: float = 0.0,
           both: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None) -> _Solved:
    """mujoco.minimize.least_squares on ``residual`` (z (K,) -> (M,)) with ``jacobian`` (z, r -> (M, K)), stopped
    also by the Newton decrement (``DECREMENT_RTOL``, and ``stat`` x the noise variance: ``DECREMENT_STAT``, or
    ``STAGE_STAT`` for a stage of a growing horizon) and by a trial point within ``stat`` of the current one.
    ``both`` (differences): (residuals, Jacobian) at a point from one batched run: the start and each trial point
    are evaluated with their Jacobian's points, which the solver asks for next when it accepts the point (it
    mostly does: one run per iteration, not two); a rejected point wasted K rollout copies, so the iteration's
    further trial points run alone."""
    from mujoco import minimize

    from .engine.announce import compiling

    last: dict[str, np.ndarray] = {}  # the current point, its residuals and Jacobian (the last Jacobian call)
    ahead: dict[bytes, np.ndarray] = {}  # trial point -> its Jacobian, evaluated with it (``both``)
    tried = [0]  # trial points since the last Jacobian

    def residual_np(x):  # mujoco.minimize passes points as columns (K, k)
        # its trial points can cross a bound by a rounding (a mass of -9e-16, which MuJoCo refuses): clipped
        x = np.asarray(x, np.float64)
        x = np.clip(x, lo, hi) if x.ndim == 1 else np.clip(x, lo[:, None], hi[:, None])
        if last and (x.ndim == 1 or x.shape[1] == 1):  # a trial point (a column) from the current point
            d = x.reshape(-1) - last["x"]
            move = last["jac"] @ d
            short = float(move @ move)
            if short <= stat * last["sigma2"]:
                raise _Converged(last["x"])
            if both is None or tried[0]:  # (after a rejection, the next trial point alone)
                r = residual(x.reshape(-1))
            else:
                r, ahead[x.reshape(-1).tobytes()] = both(x.reshape(-1))
            tried[0] += 1
            # mujoco.minimize's Armijo rule (c1 = 1e-2) on cost 1/2 r'r: a rejected trial point
            if short <= STAGE_STAT * last["sigma2"] and \
                    0.5 * float(last["r"] @ last["r"] - r @ r) + 1e-2 * float((last["jac"].T @ last["r"]) @ d) < 0:
                raise _Converged(last["x"])
            return r if x.ndim == 1 else r[:, None]
        if not last and both is not None and (x.ndim == 1 or x.shape[1] == 1):  # the start, with its Jacobian
            r, ahead[x.reshape(-1).tobytes()] = both(x.reshape(-1))
            return r if x.ndim == 1 else r[:, None]
        if x.ndim == 1:
            return residual(x)
        return np.stack([residual(c) for c in x.T], axis=1)

    def jacobian_np(x, r):
        x, r = np.clip(np.asarray(x, np.float64).reshape(-1), lo, hi), np.asarray(r, np.float64).reshape(-1)
        jac = ahead.pop(x.tobytes(), None)
        ahead.clear()
        tried[0] = 0
        jac = jacobian(x, r) if jac is None else jac
        sigma2 = noise_variance(r, x.size, known_noise)
        last.update(x=x, r=r, jac=jac, sigma2=np.float64(sigma2))
        if count[0]:
            dec, delta = gauss_newton_step(jac, r, x, lo, hi)
            if dec <= DECREMENT_RTOL * float(r @ r) or dec <= stat * sigma2:
                raise _Converged(x)
            if stat < STAGE_STAT and dec <= STAGE_STAT * sigma2:  # the last step, below 1e-4 standard error
                raise _Converged(x, np.clip(x + delta, lo, hi))
        return jac

    compiling(label, progress)
    scale = np.where(np.abs(z0) > 0, np.abs(z0), 1.0)
    count = [0]

    def callback(trace):
        count[0] = len(trace)
        on_iteration(trace[-1])

    try:
        z, _ = minimize.least_squares(z0.astype(np.float64), residual_np, bounds=[lo, hi], jacobian=jacobian_np,
                                      max_iter=iterations, verbose=0, iter_callback=callback, x_scale=scale,
                                      mu_factor=MU_FACTOR)
    except _Converged as c:
        if c.last_step is not None:  # kept unless the cost rises there (an event crossed); the Jacobian of x
            r_step = residual(c.last_step)
            if float(r_step @ r_step) <= float(last["r"] @ last["r"]):
                return _Solved(c.last_step, count[0] + 1, last["jac"], r_step, near=True)
        return _Solved(np.asarray(c.x, np.float64).reshape(-1), count[0], last["jac"], last["r"])
    z = np.asarray(z, np.float64).reshape(-1)
    same = bool(last) and np.array_equal(z, last["x"])
    return _Solved(z, count[0], last.get("jac"), last["r"] if same else None)


@dataclass(frozen=True)
class _Problem:
    """One file's residuals r(z_file) and Jacobian, compiled, with their data (arguments, not constants), the
    file's starting point and what the result and report need."""

    path: str
    fns: tuple[Any, Any]
    data: dict[str, Any]
    z0: np.ndarray
    s0: list[np.ndarray]
    shapes: list[tuple]
    sizes: list[int]
    resolved: list
    attrs: dict
    integ: Any
    times: np.ndarray
    exact: bool = True
    backend: str = ""
    switching: tuple[str, ...] = ()  # what makes the rollout piecewise smooth (``fit_host.switching``)

    def residual(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(self.fns[0](z, self.data), np.float64)

    def jacobian(self, z: np.ndarray, r: np.ndarray | None = None, final: bool = False,
                 lo: np.ndarray | None = None, hi: np.ndarray | None = None,
                 step: np.ndarray | None = None) -> np.ndarray:
        """The Jacobian at ``z`` (exact, or by differences on a backend without gradients: forward from the
        residuals ``r`` at z during the iterations, central at the solution, ``final``, with steps ``step``; their
        points inside the bounds ``lo``/``hi``)."""
        if self.exact:
            return np.asarray(self.fns[1](z, self.data), np.float64)
        return np.asarray(self.fns[1](z, self.data, r, final, lo, hi, step), np.float64)

    def residual_and_jacobian(self, z: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(residuals at z, forward-difference Jacobian at z) in one batched run (the differences path)."""
        r, jac = self.fns[1](z, self.data, None, False, lo, hi, None, True)
        return np.asarray(r, np.float64), np.asarray(jac, np.float64)


def _problem(path: PathLike, params: Sequence[str], scene: SceneLike | None, integrator: IntegratorLike,
             start: Start, noise, target: str, window: tuple[float, float] | None = None,
             jacobian: str = "auto", horizon: float = 1.0, got: tuple | None = None) -> _Problem:
    """The compiled residuals of one file (``fit``'s arguments); ``horizon`` < 1: of the first fraction of the
    window's samples only (``HORIZONS``); ``got``: what ``_read`` gave for the file (read here if None)."""
    import jax.numpy as jnp

    from .engine.plan import scene_integrator

    got = _read(path, scene, target, jacobian) if got is None else got
    xs_file, x0, attrs, file_params, sc, out_file, spec, ctrl = got
    own = attrs.get("integrator")
    own = own.get("name") if isinstance(own, dict) else own
    integ = scene_integrator(sc, integrator if integrator is not None else own)
    dt, R, t0 = float(attrs["dt"]), int(attrs["record_every"]), float(attrs.get("t0", 0.0))
    times = t0 + dt * R * np.arange(1, xs_file.shape[0] + 1)  # each sample's time (after its step)
    first, last = _window(window, times, path)
    last = first + max(1, int(np.ceil(horizon * (last - first))))
    steps = last * R  # simulated from x0 to the window's last sample; residuals of the window's samples only
    base, resolved, s0, per_world = _starting_values(path, sc, params, start, file_params, x0.shape[0], target)
    dims = {int(a): int(d) for a, d in zip(sc.model.sensor_adr, sc.model.sensor_dim)}
    check_param_fields(sc, {k: v for k, v in base.items()}, x0.shape[0])  # shapes/dtypes before compile
    per_element = start == "file"
    shapes = [np.shape(s)[1:] if per_element else np.shape(s) for s in s0]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    z0 = np.concatenate([np.ones(n) if per_element else np.ravel(s) for s, n in zip(s0, sizes)]).astype(np.float64)
    goal = np.asarray(xs_file if out_file is None else out_file, np.float64)[first:last]
    # The data are arguments of the compiled functions, not constants baked into them: a second fit of the same
    # shapes (another file, other noise) reuses the compile.
    data: dict[str, Any] = {"goal": goal, "weight": _weights(goal, noise), "x0": np.asarray(x0, np.float64),
                            "base": {k: np.asarray(v, np.float64) for k, v in base.items()},
                            "s0": [np.asarray(v, np.float64) for v in s0],
                            "ctrl": None if ctrl is None else ctrl[:, :steps]}  # the run's own, to the window's end

    def residual(z, data):
        fields = {k: jnp.asarray(v) for k, v in data["base"].items()}
        parts = jnp.split(z, np.cumsum(sizes)[:-1])
        sensors = []
        for (fld, idx), s, part, shape in zip(resolved, data["s0"], parts, shapes):
            part = part.reshape(shape)
            if fld in fit_sensors.SENSOR_FIELDS:
                sensors.append((fld, idx, part))
            else:
                fields[fld] = fields[fld].at[idx].set(s * part if per_element else part)
        t, xs = simulate(sc, integ, data["x0"], dt=dt, steps=steps, record_every=R, model_params=fields, t0=t0,
                         ctrl=data["ctrl"])
        if spec is not None:
            xs = _outputs(sc, spec, per_world, fields, t, xs)
            xs = fit_sensors.apply(xs, t, sensors, dims) if sensors else xs  # delays reach before the window
        return jnp.ravel((xs[first:] - data["goal"]) / data["weight"])

    if jacobian == "differences" or not exact(sc):
        host = host_residual(sc, integ, dt, steps, R, t0, first, resolved, shapes, sizes, per_element, per_world,
                              spec, dims)
        return _Problem(path=os.path.abspath(os.fspath(path)), fns=(host, differences(host)), data=data,
                        z0=z0, s0=s0, shapes=shapes, sizes=sizes, resolved=resolved, attrs=attrs, integ=integ,
                        times=times[first:last], exact=False, backend=sc.backend,
                        switching=tuple(switching(sc.model, params)))
    tk = sc.trace_key()
    key = None if tk is None else (
        tk, repr(getattr(integ, "config", lambda: integ)()), repr(resolved), tuple(shapes), per_element,
        per_world, None if spec is None else spec.name, dt, steps, R, t0, first,
        tuple((k, np.shape(v)) for k, v in sorted(data["base"].items())), np.shape(goal), np.shape(x0),
        np.shape(data["ctrl"]))
    return _Problem(path=os.path.abspath(os.fspath(path)), fns=_compiled(key, residual, data, z0), data=data, z0=z0,
                    s0=s0, shapes=shapes, sizes=sizes, resolved=resolved, attrs=attrs, integ=integ,
                    times=times[first:last], backend=sc.backend)


def _window(window: tuple[float, float] | None, times: np.ndarray, path) -> tuple[int, int]:
    """Sample range [first, last) of the recorded ``times`` inside ``window`` = (t_start, t_end), inclusive."""
    if window is None:
        return 0, times.size
    try:
        a, b = (float(v) for v in window)
    except (TypeError, ValueError):
        raise RolloutError(f"window must be (t_start, t_end) in seconds, got {window!r}") from None
    inside = np.flatnonzero((times >= a - 1e-12) & (times <= b + 1e-12))
    if inside.size == 0:
        raise RolloutError(f"window {window!r}: no recorded sample of {path} lies in it (samples at "
                           f"{times[0]:g} to {times[-1]:g} s)")
    return int(inside[0]), int(inside[-1]) + 1


def _blocks(params: Sequence[str], per_file: Sequence[str], probs: list[_Problem]) -> tuple[list, list[np.ndarray]]:
    """The global parameter vector: [(name, param index, file index or None)] blocks (a shared parameter once, a
    per-file one per file as ``name@k``) and, per file, the global indices of its own z."""
    blocks, offsets, at = [], {}, 0
    for i, p in enumerate(params):
        for k in (range(len(probs)) if p in per_file else [None]):
            blocks.append((p if k is None else f"{p}@{k}", i, k))
            offsets[(i, k)] = at
            at += probs[0].sizes[i]
    index = [np.concatenate([offsets[(i, k if p in per_file else None)] + np.arange(n)
                             for i, (p, n) in enumerate(zip(params, probs[0].sizes))]) for k in range(len(probs))]
    return blocks, index


def fit(path: PathLike | Sequence[PathLike], params: Sequence[str], *, scene: SceneLike | None = None,
        integrator: IntegratorLike = None, bounds: Mapping[str, tuple[float, float]] | None = None,
        start: Start = None, noise: ArrayLike | None = None, per_file: Sequence[str] = (),
        window: tuple[float, float] | None = None, iterations: int = 100,
        callback: Callable[[dict], object] | None = None, target: str = "x", progress: bool = True,
        report: PathLike | None = None, jacobian: str = "auto") -> FitResult:
    """Fit ``params`` (list of ``field:name``) to the states (``target="x"``) or a recorded output
    (``target="outputs:<name>"``) of the rollout file ``path`` (or several files, fitted jointly) by bounded least
    squares; returns a ``FitResult`` with standard errors, 95 % intervals, correlations and the unidentifiable
    parameters.

    Several files (trajectories, or model variants of one scene): every parameter is shared by all of them, except
    those named in ``per_file``, which get one value per file (``name@k`` in the result, k the file's position).
    window: (t_start, t_end) [s]: only the recorded samples in it enter the residuals (of every file); the run is
    still simulated from the file's x0.
    bounds: {name: (lo, hi)}; default 0 below for fields that cannot be negative (``NONNEGATIVE``), else none.
    noise: the measurement noise's standard deviation (one number, or one per component of the target): the
    residuals are then in units of it and the intervals use it; default: each component weighted by its spread
    over the data and the noise level estimated from the fit (``residuals["sigma2"]``).
    start: {name: starting value} (default: the file's model values), or ``"file"`` (one file): each world starts
    from its own recorded value (``/model_params``, e.g. drawn by ``randomize``) and one common scale per element
    is fitted (bounds then bound the scale), so each estimate is per world (B, ...). A file with per-world model
    fields is simulated with them (each world as it ran). iterations: the solver's limit. callback: called with
    each iteration's record. ``progress``: say when the Jacobian compiles and show the iterations on stderr.
    report: a folder for the fit's report (``fit_report``: the result and its inputs in ``fit.h5``, the table,
    parameter, residual and prediction plots (the first file's), ``index.html``).
    jacobian: "exact" (forward- or reverse-mode through the MJX rollout, whichever is cheaper for the shape),
    "differences" (finite differences of batched rollouts: forward during the iterations, all points of one
    Jacobian in one run; central at the solution, for the intervals) or "auto" (default): exact where the scene's
    backend differentiates, which without a given scene is MJX on an accelerator; on a CPU the file's model runs
    on MuJoCo C by differences (there MJX's compile alone outlasts a fit: docs/fit.md).
    """
    configure()  # float64 before the first array (idempotent)
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    _check_arguments(paths, params, per_file, start, target, iterations)
    if jacobian not in JACOBIANS:
        raise RolloutError(f"jacobian must be one of {', '.join(JACOBIANS)}, got {jacobian!r}")
    reads = [_read(p, scene, target, jacobian) for p in paths]
    probs = [_problem(p, params, scene, integrator, start, noise, target, window, jacobian, got=g)
             for p, g in zip(paths, reads)]
    if any(q.sizes != probs[0].sizes for q in probs):
        raise RolloutError(f"the files give the parameters different sizes: {[q.sizes for q in probs]}")
    blocks, index = _blocks(params, per_file, probs)
    sizes = [probs[0].sizes[i] for _, i, _ in blocks]
    shapes = [probs[0].shapes[i] for _, i, _ in blocks]
    s0 = [probs[k or 0].s0[i] for _, i, k in blocks]
    names = [name for name, _, _ in blocks]
    local = np.cumsum([0] + probs[0].sizes)  # each parameter's slice of a file's own z
    z0 = np.concatenate([probs[k or 0].z0[local[i]:local[i + 1]] for _, i, k in blocks])
    lo, hi = _bounds(params, probs[0].resolved, names, [i for _, i, _ in blocks], z0, sizes, bounds)
    known, label = noise is not None, f"fit: the Jacobian of the residuals over {', '.join(params)}"
    history: list[dict] = []
    per_element = start == "file"
    on_iter = iteration_reporter(names, sizes, shapes, s0, per_element, history, callback, progress, iterations)
    if probs[0].exact:
        residual, jacobian_of, _ = _joint(probs, index, lo, hi)
        solved = _solve(residual, jacobian_of, z0, lo, hi, iterations, on_iter, label, progress, known,
                        DECREMENT_STAT)
        z, n_iter = solved.z, solved.iterations
        r = residual(z)
        jac = jacobian_of(z, r, final=True)
    else:  # differences: the horizon grown in stages (``HORIZONS``), the intervals' Jacobian over standard errors
        samples = [q.data["goal"].shape[0] for q in probs]

        def staged(fractions: tuple, show: bool, budget: int):
            """The growing-horizon fit from z0: (``_Solved`` counting every stage's iterations, its jac None when
            they ran out before the full horizon; the residuals at its estimate; the full horizon's residual and
            Jacobian functions)."""
            z, n = z0, 0
            for k, frac in enumerate(fractions):
                part = probs if frac == 1.0 else [_problem(p, params, scene, integrator, start, noise, target,
                                                           window, jacobian, frac, g) for p, g in zip(paths, reads)]
                residual, jacobian_of, both = _joint(part, index, lo, hi)
                solved = _solve(residual, jacobian_of, z, lo, hi, budget - n, on_iter, label, show and k == 0,
                                known, DECREMENT_STAT if frac == 1.0 else STAGE_STAT, both)
                z, n = solved.z, n + solved.iterations
                if n >= budget:
                    break
            if frac != 1.0:  # the iterations ran out before the full horizon
                residual, jacobian_of, _ = _joint(probs, index, lo, hi)
                solved = _Solved(z, n)
            solved = dataclasses.replace(solved, iterations=n)
            return solved, residual(z) if solved.r is None else solved.r, residual, jacobian_of

        switching_ = probs[0].switching
        solved, r, residual, jacobian_of = staged(tuple(_horizons(samples)) if switching_ else (1.0,), progress,
                                                  iterations)
        n_iter = solved.iterations
        if switching_ and known and _misfit(r, z0.size):
            # the chi-square test says this minimum does not explain the data: the pieces a growing horizon
            # passes through decide where it ends, so grow it again in finer steps and keep the lower cost
            # (``RETRY_HORIZONS``)
            again = staged(tuple(_horizons(samples, RETRY_HORIZONS)), False, iterations)
            n_iter += again[0].iterations
            if again[1] @ again[1] < r @ r:
                solved, r, residual, jacobian_of = again
        z = solved.z
        if switching_:
            z, r, polished = _secant_polish(z, r, solved.jac, residual, lo, hi, known, on_iter)
            jac = _final_jacobian(z, r, None if polished else solved.jac, residual, lo, hi, known)
        elif solved.r is not None and solved.jac is not None:  # smooth: the solver's last Jacobian (at z, or near)
            jac = solved.jac
        else:
            jac = jacobian_of(z, r, final=True)
    rows = np.cumsum([0] + [q.data["goal"].size for q in probs])
    on_iter(None)
    u = uncertainty(jac, r, known_noise=noise is not None)
    if u.chi2_p < FIT_P:  # NaN (noise estimated: no test) compares False
        warnings.warn(f"fit: the residuals are larger than the given noise explains (reduced chi2 "
                      f"{u.reduced_chi2:.4g} over {u.dof} degrees of freedom, p = {u.chi2_p:.2g}): the fit stopped "
                      f"in a local minimum (through contacts the cost is piecewise smooth), or the model or the "
                      f"noise level is wrong; its intervals describe that minimum, not where the truth is",
                      stacklevel=2)
    res = assemble(names, element_labels(names, sizes), sizes, shapes, s0, per_element, z, u, float(0.5 * r @ r),
                   n_iter, history)
    q = probs[0]
    res = dataclasses.replace(res, jacobian=f"{'exact' if q.exact else 'differences'} ({q.backend})")
    if report is not None:
        inputs = dict(file=q.path if len(paths) == 1 else [x.path for x in probs],
                      model_sha256=str(q.attrs.get("model_sha256", "")), params=list(params), per_file=list(per_file),
                      bounds=bounds, start=start, noise=noise, target=target, iterations=iterations, window=window,
                      jacobian=res.jacobian,
                      integrator=q.integ.config() if hasattr(q.integ, "config") else str(q.integ))
        _write_report(os.fspath(report), res, inputs, dict(zip(names, s0)), q.times, q.data["goal"],
                      r[:rows[1]], q.data["weight"], target)
    return res


def _joint(probs: list[_Problem], index: list[np.ndarray], lo: np.ndarray, hi: np.ndarray
           ) -> tuple[Callable, Callable, Callable]:
    """(residual, jacobian, both) of the files ``probs`` fitted jointly, over the global parameter vector
    (``_blocks``): ``residual(z)`` takes z (K,) or points as columns (K, c) (one batched run per file on the
    differences path); ``both(z)``: (residual, forward-difference Jacobian) from one batched run per file (the
    differences path only)."""
    rows = np.cumsum([0] + [q.data["goal"].size for q in probs])

    def residual(z):
        return np.concatenate([q.residual(z[ix]) for q, ix in zip(probs, index)])

    def jacobian_of(z, r=None, final=False, step=None):
        jac = np.zeros((rows[-1], z.size))
        for q, ix, a, b in zip(probs, index, rows[:-1], rows[1:]):
            jac[a:b, ix] = q.jacobian(z[ix], None if r is None else r[a:b], final, lo[ix], hi[ix],
                                      None if step is None else step[ix])
        return jac

    def both(z):
        r, jac = np.zeros(rows[-1]), np.zeros((rows[-1], z.size))
        for q, ix, a, b in zip(probs, index, rows[:-1], rows[1:]):
            r[a:b], jac[a:b, ix] = q.residual_and_jacobian(z[ix], lo[ix], hi[ix])
        return r, jac

    return residual, jacobian_of, both


# The differences path on a model whose constraints switch (``fit_host.switching``: contacts, limits, friction loss)
# fits a growing horizon: the first HORIZONS fractions of each file's samples (the run still simulated from x0),
# each stage started from the last one's estimate, then all samples. Why: such a rollout is only piecewise smooth in
# the parameters (a contact force switches on with the approach velocity at a step; stick/slip), and its cost jumps
# where an event moves from one step to the next: the full-horizon cost has many smooth pieces within a standard
# error, and Gauss-Newton converges to the minimum of the piece its path enters. On gymnasium's hopper the -50 %
# start ended 0.3-1.3 standard errors from the +50 % start, at a cost 1-9 higher (chi-square units), in 4 of 20
# seeds. A short horizon has fewer events and trajectories that diverge less: from both starts its fit reaches
# one minimum, and every later stage starts from that same point, so the path (and the estimate) no longer depends
# on the start. A smooth model (no switching constraints) fits the full horizon at once.
HORIZONS = (0.125, 0.25, 0.5)


# A fit through a growing horizon that fails the chi-square test (``fit_stats.FIT_P``: with known noise) is grown again
# from the start in these finer steps, and the lower cost kept. On gymnasium's walker2d (two feet switching contacts;
# scripts/fit_robot_check.py) the pieces the default stages pass through decide where a fit ends (started at the
# truth itself it ends where the +-50 % starts do); in seeds 6 and 8 these stages took the cost from 4826 and 4968
# (p ~ 1e-77 and 1e-93) to 3656 and 3635 (p = 0.16 and 0.26), every estimate within 2 standard errors of the truth;
# in seed 3 they ended higher (kept: the default's), in seed 16 no lower.
RETRY_HORIZONS = (0.125, 0.1875, 0.25, 0.375, 0.5, 0.75)


def _misfit(r: np.ndarray, k: int) -> bool:
    """Whether residuals ``r`` in units of the known noise fail the chi-square test (``fit_stats``)."""
    return chi2_p(float(r @ r), r.size - k) < FIT_P


def _horizons(samples: list[int], fractions: tuple = HORIZONS) -> list[float]:
    """The stages' fractions for files of ``samples`` samples each: those of ``fractions`` that keep at least 2
    samples of every file and fewer than the next stage, then 1.0."""
    out: list[float] = []
    for f in (*fractions, 1.0):
        n = min(max(1, int(np.ceil(f * k))) for k in samples)
        if out and n <= min(max(1, int(np.ceil(out[-1] * k))) for k in samples):
            continue
        if f == 1.0 or n >= 2:
            out.append(f)
    return out if out[-1] == 1.0 else [*out, 1.0]


# After the growing horizon, on a model whose constraints switch (differences path), the estimate is polished by
# Levenberg-Marquardt steps whose Jacobians are central differences over SECANT_SCALES x each parameter's standard
# error, all scales at once: each iteration runs every scale's difference points in one batched run and every
# scale's trial steps in another, and takes the lowest cost if it is lower. Why: such a cost is a staircase of
# smooth pieces (an event moves by a step from one to the next), and on the way to the truth each piece's own slope
# can point back: on gymnasium's walker2d (scripts/fit_robot_check.py, noise seed 0) the cost on the line from the
# estimate to the truth rises within every piece and drops at each edge (3668 -> 3532, the truth's, in 4 drops over
# 49 standard errors of the leg's mass), so a solver on local slopes (forward differences within a piece) stops at a
# piece's edge, with a standard error that describes that edge. A difference over many standard errors spans pieces
# and sees the drops: from that estimate the polish reached 3529, in seed 7 3549 from 3636 (the truth's: 3551).
SECANT_SCALES = (128.0, 64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0)
SECANT_DAMPING = (1e-3, 1e-2, 1e-1, 1.0)  # Marquardt's regularizer: the trial steps of one scale
# The polish is bounded by these, not by the solver's iteration limit, and not counted in its iterations
# (``FitResult.iterations``); each step it takes is a record of ``FitResult.history`` (and the callback's).
SECANT_ITERATIONS = 8


def _secant_polish(z: np.ndarray, r: np.ndarray, jac: np.ndarray | None, residual: Callable, lo: np.ndarray,
                   hi: np.ndarray, known_noise: bool, on_iteration: Callable[[Any], None] = lambda log: None
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """(estimate, its residuals, steps taken) after the secant polish (``SECANT_SCALES``) from ``z`` and its
    residuals ``r``: per iteration, central differences over scale x standard error for every scale (one batched
    run of 2 x scales x moving parameters points, each clipped to the bounds) and a Levenberg-Marquardt trial step
    for every scale and ``SECANT_DAMPING`` (one batched run); the lowest cost is taken if it is lower (reported to
    ``on_iteration`` as the solver's iterations are), else the polish ends; at most ``SECANT_ITERATIONS``. A world
    that fails (non-finite residuals) at any of an iteration's points ends it at the last point taken.
    Standard errors from ``jac`` (None: central differences over cbrt(eps)); parameters without a finite one
    (unidentifiable) stay."""
    floor = np.cbrt(np.finfo(np.float64).eps) * np.maximum(np.abs(z), 1.0)
    if jac is None:
        jac = stencil(residual, z, floor, lo, hi)[0]
    se = uncertainty(jac, r, known_noise).stderr
    move = np.flatnonzero(np.isfinite(se) & (se > 0))
    n, cost, k = 0, float(r @ r), move.size
    if not k or not SECANT_SCALES:
        return z, r, 0
    scales = np.asarray(SECANT_SCALES)[:, None] * se[move]  # (S, k): each scale's step per moving parameter
    for _ in range(SECANT_ITERATIONS):
        up = np.minimum(z[move] + scales, hi[move])
        down = np.maximum(z[move] - scales, lo[move])
        pts = np.tile(z[:, None], 2 * scales.size)  # per scale: k points up, then k points down
        for c, (u, d) in enumerate(zip(up, down)):
            pts[move, 2 * k * c + np.arange(k)] = u
            pts[move, 2 * k * c + k + np.arange(k)] = d
        rp = residual(pts)
        if not np.all(np.isfinite(rp)):  # a world failed at a difference point: end here (lstsq cannot use it)
            break
        trials = np.tile(z[:, None], scales.shape[0] * len(SECANT_DAMPING))
        g = np.zeros((scales.shape[0], k))
        for c, (u, d) in enumerate(zip(up, down)):
            j = (rp[:, 2 * k * c:2 * k * c + k] - rp[:, 2 * k * c + k:2 * k * (c + 1)]) / (u - d)
            a, g[c] = j.T @ j, j.T @ r
            for m, mu in enumerate(SECANT_DAMPING):
                trials[move, c * len(SECANT_DAMPING) + m] = \
                    z[move] - np.linalg.lstsq(a + mu * np.diag(np.diag(a)), g[c], rcond=None)[0]
        trials = np.clip(trials, lo[:, None], hi[:, None])
        rt = residual(trials)
        costs = np.einsum("mc,mc->c", rt, rt)
        best = int(np.argmin(costs))
        if np.isnan(costs).any() or not costs[best] < cost:  # a failed trial point, or nothing lower: end here
            break
        grad = np.zeros_like(z)
        grad[move] = g[best // len(SECANT_DAMPING)]
        z, r, cost, step = trials[:, best], rt[:, best], float(costs[best]), trials[:, best] - z
        n += 1
        on_iteration(SimpleNamespace(candidate=z, objective=0.5 * cost, step=step, grad=grad))
    return z, r, n


# The intervals' Jacobian on the differences path (``_final_jacobian``): central differences over this fraction of
# each parameter's standard error.
PROBE_STEP = 0.1


def _final_jacobian(z: np.ndarray, r: np.ndarray, jac: np.ndarray | None, residual: Callable, lo: np.ndarray,
                    hi: np.ndarray, known_noise: bool) -> np.ndarray:
    """The Jacobian at the estimate for the intervals: central differences with steps of ``PROBE_STEP`` standard
    errors (all 2K points in one batched run, ``stencil``), the standard errors from the solver's last Jacobian
    ``jac`` (None: from central differences over cbrt(eps)), again from the first stencil's where they differ by
    more than 2x. Flagged (infinite standard error) parameters keep cbrt(eps) steps.

    Why: through contacts (a contact force switching on with the approach velocity at a step) or joint friction
    (stick and slip) a rollout is only piecewise smooth in the parameters; a difference over sqrt(eps) or cbrt(eps)
    that straddles such an event is the jump over the step, not the slope, and one such column turns the intervals
    into noise (on gymnasium's hopper a standard error differed 3x between two starts that agreed). The intervals
    describe the cost over a standard error, so the slope that matters is the one over a fraction of it."""
    floor = np.cbrt(np.finfo(np.float64).eps) * np.maximum(np.abs(z), 1.0)
    if jac is None:
        jac = stencil(residual, z, floor, lo, hi)[0]
    se = uncertainty(jac, r, known_noise).stderr
    for _ in range(2):
        h = np.where(np.isfinite(se), np.maximum(PROBE_STEP * se, floor), floor)
        jac = stencil(residual, z, h, lo, hi)[0]
        new = uncertainty(jac, r, known_noise).stderr
        both = np.isfinite(se) & np.isfinite(new)
        if np.all(np.isfinite(se) == np.isfinite(new)) and np.all(np.abs(np.log(new[both] / se[both])) <= np.log(2)):
            break
        se = new
    return jac


def _check_arguments(paths: list, params: Sequence[str], per_file: Sequence[str], start: Start, target: str,
                     iterations: int) -> None:
    if not paths:
        raise RolloutError("fit: no file given")
    if target != "x" and not (isinstance(target, str) and target.startswith("outputs:")):
        raise RolloutError(f"target must be 'x' or 'outputs:<name>', got {target!r}")
    if not isinstance(iterations, int) or iterations < 1:
        raise RolloutError(f"iterations must be a positive int, got {iterations!r}")
    unknown = sorted(set(per_file) - set(params))
    if unknown:
        raise RolloutError(f"per_file names {unknown}, which are not among the fitted parameters {list(params)}")
    if start == "file" and len(paths) > 1:
        raise RolloutError("start='file' fits one file's per-world values; give one file")


def _write_report(folder: str, res: FitResult, inputs: dict, start: dict, times: np.ndarray, goal: np.ndarray,
                  r: np.ndarray, weight: np.ndarray, target: str) -> None:
    """``fit_report.write_report`` with the prediction at the estimate (recorded + residual x weight); the
    inputs' arrays as lists (they are stored as JSON)."""
    from . import fit_report

    inputs = {k: _jsonable(v) for k, v in inputs.items()}
    fit_report.write_report(folder, res, inputs, start, times, goal, goal + r.reshape(goal.shape) * weight, weight,
                            [f"{target}[{c}]" for c in range(goal.shape[-1])])


def _jsonable(v):
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)) or np.isscalar(v) and not isinstance(v, str):
        return np.asarray(v).tolist()
    return v


def _weights(goal: np.ndarray, noise) -> np.ndarray:
    """Per component (last axis of ``goal``): the given noise std, or the data's spread (at least 1e-6)."""
    if noise is None:
        return np.maximum(np.std(goal, axis=(0, 1)), 1e-6)
    w = np.asarray(noise, np.float64)
    if w.ndim > 1 or (w.ndim == 1 and w.shape[0] != goal.shape[-1]) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise RolloutError(f"noise must be a positive number or one per component ({goal.shape[-1]}), got "
                           f"shape {w.shape}")
    return np.broadcast_to(w, goal.shape[-1:]).copy()


def _outputs(sc, spec, per_world: bool, fields: dict, t, xs):
    """The output ``spec`` of every world over time, each on its own model fields (live semantics)."""
    import jax

    from mjharness.adapters.outputs import evaluate_outputs

    def world(fw, xw):
        sw = sc.with_model(sc.mjx_model.tree_replace(fw))
        return jax.vmap(lambda tt, x: evaluate_outputs(sw, (spec,), tt, x)[spec.name])(t, xw)

    return jax.vmap(world, in_axes=(0 if per_world else None, 1), out_axes=1)(fields, xs)


