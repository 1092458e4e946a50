"""A rollout file as xarray and pandas objects: ``RolloutFile.to_xarray()`` and ``.to_pandas(table)``.

``to_xarray`` reads through the ``RolloutFile`` (a SWMR reader when the file is being written), not
through a netCDF engine, which cannot open a file a writer holds open: the time axis is trimmed to the
samples flushed so far (``/progress``), so a live file gives a consistent prefix, never the NaN rows
of samples still to come. Dimension names, coordinates and attributes are those the file declares
(its dimension scales and CF attributes), as ``xr.open_dataset`` shows a closed file.

``to_pandas`` gives one row per record: ``"episodes"`` (world, episode, start_step, end_step, end),
``"sensors"`` (the sensor table) and ``"contacts"`` (every valid contact of every sample and world,
vector columns split into ``pos_x``, ``pos_y``, ...), strings as ``str``.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from .format import NC_DIM_ONLY, decode_attr

SCALE_KEYS = ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME")
PANDAS_TABLES = ("episodes", "contacts", "sensors")


def _dims(ds: h5py.Dataset, T: int, B: int) -> tuple[str, ...]:
    """The dimension names of ``ds``: its attached scales' names (its own name for a scale); an axis without
    a scale (files written before named axes) ``time``/``world`` where the shape says so, else
    ``<name>_dim<i>``."""
    name = ds.name.rsplit("/", 1)[-1]
    if decode_attr(ds.attrs.get("CLASS")) == "DIMENSION_SCALE":
        return (name,)
    guess = ("time", "world") if ds.shape[:2] == (T, B) and ds.ndim >= 2 else \
        ("time",) if name == "time" else ("world",) if ds.shape[:1] == (B,) else ()
    out: list[str] = []
    for i, dim in enumerate(ds.dims):
        try:
            scale = dim[0].name.rsplit("/", 1)[-1] if len(dim) else None
        except (OSError, RuntimeError, KeyError):
            scale = None
        out.append(scale or (guess[i] if i < len(guess) else f"{name}_dim{i}"))
    return tuple(out)


def is_dimension_only(ds) -> bool:
    """An axis stored as netCDF stores a dimension without a variable (``axes.dimension``)."""
    return str(decode_attr(ds.attrs.get("NAME", ""))).startswith(NC_DIM_ONLY)


def _attrs(ds) -> dict:
    return {k: decode_attr(v) for k, v in ds.attrs.items() if k not in SCALE_KEYS}


def _text(a: np.ndarray) -> np.ndarray:
    return np.array([v.decode() if isinstance(v, bytes) else v for v in a.reshape(-1)], dtype=object).reshape(a.shape)


def _values(rf, path: str, ds: h5py.Dataset, dims: tuple) -> np.ndarray:
    """The dataset's values as a live-safe read: virtual views through what they view, the time axis trimmed."""
    base = path.rsplit("/", 1)[-1]
    if ds.is_virtual and path in ("qpos", "qvel"):
        return rf._vds(path)
    if ds.is_virtual and base == "time":
        return rf.time
    if ds.is_virtual and path.startswith("sensors/"):
        return rf.sensor(base)
    if ds.is_virtual and "carry" in rf.h5 and path in dict(rf.carry_layout):
        return rf.carry_entry(path).reshape((rf.samples, rf.batch) + ds.shape[2:])
    sel = np.s_[: rf.samples] if dims[:1] == ("time",) else ()
    v = rf.read(path, sel)
    if isinstance(v, bytes):  # a scalar string (the MJCF, a source text)
        return np.array(v.decode(), dtype=object)
    return _text(v) if v.dtype.kind in "OS" else v


def to_xarray(rf, group: str | None = None):
    """The datasets of ``group`` (the root by default; ``"outputs"``, ``"sensors"``, ``"episodes"``, ...) as an
    ``xarray.Dataset`` over the flushed samples."""
    xr = _need("xarray")
    where = group.strip("/") if group else ""
    g = rf.h5[where] if where else rf.h5
    if not isinstance(g, h5py.Group):
        raise KeyError(f"{rf.path}: /{where} is not a group")
    coords: dict[str, Any] = {}
    data: dict[str, Any] = {}  # name -> xarray.Variable
    T, B = rf.h5["x"].shape[:2]
    for name, ds in g.items():
        if not isinstance(ds, h5py.Dataset) or ds.dtype.names or is_dimension_only(ds):
            continue  # a version 1 compound table (rf.table(...)), an axis without values (bytes of the MJB)
        path = f"{where}/{name}" if where else name
        dims = _dims(ds, T, B)
        var = xr.Variable(dims, _values(rf, path, ds, dims), attrs=_attrs(ds))
        (coords if dims == (name,) else data)[name] = var
    attrs = {k: v for k, v in rf.attrs.items() if not isinstance(v, (dict, list))} if not where else _attrs(g)
    return xr.Dataset(data, coords=coords, attrs=attrs)


def to_pandas(rf, table: str):
    """Table ``table`` ("episodes", "contacts" or "sensors") as a ``pandas.DataFrame``."""
    if table not in PANDAS_TABLES:
        raise ValueError(f"to_pandas: table must be one of {PANDAS_TABLES}, got {table!r}")
    return _need("pandas").DataFrame(_ROWS[table](rf))


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"this conversion needs {module}: pip install {module} (or mjharness[dev])") from None


def _episodes(rf) -> dict:
    """The stored ``/episodes`` of a finished run, else derived from the recorded carry (a run still going)."""
    try:
        t = rf.table("episodes")
        cols = {c: t[c] for c in t.dtype.names}
    except KeyError:
        rows = rf.episode_table()
        names = ("world", "episode", "start_step", "end_step", "end") + (("return",) if rows and "return" in rows[0]
                                                                          else ())
        cols = {c: np.array([r[c] for r in rows]) for c in names}
    return {c: _str_column(v) for c, v in cols.items()}


def _sensors(rf) -> dict:
    t = rf.table("sensors")
    return {c: _str_column(t[c]) for c in t.dtype.names}


def _str_column(v: np.ndarray) -> np.ndarray:
    if v.dtype.kind in "OSU":
        return np.array([e.decode() if isinstance(e, bytes) else str(e) for e in v], dtype=object)
    return v


def _contacts(rf) -> dict:
    """Every valid contact slot of every flushed sample and world, geoms by id and by name."""
    import mujoco

    from mjharness.adapters.contacts import COLUMNS

    name = rf.contacts_output()
    slots = rf.output(name)  # (T, B, K, C)
    col = {c: i for i, c in enumerate(COLUMNS)}
    j, w, k = np.nonzero(slots[..., col["valid"]] > 0)
    rows = slots[j, w, k]
    model = rf.model()
    geom = lambda ids: np.array([mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, int(i)) or f"geom{int(i)}"  # noqa: E731
                                 for i in ids], dtype=object)
    out = {"time": rf.time[j], "sample": j, "world": w, "slot": k}
    for c in COLUMNS:
        if c == "valid":
            continue
        v = rows[:, col[c]]
        out[c] = v.astype(np.int64) if c in ("geom1", "geom2", "id") else v
        if c in ("geom1", "geom2"):
            out[f"{c}_name"] = geom(v)
    return out


_ROWS = {"episodes": _episodes, "sensors": _sensors, "contacts": _contacts}
