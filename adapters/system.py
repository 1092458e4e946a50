"""Several synchronized models integrated as one: ``System({"arm": scene, "motor": motor}, couplings=...)``.

Each member keeps its own ``StateRegistry``/``StateLayout``; the system concatenates the members in
the given (synchronization) order into one combined layout whose state names are
``"<model>.<state>"`` and whose records' ``model`` is the member name (the ``/layout`` ``model``
column). A state therefore has two offsets: *local* (into its member's buffer) and *global* (into
the system's ``x``). They are distinct types, ``LocalOffset`` and ``GlobalOffset``, and the offset
API refuses the wrong one (``OffsetTypeError``): mixing them is the classic bug of multi-model
state layers.

Couplings are declared data: ``Coupling(reads=("arm.shoulder/qvel",), writes="motor.omega", fn=...)``.
``reads`` name states (``"<model>.<state>"``) or inputs written by other couplings; ``writes`` is a
member input (``"<model>.<input>"``), or for an ``MjScene`` member ``"<model>.ctrl:<actuator>"`` /
``"<model>.qfrc_applied:<joint>"``. At every stage the couplings run first, in an order that
respects their dependencies (ties broken by the synchronization order of the written model); a
cycle is refused at construction. Then each member is evaluated, in synchronization order.

Hooks ``hooks={"arm": {"pre_step": f, "post_step": g}}`` (pure): ``f(t, x_member) -> x_member`` runs
before every step (the engine calls ``System.pre_step`` inside the compiled step), ``g(x_member) ->
x_member`` after every full step after the member's own ``project``; both in synchronization order.

Noise (``system_noise``): stochastic integrators take a System; its slots are globally canonical
(members in order, each member's slots kept), and ``shared_noise=[[("a.s", 0), ("b.v", 0)]]`` makes one
Wiener process drive endpoints of several members.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.typing import ArrayLike

from mjharness.integrators import StateLayout, StateRegistry
from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from . import noise as _noise
from . import system_noise as _sn
from .mjscene import MjScene
from .system_types import (  # the system's vocabulary: errors, offsets, records, couplings
    Coupling,
    GlobalOffset,
    LocalOffset,
    SystemRecord,
    SystemSpecError,
    _require,
)

_MJ_TARGETS = ("ctrl", "qfrc_applied")


def _split_name(name: str) -> tuple[str, str]:
    model, _, rest = name.partition(".")
    return model, rest


class System:
    """An ordered group of models integrated together (the engine and every integrator accept it)."""

    # Set once in __init__ (through __dict__: a System is immutable).
    members: dict
    records: tuple[SystemRecord, ...]
    layout: StateLayout
    couplings: tuple[Coupling, ...]
    hooks: dict
    shared_noise: tuple[tuple[tuple[str, int], ...], ...]
    nu: int
    model: mujoco.MjModel | None
    name: str
    _order: tuple[Coupling, ...]
    _slices: dict
    _index: dict[str, SystemRecord]
    _diff_idx: dict
    _nu: dict[str, int]

    def __init__(self, models: Mapping, couplings=(), hooks: Mapping | None = None, shared_noise=()):
        if isinstance(models, (list, tuple)):
            names = [n for n, _ in models]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise SystemSpecError(f"System: model name(s) {dup} appear more than once")
            models = dict(models)
        if not isinstance(models, Mapping) or not models:
            raise SystemSpecError("System needs a non-empty mapping {name: model}")
        for name, m in models.items():
            if not isinstance(name, str) or not name or "." in name or "/" in name:
                raise SystemSpecError(f"System: model name {name!r} must be a non-empty str without '.' or '/'")
            if not isinstance(getattr(m, "layout", None), StateLayout) or not callable(getattr(m, "dynamics", None)):
                raise SystemSpecError(f"System: member {name!r} ({type(m).__name__}) is not a model "
                                      f"(.layout, .dynamics)")
        members = dict(models)
        shared_noise = [list(g) for g in shared_noise or ()]
        records, layout = _combine(members, shared_noise)
        slices = {n: _member_slice(records, n) for n in members}
        index = {r.name: r for r in records}
        couplings = tuple(couplings)
        order = _order_couplings(members, couplings, index)
        hooks = _check_hooks(members, hooks or {})
        d = self.__dict__
        d.update(members=members, records=records, layout=layout, couplings=couplings, hooks=hooks,
                 _order=order, _slices=slices, _index=index)
        d["shared_noise"] = tuple(tuple((str(st), int(j)) for st, j in g) for g in shared_noise)
        d["_diff_idx"] = {n: _sn.scatter_index(n, m.layout, layout) for n, m in members.items()}
        d["_nu"] = {n: int(getattr(m, "nu", 0)) for n, m in members.items()}
        d["nu"] = sum(d["_nu"].values())
        first = next((m for m in members.values() if isinstance(m, MjScene)), None)
        d["model"] = first.model if first is not None else None  # the file's /model
        d["name"] = "+".join(members)

    def __setattr__(self, key, value):
        raise SystemSpecError(f"a System is immutable once built (tried to set {key!r}); build a new one")

    # -- offsets ---------------------------------------------------------------------------------
    def record(self, name: str) -> SystemRecord:
        if name not in self._index:
            raise SystemSpecError(f"System has no state {name!r}; states: {list(self._index)}")
        return self._index[name]

    def to_global(self, model: str, local: LocalOffset) -> GlobalOffset:
        off = _require(local, LocalOffset, f"to_global({model!r}, ...)")
        if model not in self.members:
            raise SystemSpecError(f"System has no model {model!r}")
        sl = self._slices[model]
        if not 0 <= off < sl.stop - sl.start:
            raise SystemSpecError(f"local offset {off} is outside model {model!r} (size {sl.stop - sl.start})")
        return GlobalOffset(sl.start + off)

    def to_local(self, offset: GlobalOffset) -> tuple[str, LocalOffset]:
        off = _require(offset, GlobalOffset, "to_local")
        for n, sl in self._slices.items():
            if sl.start <= off < sl.stop:
                return n, LocalOffset(off - sl.start)
        raise SystemSpecError(f"global offset {off} is outside the system (size {self.layout.size})")

    def value_at(self, x: jax.Array, offset: GlobalOffset, size: int = 1) -> jax.Array:
        """``x[offset:offset+size]`` of the system buffer; refuses a ``LocalOffset``."""
        off = _require(offset, GlobalOffset, "System.value_at")
        return x[..., off:off + size]

    def member_value_at(self, x_member: jax.Array, offset: LocalOffset, size: int = 1) -> jax.Array:
        """``x_member[offset:offset+size]`` of one member's buffer; refuses a ``GlobalOffset``."""
        off = _require(offset, LocalOffset, "System.member_value_at")
        return x_member[..., off:off + size]

    def member_x(self, x: jax.Array, model: str) -> jax.Array:
        return x[..., self._slices[model]]

    # -- what the engine asks of a scene -------------------------------------------------------------
    def x0(self) -> np.ndarray:
        parts = [np.asarray(m.x0() if hasattr(m, "x0") else m.layout.default_values(), np.float64)
                 for m in self.members.values()]
        return np.concatenate(parts)

    @property
    def qpos_segment(self):
        return self._member_segment("qpos_segment")

    @property
    def qvel_segment(self):
        return self._member_segment("qvel_segment")

    def _member_segment(self, attr):
        for n, m in self.members.items():
            if isinstance(m, MjScene):
                s, base = getattr(m, attr), self._slices[n].start
                return slice(base + s.start, base + s.stop)
        return None

    @property
    def default_integrator(self) -> str:
        """The first MjScene member's own integrator (``rk4`` when there is none)."""
        first = next((m for m in self.members.values() if isinstance(m, MjScene)), None)
        return first.default_integrator if first is not None else "rk4"

    @property
    def second_order(self):
        pairs = []
        for n, m in self.members.items():
            pairs += [(f"{n}.{p}", f"{n}.{v}") for p, v in (getattr(m, "second_order", None) or ())]
        return tuple(pairs) or None

    @property
    def carry_spec(self) -> dict:
        return {f"{n}/{k}": tuple(s) for n, m in self.members.items()
                for k, s in (getattr(m, "carry_spec", None) or {}).items()}

    def init_carry(self) -> dict:
        return {f"{n}/{k}": v for n, m in self.members.items()
                if getattr(m, "carry_spec", None) for k, v in m.init_carry().items()}

    def describe(self) -> dict:
        """The system as data (the file's ``system`` attribute)."""
        return {"order": list(self.members), "models": {n: type(m).__name__ for n, m in self.members.items()},
                "couplings": [{"reads": list(c.reads), "writes": c.writes} for c in self.couplings],
                "hooks": {n: sorted(h) for n, h in self.hooks.items()},
                "shared_noise": [[list(ep) for ep in g] for g in self.shared_noise]}

    # -- per-world model fields of the members (model_params, randomize) -------------------------------
    def param_owner(self, path: str) -> tuple[str, MjScene, str]:
        """``"<member>.<field>"`` (the naming of coupling targets, ``"arm.ctrl:motor"``) -> (member name, the
        MjScene member, its field path); a SystemSpecError names what is wrong."""
        name, _, field = path.partition(".") if isinstance(path, str) else ("", "", "")
        if not field or name not in self.members:
            scene = next((n for n, m in self.members.items() if isinstance(m, MjScene)), "arm")
            raise SystemSpecError(f"a System's per-world model field is '<member>.<field>' (e.g. "
                                  f"'{scene}.body_mass'), got {path!r}; members: {list(self.members)}")
        m = self.members[name]
        if not isinstance(m, MjScene):
            raise SystemSpecError(f"{path!r}: member {name!r} is a {type(m).__name__}, not an MjScene; only "
                                  f"MjScene members have MuJoCo model fields")
        return name, m, field

    def with_params(self, params: dict) -> System:
        """The system evaluating one world's member fields ``{"<member>.<field>": value}``: each MjScene member
        addressed becomes ``member.with_params({field: value})`` (its backend's per-world path)."""
        split: dict[str, dict] = {}
        for path, v in params.items():
            name, _, field = self.param_owner(path)
            split.setdefault(name, {})[field] = v
        twin = copy.copy(self)
        twin.__dict__["members"] = {n: m.with_params(split[n]) if n in split else m for n, m in self.members.items()}
        return twin

    # -- dynamics ------------------------------------------------------------------------------------
    def _inputs(self, t, x):
        """The couplings' values at this stage, in dependency order."""
        vals = {}
        for c in self._order:
            args = [vals[r] if r in vals else x[self._index[r].global_:self._index[r].global_ + self._index[r].size]
                    for r in c.reads]
            vals[c.writes] = jnp.asarray(c.fn(*args))
        return vals

    def _member_ctrl(self, ctrl):
        out, k = {}, 0
        for n in self.members:
            nu = self._nu[n]
            out[n] = None if ctrl is None or nu == 0 else ctrl[k:k + nu]
            k += nu
        return out

    def dynamics(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None, *,
                 carry: dict | None = None) -> Any:
        vals = self._inputs(t, x)
        ctrls = self._member_ctrl(ctrl)
        parts, carry_out = [], {}
        for n, m in self.members.items():
            mine = {k.partition(".")[2]: v for k, v in vals.items() if k.partition(".")[0] == n}
            mc = None
            if carry is not None and getattr(m, "carry_spec", None):
                mc = {k: carry[f"{n}/{k}"] for k in m.carry_spec}
            out = _evaluate_member(m, t, x[self._slices[n]], ctrls[n], mine, mc)
            if mc is not None:
                out, co = out
                carry_out.update({f"{n}/{k}": v for k, v in co.items()})
            parts.append(jnp.ravel(out))
        dx = jnp.concatenate(parts)
        return dx if carry is None else (dx, carry_out)

    def drift_diffusion(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None, *,
                        carry: dict | None = None) -> Any:
        """(derivative, packed diffusion) of the system at one point; with a carry also its proposal."""
        vals = self._inputs(t, x)
        ctrls = self._member_ctrl(ctrl)
        fs, gs, carry_out = [], [], {}
        for n, m in self.members.items():
            mine = {k.partition(".")[2]: v for k, v in vals.items() if k.partition(".")[0] == n}
            mc = None
            if carry is not None and getattr(m, "carry_spec", None):
                mc = {k: carry[f"{n}/{k}"] for k in m.carry_spec}
            f, g, co = _member_drift_diffusion(m, t, x[self._slices[n]], ctrls[n], mine, mc)
            carry_out.update({f"{n}/{k}": v for k, v in (co or {}).items()})
            fs.append(jnp.ravel(f))
            if self._diff_idx[n].size:
                gs.append((self._diff_idx[n], g))
        out = (jnp.concatenate(fs), _sn.assemble(self.layout.diffusion_size, gs))
        return out if carry is None else (out, carry_out)

    def diffusion(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None) -> jax.Array:
        """Packed diffusion buffer (``layout.diffusion_size``, slots globally canonical); XLA drops the unused drift."""
        return self.drift_diffusion(t, x, ctrl)[1]

    @property
    def diffusion_time_dependent(self) -> bool:
        return any(bool(getattr(m, "diffusion_time_dependent", True)) for m in self.members.values()
                   if m.layout.diffusion_size)

    def pre_step(self, t: ArrayLike, x: jax.Array) -> jax.Array:
        """The members' ``pre_step`` hooks (``fn(t, x_member) -> x_member``), in synchronization order; the
        engine applies it to every world's state before each step (inside the compiled step)."""
        if not any("pre_step" in h for h in self.hooks.values()):
            return x
        parts = []
        for n in self.members:
            xm = x[..., self._slices[n]]
            hook = self.hooks.get(n, {}).get("pre_step")
            parts.append(xm if hook is None else jnp.asarray(hook(t, xm), xm.dtype).reshape(xm.shape))
        return jnp.concatenate(parts, axis=-1)

    def project(self, x: jax.Array) -> jax.Array:
        parts = []
        for n, m in self.members.items():
            xm = x[self._slices[n]]
            if callable(getattr(m, "project", None)):
                xm = m.project(xm)
            hook = self.hooks.get(n, {}).get("post_step")
            if hook is not None:
                xm = jnp.asarray(hook(xm))
            parts.append(xm)
        return jnp.concatenate(parts)

    def __repr__(self):
        return f"System({', '.join(f'{n}={type(m).__name__}' for n, m in self.members.items())})"


# -- construction helpers --------------------------------------------------------------------------

def _combine(members: dict, shared_noise=()) -> tuple[tuple[SystemRecord, ...], StateLayout]:
    reg = StateRegistry()
    for n, m in members.items():
        for r in m.layout.records:  # group: the member's own sub-models keep their noise-slot order
            reg.register(f"{n}.{r.name}", r.spec, model=n, group=f"{n}:{r.group}")
        for g in _sn.member_shares(m.layout):
            reg.share_noise([(f"{n}.{s}", j) for s, j in g])
    specs = {f"{n}.{r.name}": r.spec for n, m in members.items() for r in m.layout.records}
    for g in _sn.check_shared_noise(shared_noise, specs, SystemSpecError):
        reg.share_noise(g)
    layout = reg.finalize()
    records, base = [], 0
    for n, m in members.items():
        for r in m.layout.records:
            rec = layout[f"{n}.{r.name}"]
            if rec.offset != base + r.offset:  # members are contiguous blocks in order: checked, not assumed
                raise SystemSpecError(f"internal: state {rec.name!r} is not at its member's block offset")
            records.append(SystemRecord(rec.name, n, r.name, r.size, LocalOffset(r.offset),
                                        GlobalOffset(rec.offset)))
        base += m.layout.size
    return tuple(records), layout


def _member_slice(records, model):
    mine = [r for r in records if r.model == model]
    if not mine:
        return slice(0, 0)
    return slice(int(mine[0].global_), int(mine[-1].global_) + mine[-1].size)


def _check_target(members, name: str):
    model, rest = _split_name(name)
    if model not in members:
        raise SystemSpecError(f"coupling writes {name!r}: no model {model!r} (models: {list(members)})")
    m = members[model]
    kind, _, what = rest.partition(":")
    if isinstance(m, MjScene) and kind in _MJ_TARGETS:
        obj = mujoco.mjtObj.mjOBJ_ACTUATOR if kind == "ctrl" else mujoco.mjtObj.mjOBJ_JOINT
        if mujoco.mj_name2id(m.model, obj, what) < 0:
            what_kind = "actuator" if kind == "ctrl" else "joint"
            raise SystemSpecError(f"coupling writes {name!r}: {model!r} has no {what_kind} {what!r}")
        return
    inputs = getattr(m, "inputs", None) or {}
    if rest not in inputs:
        extra = ", or ctrl:<actuator>, qfrc_applied:<joint>" if isinstance(m, MjScene) else ""
        raise SystemSpecError(f"coupling writes {name!r}: model {model!r} has no input {rest!r} "
                           f"(inputs: {sorted(inputs)}{extra})")


def _order_couplings(members, couplings, index) -> tuple[Coupling, ...]:
    targets = {}
    for c in couplings:
        if not isinstance(c, Coupling):
            raise SystemSpecError(f"couplings must be Coupling objects, got {type(c).__name__}")
        _check_target(members, c.writes)
        if c.writes in targets:
            raise SystemSpecError(f"two couplings write {c.writes!r}")
        targets[c.writes] = c
    for c in couplings:
        for r in c.reads:
            if r not in index and r not in targets:
                raise SystemSpecError(f"coupling -> {c.writes!r} reads {r!r}: no such state or coupled input "
                                   f"(states are '<model>.<state>', e.g. {next(iter(index))!r})")
    rank = {n: i for i, n in enumerate(members)}
    done, order = set(), []
    visiting: list[Coupling] = []

    def visit(c):
        if c.writes in done:
            return
        if c.writes in visiting:
            cycle = visiting[visiting.index(c.writes):] + [c.writes]
            raise SystemSpecError(f"couplings form a cycle that cannot be ordered within a stage: {' -> '.join(cycle)}")
        visiting.append(c.writes)
        for r in c.reads:
            if r in targets:
                visit(targets[r])
        visiting.pop()
        done.add(c.writes)
        order.append(c)

    for c in sorted(couplings, key=lambda c: rank[_split_name(c.writes)[0]]):
        visit(c)
    return tuple(order)


def _check_hooks(members, hooks) -> dict:
    out = {}
    for n, h in hooks.items():
        if n not in members:
            raise SystemSpecError(f"hooks for unknown model {n!r} (models: {list(members)})")
        bad = sorted(set(h) - {"pre_step", "post_step"})
        if bad or not all(callable(f) for f in h.values()):
            raise SystemSpecError(f"hooks[{n!r}] must map 'pre_step' / 'post_step' to callables, got {dict(h)!r}")
        out[n] = dict(h)
    return out


# -- evaluating one member --------------------------------------------------------------------------

def _evaluate_member(m, t, x, ctrl, inputs: dict, carry):
    if isinstance(m, MjScene):
        return _evaluate_mjscene(m, t, x, ctrl, inputs, carry)
    kw = {} if carry is None else {"carry": carry}
    if getattr(m, "inputs", None):
        kw["inputs"] = inputs
    return m.dynamics(t, x, ctrl, **kw)


def _coupled_ctrl(m: MjScene, ctrl, inputs: dict):
    if inputs:
        u = jnp.zeros(m.nu) if ctrl is None else jnp.asarray(ctrl, jnp.float64)
        for key, v in inputs.items():
            kind, _, what = key.partition(":")
            if kind == "ctrl":
                u = u.at[mujoco.mj_name2id(m.model, mujoco.mjtObj.mjOBJ_ACTUATOR, what)].set(jnp.ravel(v)[0])
        ctrl = u
    return ctrl


def _evaluate_mjscene(m: MjScene, t, x, ctrl, inputs: dict, carry):
    """MjScene.dynamics with coupled ctrl entries and generalized forces written into the MJX data."""
    ctrl = _coupled_ctrl(m, ctrl, inputs)
    frc = [(key.partition(":")[2], v) for key, v in inputs.items() if key.startswith("qfrc_applied:")]
    if not frc:
        return m.dynamics(t, x, ctrl, carry=carry)
    d = _forward_with_forces(m, t, x, ctrl, carry, frc)
    dx = m._derivative(t, x, d, d.qacc)
    return dx if carry is None else (dx, {"qacc_warmstart": d.qacc})


def _forward_with_forces(m: MjScene, t, x, ctrl, carry, frc):
    d = m.to_mjx(x).replace(time=jnp.asarray(t, jnp.float64))
    if ctrl is not None:
        d = d.replace(ctrl=jnp.asarray(ctrl, d.ctrl.dtype).reshape(d.ctrl.shape))
    if carry is not None:
        d = d.replace(qacc_warmstart=jnp.asarray(carry["qacc_warmstart"], d.qacc_warmstart.dtype))
    q = d.qfrc_applied
    for joint, v in frc:
        j = mujoco.mj_name2id(m.model, mujoco.mjtObj.mjOBJ_JOINT, joint)
        adr, nv = int(m.model.jnt_dofadr[j]), m.joints[j].nv
        q = q.at[adr:adr + nv].add(jnp.reshape(v, (nv,)))
    return mjx.forward(m.mjx_model, d.replace(qfrc_applied=q))


def _member_drift_diffusion(m, t, x, ctrl, inputs: dict, carry):
    """``(f, g, carry_out)`` of one member with its coupled inputs (one ``mjx.forward`` for an MjScene)."""
    if not isinstance(m, MjScene):
        return _sn.member_drift_diffusion(m, t, x, ctrl, inputs, carry, _evaluate_member)
    if not m.layout.diffusion_size:
        out = _evaluate_mjscene(m, t, x, ctrl, inputs, carry)
        f, co = out if carry is not None else (out, None)
        return f, jnp.zeros(0, jnp.float64), co
    ctrl = _coupled_ctrl(m, ctrl, inputs)
    frc = [(key.partition(":")[2], v) for key, v in inputs.items() if key.startswith("qfrc_applied:")]
    if not frc:
        out = m.drift_diffusion(t, x, ctrl, carry=carry)
        (f, g), co = out if carry is not None else (out, None)
        return f, g, co
    d = _forward_with_forces(m, t, x, ctrl, carry, frc)
    f, g = m._derivative(t, x, d, d.qacc), _noise.diffusion_from_data(m, t, x, d)
    return f, g, None if carry is None else {"qacc_warmstart": d.qacc}
