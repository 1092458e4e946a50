"""Force providers of an ``MjScene`` (``MjScene.add_force``; guide: docs/forces.md).

A provider ``fn(t, x, data)`` (``fn(t, x, data, params)`` when added with ``params=``) returns world-frame wrenches
``[force (3), torque (3)]`` per body, applied at the body's centre of mass exactly as MuJoCo's ``xfrc_applied`` (the
torque about ``xipos``), or ``{"qfrc": (nv,)}`` generalized forces as ``qfrc_applied``, or both (``{"xfrc": ...,
"qfrc": ...}``). Providers are evaluated at every stage of every integrator, on the stage's own positions and
velocities: after MuJoCo's position and velocity stages (kinematics, centres of mass, ``cvel``) and before actuation
and the acceleration, so their sum adds to the scene's own applied forces and to the actuators' (the controls) in the
smooth acceleration and the constraint solve. Adaptive error control and RK4's order therefore see them like any other
force.

- MJX: ``fn`` is a JAX function of one world traced into the compiled step (``t`` (), ``x`` (n,), ``data`` the
  ``mjx.Data`` after ``forward_to_velocity``), returning ``(nbody, 6)`` / ``(nv,)``.
- MuJoCo C: ``fn`` is a NumPy function of the whole batch, called on the host at every stage (``t`` (B,), ``x``
  (B, n), ``data`` a read-only ``HostView`` of MjData's fields with a leading B axis,
  ``backends/providers.py``), returning ``(B, nbody, 6)`` / ``(B, nv)``.
- MuJoCo Warp: refused (MJWarp's forward has no hook between its stages).

A provider is called once when added (on one world of the scene's default state) so that a bad return shape is
refused there, naming the provider; the scene's layout must still be open (as for noise): a compiled run never
misses a provider. Its closure's values are constants of a compiled MJX step: a scene's compiled chunks are reused
for the same scene object only (``MjScene.trace_key`` is None with providers).

Per-world parameters: ``add_force(fn, name, params={"CD": 0.47, "wind": [0, 0, 0]})`` gives ``fn`` a fourth argument,
a dict of each parameter's value in the world(s) evaluated: on MJX one world's values (the nominal shape), on MuJoCo C
the batch's ((B, *shape)). A run sets them per world as it sets model fields, under the names
``"force:<provider>.<param>"`` (``PARAM_PREFIX``): ``model_params={"force:drag.CD": (B,)}`` and
``randomize={"force:drag.CD": "*uniform(0.9, 1.1)", "force:drag.wind[1]": "normal(0, 3)"}``; the file records them
with the other per-world fields (``/model_params/force:drag.CD``, long_name "force provider drag parameter CD, per
world", units from ``add_force(..., param_units={"CD": "1"})``, else "unknown").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.integrators import StateError
from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from .backends.providers import PARAM_PREFIX, ForceError, is_force_param, summed

__all__ = ["ForceProvider", "ForceError", "add_force", "scene_forces", "mjx_forward", "mjx_wrench", "mjx_check",
           "PARAM_PREFIX", "is_force_param", "force_params", "force_param", "force_param_units", "batch_jit"]


@dataclass(frozen=True, eq=False)
class ForceProvider:
    """One provider of a scene: its function, its name (errors and the docs name it) and its nominal parameters
    (``{name: float64 array}``, or None for a provider ``fn(t, x, data)`` without them)."""

    fn: Callable
    name: str
    params: dict | None = None
    units: dict | None = None  # {param: unit string} the user declared (``/model_params`` attribute ``units``)

    def call(self, t, x, data, values: dict | None = None):
        """``fn(t, x, data[, params])`` with the parameters ``values`` (per world), the nominal ones where absent."""
        if self.params is None:
            return self.fn(t, x, data)
        return self.fn(t, x, data, {k: (values or {}).get(k, v) for k, v in self.params.items()})

    def field(self, param: str) -> str:
        """The per-world field name of parameter ``param`` (``"force:drag.CD"``)."""
        return f"{PARAM_PREFIX}{self.name}.{param}"


def force_params(scene) -> dict:
    """{``"force:<provider>.<param>"``: nominal value (float64 array)} of every provider parameter of ``scene``."""
    return {p.field(k): v for p in scene_forces(scene) for k, v in (p.params or {}).items()}


def force_param_units(scene) -> dict:
    """{``"force:<provider>.<param>"``: unit} of the parameters whose provider declared one (``param_units``)."""
    return {p.field(k): u for p in scene_forces(scene) for k, u in (p.units or {}).items()}


def force_param(scene, field: str, what: str = "model_params") -> np.ndarray:
    """The nominal value of per-world field ``"force:<provider>.<param>"``, or ``ForceError`` naming what exists."""
    known = force_params(scene)
    if field not in known:
        have = sorted(known) or "none (add_force(fn, name, params={...}) declares them)"
        raise ForceError(f"{what}: {field!r} is not a force provider parameter of the scene; its parameters: {have}")
    return known[field]


def _params(name: str, params) -> dict | None:
    """``params`` as {name: float64 array}: finite numbers (scalars or arrays), identifiers as names."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise ForceError(f"add_force({name!r}): params must be a dict {{name: value}}, got {type(params).__name__}")
    out = {}
    for k, v in params.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ForceError(f"add_force({name!r}): parameter names must be identifiers (they key per-world fields "
                             f"'force:{name}.<param>'), got {k!r}")
        try:
            a = np.array(v, np.float64)
        except (TypeError, ValueError):
            raise ForceError(f"add_force({name!r}): parameter {k!r} must be a number or an array of numbers, "
                             f"got {v!r}") from None
        if not np.all(np.isfinite(a)):
            raise ForceError(f"add_force({name!r}): parameter {k!r} must be finite, got {v!r}")
        a.flags.writeable = False
        out[k] = a
    return out


def _units(name: str, units, params: dict | None) -> dict | None:
    """``param_units`` as {param: unit string}, each naming one of the provider's parameters."""
    if units is None:
        return None
    if not isinstance(units, dict) or not all(isinstance(u, str) and u.strip() for u in units.values()):
        raise ForceError(f"add_force({name!r}): param_units must be a dict {{param: unit string}} (e.g. "
                         f"{{'CD': '1', 'area': 'm2'}}), got {units!r}")
    bad = sorted(map(str, set(units) - set(params or {})))
    if bad:
        raise ForceError(f"add_force({name!r}): param_units names {bad}, which are not among the provider's "
                         f"params {sorted(params or {})}")
    return {k: u.strip() for k, u in units.items()}


def scene_forces(scene) -> tuple[ForceProvider, ...]:
    """The force providers of ``scene`` in the order they were added."""
    return scene.__dict__.get("_forces", ())


def _name(fn, name, taken: set) -> str:
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ForceError(f"add_force: name must be a non-empty string, got {name!r}")
        if name in taken:
            raise ForceError(f"add_force: the scene already has a force provider named {name!r}")
        return name
    base = getattr(fn, "__name__", "")
    base = base if base and base != "<lambda>" else "force"
    return next(n for n in (base, *(f"{base}{i}" for i in range(1, len(taken) + 2))) if n not in taken)


def add_force(scene, fn, name: str | None = None, params: dict | None = None,
              param_units: dict | None = None) -> ForceProvider:
    """Add provider ``fn`` to ``scene`` (see module docstring); returns its record. ``params``: the provider's
    nominal parameters ``{name: number or array}``, handed to ``fn(t, x, data, params)`` per world;
    ``param_units``: ``{name: unit}`` of some of them, the ``units`` of their ``/model_params`` datasets (a
    parameter without one is recorded with units "unknown")."""
    if not callable(fn):
        raise ForceError(f"add_force: fn must be callable fn(t, x, data), got {fn!r}")
    old = scene_forces(scene)
    name = _name(fn, name, {p.name for p in old})
    if "." in name or PARAM_PREFIX in name:  # the provider's name is part of its parameters' field names
        raise ForceError(f"add_force: name {name!r} may not contain '.' or {PARAM_PREFIX!r}")
    nominal = _params(name, params)
    units = _units(name, param_units, nominal)
    if scene.registry.finalized:
        raise StateError(f"add_force({name!r}): the scene's layout is already finalized (scene.layout was used); "
                         "add force providers before the first use of the layout")
    scene.backend_impl.require("force_providers", f"add_force({name!r})")
    provider = ForceProvider(fn, name, nominal, units)
    scene._forces = old + (provider,)
    try:
        scene.backend_impl.check_forces(scene)
    except Exception:
        scene._forces = old
        raise
    return provider


def _sums(scene, t, x, d) -> dict:
    """{"xfrc": (nbody, 6), "qfrc": (nv,)} summed over the providers at data ``d`` (one world, traced), each with the
    world's parameters (``MjScene.with_params`` keeps them in ``_force_values``; the nominal ones otherwise)."""
    m = scene.model
    values = scene.__dict__.get("_force_values") or {}
    results = [(p.name, p.call(t, x, d, {k: values[p.field(k)] for k in (p.params or {}) if p.field(k) in values}))
               for p in scene_forces(scene)]
    return summed(results, (), m.nbody, m.nv)


def mjx_forward(scene, t, x, d) -> mjx.Data:
    """``mjx.forward`` of MJX data ``d`` with the scene's force providers evaluated between the velocity and the
    actuation stages and added to ``xfrc_applied`` / ``qfrc_applied`` (plain ``mjx.forward`` without providers)."""
    if not scene_forces(scene):
        return mjx.forward(scene.mjx_model, d)
    from .backends.mjx_private import forward_from_actuation, forward_to_velocity

    m = scene.mjx_model
    d = forward_to_velocity(m, d)
    total = _sums(scene, t, x, d)
    upd = {f"{k}_applied": getattr(d, f"{k}_applied") + jnp.asarray(v, d.qpos.dtype) for k, v in total.items()}
    return forward_from_actuation(m, d.replace(**upd))


def mjx_wrench(scene, t, x, d) -> jax.Array:
    """The providers' wrench sum (nbody, 6) at the inputs of forward-evaluated data ``d`` (output
    ``applied_wrench``): the velocity stage again on what the stage's providers saw; zeros without providers."""
    m = scene.model
    if not scene_forces(scene):
        return jnp.zeros((m.nbody, 6), d.qpos.dtype)
    from .backends.mjx_private import forward_to_velocity

    inputs = {f: getattr(d, f) for f in ("qpos", "qvel", "act", "time", "ctrl", "qacc_warmstart")}
    d0 = forward_to_velocity(scene.mjx_model, scene._template.replace(**inputs))
    return jnp.asarray(_sums(scene, t, x, d0).get("xfrc", jnp.zeros((m.nbody, 6))), d.qpos.dtype)


def mjx_check(scene) -> None:
    """Trace the providers abstractly on one world (shapes only: nothing runs); ``ForceError`` on a bad result."""
    data = scene.data
    x0 = np.concatenate([data.qpos, data.qvel, data.act])
    t, x = jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct(x0.shape, jnp.float64)
    jax.eval_shape(lambda t, x: mjx_forward(scene, t, x, scene.to_mjx(x).replace(time=t)).qacc, t, x)


class batch_jit:  # noqa: N801 - used like a decorator, as jax.jit
    """A JAX function of a batch of worlds for both backends' providers: ``fn`` itself on traced values (MJX traces
    a provider per world) and ``jax.jit(fn)`` on NumPy arrays (MuJoCo C calls a provider with the whole batch),
    the batch split into contiguous slices evaluated on ``threads`` threads at once, results back as NumPy.

    One jitted call instead of eager JAX (which dispatches every small operation), and every core on the host's
    share of a stage (XLA runs one call's elementwise work on one thread: measured 2.9 ms for the Monte Carlo
    example's drag on 10,000 worlds, 1.6 ms on two threads). ``fn`` must treat the worlds independently, as
    ``jax.vmap`` would (no sums over the batch axis): each slice is its own call, and a world's result is the same
    bits in any slice (checked for the example's drag, tests/test_forces.py). Every array argument (ndim >= 1)
    is split along its leading axis, which must be the same length for all of them; 0-d values go to every slice.
    Batches below ``min_rows`` rows a slice are not split. ``threads``: default the CPUs this process may use."""

    def __init__(self, fn: Callable, threads: int | None = None, min_rows: int = 2048):
        from .backends.host import default_threads

        self.fn, self.jitted = fn, jax.jit(fn)
        self.threads = default_threads() if threads is None else int(threads)
        self.min_rows = int(min_rows)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.__name__ = getattr(fn, "__name__", "batch_jit")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args):
        if not all(isinstance(a, (np.ndarray, np.generic, float, int)) for a in args):
            return self.fn(*args)  # traced (MJX) or JAX arrays: the function itself
        lead = {np.shape(a)[0] for a in args if np.ndim(a)}
        if len(lead) > 1:
            raise ValueError(f"batch_jit({self.__name__}): array arguments with different leading lengths "
                             f"{sorted(lead)}; every array argument carries the batch axis")
        n = lead.pop() if lead else 0
        k = min(self.threads, n // max(self.min_rows, 1))
        if k <= 1:
            return self._host(args)
        bounds = np.linspace(0, n, k + 1).astype(int)
        pieces = [tuple(a[lo:hi] if np.ndim(a) else a for a in args) for lo, hi in zip(bounds[:-1], bounds[1:])]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="mjharness-batch-jit")
        futures = [self._executor.submit(self._host, p) for p in pieces[1:]]
        parts = [self._host(pieces[0])] + [f.result() for f in futures]  # the first slice on the calling thread
        return jax.tree.map(lambda *p: np.concatenate(p), *parts)

    def _host(self, args):
        return jax.tree.map(np.asarray, self.jitted(*args))

    def __del__(self):
        if getattr(self, "_executor", None) is not None:
            self._executor.shutdown(wait=False)
