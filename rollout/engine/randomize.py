"""Domain randomization: per-world model fields drawn from distributions, derived constants as ``mj_setConst``.

``randomize={KEY: DIST}``: KEY is ``field`` or ``field:name`` (``engine.params``), optionally with a
component ``[i]`` of the named selection (``geom_friction:floor[0]``); DIST is ``uniform(a, b)``,
``normal(mu, sigma)``, ``loguniform(a, b)`` or ``choice(v1, v2, ...)``, prefixed ``*`` to scale the world's
value or ``+`` to add to it (``"*uniform(0.8, 1.2)"``). Every selected element draws its own value.

World w draws KEY from ``numpy.random.default_rng([seed, w, crc32(KEY)])`` with its *global* index, so a
world's model does not depend on the batch size, the chunking, the devices or the process split.

Per world the nominal ``MjModel`` is copied, the explicit ``model_params`` row (if any) and then the draws are
written, and ``mj_setConst`` recomputes the derived constants (``body_subtreemass``, ``body_invweight0``,
``dof_invweight0``, ``dof_M0``, ``actuator_acc0``, ``tendon_length0``, ...). Which derived fields a run
carries is found once by a probe (the randomized elements perturbed, ``mj_setConst``, compare every floating
field), so it is the same for every world and process. The run's per-world fields are the randomized fields,
the explicit ones and the derived ones that the backend's model has.
"""

from __future__ import annotations

import ast
import copy
import re
import zlib
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import RolloutError
from .params import field_value, resolve_param, set_field

OPS = {"": "set", "*": "scale", "+": "add"}
ARITY = {"uniform": 2, "normal": 2, "loguniform": 2, "choice": None}   # None: one or more values

# Fields randomization refuses, by prefix, and why (integer fields are refused by their dtype).
REFUSED = (
    ("geom_size", "collision bounds (geom_rbound, geom_aabb) are compiled from it and mj_setConst does not "
                  "recompute them"),
    ("geom_rbound", "a compiled bound"), ("geom_aabb", "a compiled bound"),
    ("mesh_", "mesh data is compiled into collision structures"), ("hfield_", "height fields are compiled data"),
    ("flex", "flex data is compiled"), ("opt.timestep", "the run's dt sets the step"),
    ("body_subtreemass", "derived: mj_setConst recomputes it"), ("body_invweight0", "derived (mj_setConst)"),
    ("dof_invweight0", "derived (mj_setConst)"), ("dof_M0", "derived (mj_setConst)"),
    ("tendon_invweight0", "derived (mj_setConst)"), ("tendon_length0", "derived (mj_setConst)"),
    ("actuator_acc0", "derived (mj_setConst)"), ("actuator_length0", "derived (mj_setConst)"),
    ("stat.", "derived model statistics"), ("qpos0", "the reference configuration of every derived constant"),
)
_KEY = re.compile(r"^\s*([A-Za-z_][\w.]*(?::[^\[\]]+)?)\s*(?:\[\s*(\d+)\s*\])?\s*$")
_DIST = re.compile(r"^\s*([*+]?)\s*([a-z]+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class Dist:
    """One parsed distribution: ``op`` (set | scale | add), ``kind`` (a key of ARITY) and its numbers."""

    op: str
    kind: str
    args: tuple

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        a = self.args
        if self.kind == "uniform":
            return rng.uniform(a[0], a[1], n)
        if self.kind == "normal":
            return rng.normal(a[0], a[1], n)
        if self.kind == "loguniform":
            return np.exp(rng.uniform(np.log(a[0]), np.log(a[1]), n))
        return np.asarray(a, np.float64)[rng.integers(len(a), size=n)]

    def apply(self, nominal: np.ndarray, x: np.ndarray) -> np.ndarray:
        return {"set": x, "scale": nominal * x, "add": nominal + x}[self.op]


def parse_dist(key: str, text) -> Dist:
    """``"*uniform(0.8, 1.2)"`` -> Dist; a RolloutError names ``key`` and what is wrong."""
    m = _DIST.match(text) if isinstance(text, str) else None
    if m is None:
        raise RolloutError(f"randomize[{key!r}]: {text!r} is not a distribution; give e.g. 'uniform(0.5, 1.5)', "
                           f"'*normal(1, 0.1)', '+uniform(-0.1, 0.1)', 'loguniform(1e-3, 1)', 'choice(1, 2, 4)'")
    op, kind, body = m.groups()
    if kind not in ARITY:
        raise RolloutError(f"randomize[{key!r}]: unknown distribution {kind!r}; known: {sorted(ARITY)}")
    try:
        args = ast.literal_eval(f"({body},)") if body.strip() else ()
    except (ValueError, SyntaxError):
        raise RolloutError(f"randomize[{key!r}]: the arguments of {text!r} are not numbers") from None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in args):
        raise RolloutError(f"randomize[{key!r}]: the arguments of {text!r} must be finite numbers")
    want = ARITY[kind]
    if (want is None and not args) or (want is not None and len(args) != want):
        raise RolloutError(f"randomize[{key!r}]: {kind} takes {want or 'one or more'} numbers, got {len(args)}")
    args = tuple(float(v) for v in args)
    if kind in ("uniform", "loguniform") and not args[0] <= args[1]:
        raise RolloutError(f"randomize[{key!r}]: {kind}(a, b) needs a <= b, got {text!r}")
    if kind == "loguniform" and not args[0] > 0:
        raise RolloutError(f"randomize[{key!r}]: loguniform(a, b) needs a > 0, got {text!r}")
    if kind == "normal" and not args[1] >= 0:
        raise RolloutError(f"randomize[{key!r}]: normal(mu, sigma) needs sigma >= 0, got {text!r}")
    return Dist(OPS[op], kind, args)


@dataclass(frozen=True)
class Target:
    """One randomize entry resolved on a model: which flat elements of which field it draws."""

    key: str
    field: str
    flat: np.ndarray     # indices into the field's flattened values
    dist: Dist


def resolve_target(model: mujoco.MjModel, key, text) -> Target:
    """KEY and DIST checked against ``model`` (the MuJoCo C model: its names and fields)."""
    if not isinstance(key, str) or _KEY.match(key) is None:
        raise RolloutError(f"randomize: key {key!r} is not 'field', 'field:name' or either with '[i]' "
                           f"(e.g. 'body_mass:torso', 'geom_friction:floor[0]', 'opt.gravity[2]')")
    dist = parse_dist(key, text)
    name, comp = _KEY.match(key).groups()
    for prefix, why in REFUSED:
        if name.startswith(prefix):
            raise RolloutError(f"randomize[{key!r}]: {name.partition(':')[0]} cannot be randomized: {why}")
    field, idx = resolve_param(model, None, name, what="randomize")
    shape = np.shape(field_value(model, field))
    sel = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[idx].reshape(-1)
    if comp is not None:
        if int(comp) >= sel.size:
            raise RolloutError(f"randomize[{key!r}]: component [{comp}] of a selection of {sel.size} value(s)")
        sel = sel[int(comp):int(comp) + 1]
    return Target(key, field, sel, dist)


def resolve_targets(model: mujoco.MjModel, randomize: dict) -> tuple[Target, ...]:
    """Every entry resolved; two keys drawing the same element are refused (their order would matter)."""
    if not isinstance(randomize, dict):
        raise RolloutError(f"randomize must be a dict {{KEY: DIST}}, got {type(randomize).__name__}")
    targets = tuple(resolve_target(model, k, v) for k, v in randomize.items())
    seen = {}
    for t in targets:
        for i in t.flat.tolist():
            other = seen.setdefault((t.field, i), t.key)
            if other != t.key:
                raise RolloutError(f"randomize: {other!r} and {t.key!r} both draw element {i} of {t.field}")
    return targets


def draw(target: Target, seed: int, world: int) -> np.ndarray:
    """World ``world``'s draw of ``target`` (one value per selected element): counter-based on (seed, world, key)."""
    rng = np.random.default_rng([int(seed), int(world), zlib.crc32(target.key.encode())])
    return target.dist.sample(rng, target.flat.size)


def _apply(m: mujoco.MjModel, target: Target, x: np.ndarray) -> None:
    values = np.array(field_value(m, target.field), np.float64)
    flat = values.reshape(-1)
    flat[target.flat] = target.dist.apply(flat[target.flat], x)
    set_field(m, target.field, values)


def float_fields(m: mujoco.MjModel) -> tuple[str, ...]:
    """Paths of every floating field of an MjModel (arrays and the ``stat`` scalars)."""
    out = []
    for name in dir(m):
        if name.startswith("_"):
            continue
        v = getattr(m, name, None)
        if isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.floating):
            out.append(name)
    return tuple(out) + tuple(f"stat.{f}" for f in ("meaninertia", "meanmass", "meansize", "extent", "center"))


def _with_const(m: mujoco.MjModel) -> mujoco.MjModel:
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return m


def derived_fields(model: mujoco.MjModel, targets, explicit: dict) -> tuple[str, ...]:
    """The floating fields ``mj_setConst`` changes when the targets' elements and the explicit fields change:
    a probe (each such element moved by x1.37 + 0.011), compared field by field with the nominal model."""
    probe = copy.copy(model)
    for t in targets:
        values = np.array(field_value(probe, t.field), np.float64)
        values.reshape(-1)[t.flat] = values.reshape(-1)[t.flat] * 1.37 + 0.011
        set_field(probe, t.field, values)
    for name in explicit:
        if hasattr(model, name.split(".")[0]):
            set_field(probe, name, np.asarray(field_value(probe, name), np.float64) * 1.37 + 0.011)
    _with_const(probe)
    moved = {t.field for t in targets} | set(explicit)
    return tuple(f for f in float_fields(model) if f not in moved
                 and not np.array_equal(np.asarray(field_value(model, f)), np.asarray(field_value(probe, f))))


def world_model(model: mujoco.MjModel, targets, seed: int, world: int, explicit_row: dict) -> mujoco.MjModel:
    """World ``world``'s MjModel: a copy of ``model`` with its explicit fields, its draws and ``mj_setConst``."""
    m = copy.copy(model)
    for name, v in explicit_row.items():
        if hasattr(m, name.split(".")[0]):
            set_field(m, name, v)
    for t in targets:
        _apply(m, t, draw(t, seed, world))
    return _with_const(m)


def randomized_params(model: mujoco.MjModel, randomize: dict, seed: int, worlds, explicit: dict | None = None,
                      keep=lambda field, shape: True) -> dict:
    """{field: (B, *shape)} of the worlds ``worlds`` (global indices): the randomized fields, the explicit
    ``model_params`` (``explicit``, (B, ...) rows of these worlds, applied before the draws) and the derived
    fields, each as ``mj_setConst`` leaves it. ``keep(field, shape)``: whether the backend's model has the
    field (a derived field it lacks is dropped; a randomized one is refused)."""
    explicit = {k: np.asarray(v, np.float64) for k, v in (explicit or {}).items()}
    targets = resolve_targets(model, randomize)
    for t in targets:
        if not keep(t.field, np.shape(field_value(model, t.field))):
            raise RolloutError(f"randomize[{t.key!r}]: this backend's model has no field {t.field!r} of that shape")
    fields = sorted({t.field for t in targets} | set(explicit) | set(derived_fields(model, targets, explicit)))
    fields = [f for f in fields if f in explicit or keep(f, np.shape(field_value(model, f)))]
    rows = {f: [] for f in fields}
    for i, w in enumerate(np.asarray(worlds).tolist()):
        m = world_model(model, targets, seed, w, {k: v[i] for k, v in explicit.items()})
        for f in fields:
            rows[f].append(explicit[f][i] if f in explicit and not hasattr(m, f.split(".")[0])
                           else np.array(field_value(m, f), np.float64))
    return {f: np.stack(v) for f, v in rows.items()}


def field_attrs(randomize: dict, model: mujoco.MjModel) -> dict:
    """{field: {key: dist}}: the distribution strings of each randomized field (the file's attributes)."""
    out = {}
    for t in resolve_targets(model, randomize):
        out.setdefault(t.field, {})[t.key] = randomize[t.key]
    return out
