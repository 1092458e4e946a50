"""The axes of a rollout file: dimension scales and their labels, the per-output and sensor groups' axes, and the
virtual views (``/qpos``, ``/qvel``, ``/carry/<name>``, ``/sensors/<name>``) over the sample datasets."""

from __future__ import annotations

import h5py
import numpy as np

from . import cf
from .format import (
    NC_DIM_ONLY,
    FileSpec,
    checksum_kwargs,
    chunks,
    compression_kwargs,
    decode_attr,
)
from .layout import carry_slots_of_table, normalize_carry_layout
from .tables import read_table, write_table


def _text(g, name: str, text: str) -> None:
    ds = g.create_dataset(name, data=text, dtype=h5py.string_dtype())
    cf.describe(ds, *cf.VARIABLES[f"model/{name}"])


def dimension(g, name: str, size: int) -> h5py.Dataset:
    """A named axis without coordinate values, as netCDF-4 stores one: a dimension scale that is never written
    (no storage) and whose scale name marks it as "a netCDF dimension but not a netCDF variable"."""
    ds = g.create_dataset(name, shape=(size,), dtype="f4")
    ds.make_scale(f"{NC_DIM_ONLY}{size:10d}")
    return ds


def _state_labels(table) -> list[str]:
    """One label per component of x: the state's name, with ``[i]`` for states of more than one value."""
    rows = sorted((r for r in table if decode_name(r["update"]) != "carry"), key=lambda r: int(r["offset"]))
    return [decode_name(r["name"]) + ("" if int(r["size"]) == 1 else f"[{i}]") for r in rows
            for i in range(int(r["size"]))]


def _carry_labels(carry_layout) -> list[str]:
    return [name + ("" if size == 1 else f"[{i}]") for name, size in
            ((nm, int(np.prod(sh, dtype=np.int64))) for nm, sh in carry_layout) for i in range(size)]


def decode_name(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _attach_scales(f: h5py.File, names, world, components) -> None:
    """time (on the time-major (T, B, n) ones), world and component scales on the datasets ``names``."""
    for name in names:
        ds = f[name]
        if ds.ndim == 3:
            ds.dims[0].attach_scale(f["time"])
        ds.dims[ds.ndim - 2].attach_scale(world)
        ds.dims[ds.ndim - 1].attach_scale(components)


def _state_axes(f: h5py.File, spec: FileSpec, B: int, n: int, c0) -> None:
    """Named, labelled axes for generic readers (xarray/netCDF): ``time``, ``world``, ``state`` (x's
    components by name), ``carry_index``; qpos/qvel get theirs where they are attached (``_virtual``)."""
    f["time"].make_scale("time")
    world = f.create_dataset("world", data=np.arange(B, dtype=np.int64))
    world.make_scale("world")
    labels = _state_labels(read_table(f["layout_table"]))
    if len(labels) == n:
        _attach_scales(f, ("x", "x0"), world, _label_scale(f, "state", labels))
    for name in ("status", "status_step"):
        f[name].dims[0].attach_scale(world)
    if c0 is not None:
        cl = _carry_labels(normalize_carry_layout(spec.carry_layout))
        if len(cl) == c0.shape[1]:
            _attach_scales(f, ("carry", "carry0"), world, _label_scale(f, "carry_index", cl))
    f["progress"].dims[0].attach_scale(_label_scale(f, "progress_field", ["samples", "complete"]))
    f.attrs["state_labels"] = "state, qpos_index, qvel_index, carry_index: component labels of x, qpos, qvel, carry"


def _label_scale(f: h5py.File, path: str, labels) -> h5py.Dataset:
    ds = f.create_dataset(path, data=np.array([str(v) for v in labels], dtype=h5py.string_dtype()))
    ds.make_scale(path.rsplit("/", 1)[-1])
    cf.describe(ds, *cf.label_attrs(path))
    return ds


def _create_outputs(f: h5py.File, spec: FileSpec, T: int, B: int, model) -> None:
    """``/outputs/<name>`` (T, B, ...) with their attributes and dimension scales, the ``/sensors`` table
    and, per sensor, virtual datasets ``/sensors/<name>`` over ``/outputs/sensordata``."""
    g = f.create_group("outputs")
    time, world = _group_axes(g, T, B)
    for name, shape, attrs, labels, comps in spec.outputs:
        shape = tuple(shape)
        width = int(np.prod(shape, dtype=np.int64))
        ch = chunks(T, B, width, spec.time_chunk)
        ds = g.create_dataset(name, shape=(T, B) + shape, maxshape=(None, B) + shape, dtype=spec.sample_dtype,
                              chunks=ch[:2] + shape, fillvalue=np.nan, **compression_kwargs(spec.compression),
                              **checksum_kwargs())
        key = name.replace("/", "_").replace(":", "_")
        for k, v in attrs.items():
            if np.ndim(v) >= 2:  # netCDF cannot read a 2-D attribute: a dataset beside the output instead
                _array_beside(g, f"_{key}_{k}", np.asarray(v), f"{k} of output {name}")
                ds.attrs[k] = f"outputs/_{key}_{k}"
            else:
                ds.attrs[k] = v
        # an output kind may name its own (flight outputs); else the MuJoCo field it reads
        ds.attrs["long_name"] = attrs.get("long_name") or (f"recorded output {name} (MuJoCo "
                                                           f"{attrs.get('mujoco_field', 'user function')})")
        ds.attrs.setdefault("units", "unknown")
        ds.dims[0].attach_scale(time)
        ds.dims[1].attach_scale(world)
        axes = [labels, comps] if len(shape) >= 2 else [comps or labels]
        for i, size in enumerate(shape):  # every axis named: its labels, or indices where there are none
            lab = axes[i] if i < len(axes) and axes[i] and len(axes[i]) == size else [str(j) for j in range(size)]
            ds.dims[2 + i].attach_scale(_label_scale(f, f"outputs/_{key}_{2 + i}", lab))
    if spec.sensors:
        units = [cf.sensor_units(model, r) for r in spec.sensors]
        rows = np.array([(r["name"], r["type"], r["object"], r["adr"], r["dim"], r["cutoff"], r["noise"], u)
                         for r, u in zip(spec.sensors, units)], dtype=SENSOR_DTYPE)
        sg = f.create_group("sensors")
        sg.attrs["table"] = "sensors/table: name, type, object, adr, dim, cutoff, noise, units (MuJoCo sensor fields)"
        write_table(sg, "table", rows, "sensor", [r["name"] for r in spec.sensors], column_attrs=SENSOR_COLUMNS)
        if "sensordata" in f["outputs"]:
            _sensor_views(f, T, B)
            _sensordata_units(f, rows)


def _array_beside(g, name: str, v: np.ndarray, long_name: str) -> None:
    ds = g.create_dataset(name, data=v)
    for i, size in enumerate(v.shape):
        ds.dims[i].attach_scale(dimension(g, f"{name}_{i}", size))
    cf.describe(ds, long_name, "1")


def _sensordata_units(f: h5py.File, rows) -> None:
    """``/outputs/_sensordata_units``: each sensordata column's unit (its sensor's), on the column axis."""
    ds = f["outputs/sensordata"]
    if ds.ndim != 3 or not len(ds.dims[2]):
        return
    units = ["unknown"] * ds.shape[2]
    for r in rows:
        units[int(r["adr"]):int(r["adr"]) + int(r["dim"])] = [str(r["units"])] * int(r["dim"])
    u = f["outputs"].create_dataset("_sensordata_units", data=np.array(units, dtype=h5py.string_dtype()))
    u.dims[0].attach_scale(ds.dims[2][0])
    cf.describe(u, "unit of each sensordata column", "1")
    ds.attrs["units"] = cf.common_units(units, "outputs/_sensordata_units")


SENSOR_DTYPE = np.dtype([("name", h5py.string_dtype()), ("type", h5py.string_dtype()),
                         ("object", h5py.string_dtype()), ("adr", "i8"), ("dim", "i8"), ("cutoff", "f8"),
                         ("noise", "f8"), ("units", h5py.string_dtype())])
SENSOR_COLUMNS = {c: {"long_name": d, "units": u} for c, d, u in (
    ("name", "sensor name", "1"), ("type", "MuJoCo sensor type (mjtSensor)", "1"),
    ("object", "the object the sensor is attached to (type:name)", "1"),
    ("adr", "first column in sensordata (sensor_adr)", "1"), ("dim", "columns in sensordata (sensor_dim)", "1"),
    ("cutoff", "sensor_cutoff (in the sensor's units)", "1"), ("noise", "sensor_noise (standard deviation)", "1"),
    ("units", "unit of the sensor's values", "1"))}


def _sensor_views(f: h5py.File, T: int, B: int) -> None:
    src_ds = f["outputs/sensordata"]
    nsd = src_ds.shape[2]
    for r in read_table(f["sensors/table"]):
        name, adr, dim = r["name"].decode() if isinstance(r["name"], bytes) else r["name"], int(r["adr"]), int(r["dim"])
        path = f"sensors/{name}"
        kept = _drop(f, path)
        lay = h5py.VirtualLayout(shape=(T, B, dim), dtype=src_ds.dtype)  # the source's width
        src = h5py.VirtualSource(".", "outputs/sensordata", shape=(T, B, nsd))
        if T and B:
            lay[:, :, :] = src[:, :, adr:adr + dim]
        vds = f.create_virtual_dataset(path, lay, fillvalue=np.nan)
        for k in ("semantics", "stage"):
            vds.attrs[k] = src_ds.attrs[k]
        vds.attrs["long_name"] = f"sensor {name} ({decode_name(r['type'])} of {decode_name(r['object'])})"
        vds.attrs["units"] = decode_name(r["units"]) if "units" in (r.dtype.names or ()) else "unknown"
        vds.attrs["sensordata_columns"] = f"{adr}:{adr + dim}"
        vds.attrs.update(kept)
        _sensor_axes(f, vds, name, dim, B)


def _group_axes(g, T: int, B: int):
    """``<group>/time`` (a view of ``/time`` that follows its growth) and ``<group>/world`` as dimension scales,
    so a generic reader opening the group alone (xarray ``group=``) gets time and world coordinates."""
    if "time" not in g:
        lay = h5py.VirtualLayout(shape=(T,), maxshape=(None,), dtype="f8")
        U = h5py.h5s.UNLIMITED
        lay[0:U] = h5py.VirtualSource(".", "time", shape=(T,), maxshape=(None,))[0:U]
        ds = g.create_virtual_dataset("time", lay, fillvalue=np.nan)
        ds.make_scale("time")
        cf.describe(ds, *cf.VARIABLES["time"])
    if "world" not in g:
        ds = g.create_dataset("world", data=np.arange(B, dtype=np.int64))
        ds.make_scale("world")
        cf.describe(ds, *cf.VARIABLES["world"])
    return g["time"], g["world"]


def _sensor_axes(f: h5py.File, vds, name: str, dim: int, B: int) -> None:
    """time, world and the sensor's components (``<name>[i]``) on ``/sensors/<name>``."""
    sg = f["sensors"]
    time, world = _group_axes(sg, f["time"].shape[0], B)
    key = f"_{name}_component"
    comp = sg[key] if key in sg else _label_scale(f, f"sensors/{key}", [name if dim == 1 else f"{name}[{i}]"
                                                                       for i in range(dim)])
    for i, scale in enumerate((time, world, comp)):
        vds.dims[i].attach_scale(scale)


# Attributes HDF5's dimension scales keep for themselves (references into the file).
SCALE_KEYS = ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME")


def _drop(f: h5py.File, path: str) -> dict:
    """Delete ``path`` (a view about to be rebuilt at a new length); returns its own attributes to put back."""
    if path not in f:
        return {}
    kept = {k: v for k, v in f[path].attrs.items() if k not in SCALE_KEYS}
    del f[path]
    return kept


def _virtual(f: h5py.File, name: str, seg: slice, T: int, B: int, n: int) -> None:
    kept = _drop(f, name)
    width = seg.stop - seg.start
    lay = h5py.VirtualLayout(shape=(T, B, width), dtype=f["x"].dtype)  # the source's width (float64 or float32)
    # "." = this very file, so the virtual datasets survive renaming or moving the file.
    src = h5py.VirtualSource(".", "x", shape=(T, B, n))
    if T and B and width:
        lay[:, :, :] = src[:, :, seg.start:seg.stop]
    vds = f.create_virtual_dataset(name, lay, fillvalue=np.nan)
    vds.attrs.update(kept)
    _attach_vds_axes(f, vds, name, seg)


def _carry_views(f: h5py.File, T: int, B: int) -> None:
    """``/<name>`` (T, B, *shape) over the carry entry ``name`` for each name of the ``carry_views`` attribute (a
    closed loop's applied controls ``/ctrl`` and episode index ``/episode``): the carry holds them, no second copy."""
    names = [v for v in decode_attr(f.attrs.get("carry_views", "")).split(",") if v]
    if not names:
        return
    slots = carry_slots_of_table(layout_rows(f))
    nc = f["carry"].shape[2]
    for name in names:
        shape, off, size = slots[name]
        kept = _drop(f, name)
        lay = h5py.VirtualLayout(shape=(T, B) + ((size,) if shape else ()), dtype=f["carry"].dtype)
        src = h5py.VirtualSource(".", "carry", shape=(T, B, nc))
        if T and B:
            if shape:
                lay[:, :, :] = src[:, :, off:off + size]
            else:
                lay[:, :] = src[:, :, off]
        vds = f.create_virtual_dataset(name, lay, fillvalue=np.nan)
        vds.attrs.update(kept)
        if "time" in f and "world" in f:
            vds.dims[0].attach_scale(f["time"])
            vds.dims[1].attach_scale(f["world"])
            if shape:
                key = f"{name}_index"
                labels = f[key] if key in f else _label_scale(f, key, [f"{name}[{i}]" for i in range(size)])
                vds.dims[2].attach_scale(labels)


def _attach_vds_axes(f: h5py.File, vds, name: str, seg: slice) -> None:
    """``time``, ``world`` and ``<name>_index`` (labels of the segment's components) on /qpos or /qvel."""
    if not all(k in f for k in ("time", "world", "state")):
        return  # files written before named axes
    key = f"{name}_index"
    labels = f[key] if key in f else _label_scale(f, key, [decode_name(v) for v in f["state"][seg]])
    for i, scale in enumerate((f["time"], f["world"], labels)):
        vds.dims[i].attach_scale(scale)


def layout_rows(f: h5py.File) -> np.ndarray:
    """The layout table of a file of either version (``/layout_table`` columns, or version 1's ``/layout``)."""
    return read_table(f["layout_table"] if "layout_table" in f else f["layout"])
