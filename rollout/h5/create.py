"""Creating a rollout file: every dataset, dimension scale, table, virtual view and attribute made up front.

Files are created in the HDF5 1.10 file format (``format.LIBVER``: the oldest with SWMR and virtual
datasets, so HDF5 1.10 and later read them), every dataset made up front (chunked, Fletcher-32
checksummed, growable along time); ``writer.py`` then streams the samples into it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Mapping

import h5py
import mujoco
import numpy as np

from mjharness.integrators import StateError
from mjharness.scenes import scene_info

from . import cf
from .axes import _carry_views, _create_outputs, _state_axes, _text, _virtual, decode_name, dimension
from .digest import content_digest, seal
from .errors import RolloutFileError, RolloutWriteError
from .format import (
    FORMAT_VERSION,
    INTEGRITY,
    LIBVER,
    FileSpec,
    checksum_kwargs,
    chunks,
    create_samples_dataset,
    create_small,
    set_attr,
)
from .layout import carry_size, carry_vector, normalize_carry_layout, with_carry_rows
from .model import asset_key, model_mjb
from .provenance import write_code
from .tables import read_table, table_sha256, write_table


def _carry0(spec: FileSpec, carry_layout, B: int) -> np.ndarray | None:
    nc = carry_size(carry_layout)
    if not carry_layout:
        c = spec.carry0
        given = len(c) if isinstance(c, Mapping) else 0 if c is None else np.size(c)
        if c is not None and given:
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
        cf.describe(ds, cf.model_param_long_name(name), cf.model_field_units(name))
        for k, a in spec.model_param_attrs.get(name, {}).items():  # after: a provider's declared units win
            set_attr(ds, k, a)
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
    reward_units = str(spec.attrs.get("reward_units", "1"))
    for name in ("time", "x0", "x", "qpos", "qvel", "status", "status_step", "progress", "world", "state",
                 "qpos_index", "qvel_index", "carry0", "carry", "carry_index", "progress_field", "ctrl", "episode",
                 "reward"):
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
        cu = cf.carry_units(model, normalize_carry_layout(spec.carry_layout), reward_units)
        if len(cu) == f["carry"].shape[2] and "carry_index" in f:
            _units_coordinate(f, "carry_units", cu, f["carry_index"])
        for name in ("carry", "carry0"):
            f[name].attrs["units"] = cf.common_units(cu, "carry_units") if cu else "1"
    if "reward" in f:
        f["reward"].attrs["units"] = reward_units
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
