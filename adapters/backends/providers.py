"""Force providers' results (``MjScene.add_force``, ``adapters/forces.py``): checking and summing on every backend,
and the providers' stage on MuJoCo C (``HostForces``).

A provider returns world-frame wrenches per body (``xfrc_applied``), generalized forces (``qfrc_applied``), or both
(``{"xfrc": ..., "qfrc": ...}``). ``summed`` checks every result's shape (naming the provider and the expected shape)
and adds them in the order they were added. On MuJoCo C the providers are NumPy functions of the whole batch:
``HostForces`` runs ``Batch.forward`` up to the velocity stage (kinematics, centres of mass, ``cvel``) on the stage's
inputs, hands every provider a read-only view of that batch (``HostView``) and returns the sums, which the stage's
evaluation then writes into ``xfrc_applied`` / ``qfrc_applied`` before its own ``mj_forward``.

Per-world provider parameters travel with the per-world model fields, in the same flat row per world, under the
names ``"force:<provider>.<param>"`` (``PARAM_PREFIX``): the model-field writers skip them (``model_slices``) and
``HostForces`` hands each provider its own as (B, *shape) arrays.
"""

from __future__ import annotations

import threading
from typing import Any

import mujoco
import numpy as np
from mujoco.batch import MODEL_FIELDS

from mjharness.integrators.errors import UserError

from .base import BackendError
from .host_batch import PARAM_PREFIX, field_slices, is_force_param, kept_batch, model_slices, start_row

__all__ = ["PARAM_PREFIX", "is_force_param", "ForceError", "HostForces", "HostView", "forces_caller", "summed", "parts"]

# What a provider reads on MuJoCo C: the stage's inputs and what mj_fwdPosition / mj_fwdVelocity compute.
STATE_FIELDS = ("time", "qpos", "qvel", "act", "ctrl")
VIEW_FIELDS = ("xpos", "xquat", "xmat", "xipos", "ximat", "cvel", "subtree_com", "site_xpos", "site_xmat")
MATRICES = ("xmat", "ximat", "site_xmat")  # (B, n, 3, 3) as MJX's data has them (MjData's are (n, 9))
_KEYS = ("xfrc", "qfrc")
# Batch.forward resets a world whose qpos/qvel is bad (NaN or beyond 1e10): its provider forces are NaN, so the
# engine's non-finite rule stops it instead of a provider seeing the reset state.
_RESETS = [int(getattr(mujoco.mjtWarning, w)) for w in ("mjWARN_BADQPOS", "mjWARN_BADQVEL")]


class ForceError(UserError, ValueError):
    """A force provider is malformed or returned something other than its contract; names the provider."""


def parts(name: str, out: Any, lead: tuple, nbody: int, nv: int) -> dict:
    """``{"xfrc": (*lead, nbody, 6), "qfrc": (*lead, nv)}`` (the keys given) of provider ``name``'s result ``out``, or
    ``ForceError`` naming the provider and the expected shapes. ``lead``: () for one world (MJX), (B,) on MuJoCo C."""
    want = {"xfrc": lead + (nbody, 6), "qfrc": lead + (nv,)}
    b = "B, " * len(lead)  # MuJoCo C: the batch's leading axis
    expected = (f"an array ({b}nbody, 6) = {want['xfrc']} (world-frame [force, torque] at each body's centre of "
                f"mass) or a dict with 'xfrc' ({b}nbody, 6) and/or 'qfrc' ({b}nv) = {want['qfrc']}"
                + ("; backend='mujoco' calls a provider with the whole batch (leading axis B)" if lead else ""))
    got = dict(out) if isinstance(out, dict) else {"xfrc": out}
    if not got or set(got) - set(_KEYS):
        raise ForceError(f"force provider {name!r} returned a dict with keys {sorted(got)}; expected {expected}")
    shapes = {k: tuple(np.shape(v)) for k, v in got.items()}
    bad = {k: s for k, s in shapes.items() if s != want[k]}
    if bad:
        shown = ", ".join(f"{k} {s}" for k, s in bad.items())
        raise ForceError(f"force provider {name!r} returned {shown}; expected {expected}")
    return got


def summed(results: list[tuple[str, Any]], lead: tuple, nbody: int, nv: int) -> dict:
    """{"xfrc": sum, "qfrc": sum} over the providers' results ``[(name, result), ...]`` in order; a key no provider
    gave is absent."""
    total: dict = {}
    for name, out in results:
        for k, v in parts(name, out, lead, nbody, nv).items():
            total[k] = v if k not in total else total[k] + v
    return total


def _read_only(a: np.ndarray, name: str = "") -> np.ndarray:
    v = a.reshape(a.shape[:-1] + (3, 3)) if name in MATRICES else a.view()
    v.flags.writeable = False
    return v


class HostView:
    """What a provider on MuJoCo C reads: MjData's fields of the whole batch (leading axis B), read-only, valid
    during the call only. The stage's inputs (``STATE_FIELDS``) are the call's own arrays; a field of the position
    and velocity stages (``VIEW_FIELDS``) runs ``Batch.forward`` up to the velocity stage on first use, so a
    provider that reads only the state (drag on a sphere: ``qvel``) costs no kinematics pass."""

    def __init__(self, inputs: dict, stage: _VelocityStage):
        self.__dict__.update(inputs)
        self._stage = stage

    def __getattr__(self, name: str):  # only for what is not yet an attribute: the velocity stage's fields
        if name not in VIEW_FIELDS:
            raise AttributeError(f"a force provider's data on backend='mujoco' has {STATE_FIELDS + VIEW_FIELDS}, "
                                 f"not {name!r}")
        value = self.__dict__[name] = self._stage.field(name)
        return value


class _VelocityStage:
    """One call's ``Batch.forward`` up to the velocity stage, run when a provider first reads one of its fields (and
    again when it reads a field not bound before: a Batch copies out only the fields bound at its call)."""

    def __init__(self, forces: HostForces, n: int, inputs: dict, p):
        self.forces, self.n, self.inputs, self.p = forces, n, inputs, p
        self.fresh, self.reset = False, np.zeros(n, bool)

    def field(self, name: str) -> np.ndarray:
        b, state, bound, fields = self.forces._batch(self.n)
        if name not in bound:
            bound[name], self.fresh = _read_only(b.bind(name), name), False
        if not self.fresh:
            for arr, sl in fields:
                arr[...] = np.asarray(self.p, np.float64).reshape(self.n, -1)[:, sl].reshape(arr.shape)
            for f in STATE_FIELDS:
                state[f][...] = self.inputs[f]
            b.warning[...] = 0
            b.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)
            self.fresh, self.reset = True, b.warning[:, _RESETS, 1].any(axis=1)
        return bound[name]


class HostForces:
    """``(t, x, ctrl, p=None) -> (xfrc (n, nbody, 6), qfrc (n, nv))``: the providers' sums at a batch of stage inputs
    (zeros for a kind no provider gives), with each world's model fields ``p`` of ``layout`` in the Batch."""

    def __init__(self, pool, providers: tuple, layout: tuple | None = None):
        bad = [name for name, _ in layout or () if name not in MODEL_FIELDS and not is_force_param(name)]
        if bad:
            raise BackendError(f"force provider {providers[0].name!r} on backend='mujoco' reads the kinematics of "
                               f"a Batch, which cannot hold the per-world model fields {bad}; use backend='mjx'")
        self.pool, self.providers, self.layout = pool, providers, layout
        self.slices = model_slices(layout)
        # each provider's parameters in the flat row: [(param, slice, per-world shape)]
        where = dict(field_slices(layout))
        self.params = [[(k, where[pr.field(k)], v.shape) for k, v in (pr.params or {}).items() if pr.field(k) in where]
                       for pr in providers]
        self.row0 = start_row(pool)
        self.batches: dict[int, tuple] = {}
        self.zeros: dict[tuple, np.ndarray] = {}
        self.lock = threading.Lock()  # a Batch serves one call at a time

    def _batch(self, n: int) -> tuple:
        return kept_batch(self, n, lambda b: (b, {f: b.bind(f) for f in STATE_FIELDS}, {},
                                              [(b.expand(name), sl) for name, sl in self.slices]))

    def __call__(self, t, x, ctrl, p=None) -> tuple[np.ndarray, np.ndarray]:
        m = self.pool.model
        nq, nv, na = m.nq, m.nv, m.na
        x = _read_only(np.asarray(x, np.float64))
        n = x.shape[0]
        inputs = {"time": np.asarray(t, np.float64).reshape(n), "qpos": x[:, :nq], "qvel": x[:, nq:nq + nv],
                  "act": x[:, nq + nv:nq + nv + na], "ctrl": np.asarray(ctrl, np.float64).reshape(n, m.nu)}
        inputs = {k: _read_only(v) for k, v in inputs.items()}
        with self.lock:
            stage = _VelocityStage(self, n, inputs, p)
            view = HostView(inputs, stage)
            total = summed([(pr.name, pr.call(inputs["time"], x, view, self._values(i, n, p)))
                            for i, pr in enumerate(self.providers)], (n,), m.nbody, nv)
        # The sums as they are (callers only read them: no copy of a (B, nbody, 6) array a stage); copies only where
        # a world's forces are to be NaN (a world Batch.forward reset, rare).
        xfrc = np.asarray(total["xfrc"], np.float64) if "xfrc" in total else self._zeros(n, (m.nbody, 6))
        qfrc = np.asarray(total["qfrc"], np.float64) if "qfrc" in total else self._zeros(n, (nv,))
        if stage.reset.any():
            xfrc, qfrc = np.array(xfrc), np.array(qfrc)
            xfrc[stage.reset], qfrc[stage.reset] = np.nan, np.nan
        return xfrc, qfrc

    def _zeros(self, n: int, shape: tuple) -> np.ndarray:
        """Read-only zeros (n, *shape) for a kind no provider gives, kept per shape."""
        key = (n,) + shape
        z = self.zeros.get(key)
        if z is None:
            if len(self.zeros) >= 8:
                self.zeros.clear()
            z = self.zeros[key] = np.zeros(key)
            z.flags.writeable = False
        return z


    def _values(self, i: int, n: int, p) -> dict:
        """Provider ``i``'s parameters of the batch: per world from the flat rows ``p`` (n, P) where the run sets
        them, else the nominal value repeated, each (n, *shape) and read-only."""
        pr = self.providers[i]
        if pr.params is None:
            return {}
        out = {k: np.broadcast_to(v, (n,) + v.shape) for k, v in pr.params.items()}
        if self.params[i]:
            rows = np.asarray(p, np.float64).reshape(n, -1)
            out.update({k: _read_only(rows[:, sl].reshape((n,) + shape)) for k, sl, shape in self.params[i]})
        return out


def forces_caller(pool, providers: tuple, layout: tuple | None = None) -> HostForces | None:
    """The pool's ``HostForces`` for ``providers`` and ``layout`` (one each per pool: its Batches persist across
    stages), or None without providers."""
    if not providers:
        return None
    cache = pool.__dict__.setdefault("_host_forces", {})
    key = (tuple(id(p) for p in providers), layout)
    got = cache.get(key)
    if got is None:
        got = cache[key] = HostForces(pool, tuple(providers), layout)
    return got
