"""The ``/layout`` table <-> ``StateLayout``, and the carry's rows and flat vector.

One compound row per state (name, model, joint, update kind, shapes, offsets into x / the derivative
/ the diffusion buffers, noise slots), then one row per carry entry: update kind ``"carry"``, value
offset/size into the flat carry vector (``/carry``'s last axis), no derivative, diffusion or noise
(offsets -1, sizes 0) and error control ``"none"``, because a carry is never integrated.
``layout_from_table`` rebuilds the states only; ``carry_layout_from_table`` the carry's (name, size)
pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from mjharness.integrators import StateError, StateLayout, StateRegistry, StateSpec

CARRY_UPDATE = "carry"

_STR_FIELDS = ("name", "model", "joint", "update", "shape", "deriv_shape", "diffusion_shape", "error_control",
               "noise_slots", "group")
_INT_FIELDS = ("offset", "size", "deriv_offset", "deriv_size", "diffusion_offset", "diffusion_size", "noise_count")


def _shape_str(shape) -> str:
    return ",".join(str(int(d)) for d in shape)


# A carry layout as given: ordered (name, size) or (name, shape) pairs, or a mapping name -> either.
CarryLayout: TypeAlias = "Iterable[tuple[str, int | Sequence[int]]] | Mapping[str, int | Sequence[int]]"


def _parse_shape(s: str) -> tuple[int, ...]:
    return tuple(int(d) for d in s.split(",")) if s else ()


# -- the carry ------------------------------------------------------------------------------------

def normalize_carry_layout(carry_layout) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``carry_layout`` (ordered (name, size) or (name, shape) pairs, or a mapping name -> either; a
    size means shape (size,)) as a tuple of (name, shape tuple) pairs; raises StateError naming a bad
    entry."""
    items = carry_layout.items() if isinstance(carry_layout, Mapping) else carry_layout
    out, seen = [], set()
    for item in items:
        try:
            name, shape = item
        except (TypeError, ValueError):
            raise StateError(f"carry_layout entries must be (name, shape) pairs, got {item!r}") from None
        if not isinstance(name, str) or not name:
            raise StateError(f"carry_layout: a carry entry needs a non-empty str name, got {name!r}")
        if name in seen:
            raise StateError(f"carry_layout: carry entry {name!r} appears twice")
        seen.add(name)
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)
        try:
            shape = tuple(shape)
        except TypeError:
            raise StateError(f"carry entry {name!r}: shape must be an int or a tuple of ints, got {shape!r}") from None
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            raise StateError(f"carry entry {name!r}: shape must hold non-negative ints, got {shape!r}")
        out.append((name, tuple(int(d) for d in shape)))
    return tuple(out)


def _carry_slots(carry_layout):
    offset = 0
    for name, shape in normalize_carry_layout(carry_layout):
        size = int(np.prod(shape, dtype=np.int64))
        yield name, shape, offset, size
        offset += size


def carry_size(carry_layout: CarryLayout) -> int:
    """nc: the length of the flat carry vector of one world."""
    return sum(size for *_, size in _carry_slots(carry_layout))


def carry_vector(carry_layout: CarryLayout, carry: Mapping) -> np.ndarray:
    """The carry dict (name -> (B, size) or (B, *shape)) as the flat float64 (B, nc) array the file stores."""
    slots = list(_carry_slots(carry_layout))
    names = [s[0] for s in slots]
    if set(carry) != set(names):
        raise StateError(f"carry holds {sorted(carry)}, the carry layout names {names}")
    parts, B = [], None
    for name, shape, _, size in slots:
        v = np.asarray(carry[name], dtype=np.float64)
        # A flat (B, size) entry fits a declared size; a declared shape needs exactly that shape.
        fits = v.ndim >= 1 and (v.shape[1:] == shape or (len(shape) == 1 and math.prod(v.shape[1:]) == size))
        if not fits or (B is not None and v.shape[0] != B):
            want = f"({'B' if B is None else B}{''.join(f', {d}' for d in shape)})"
            raise StateError(f"carry entry {name!r} must have shape {want}, got {v.shape}")
        B = v.shape[0]
        parts.append(v.reshape(B, size))
    if B is None:
        raise StateError("carry_vector: the carry layout is empty (nothing to flatten)")
    return np.concatenate(parts, axis=1)


def carry_dict(carry_layout: CarryLayout, flat: ArrayLike) -> dict[str, np.ndarray]:
    """The flat carry (..., nc) as a dict name -> (..., size), or (..., *shape) for entries declared
    with a shape (copies, in layout order)."""
    a = np.asarray(flat)
    nc = carry_size(carry_layout)
    if a.ndim < 1 or a.shape[-1] != nc:
        raise StateError(f"a flat carry must end in its size {nc}, got shape {a.shape}")
    lead = a.shape[:-1]
    return {name: a[..., off:off + size].reshape(lead + shape).copy()
            for name, shape, off, size in _carry_slots(carry_layout)}


# -- the table ------------------------------------------------------------------------------------

def _state_rows(layout: StateLayout, joint_of=None) -> list[dict]:
    return [dict(name=r.name, model=r.model, joint=(joint_of(r.name) if joint_of else None) or "", update=r.update,
                 shape=_shape_str(r.spec.shape), deriv_shape=_shape_str(r.spec.deriv_shape),
                 diffusion_shape=_shape_str(r.spec.diffusion_shape), error_control=r.spec.error_control,
                 noise_slots=_shape_str(r.noise_slots), offset=r.offset, size=r.size, deriv_offset=r.deriv_offset,
                 deriv_size=r.deriv_size, diffusion_offset=r.diffusion_offsets[0] if r.diffusion_offsets else -1,
                 diffusion_size=r.diffusion_size, noise_count=r.spec.noise_count,
                 group="" if r.group == r.model else r.group)
            for r in layout.records]


def _carry_rows(carry_layout) -> list[dict]:
    return [dict(name=name, model="", joint="", update=CARRY_UPDATE, shape=_shape_str(shape), deriv_shape="",
                 diffusion_shape="", error_control="none", noise_slots="", offset=off, size=size, deriv_offset=-1,
                 deriv_size=0, diffusion_offset=-1, diffusion_size=0, noise_count=0, group="")
            for name, shape, off, size in _carry_slots(carry_layout)]


def _table(rows: list[dict]) -> np.ndarray:
    # Field order as in the first files: eight strings, the ints, then noise_slots; ``group`` (a System's
    # noise-slot grouping, see StateRegistry.register) only when some state has one.
    width = {f: max([len(row[f].encode()) for row in rows] + [1]) for f in _STR_FIELDS}
    dtype = np.dtype([(f, f"S{width[f]}") for f in _STR_FIELDS[:8]] + [(f, "<i8") for f in _INT_FIELDS]
                     + [("noise_slots", f"S{width['noise_slots']}")]
                     + ([("group", f"S{width['group']}")] if any(row["group"] for row in rows) else []))
    fields = dtype.names
    assert fields is not None  # a structured dtype, made above
    table = np.zeros(len(rows), dtype=dtype)
    for i, row in enumerate(rows):
        table[i] = tuple(row[f].encode() if f in _STR_FIELDS else row[f] for f in fields)
    return table


def _rows_of(table) -> list[dict]:
    names = set(table.dtype.names or ())

    def value(row, f):
        if f not in names:  # files written before a column existed (e.g. ``model``): empty / 0
            return "" if f in _STR_FIELDS else 0
        v = row[f]
        if f in _STR_FIELDS:
            return v.decode() if isinstance(v, bytes) else str(v)
        return int(v)

    return [{f: value(row, f) for f in _STR_FIELDS + _INT_FIELDS} for row in table]


def layout_table(layout: StateLayout, joint_of: Callable[[str], str | None] | None = None,
                 carry_layout: CarryLayout = ()) -> np.ndarray:
    """The layout (and carry rows, if any) as a numpy structured array (the ``/layout`` compound table)."""
    return _table(_state_rows(layout, joint_of) + _carry_rows(carry_layout))


def with_carry_rows(table, carry_layout) -> np.ndarray:
    """``table``'s state rows followed by the rows of ``carry_layout`` (replacing any carry rows it had)."""
    states = [row for row in _rows_of(table) if row["update"] != CARRY_UPDATE]
    return _table(states + _carry_rows(carry_layout))


def carry_layout_from_table(table: np.ndarray) -> tuple[tuple[str, int], ...]:
    """The (name, size) pairs of the table's carry rows, in vector order (() for a table without any);
    each row's ``shape`` column keeps the shape it was declared with."""
    rows = sorted((row for row in _rows_of(table) if row["update"] == CARRY_UPDATE), key=lambda row: row["offset"])
    out = tuple((row["name"], row["size"]) for row in rows)
    for row, (name, _, off, size) in zip(rows, _carry_slots(out)):
        if row["offset"] != off or int(np.prod(_parse_shape(row["shape"]), dtype=np.int64)) != size:
            raise StateError(f"/layout carry row {name!r} has offset/size/shape {row['offset']}/{row['size']}/"
                             f"({row['shape']}), its place in the carry vector is {off}/{size}")
    return out


def carry_slots_of_table(table) -> dict:
    """{carry name: (declared shape, offset, size)} of the table's carry rows."""
    rows = sorted((row for row in _rows_of(table) if row["update"] == CARRY_UPDATE), key=lambda row: row["offset"])
    return {row["name"]: (_parse_shape(row["shape"]), int(row["offset"]), int(row["size"])) for row in rows}


def layout_from_table(table: np.ndarray) -> StateLayout:
    """Rebuild the ``StateLayout`` of the states a ``/layout`` table describes (carry rows are not
    states) and check every offset matches."""
    rows = sorted((row for row in _rows_of(table) if row["update"] != CARRY_UPDATE), key=lambda row: row["offset"])
    reg = StateRegistry()
    for row in rows:
        spec = StateSpec(_parse_shape(row["shape"]), _parse_shape(row["deriv_shape"]),
                         _parse_shape(row["diffusion_shape"]), row["noise_count"], row["error_control"], row["update"])
        reg.register(row["name"], spec, model=row["model"], group=row["group"] or None)
    by_slot: dict[int, list] = {}
    for row in rows:
        for j, slot in enumerate(_parse_shape(row["noise_slots"])):
            by_slot.setdefault(slot, []).append((row["name"], j))
    for group in by_slot.values():
        if len(group) > 1:
            reg.share_noise(group)
    layout = reg.finalize()
    for row in rows:
        r = layout[row["name"]]
        if (r.offset, r.deriv_offset, r.noise_slots) != (row["offset"], row["deriv_offset"],
                                                        _parse_shape(row["noise_slots"])):
            raise StateError(f"/layout row {r.name!r} does not rebuild to the same offsets (table "
                             f"{row['offset']}/{row['deriv_offset']}, rebuilt {r.offset}/{r.deriv_offset})")
    return layout


def vds_segment(ds) -> slice:
    """The columns of ``/x`` a virtual dataset (``/qpos``, ``/qvel``) maps."""
    src = ds.virtual_sources()[0]
    sel = src.src_space.get_select_bounds()
    return slice(int(sel[0][2]), int(sel[1][2]) + 1)
