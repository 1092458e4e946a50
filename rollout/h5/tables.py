"""Tables in a rollout file: one 1-D dataset per column in a group, on one named row axis.

netCDF readers (netCDF-C, xarray's ``netcdf4`` engine) skip or crash on HDF5 compound types, so since
format version 2 a table (``/layout_table``, ``/episodes``, ``/sensors/table``) is a group holding each
column as its own dataset, strings as variable-length UTF-8, every column on the group's row dimension
scale (``xr.open_dataset(p, group="episodes")`` is the table). Version 1 files hold the same tables as
one compound dataset; ``read_table`` returns either as the same numpy structured array (strings as
bytes, as HDF5 returns a compound's strings), so the code that reads rows does not care which.
"""

from __future__ import annotations

import hashlib

import h5py
import numpy as np

from .format import checksum_kwargs


def _column(values: np.ndarray) -> np.ndarray:
    """A column as HDF5 should store it: text as variable-length UTF-8, numbers as they are."""
    if values.dtype.kind in "OSU":
        return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in values], dtype=h5py.string_dtype())
    return values


def _columns(table: np.ndarray) -> tuple[str, ...]:
    """The column names of the structured array ``table``."""
    names = table.dtype.names
    if names is None:
        raise TypeError(f"a table is a structured array, not an array of {table.dtype}")
    return names


def write_table(parent: h5py.Group, name: str, table: np.ndarray, row_axis: str, row_labels=None,
                column_attrs: dict | None = None) -> h5py.Group:
    """``parent/name``: the structured array ``table`` as a group of 1-D columns on the dimension ``row_axis``
    (a dimension scale inside the group: its values ``row_labels``, or the row numbers). ``column_attrs``:
    {column: {attr: value}} (units, long_name, ...). The group's ``columns`` attribute keeps the column order."""
    g = parent.create_group(name)
    labels = np.arange(len(table), dtype=np.int64) if row_labels is None else _column(np.asarray(row_labels))
    axis = g.create_dataset(row_axis, data=labels)
    axis.make_scale(row_axis)
    axis.attrs.update(long_name=f"row of the {name} table", units="1")
    g.attrs["columns"] = ",".join(_columns(table))
    for col in _columns(table):
        data = _column(np.asarray(table[col]))
        kw = checksum_kwargs() if data.dtype.kind not in "O" and data.size else {}
        ds = g.create_dataset(col, data=data, chunks=data.shape if kw else None, **kw)
        ds.dims[0].attach_scale(axis)
        for k, v in (column_attrs or {}).get(col, {}).items():
            ds.attrs[k] = v
    return g


def table_sha256(table: np.ndarray) -> str:
    """Hex SHA-256 of a table's rows, column by column (names, then values: text as UTF-8, numbers as
    little-endian bytes): the same for both storage forms, so a version 2 file's string columns (which HDF5
    stores outside any checksummed chunk) are covered by the ``<table>_sha256`` root attribute."""
    h = hashlib.sha256()
    for col in _columns(table):
        v = np.asarray(table[col])
        h.update(col.encode() + b"\0")
        if _bytes_field(v.dtype):
            h.update(b"\0".join(e if isinstance(e, bytes) else str(e).encode() for e in v) + b"\0")
        else:
            h.update(np.ascontiguousarray(v.astype(v.dtype.newbyteorder("<"))).tobytes())
    return h.hexdigest()


def _bytes_field(dtype) -> bool:
    return dtype.kind in "OSU"


def read_table(obj) -> np.ndarray:
    """The rows of a table (a version 2 column group or a version 1 compound dataset) as a structured array;
    string columns hold bytes in both cases."""
    if isinstance(obj, h5py.Dataset):
        return obj[()]
    names = [c for c in str(obj.attrs["columns"]).split(",") if c]
    cols = {c: obj[c][()] for c in names}
    n = len(next(iter(cols.values()))) if cols else 0
    dtype = np.dtype([(c, object if _bytes_field(v.dtype) else v.dtype) for c, v in cols.items()])
    out = np.empty(n, dtype=dtype)
    for c, v in cols.items():
        out[c] = [e if isinstance(e, bytes) else str(e).encode() for e in v] if _bytes_field(v.dtype) else v
    return out


def is_table(obj) -> bool:
    """Whether ``obj`` is a table (a column group or a compound dataset)."""
    if isinstance(obj, h5py.Group):
        return "columns" in obj.attrs
    return isinstance(obj, h5py.Dataset) and obj.dtype.names is not None
