"""Creating, extending and streaming into a rollout file.

Files are created in the HDF5 1.10 file format (``format.LIBVER``: the oldest with SWMR and virtual
datasets, so HDF5 1.10 and later read them), every dataset made up front (chunked, Fletcher-32
checksummed, growable along time), then the writer switches to SWMR (single writer, multiple
readers) mode, in which HDF5 orders its metadata flushes so that a reader (``swmr=True``) always sees
a consistent file. Every chunk is written and flushed by one background thread, rows first and the
``/progress`` dataset ([samples, complete]) last, so a reader sees a consistent prefix at any time,
never a state without its carry, and a killed run leaves a file holding every flushed chunk. A write
that fails (disk full, I/O error, vanished directory) is captured in the thread and raised as
``RolloutWriteError`` by the next ``put`` or by ``close``; the file then keeps ``complete=False`` and
the samples of the last chunk fully flushed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import threading
from collections.abc import Mapping

import h5py
import mujoco
import numpy as np

from mjharness.integrators import StateError
from mjharness.scenes import scene_info

from . import cf
from .digest import ChunkDigests, content_digest, seal, seal_path
from .errors import RolloutFileError, RolloutWriteError
from .format import (
    FORMAT_VERSION,
    INTEGRITY,
    LIBVER,
    NC_DIM_ONLY,
    FileSpec,
    checksum_kwargs,
    chunks,
    compression_kwargs,
    create_samples_dataset,
    create_small,
    decode_attr,
    is_output,
    set_attr,
)
from .layout import carry_size, carry_slots_of_table, carry_vector, normalize_carry_layout, vds_segment, with_carry_rows
from .model import asset_key, model_mjb
from .provenance import write_code
from .tables import read_table, table_sha256, write_table


def _carry0(spec: FileSpec, carry_layout, B: int) -> np.ndarray | None:
    nc = carry_size(carry_layout)
    if not carry_layout:
        given = len(spec.carry0) if isinstance(spec.carry0, Mapping) else np.size(spec.carry0)
        if spec.carry0 is not None and given:
            raise RolloutFileError("FileSpec.carry0 is given but carry_layout is empty (no carry to store)")
        return None
    if spec.carry0 is None:
        raise RolloutFileError(f"FileSpec.carry_layout names a carry ({nc} values per world) but carry0 is None")
    c0 = carry_vector(carry_layout, spec.carry0) if isinstance(spec.carry0, Mapping) else \
        np.asarray(spec.carry0, dtype=np.float64)
    if c0.shape != (B, nc):
        raise RolloutFileError(f"FileSpec.carry0 must have shape (batch, nc) = ({B}, {nc}), got {c0.shape}")
    return c0


def _model_record(spec: FileSpec) -> tuple[str, bytes | None, int | None]:
    """(mjcf, mjb, signature) from ``spec.model``, or as the spec gives them."""
    if spec.model is None:
        mjb, sig = spec.mjb, spec.model_signature
        if mjb is not None and not isinstance(mjb, (bytes, bytearray, np.ndarray)):
            raise RolloutFileError(f"FileSpec.mjb must be bytes (model_mjb(model)), got {type(mjb).__name__}")
        if sig is not None and (mjb is None or isinstance(sig, bool) or not isinstance(sig, (int, np.integer))
                                or not 0 <= int(sig) < 2**64):
            raise RolloutFileError(f"FileSpec.model_signature must be model.signature (a uint64) beside mjb, "
                                   f"got {sig!r}")
        return spec.mjcf, mjb, sig
    if not isinstance(spec.model, mujoco.MjModel):
        raise RolloutFileError(f"FileSpec.model must be an mujoco.MjModel, got {type(spec.model).__name__}")
    if spec.mjb is not None or spec.model_signature is not None:
        raise RolloutFileError("FileSpec: give model, or mjb with model_signature, not both")
    return spec.mjcf or scene_info(spec.model).xml, model_mjb(spec.model), int(spec.model.signature)


def _check_spec(spec: FileSpec):
    """Validate what is not already a checked engine value; returns (x0, carry layout, carry0, model record)."""
    x0 = np.asarray(spec.x0, dtype=np.float64)
    if x0.ndim != 2:
        raise RolloutFileError(f"FileSpec.x0 must have shape (batch, n), got {x0.shape}")
    try:
        carry_layout = normalize_carry_layout(spec.carry_layout)
        c0 = _carry0(spec, carry_layout, x0.shape[0])
    except StateError as e:
        raise RolloutFileError(f"FileSpec carry: {e}") from None
    record = _model_record(spec)
    if spec.source_xml is not None and not isinstance(spec.source_xml, str):
        raise RolloutFileError(f"FileSpec.source_xml must be a str, got {type(spec.source_xml).__name__}")
    for name, data in spec.assets.items():
        if not isinstance(name, str) or not name or not isinstance(data, (bytes, bytearray)):
            raise RolloutFileError(f"FileSpec.assets must map non-empty names to bytes, got {name!r}: "
                                   f"{type(data).__name__}")
    return x0, carry_layout, c0, record


def _text(g, name: str, text: str) -> None:
    ds = g.create_dataset(name, data=text, dtype=h5py.string_dtype())
    cf.describe(ds, *cf.VARIABLES[f"model/{name}"])


def dimension(g, name: str, size: int) -> h5py.Dataset:
    """A named axis without coordinate values, as netCDF-4 stores one: a dimension scale that is never written
    (no storage) and whose scale name marks it as "a netCDF dimension but not a netCDF variable"."""
    ds = g.create_dataset(name, shape=(size,), dtype="f4")
    ds.make_scale(f"{NC_DIM_ONLY}{size:10d}")
    return ds


def _bytes_dataset(g, name: str, data: bytes, axis: str) -> h5py.Dataset:
    """Bytes as a uint8 dataset on its own named axis (netCDF readers need a name for every dimension)."""
    ds = create_small(g, name, np.frombuffer(bytes(data), dtype=np.uint8))
    if ds.ndim:
        ds.dims[0].attach_scale(dimension(g, axis, ds.shape[0]))
    return ds


def _write_model(f: h5py.File, spec: FileSpec, record) -> None:
    mjcf, mjb, sig = record
    g = f.create_group("model")
    g.attrs["long_name"] = "the model that ran"
    _text(g, "mjcf", mjcf)
    _text(g, "compat_log", json.dumps(spec.compat_log, default=str))
    if mjb is not None:
        ds = _bytes_dataset(g, "mjb", mjb, "mjb_byte")
        cf.describe(ds, *cf.VARIABLES["model/mjb"])
        if sig is not None:
            ds.attrs["signature"] = np.uint64(sig)
    if spec.source_xml is not None:
        _text(g, "source_xml", spec.source_xml)
    if spec.assets:
        ag = g.create_group("assets")
        for name, data in spec.assets.items():
            key = asset_key(name)
            ds = _bytes_dataset(ag, key, data, f"_{key}_byte")
            ds.attrs["name"] = name
            cf.describe(ds, f"asset {name} (bytes)", "1")
    if spec.model_params:  # per world (B, ...) at the root, so a multi-process join stitches them by world
        _write_model_params(f, spec)


def _write_model_params(f: h5py.File, spec: FileSpec) -> None:
    """``/model_params/<field>`` (B, ...) on ``world`` and one named axis per further dimension."""
    pg = f.create_group("model_params")
    world = pg.create_dataset("world", data=np.arange(spec.x0.shape[0], dtype=np.int64))
    world.make_scale("world")
    cf.describe(world, *cf.VARIABLES["world"])
    for name, v in spec.model_params.items():
        v = np.asarray(v)
        ds = create_small(pg, name, v)
        for k, a in spec.model_param_attrs.get(name, {}).items():
            set_attr(ds, k, a)
        cf.describe(ds, f"per-world model field {name}", cf.model_field_units(name))
        if v.ndim and v.shape[0] == world.shape[0]:
            ds.dims[0].attach_scale(world)
        for i, size in enumerate(v.shape[1:], start=1):
            ds.dims[i].attach_scale(dimension(pg, f"_{name.replace('.', '_')}_{i}", size))


def create_rollout_file(path: str, spec: FileSpec) -> None:
    """Write the header, tables and empty datasets of a new rollout file (truncating ``path``).

    The spec is checked first: a bad one raises ``RolloutFileError`` before the file is touched. A
    failure to write (a full disk) raises ``RolloutWriteError`` and removes the partial file.
    """
    x0, carry_layout, c0, record = _check_spec(spec)
    try:
        ensure_space(path, 2 * (x0.nbytes + len(record[1] or b"") + len(record[0] or "")))
        with h5py.File(path, "w", libver=LIBVER, locking=False) as f:
            _populate(f, spec, x0, carry_layout, c0, record)
    except OSError as e:
        try:
            os.remove(path)  # a header that never made it to disk holds nothing to keep
        except OSError:
            pass
        raise RolloutWriteError(f"{path}: creating the file failed: {_os_text(e)}; nothing was run (free space or "
                                f"choose another --out)", path=path, dataset="(header)", os_error=e) from None


def _populate(f: h5py.File, spec: FileSpec, x0, carry_layout, c0, record) -> None:
    B, n = x0.shape
    T = spec.samples
    model = _units_model(spec, record)
    table = with_carry_rows(spec.layout, carry_layout)
    for k, v in spec.attrs.items():
        set_attr(f, k, v)
    f.attrs["format_version"] = FORMAT_VERSION  # the layout this writer makes, whatever the caller's attrs say
    for k, v in cf.global_attrs(spec.attrs, spec.history).items():
        f.attrs[k] = v
    f.attrs["complete"] = False
    f.attrs["samples"] = np.int64(0)
    f.attrs["integrity"] = INTEGRITY
    f.attrs["checksums"] = "fletcher32"
    _write_model(f, spec, record)
    write_table(f, "layout_table", table, "layout_row", [decode_name(r["name"]) for r in table],
                column_attrs=LAYOUT_COLUMNS)
    f.attrs["layout_sha256"] = table_sha256(read_table(f["layout_table"]))  # in the content digest (settings)
    f["layout_table"].attrs["long_name"] = "state layout: one row per state, then one per carry entry"
    create_small(f, "x0", x0)
    x_chunks = chunks(T, B, n, spec.time_chunk)
    f.create_dataset("time", shape=(T,), maxshape=(None,), dtype="f8", chunks=(x_chunks[0],), fillvalue=np.nan,
                     **checksum_kwargs())
    create_samples_dataset(f, "x", (T, B, n), x_chunks, spec.compression, spec.sample_dtype)
    if c0 is not None:
        create_small(f, "carry0", c0)
        create_samples_dataset(f, "carry", (T, B, c0.shape[1]), x_chunks[:2] + (max(c0.shape[1], 1),),
                               spec.compression, spec.sample_dtype)
    create_small(f, "status", np.zeros(B, dtype=np.int8))
    create_small(f, "status_step", np.full(B, -1, dtype=np.int64))
    # [samples flushed, complete]: SWMR readers' truth. Contiguous and unchecksummed: it is rewritten in place
    # every chunk (one 16-byte write), and a reader must never see a checksum error for reading it mid-write.
    f.create_dataset("progress", data=np.zeros(2, dtype=np.int64))
    _state_axes(f, spec, B, n, c0)
    for name, seg in (("qpos", spec.qpos), ("qvel", spec.qvel)):
        if seg is not None:
            _virtual(f, name, seg, T, B, n)
    if spec.carry_views:
        f.attrs["carry_views"] = ",".join(spec.carry_views)
        _carry_views(f, T, B)
    if spec.outputs:
        _create_outputs(f, spec, T, B, model)
    write_code(f, spec.code)
    if spec.ctrl_input is not None:
        _write_ctrl_input(f, np.asarray(spec.ctrl_input, dtype=np.float64), model)
    _describe_root(f, spec, model)
    f.attrs["content_sha256"] = content_digest(f)
    seal(f, create=True, rewritten=("status", "status_step"), defer=True)  # the hashes of all above: writer thread


# CF attributes of the /layout_table columns.
LAYOUT_COLUMNS = {c: {"long_name": d, "units": "1"} for c, d in (
    ("name", "state name"), ("model", "model that registered the state"), ("joint", "MuJoCo joint of the state"),
    ("update", "update kind (euclidean, quaternion, ..., carry)"), ("shape", "value shape"),
    ("deriv_shape", "derivative shape"), ("diffusion_shape", "diffusion tangent shape"),
    ("error_control", "adaptive error control mode"), ("noise_slots", "global noise slots"),
    ("group", "state group"), ("offset", "offset into x (or the carry vector) in scalars"),
    ("size", "scalars in x"), ("deriv_offset", "offset into the derivative"), ("deriv_size", "derivative scalars"),
    ("diffusion_offset", "offset into the diffusion buffer"), ("diffusion_size", "diffusion scalars"),
    ("noise_count", "local noise count"))}


def _write_ctrl_input(f: h5py.File, ctrl: np.ndarray, model) -> None:
    """``/inputs/ctrl`` (B, steps, nu): the controls the run was given as an array, so a rerun has them."""
    g = f.create_group("inputs")
    ds = g.create_dataset("ctrl", data=ctrl, chunks=True, **checksum_kwargs()) if ctrl.size else \
        g.create_dataset("ctrl", data=ctrl)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"actuator{i}" for i in range(model.nu)] \
        if model is not None and model.nu == ctrl.shape[2] else [str(i) for i in range(ctrl.shape[2])]
    for i, (axis, labels) in enumerate((("world", np.arange(ctrl.shape[0], dtype=np.int64)),
                                       ("step", np.arange(ctrl.shape[1], dtype=np.int64)),
                                       ("actuator", np.array(names, dtype=h5py.string_dtype())))):
        scale = g.create_dataset(axis, data=labels)
        scale.make_scale(axis)
        cf.describe(scale, {"world": "world index", "step": "step index", "actuator": "actuator name"}[axis], "1")
        ds.dims[i].attach_scale(scale)
    units = [cf.actuator_units(model, i) for i in range(model.nu)] if model is not None and model.nu else \
        ["actuator units"]
    cf.describe(ds, "controls given to the run, one per step (ctrl input)", cf.common_units(units, "the actuators"))
    ds.attrs["sha256"] = hashlib.sha256(np.ascontiguousarray(ctrl).tobytes()).hexdigest()


def _units_model(spec: FileSpec, record) -> mujoco.MjModel | None:
    """The model the units are read from: the spec's, or the one its MJB holds (None: units stay "unknown")."""
    if isinstance(spec.model, mujoco.MjModel):
        return spec.model
    if record[1] is None:
        return None
    from .model import model_from_mjb

    try:
        return model_from_mjb(record[1])
    except Exception:  # noqa: BLE001 - an MJB of another MuJoCo version
        return None


def _describe_root(f: h5py.File, spec: FileSpec, model) -> None:
    """``long_name``/``units`` on the root datasets; per-component units as coordinates where they mix."""
    n = f["x"].shape[2]
    units = cf.state_units(model, n, spec.qpos, spec.qvel)
    for name in ("time", "x0", "x", "qpos", "qvel", "status", "status_step", "progress", "world", "state",
                 "qpos_index", "qvel_index", "carry0", "carry", "carry_index", "progress_field", "ctrl", "episode"):
        if name in f:
            cf.describe(f[name], *cf.VARIABLES[name])
    f["status"].attrs.update(cf.status_flags())
    if "state" in f:
        _units_coordinate(f, "state_units", units, f["state"])
    where = "state_units"
    for name, seg in (("x0", slice(0, n)), ("x", slice(0, n)), ("qpos", spec.qpos), ("qvel", spec.qvel)):
        if name in f and seg is not None:
            f[name].attrs["units"] = cf.common_units(units[seg], where)
    if "carry" in f:
        cu = cf.carry_units(model, normalize_carry_layout(spec.carry_layout))
        if len(cu) == f["carry"].shape[2] and "carry_index" in f:
            _units_coordinate(f, "carry_units", cu, f["carry_index"])
        for name in ("carry", "carry0"):
            f[name].attrs["units"] = cf.common_units(cu, "carry_units") if cu else "1"
    if "ctrl" in f:
        f["ctrl"].attrs["units"] = cf.common_units([cf.actuator_units(model, i) for i in range(model.nu)],
                                                    "the actuators' gear") if model is not None and model.nu else "1"


def _units_coordinate(f: h5py.File, name: str, units, axis) -> None:
    """A string dataset of per-component units on the dimension ``axis`` (CF: an auxiliary coordinate)."""
    ds = f.create_dataset(name, data=np.array(units, dtype=h5py.string_dtype()))
    ds.dims[0].attach_scale(axis)
    cf.describe(ds, *cf.VARIABLES[name])


# Room kept free beyond a write's raw bytes: HDF5's metadata (chunk index, object headers) grows with it.
SPACE_MARGIN = 256 * 1024


def ensure_space(path: str, nbytes: int) -> None:
    """Raise ENOSPC *before* a write that the file system cannot hold. HDF5 does not recover from a write
    that fails half way (its caches stay dirty, and closing the file can then crash the process), so a
    full disk is caught here, while the file is still consistent and closes cleanly. Other write errors
    (EIO, quotas statvfs does not show) still reach HDF5 and are reported as well as HDF5 allows."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    need = int(nbytes * 1.05) + SPACE_MARGIN
    if need > free:
        raise OSError(errno.ENOSPC, f"No space left on device: the next write needs about {need} bytes, "
                                    f"{free} are free (checked before writing, so the file stays valid)")


def _os_text(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    errno_ = getattr(e, "errno", None)
    return f"[errno {errno_}] {text}" if errno_ and f"errno {errno_}" not in text.lower() else text


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
        ds.attrs["long_name"] = f"recorded output {name} (MuJoCo {attrs.get('mujoco_field', 'user function')})"
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


def open_for_write(path: str) -> h5py.File:
    """``h5py.File(path, "r+")`` for a file that may have been left by a killed or failed SWMR writer
    (whose marks are cleared first, ``superblock``); OS errors become ``RolloutWriteError``. Call only
    while holding the file's writer lock."""
    from .superblock import reopen_for_write

    try:
        reopen_for_write(path)
        return open_rw(path) if _is_swmr_format(path) else h5py.File(path, "r+", locking=False)
    except OSError as e:
        raise RolloutWriteError(f"{path}: cannot open for writing: {_os_text(e)}", path=path, dataset="(open)",
                                os_error=e) from None


def open_rw(path: str) -> h5py.File:
    """``path`` opened read-write: a version 2 file in the 1.10 format it was written in (``LIBVER``), so what
    is added stays readable by HDF5 1.10; a version 1 file in the latest format, as it was written (HDF5
    cannot extend its newer objects under a lower bound)."""
    with h5py.File(path, "r", locking=False) as f:
        version = int(decode_attr(f.attrs.get("format_version", 1)) or 1)
    return h5py.File(path, "r+", libver=LIBVER if version >= 2 else "latest", locking=False)


def layout_rows(f: h5py.File) -> np.ndarray:
    """The layout table of a file of either version (``/layout_table`` columns, or version 1's ``/layout``)."""
    return read_table(f["layout_table"] if "layout_table" in f else f["layout"])


def _is_swmr_format(path: str) -> bool:
    from .superblock import superblock_state

    return superblock_state(path) is not None


def extend_rollout_file(path: str, samples: int, attrs: dict, start: int | None = None) -> None:
    """Prepare an existing file for a resumed run: grow ``/x``, ``/carry`` and ``/time`` to ``samples``,
    update attrs, mark it incomplete; ``start``: the sample the run resumes from (what readers see until
    the next chunk lands; default: the samples the file holds). ``/inputs/ctrl`` stays: a resume is refused
    unless its array controls are the run's own (the ``ctrl`` attribute's digest)."""
    f = open_for_write(path)
    try:
        with f:
            T_old, B, n = f["x"].shape
            if samples > T_old:
                f["x"].resize((samples, B, n))
                f["time"].resize((samples,))
                if "carry" in f:
                    f["carry"].resize((samples,) + f["carry"].shape[1:])
                for name in ("qpos", "qvel"):
                    if name in f:
                        _virtual(f, name, vds_segment(f[name]), samples, B, n)
                _carry_views(f, samples, B)
                for name, ds in (f["outputs"].items() if "outputs" in f else ()):
                    if is_output(name):  # not the axes ("time" follows /time) and labels
                        ds.resize((samples,) + ds.shape[1:])
                if "sensors/table" in f and "outputs/sensordata" in f:
                    _sensor_views(f, samples, B)
            for k, v in attrs.items():
                set_attr(f, k, v)
            f.attrs["complete"] = False
            for name in ("episodes", "episode_row"):  # the table of a finished run: rewritten when the resumed one ends
                if name in f:
                    del f[name]
            if "progress" in f:
                held = int(f["progress"][0]) if start is None else int(start)
                f["progress"][:] = [held, 0]
                f.attrs["samples"] = np.int64(held)
            seal(f, create=False)
            f.flush()
    except OSError as e:
        raise RolloutWriteError(f"{path}: preparing the file for the resumed run failed: {_os_text(e)}", path=path,
                                dataset="(header)", os_error=e) from None


class RolloutWriter:
    """Writes chunks in a background thread: ``put`` returns at once (at most ``depth`` chunks wait).

    Each chunk: ``/x``, ``/outputs``, ``/carry`` (when the file has one) and ``/time`` rows, ``/status``
    and ``/status_step`` as of the chunk's end, a flush, then ``/progress`` (the ``samples``
    attribute in files written before it) and a flush. ``close(complete)`` drains the queue and marks
    the file; ``complete`` holds only when every planned sample is on disk. A failed write stops the
    thread's writing; the next ``put`` or ``close`` raises ``RolloutWriteError`` naming the file, the
    dataset and the OS error. Files with ``/progress`` are written in SWMR mode.
    """

    def __init__(self, path: str, depth: int = 2):
        self.path = path
        self._file = open_for_write(path)
        self._closed = self._failed = False
        try:
            self._progress = "progress" in self._file
            if self._progress:
                self._file.swmr_mode = True
            self._shape = self._file["x"].shape[1:]
            self._T = self._file["x"].shape[0]
            self._carry_shape = self._file["carry"].shape[1:] if "carry" in self._file else None
            og = self._file["outputs"] if "outputs" in self._file else {}
            self._outputs = {k: v.shape[1:] for k, v in og.items() if is_output(k)}
            self._samples = int(self._file["progress"][0]) if self._progress else int(self._file.attrs["samples"])
            # Handles kept open for the writer's life: HDF5 writes a dataset's cached chunks when its handle
            # closes, and an error there (a full disk) is only printed, never raised. Open handles are flushed
            # explicitly instead, where a failure raises.
            names = ["x", "time", "status", "status_step"] + (["carry"] if self._carry_shape is not None else []) \
                + [f"outputs/{k}" for k in self._outputs] + (["progress"] if self._progress else [])
            self._ds = {name: self._file[name] for name in names}
            self._digests = ChunkDigests(self._file)
        except (OSError, RuntimeError) as e:
            self._close_quietly()
            raise RolloutWriteError(f"{path}: cannot start writing: {_os_text(e)}", path=path, dataset="(open)",
                                    os_error=e) from None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: tuple[str, BaseException] | None = None
        self._thread = threading.Thread(target=self._run, name="mjharness-h5-writer", daemon=True)
        self._thread.start()

    @property
    def has_carry(self) -> bool:
        """Whether the file stores the carry (files written before ``/carry`` do not)."""
        return self._carry_shape is not None

    @property
    def samples(self) -> int:
        """Samples fully on disk (what a reader and a resume see)."""
        return self._samples

    def _write(self, item) -> None:
        f = self._file
        j0, time, xs, status, status_step, carry, outputs = item
        j1 = j0 + len(time)
        rows = [("x", xs)] + [(f"outputs/{k}", v) for k, v in outputs.items()] + \
            ([("carry", carry)] if carry is not None else []) + [("time", time)]
        ds = self._ds
        rows += [("status", status), ("status_step", status_step)]
        self._at = rows[0][0]
        ensure_space(self.path, sum(np.asarray(v).nbytes for _, v in rows))
        for name, v in rows:
            self._at = name
            if name.startswith("status"):
                ds[name][...] = v
            else:
                ds[name][j0:j1] = v
        for name, _ in rows:
            self._at = name
            ds[name].flush()  # the chunk cache to disk: a full disk raises here
        self._at = "integrity"
        self._digests.record(rows, j0, j1)  # hashes of the rows on disk, before /progress publishes them
        self._at = "(flush)"
        f.flush()
        self._at = "progress"
        if self._progress:  # last: a reader never sees a sample before all its rows are on disk
            ds["progress"][0] = j1
            ds["progress"].flush()
        else:
            f.attrs["samples"] = j1
        f.flush()
        self._samples = j1

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue
            try:
                self._write(item)
            except BaseException as e:  # noqa: B036 - handed to the caller on its next call
                self._error = (self._at, e)

    def _raise(self):
        if self._error is None:
            return
        (at, err), self._error = self._error, None
        self._failed = True
        if not isinstance(err, (OSError, RuntimeError)):
            raise err
        raise RolloutWriteError(
            f"{self.path}: writing /{at} failed: {_os_text(err)}. The run stopped; the file holds "
            f"{self._samples} complete samples (complete=False): free space or move the file, then continue it "
            f"with --resume (rollout(..., resume=path))", path=self.path, dataset=f"/{at}", os_error=err) from err

    def _check_chunk(self, time, xs, carry):
        m = len(time)
        if xs.shape != (m,) + self._shape:
            raise RolloutFileError(f"{self.path}: a chunk of {m} samples needs x of shape "
                                   f"{(m,) + self._shape}, got {xs.shape}")
        if self._carry_shape is None:
            if carry is not None:
                raise RolloutFileError(f"{self.path}: the file has no /carry (created without a carry layout), "
                                       f"but a carry was passed")
        elif carry is None:
            raise RolloutFileError(f"{self.path}: the file has a /carry; every chunk needs its carry rows")
        elif carry.shape != (m,) + self._carry_shape:
            raise RolloutFileError(f"{self.path}: a chunk of {m} samples needs carry of shape "
                                   f"{(m,) + self._carry_shape}, got {carry.shape}")

    def put(self, j0: int, time, xs, status, status_step, carry=None, outputs=None) -> None:
        """Queue samples ``j0 .. j0 + len(time)``: states ``xs`` (m, B, n), the carry after each of
        them ``carry`` (m, B, nc) (required exactly when the file has a ``/carry``), and the statuses
        at the chunk's end. Raises ``RolloutWriteError`` when an earlier chunk failed to write."""
        self._raise()
        time, xs = np.asarray(time), np.asarray(xs)
        carry = None if carry is None else np.asarray(carry, dtype=np.float64)
        self._check_chunk(time, xs, carry)
        outputs = {k: np.asarray(v, dtype=np.float64) for k, v in (outputs or {}).items()}
        want = self._outputs
        if set(outputs) != set(want) or any(v.shape != (len(time),) + want[k] for k, v in outputs.items()):
            raise RolloutFileError(f"{self.path}: a chunk needs outputs {sorted(want)} of shapes "
                                   f"(m, B, ...) = {want}, got { {k: v.shape for k, v in outputs.items()} }")
        self._queue.put((j0, time, xs, np.asarray(status), np.asarray(status_step), carry, outputs))

    def check(self) -> None:
        """Raise ``RolloutWriteError`` now if a chunk written so far failed (the host loop calls it per chunk)."""
        self._raise()

    def _close_quietly(self) -> None:
        # After a failed write HDF5 may fail again on close (it flushes its caches); the file on disk is
        # what the last successful flush left, which is what we want. Never let that second error (or
        # a half-closed handle at interpreter exit) surface.
        if self._closed:
            return
        self._closed = True
        handles, self._ds = getattr(self, "_ds", {}), {}
        for obj in [*handles.values(), self._file]:
            try:
                obj.id.close() if obj is not self._file else obj.close()
            except Exception:  # noqa: BLE001 - secondary to the error already being raised
                pass

    def close(self, complete: bool, attrs: dict | None = None) -> None:
        """Drain the queue and close; ``complete`` is recorded only when all planned samples are on disk.
        Raises ``RolloutWriteError`` if a chunk (or the close itself) failed."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None or self._failed:  # the error was (or is now) raised: nothing more is written
            self._close_quietly()
            self._raise()
            return
        complete = bool(complete) and self._samples == self._T
        try:
            f = self._file
            self._at = "progress"
            if self._progress:
                self._ds["progress"][1] = int(complete)
                self._ds["progress"].flush()
                f.flush()
            self._at = "(attributes)"
            late = self._set_final_attrs(f, complete, attrs or {})
            self._closed = True
            self._ds = {}
            f.close()
            if late:  # HDF5 could not change attributes in SWMR mode: do it now, no reader can be confused
                with open_rw(self.path) as g:
                    self._set_final_attrs(g, complete, attrs or {})
            if attrs:
                seal_path(self.path)
        except (OSError, RuntimeError) as e:
            self._error = (self._at, e)
            self._close_quietly()
            self._raise()

    def _set_final_attrs(self, f, complete: bool, attrs: dict) -> bool:
        """Root ``samples``/``complete`` (and ``attrs``) in place; True when it has to wait until after SWMR."""
        try:
            f.attrs.modify("samples", np.int64(self._samples))
            f.attrs.modify("complete", complete)
            for k, v in attrs.items():
                set_attr(f, k, v)
            return False
        except (OSError, RuntimeError, KeyError):
            if not self._progress:
                raise
            return True


EPISODE_ROW = np.dtype([("world", "<i8"), ("episode", "<i8"), ("start_step", "<i8"), ("end_step", "<i8"),
                        ("end", h5py.string_dtype())])
EPISODE_COLUMNS = {c: {"long_name": d, "units": "1"} for c, d in (
    ("world", "world index"), ("episode", "episode index within the world"),
    ("start_step", "global index of the episode's first step (-1: between two samples)"),
    ("end_step", "global index of the episode's last step"),
    ("end", "how the episode ended: terminated | failed | truncated (the run ended) | running"))}


def write_episode_table(path: str, rows: list[dict] | None = None) -> None:
    """``/episodes`` of a finished run with a termination rule: one row per world and episode (world, episode,
    start_step, end_step, end), as ``RolloutFile.episode_table`` derives them from the recorded carry (``rows``
    None: derived from the file in the same open)."""
    try:
        with open_rw(path) as f:
            if rows is None:
                from .reader import RolloutFile

                rows = RolloutFile.of_handle(f, path).episode_table()
            table = np.array([(d["world"], d["episode"], d["start_step"], d["end_step"], d["end"]) for d in rows],
                             dtype=EPISODE_ROW)
            for name in ("episodes", "episode_row"):
                if name in f:
                    del f[name]
            if int(decode_attr(f.attrs.get("format_version", 1))) < 2:  # a resumed version 1 file keeps its form
                ds = f.create_dataset("episodes", data=table)
                ds.attrs["end"] = "terminated | failed | truncated (the run ended) | running"
                rows = f.create_dataset("episode_row", data=np.arange(len(table), dtype=np.int64))
                rows.make_scale("episode_row")  # a named axis for generic readers (xarray), not a phony one
                ds.dims[0].attach_scale(rows)
            else:
                g = write_table(f, "episodes", table, "episode_row", column_attrs=EPISODE_COLUMNS)
                g.attrs["long_name"] = "episodes of every world: one row per world and episode"
            seal(f, create=False)  # the content hashes cover the table
    except OSError as e:
        raise RolloutWriteError(f"{path}: writing /episodes failed: {_os_text(e)}; the samples are complete, "
                                f"open_rollout(path).episodes(world) derives them", path=path, dataset="episodes",
                                os_error=e) from None
