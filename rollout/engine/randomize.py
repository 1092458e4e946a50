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

A draw that makes a world's model invalid is refused (``POSITIVE``, ``check_world``): a negative mass, inertia,
damping, stiffness, armature, friction loss or friction, a principal inertia breaking A + B >= C, or a moving
body left without mass (``body_subtreemass`` <= mjMINVAL), naming the key, the world and the drawn value.
Values are never clipped.

A ``System`` (``adapters/system.py``) addresses its members' fields as ``"<member>.<field>[:name]"`` (the
naming of its coupling targets, ``"arm.ctrl:motor"``): ``member=`` resolves such keys on that member's model.
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
KEY_SYNTAX = re.compile(r"^\s*([A-Za-z_][\w.]*(?::[^\[\]]+)?)\s*(?:\[\s*(\d+)\s*\])?\s*$")
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
    """One randomize entry resolved on a model: which flat elements of which field it draws.

    ``field``: the per-world field's name as recorded (``"arm.body_mass"`` for a System member's field);
    ``path``: the field of the (member's) MjModel (``"body_mass"``)."""

    key: str
    field: str
    flat: np.ndarray     # indices into the field's flattened values
    dist: Dist
    path: str = ""

    def __post_init__(self):
        if not self.path:
            object.__setattr__(self, "path", self.field)


def member_of(model: mujoco.MjModel, key: str) -> str:
    """The System member a key addresses (``"arm"`` of ``"arm.body_mass:link1"``), or "" (a field of ``model``:
    ``"opt.gravity"``, ``"body_mass:link1"``)."""
    head = key.partition(":")[0].partition("[")[0]
    return head.partition(".")[0] if "." in head and not hasattr(model, head.partition(".")[0]) else ""


def resolve_target(model: mujoco.MjModel, key, text, member: str | None = None) -> Target:
    """KEY and DIST checked against ``model`` (the MuJoCo C model: its names and fields). ``member``: the System
    member whose model ``model`` is (keys then start with ``"<member>."``); "" for a scene's own model; None:
    read from the key (``member_of``: the file summary, which has one model)."""
    match = KEY_SYNTAX.match(key) if isinstance(key, str) else None
    if match is None:
        raise RolloutError(f"randomize: key {key!r} is not 'field', 'field:name' or either with '[i]' "
                           f"(e.g. 'body_mass:torso', 'geom_friction:floor[0]', 'opt.gravity[2]'; a System's "
                           f"member: 'arm.body_mass:link1')")
    dist = parse_dist(key, text)
    name, comp = match.groups()
    found = member_of(model, name)
    member = found if member is None else member
    if member and not name.startswith(member + "."):
        raise RolloutError(f"randomize[{key!r}]: does not address System member {member!r}")
    if not member and found:
        raise RolloutError(f"randomize[{key!r}]: {found!r} is not a field of the model; '<member>.<field>' keys "
                           f"address the members of a System (adapters/system.py)")
    local = name[len(member) + 1:] if member else name
    for prefix, why in REFUSED:
        if local.startswith(prefix):
            raise RolloutError(f"randomize[{key!r}]: {local.partition(':')[0]} cannot be randomized: {why}")
    field, idx = resolve_param(model, None, local, what="randomize")
    shape = np.shape(field_value(model, field))
    sel = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[idx].reshape(-1)
    if comp is not None:
        if int(comp) >= sel.size:
            raise RolloutError(f"randomize[{key!r}]: component [{comp}] of a selection of {sel.size} value(s)")
        sel = sel[int(comp):int(comp) + 1]
    return Target(key, f"{member}.{field}" if member else field, sel, dist, field)


def resolve_targets(model: mujoco.MjModel, randomize: dict, member: str | None = None) -> tuple[Target, ...]:
    """Every entry resolved; two keys drawing the same element are refused (their order would matter)."""
    if not isinstance(randomize, dict):
        raise RolloutError(f"randomize must be a dict {{KEY: DIST}}, got {type(randomize).__name__}")
    targets = tuple(resolve_target(model, k, v, member) for k, v in randomize.items())
    refuse_overlaps(targets)
    return targets


def refuse_overlaps(targets) -> None:
    """Two keys drawing the same element of a field are refused (their order would matter)."""
    seen: dict[tuple[str, int], str] = {}
    for t in targets:
        for i in t.flat.tolist():
            other = seen.setdefault((t.field, i), t.key)
            if other != t.key:
                raise RolloutError(f"randomize: {other!r} and {t.key!r} both draw element {i} of {t.field}")


def draw(target: Target, seed: int, world: int) -> np.ndarray:
    """World ``world``'s draw of ``target`` (one value per selected element): counter-based on (seed, world, key)."""
    rng = np.random.default_rng([int(seed), int(world), zlib.crc32(target.key.encode())])
    return target.dist.sample(rng, target.flat.size)


# numpy.random.SeedSequence's hash constants (numpy/random/bit_generator.pyx) and PCG64's 128-bit LCG multiplier:
# ``draw_worlds`` computes default_rng([seed, w, key])'s initial PCG64 state for every world at once.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_M32, _M128 = 0xFFFFFFFF, (1 << 128) - 1


def _pcg64_states(seed: int, worlds: np.ndarray, key: int) -> list[tuple[int, int]]:
    """(state, inc) of ``PCG64(SeedSequence([seed, w, key]))`` for every world w, as numpy seeds them: the entropy
    words (each int < 2**32 is one uint32 word) mixed into SeedSequence's pool of 4 (``mix_entropy``), 4 uint64
    words drawn from it (``generate_state``), then ``pcg_setseq_128_srandom_r``. Vectorized over the worlds in
    uint32 arithmetic (mod 2**32 as numpy's C); checked against numpy's own objects in tests/test_force_params.py."""
    n = worlds.size
    ent = [np.full(n, seed, np.uint64), worlds.astype(np.uint64), np.full(n, key, np.uint64)]
    hc = _INIT_A

    def hashmix(value):
        nonlocal hc
        value = (value ^ hc) & _M32
        hc = (hc * _MULT_A) & _M32
        value = (value * hc) & _M32
        return value ^ (value >> 16)

    def mix(x, y):
        r = (_MIX_L * x - _MIX_R * y) & _M32  # uint64 wraps mod 2**64, a multiple of 2**32: the low words are C's
        return r ^ (r >> 16)

    pool = [hashmix(ent[i] if i < len(ent) else np.zeros(n, np.uint64)) for i in range(4)]
    for i_src in range(4):
        for i_dst in range(4):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hashmix(pool[i_src]))
    hc, words = _INIT_B, []
    for i in range(8):
        v = (pool[i % 4] ^ hc) & _M32
        hc = (hc * _MULT_B) & _M32
        v = (v * hc) & _M32
        words.append(v ^ (v >> 16))
    w64 = [(words[2 * j] | (words[2 * j + 1] << np.uint64(32))).tolist() for j in range(4)]
    out = []
    for s0, s1, i0, i1 in zip(*w64):
        inc = ((((i0 << 64) | i1) << 1) | 1) & _M128
        state = (inc + ((s0 << 64) | s1)) & _M128  # state 0 stepped (0 * mult + inc), plus initstate
        out.append(((state * _PCG_MULT + inc) & _M128, inc))
    return out


def draw_worlds(target: Target, seed: int, worlds) -> np.ndarray:
    """(len(worlds), k): ``draw(target, seed, w)`` of every world w, the same bits, without a ``default_rng`` per
    world (34 us each, most of a 10,000-world randomization): each world's PCG64 state computed at once
    (``_pcg64_states``) and set on one generator before its sample."""
    worlds = np.asarray(worlds, np.int64).reshape(-1)
    k = target.flat.size
    out = np.empty((worlds.size, k))
    if worlds.size == 0:
        return out
    if not (0 <= int(seed) <= _M32 and int(worlds.min()) >= 0 and int(worlds.max()) <= _M32):
        for i, w in enumerate(worlds.tolist()):  # an entropy word of more than 32 bits: numpy's own path
            out[i] = draw(target, seed, w)
        return out
    bits = np.random.PCG64(0)
    rng = np.random.Generator(bits)
    for i, (st, inc) in enumerate(_pcg64_states(int(seed), worlds, zlib.crc32(target.key.encode()))):
        bits.state = {"bit_generator": "PCG64", "state": {"state": st, "inc": inc}, "has_uint32": 0, "uinteger": 0}
        out[i] = target.dist.sample(rng, k)
    return out


def _apply(m: mujoco.MjModel, target: Target, x: np.ndarray) -> None:
    values = np.array(field_value(m, target.path), np.float64)
    flat = values.reshape(-1)
    flat[target.flat] = target.dist.apply(flat[target.flat], x)
    set_field(m, target.path, values)


# -- valid worlds: what a drawn value may not be (checked per world, before mj_setConst; never clipped) --------

MJMINVAL = 1e-15  # MuJoCo's mjMINVAL: a moving body needs more mass than this
# Fields whose every value must be >= 0, and what a value is. MuJoCo's compiler refuses a negative body or geom
# mass/inertia ("mass, inertia or density are negative"); it compiles negative damping, stiffness, armature,
# friction loss and friction from an XML, but they are not physical: negative damping/stiffness feed energy in,
# negative armature can make M indefinite, the engine skips a negative friction loss and clamps a contact's
# friction to mjMINMU, so the world would not run the recorded value. (actuator_gear may be negative: it reverses
# the actuator.)
POSITIVE = {
    "body_mass": "a body's mass", "body_inertia": "a principal moment of inertia",
    "dof_damping": "joint damping", "jnt_stiffness": "joint stiffness", "dof_armature": "armature (rotor inertia)",
    "dof_frictionloss": "dry friction loss", "geom_friction": "a friction coefficient",
    "tendon_damping": "tendon damping", "tendon_stiffness": "tendon stiffness",
    "tendon_armature": "tendon armature", "tendon_frictionloss": "tendon friction loss",
}
_TRIANGLE_RTOL = 1e-12  # A + B >= C up to rounding of a common scale (the compiler checks the XML's values)


def _refuse(t: Target, world: int, shape: tuple, i: int, v: float, rule: str):
    at = ", ".join(str(int(j)) for j in np.unravel_index(i, shape))
    raise RolloutError(f"randomize[{t.key!r}]: world {world} drew {t.field}[{at}] = "
                       f"{v:.6g}: {rule}. Values are not clipped: choose a distribution that stays valid (e.g. "
                       f"'loguniform(a, b)' or '*uniform(a, b)' with 0 < a)")


def check_drawn(m: mujoco.MjModel, targets, world: int) -> None:
    """World ``world``'s drawn values on ``m`` (before mj_setConst): >= 0 where ``POSITIVE`` says so, principal
    inertias satisfying A + B >= C. A RolloutError names the key, the world and the value."""
    for t in targets:
        what = POSITIVE.get(t.path)
        if what is None:
            continue
        values = np.asarray(field_value(m, t.path), np.float64)
        flat = values.reshape(-1)
        bad = t.flat[~(flat[t.flat] >= 0)]
        if bad.size:
            _refuse(t, world, values.shape, int(bad[0]), flat[bad[0]], f"MuJoCo requires {what} >= 0")
        if t.path == "body_inertia":
            for b in np.unique(t.flat // 3).tolist():
                a, b2, c = np.sort(values[b])
                if a + b2 < c * (1 - _TRIANGLE_RTOL):
                    i = next(j for j in t.flat.tolist() if j // 3 == b)
                    name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b)
                    _refuse(t, world, values.shape, i, flat[i], f"body {name!r}'s principal inertia "
                            f"{values[b].tolist()} breaks A + B >= C, which MuJoCo's compiler requires")


def check_moving_mass(m: mujoco.MjModel, targets, world: int) -> None:
    """After mj_setConst: every body with degrees of freedom above a drawn mass keeps a subtree mass >
    mjMINVAL (MuJoCo's compiler: "mass and inertia of moving bodies must be larger than mjMINVAL")."""
    for t in targets:
        if t.path != "body_mass":
            continue
        for b in t.flat.tolist():
            a = b
            while a > 0:
                if m.body_dofnum[a] > 0 and not m.body_subtreemass[a] > MJMINVAL:
                    name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, a)
                    _refuse(t, world, m.body_mass.shape, b, m.body_mass[b],
                            f"body {name!r} moves (it has degrees of freedom) and its subtree would weigh "
                            f"{m.body_subtreemass[a]:.3g} <= mjMINVAL, which MuJoCo's compiler refuses")
                a = int(m.body_parentid[a])


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
        values = np.array(field_value(probe, t.path), np.float64)
        values.reshape(-1)[t.flat] = values.reshape(-1)[t.flat] * 1.37 + 0.011
        set_field(probe, t.path, values)
    for name in explicit:
        if hasattr(model, name.split(".")[0]):
            set_field(probe, name, np.asarray(field_value(probe, name), np.float64) * 1.37 + 0.011)
    _with_const(probe)
    moved = {t.path for t in targets} | set(explicit)
    return tuple(f for f in float_fields(model) if f not in moved
                 and not np.array_equal(np.asarray(field_value(model, f)), np.asarray(field_value(probe, f))))


def world_model(model: mujoco.MjModel, targets, seed: int, world: int, explicit_row: dict) -> mujoco.MjModel:
    """World ``world``'s MjModel: a copy of ``model`` with its explicit fields, its draws (checked:
    ``check_drawn``, ``check_moving_mass``) and ``mj_setConst``."""
    m = copy.copy(model)
    for name, v in explicit_row.items():
        if hasattr(m, name.split(".")[0]):
            set_field(m, name, v)
    for t in targets:
        _apply(m, t, draw(t, seed, world))
    check_drawn(m, targets, world)
    _with_const(m)
    check_moving_mass(m, targets, world)
    return m


def randomized_params(model: mujoco.MjModel, randomize: dict, seed: int, worlds, explicit: dict | None = None,
                      keep=lambda field, shape: True, member: str = "") -> dict:
    """{field: (B, *shape)} of the worlds ``worlds`` (global indices): the randomized fields, the explicit
    ``model_params`` (``explicit``, (B, ...) rows of these worlds, applied before the draws) and the derived
    fields, each as ``mj_setConst`` leaves it. ``keep(field, shape)``: whether the backend's model has the
    field (a derived field it lacks is dropped; a randomized one is refused). ``member``: the System member
    ``model`` belongs to (its keys read ``"<member>.<field>..."``; the result's fields are ``model``'s own)."""
    explicit = {k: np.asarray(v, np.float64) for k, v in (explicit or {}).items()}
    targets = resolve_targets(model, randomize, member)
    for t in targets:
        if not keep(t.path, np.shape(field_value(model, t.path))):
            raise RolloutError(f"randomize[{t.key!r}]: this backend's model has no field {t.path!r} of that shape")
    fields = sorted({t.path for t in targets} | set(explicit) | set(derived_fields(model, targets, explicit)))
    fields = [f for f in fields if f in explicit or keep(f, np.shape(field_value(model, f)))]
    rows: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    for i, w in enumerate(np.asarray(worlds).tolist()):
        m = world_model(model, targets, seed, w, {k: v[i] for k, v in explicit.items()})
        for f in fields:
            rows[f].append(explicit[f][i] if f in explicit and not hasattr(m, f.split(".")[0])
                           else np.array(field_value(m, f), np.float64))
    return {f: np.stack(v) for f, v in rows.items()}


def field_attrs(randomize: dict, model: mujoco.MjModel) -> dict:
    """{field: {key: dist}}: the distribution strings of each randomized field (the file's attributes)."""
    out: dict[str, dict[str, object]] = {}
    for t in resolve_targets(model, randomize):
        out.setdefault(t.field, {})[t.key] = randomize[t.key]
    return out
