"""Named-state registry: specs, registration, and the finalized (static, hashable) layout.

Basilisk's dynamics layer hands out mutable handles into three buffers (values, derivatives,
diffusion tangents). In JAX this splits into a static ``StateLayout`` (offsets, counted in scalars)
and plain arrays that are pytree leaves. Views are slices computed from the layout at trace time.

Noise slots are numbered canonically at ``finalize``, so they do not depend on the order in which
states were registered or shares declared: models in integration order (the order in which each
model first registered a state; for an ``MjScene`` the MuJoCo model first, then each ``add_state``
prefix), states by name within a model, local sources in order; a shared group (``share_noise``,
overlapping groups merge) takes the slot of its first endpoint in that traversal. The diffusion
buffer is packed by slot: each (state, local source) endpoint owns one tangent (3 scalars for a
quaternion state, the state's size otherwise), not a dense state x slot matrix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from .errors import UserError

# A value or derivative buffer: a NumPy or JAX array (this module imports no JAX: the CLI's checks use it).
Buffer: TypeAlias = Any

UPDATE_KINDS = ("euclidean", "quaternion", "quaternion_qdot")
# Old names that still work, with a DeprecationWarning: "quaternion_highorder" was not higher order.
DEPRECATED_UPDATES = {"quaternion_highorder": "quaternion_qdot"}


def canonical_update(kind: str, stacklevel: int = 3) -> str:
    """``kind`` with a deprecated name replaced by its current one (warning once per call site)."""
    if kind in DEPRECATED_UPDATES:
        import warnings

        new = DEPRECATED_UPDATES[kind]
        warnings.warn(f"update kind {kind!r} is deprecated (it is not higher order); use {new!r}",
                      DeprecationWarning, stacklevel=stacklevel)
        return new
    return kind
ERROR_CONTROLS = ("state", "component")


class StateError(UserError, ValueError):
    """A state was declared, registered, read or written inconsistently."""


def _shape(value, what: str, name: str = "") -> tuple[int, ...]:
    where = f" of state {name!r}" if name else ""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),)
    try:
        shape = tuple(value)
    except TypeError:
        raise StateError(f"{what}{where} must be a tuple of non-negative ints, got {value!r}") from None
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise StateError(f"{what}{where} must be a tuple of non-negative ints, got {value!r}")
    return tuple(int(d) for d in shape)


@dataclass(frozen=True)
class StateSpec:
    """Declaration of one state.

    ``shape``: value shape; ``deriv_shape``: shape of its time derivative (the tangent for the
    ``quaternion`` policy: 3 components for a 4-component value); ``diffusion_shape``: shape of the
    tangent one noise source moves; ``noise_count``: local noise sources; ``error_control``: adaptive
    error norm over the whole state (``"state"``) or per component (``"component"``); ``update``:
    ``"euclidean"`` (x + h k), ``"quaternion"`` (exp-map of a 3-vector drift) or
    ``"quaternion_qdot"`` (4-component q-dot, normalised after the step).
    """

    shape: tuple[int, ...]
    deriv_shape: tuple[int, ...] | None = None
    diffusion_shape: tuple[int, ...] | None = None
    noise_count: int = 0
    error_control: str = "state"
    update: str = "euclidean"

    def __post_init__(self):
        shape = _shape(self.shape, "shape")
        object.__setattr__(self, "update", canonical_update(self.update, stacklevel=4))
        if self.update not in UPDATE_KINDS:
            raise StateError(f"update must be one of {UPDATE_KINDS}, got {self.update!r}")
        if self.error_control not in ERROR_CONTROLS:
            raise StateError(f"error_control must be one of {ERROR_CONTROLS}, got {self.error_control!r}")
        nc = self.noise_count
        if isinstance(nc, bool) or not isinstance(nc, (int, np.integer)) or nc < 0:
            raise StateError(f"noise_count must be a non-negative int, got {nc!r}")
        if self.update == "euclidean":
            want_d, want_g = shape, shape
        else:
            if shape != (4,):
                raise StateError(f"a {self.update} state must have shape (4,), got {shape}")
            want_d = (3,) if self.update == "quaternion" else (4,)
            want_g = (3,)
        d = want_d if self.deriv_shape is None else _shape(self.deriv_shape, "deriv_shape")
        g = want_g if self.diffusion_shape is None else _shape(self.diffusion_shape, "diffusion_shape")
        if d != want_d:
            raise StateError(f"deriv_shape {d} does not fit update {self.update!r} of shape {shape}: "
                             f"expected {want_d}")
        if g != want_g:
            raise StateError(f"diffusion_shape {g} does not fit update {self.update!r} of shape {shape}: "
                             f"expected {want_g}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "deriv_shape", d)
        object.__setattr__(self, "diffusion_shape", g)
        object.__setattr__(self, "noise_count", int(nc))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def deriv_size(self) -> int:
        return math.prod(self.deriv_shape or ())  # never None after __post_init__

    @property
    def tangent_size(self) -> int:
        """Size of one diffusion tangent (3 for quaternion states, the value size otherwise)."""
        return math.prod(self.diffusion_shape or ())  # never None after __post_init__


@dataclass(frozen=True)
class StateRecord:
    """Where one state lives in the three buffers (offsets counted in scalars)."""

    name: str
    spec: StateSpec
    model: str
    index: int
    offset: int
    size: int
    deriv_offset: int
    deriv_size: int
    # One entry per local noise source, in state-local order.
    noise_slots: tuple[int, ...] = ()
    diffusion_offsets: tuple[int, ...] = ()
    group: str = ""  # the noise-slot grouping key (``register(group=...)``; the model unless overridden)

    @property
    def value_slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)

    @property
    def deriv_slice(self) -> slice:
        return slice(self.deriv_offset, self.deriv_offset + self.deriv_size)

    @property
    def diffusion_size(self) -> int:
        return self.spec.noise_count * self.spec.tangent_size

    @property
    def update(self) -> str:
        return self.spec.update


@dataclass(frozen=True)
class UpdateRun:
    """A maximal run of adjacent Euclidean states: one fused ``x + h k`` slice."""

    offset: int
    size: int
    deriv_offset: int
    names: tuple[str, ...]

    @property
    def value_slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)

    @property
    def deriv_slice(self) -> slice:
        return slice(self.deriv_offset, self.deriv_offset + self.size)


@dataclass(frozen=True)
class NoiseEndpoint:
    """One (state, local source) pair inside a global noise slot, packed in the diffusion buffer."""

    state: str
    local: int
    slot: int
    diffusion_offset: int
    deriv_offset: int
    tangent_size: int


@dataclass(frozen=True)
class StateLayout:
    """Finalized, immutable, hashable layout (safe as a ``jax.jit`` static argument)."""

    records: tuple[StateRecord, ...]
    size: int
    deriv_size: int
    diffusion_size: int
    noise_slots: int
    endpoints: tuple[NoiseEndpoint, ...]
    runs: tuple[UpdateRun, ...]
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_index", {r.name: i for i, r in enumerate(self.records)})

    # -- lookup ---------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.records)

    def __getitem__(self, name: str) -> StateRecord:
        try:
            return self.records[self._index[name]]
        except KeyError:
            raise KeyError(f"no state named {name!r}; states: {', '.join(self.names)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def special(self) -> tuple[StateRecord, ...]:
        """States that go through a non-Euclidean update policy."""
        return tuple(r for r in self.records if r.update != "euclidean")

    def segment(self, names: Iterable[str]) -> slice:
        """One slice of ``x`` covering exactly ``names``; refuses names that are not contiguous."""
        names = list(names)
        if not names:
            raise StateError("segment() needs at least one state name")
        recs = sorted((self[n] for n in names), key=lambda r: r.offset)
        if len({r.name for r in recs}) != len(recs):
            raise StateError(f"segment() got a repeated name in {names}")
        for a, b in zip(recs, recs[1:]):
            if a.offset + a.size != b.offset:
                gap = [r.name for r in self.records if a.offset + a.size <= r.offset < b.offset]
                raise StateError(f"states {names} are not contiguous: {gap} lie between "
                                 f"{a.name!r} and {b.name!r}")
        return slice(recs[0].offset, recs[-1].offset + recs[-1].size)

    def deriv_segment(self, names: Iterable[str]) -> slice:
        """Like ``segment`` but into the derivative buffer."""
        recs = sorted((self[n] for n in names), key=lambda r: r.deriv_offset)
        for a, b in zip(recs, recs[1:]):
            if a.deriv_offset + a.deriv_size != b.deriv_offset:
                raise StateError(f"states {[r.name for r in recs]} are not contiguous in the derivative buffer")
        return slice(recs[0].deriv_offset, recs[-1].deriv_offset + recs[-1].deriv_size)

    # -- buffer views ---------------------------------------------------------------------------
    def _check_buffer(self, buf, n: int, what: str):
        shape = getattr(buf, "shape", None)
        if shape is None or len(shape) < 1 or shape[-1] != n:
            raise StateError(f"{what} buffer must have trailing size {n}, got shape {shape}")

    def get(self, x: Buffer, name: str) -> Buffer:
        """Read one state from a flat ``(n,)`` or batched ``(..., n)`` value buffer."""
        r = self[name]
        self._check_buffer(x, self.size, "value")
        return x[..., r.offset:r.offset + r.size].reshape(x.shape[:-1] + r.spec.shape)

    def get_deriv(self, dx: Buffer, name: str) -> Buffer:
        r = self[name]
        self._check_buffer(dx, self.deriv_size, "derivative")
        return dx[..., r.deriv_offset:r.deriv_offset + r.deriv_size].reshape(dx.shape[:-1] + r.spec.deriv_shape)

    def set(self, x: Buffer, name: str, value: Buffer) -> Buffer:
        """Return a copy of ``x`` with state ``name`` replaced (exact shape; never resizes).

        ``value`` has the state's shape, or the batch shape of ``x`` followed by it.
        Works for numpy (copy) and JAX (functional update) buffers.
        """
        r = self[name]
        self._check_buffer(x, self.size, "value")
        value_shape = tuple(np.shape(value))
        batch = tuple(x.shape[:-1])
        if value_shape not in (r.spec.shape, batch + r.spec.shape):
            raise StateError(f"state {name!r} has shape {r.spec.shape}; got a value of shape {value_shape}"
                             + (f" (batch {batch})" if batch else ""))
        flat = _reshape(value, (r.size,) if value_shape == r.spec.shape else batch + (r.size,))
        if isinstance(x, np.ndarray):
            out = x.copy()
            out[..., r.offset:r.offset + r.size] = flat
            return out
        return x.at[..., r.offset:r.offset + r.size].set(flat)

    def default_values(self, dtype: Any = np.float64) -> np.ndarray:
        """Zeros, with identity quaternions for quaternion states."""
        x = np.zeros(self.size, dtype=dtype)
        for r in self.special:
            x[r.offset] = 1.0
        return x

    def reset(self, values: Mapping[str, Any], base: Buffer | None = None, batch: int | None = None) -> np.ndarray:
        """Build a value buffer from ``values`` by name (exact shapes), over ``base`` or defaults.

        Every name and shape is checked before anything is written, so a bad entry changes nothing.
        """
        if base is None:
            base = self.default_values()
            if batch is not None:
                base = np.broadcast_to(base, (batch, self.size)).copy()
        base = np.array(base, dtype=np.float64, copy=True)
        self._check_buffer(base, self.size, "value")
        unknown = [n for n in values if n not in self]
        if unknown:
            raise StateError(f"unknown state(s) {unknown}; states: {', '.join(self.names)}")
        batch_shape = base.shape[:-1]
        for n, v in values.items():
            vs = tuple(np.shape(v))
            if vs not in (self[n].spec.shape, batch_shape + self[n].spec.shape):
                raise StateError(f"state {n!r} has shape {self[n].spec.shape}; got a value of shape {vs}")
        for n, v in values.items():
            base = self.set(base, n, np.asarray(v, dtype=np.float64))
        return base

    def describe(self) -> list[dict]:
        """One dict per state (for tables, HDF5 and ``mjharness inspect``)."""
        return [dict(name=r.name, model=r.model, update=r.update, offset=r.offset, size=r.size,
                     deriv_offset=r.deriv_offset, deriv_size=r.deriv_size,
                     diffusion_offsets=r.diffusion_offsets, diffusion_size=r.diffusion_size,
                     noise_slots=r.noise_slots, shape=r.spec.shape, error_control=r.spec.error_control)
                for r in self.records]


def _reshape(value, shape):
    if isinstance(value, np.ndarray) or np.isscalar(value) or isinstance(value, (list, tuple)):
        return np.reshape(np.asarray(value, dtype=np.float64), shape)
    return value.reshape(shape)


class StateRegistry:
    """Collects state declarations; ``finalize()`` freezes them into a ``StateLayout``."""

    def __init__(self):
        self._specs: dict[str, StateSpec] = {}
        self._models: dict[str, str] = {}
        self._groups: dict[str, str] = {}
        self._shared: list[tuple[tuple[str, int], ...]] = []
        self._layout: StateLayout | None = None

    @property
    def finalized(self) -> bool:
        return self._layout is not None

    def _check_open(self, what: str):
        if self._layout is not None:
            raise StateError(f"cannot {what}: the registry is finalized")

    def register(self, name: str, spec: StateSpec, model: str = "", group: str | None = None) -> str:
        """Declare state ``name``; ``model`` groups states for canonical noise-slot numbering.

        ``group`` (default ``model``) overrides that grouping only: a ``System`` keeps each member's own
        sub-model order with it, so a member's noise slots stay in its own canonical order."""
        self._check_open(f"register {name!r}")
        if not isinstance(name, str) or not name:
            raise StateError(f"a state name must be a non-empty string, got {name!r}")
        if not isinstance(spec, StateSpec):
            raise StateError(f"state {name!r}: spec must be a StateSpec, got {type(spec).__name__}")
        if name in self._specs:
            raise StateError(f"state {name!r} is already registered")
        self._specs[name] = spec
        self._models[name] = model
        self._groups[name] = model if group is None else group
        return name

    def __contains__(self, name: str) -> bool:
        return name in self._specs

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def spec(self, name: str) -> StateSpec:
        if name not in self._specs:
            raise KeyError(f"no state named {name!r}")
        return self._specs[name]

    def add_noise(self, name: str, count: int = 1) -> tuple[int, ...]:
        """Give state ``name`` ``count`` more local noise sources; returns their local indices."""
        self._check_open(f"add noise to {name!r}")
        spec = self.spec(name)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise StateError(f"noise count for state {name!r} must be a positive int, got {count!r}")
        first = spec.noise_count
        self._specs[name] = StateSpec(spec.shape, spec.deriv_shape, spec.diffusion_shape,
                                      first + int(count), spec.error_control, spec.update)
        return tuple(range(first, first + int(count)))

    def share_noise(self, endpoints: Iterable[tuple[str, int]]) -> None:
        """Declare that these (state, local source) endpoints are driven by one Wiener process."""
        self._check_open("share noise")
        eps = []
        for ep in endpoints:
            try:
                name, local = ep
            except (TypeError, ValueError):
                raise StateError(f"a noise endpoint is a (state, local index) pair, got {ep!r}") from None
            if name not in self._specs:
                raise StateError(f"share_noise: no state named {name!r}")
            nc = self._specs[name].noise_count
            if isinstance(local, bool) or not isinstance(local, (int, np.integer)) or not 0 <= local < nc:
                raise StateError(f"share_noise: state {name!r} has {nc} local noise source(s); "
                                 f"index {local!r} is out of range")
            eps.append((name, int(local)))
        if len(set(eps)) >= 2:
            self._shared.append(tuple(eps))

    def finalize(self) -> StateLayout:
        """Allocate the buffers; a second call returns the same layout."""
        if self._layout is None:
            self._layout = _build_layout(self._specs, self._models, self._shared, self._groups)
        return self._layout


def _build_layout(specs, models, shared, groups=None) -> StateLayout:
    # Values and derivatives: registration order.
    partial, off, doff = [], 0, 0
    for i, (name, spec) in enumerate(specs.items()):
        partial.append((name, spec, i, off, doff))
        off += spec.size
        doff += spec.deriv_size
    groups = models if groups is None else groups
    canonical, slot, n_slots = _noise_slots(specs, groups, shared)
    endpoints, diff_off, goff = _packed_endpoints(specs, canonical, slot, {name: d for name, _, _, _, d in partial})
    records = tuple(
        StateRecord(name=name, spec=spec, model=models[name], index=i, offset=o, size=spec.size,
                    deriv_offset=d, deriv_size=spec.deriv_size,
                    noise_slots=tuple(slot[(name, j)] for j in range(spec.noise_count)),
                    diffusion_offsets=tuple(diff_off[(name, j)] for j in range(spec.noise_count)),
                    group=groups[name])
        for name, spec, i, o, d in partial)
    return StateLayout(records=records, size=off, deriv_size=doff, diffusion_size=goff,
                       noise_slots=n_slots, endpoints=endpoints, runs=_update_runs(records))


def _noise_slots(specs, groups, shared) -> tuple[list, dict, int]:
    """Global noise slots: models in integration (first-registration) order, states by name within a model,
    local sources in order; shared endpoints merged with union-find. (canonical endpoints, slot of each, count)"""
    model_order = list(dict.fromkeys(groups[n] for n in specs))
    canonical = [(name, j) for m in model_order
                 for name in sorted(n for n in specs if groups[n] == m)
                 for j in range(specs[name].noise_count)]
    parent = {ep: ep for ep in canonical}

    def find(ep):
        while parent[ep] != ep:
            parent[ep] = parent[parent[ep]]
            ep = parent[ep]
        return ep

    rank = {ep: k for k, ep in enumerate(canonical)}
    for group in shared:
        roots = sorted({find(ep) for ep in group}, key=rank.__getitem__)
        for r in roots[1:]:
            parent[r] = roots[0]
    slot_of_root: dict = {}
    for ep in canonical:
        slot_of_root.setdefault(find(ep), len(slot_of_root))
    return canonical, {ep: slot_of_root[find(ep)] for ep in canonical}, len(slot_of_root)


def _packed_endpoints(specs, canonical, slot, deriv_off) -> tuple[tuple, dict, int]:
    """Packed diffusion storage: by global slot, endpoints in canonical order within a slot.
    (endpoints, diffusion offset of each, packed size)"""
    rank = {ep: k for k, ep in enumerate(canonical)}
    goff, endpoints, diff_off = 0, [], {}
    for name, j in sorted(canonical, key=lambda ep: (slot[ep], rank[ep])):
        ts = specs[name].tangent_size
        endpoints.append(NoiseEndpoint(name, j, slot[(name, j)], goff, deriv_off[name], ts))
        diff_off[(name, j)] = goff
        goff += ts
    return tuple(endpoints), diff_off, goff


def _update_runs(records) -> tuple:
    """Maximal runs of adjacent Euclidean states (value and derivative offsets both contiguous): one fused add."""
    runs: list[UpdateRun] = []
    cur: tuple[int, int, int, tuple[str, ...]] | None = None
    for r in records:
        if r.update == "euclidean" and r.size:
            if cur is not None and cur[0] + cur[1] == r.offset and cur[2] + cur[1] == r.deriv_offset:
                cur = (cur[0], cur[1] + r.size, cur[2], cur[3] + (r.name,))
            else:
                if cur is not None:
                    runs.append(UpdateRun(*cur))
                cur = (r.offset, r.size, r.deriv_offset, (r.name,))
        elif r.update != "euclidean":
            if cur is not None:
                runs.append(UpdateRun(*cur))
            cur = None
    if cur is not None:
        runs.append(UpdateRun(*cur))
    return tuple(runs)
