"""Creating, extending and streaming into a rollout file.

Every chunk is written and flushed by one background thread, rows first and the ``samples``
attribute last, so a reader (which opens the file without HDF5's file lock) sees a consistent
prefix at any time, never a state without its carry, and a killed run leaves a file holding every
flushed chunk.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Mapping

import h5py
import mujoco
import numpy as np

from mjharness.integrators import StateError
from mjharness.scenes import scene_info

from .format import FileSpec, RolloutFileError, chunks, compression_kwargs, create_samples_dataset, set_attr
from .layout import carry_size, carry_vector, normalize_carry_layout, with_carry_rows
from .model import asset_key, model_mjb


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


def _write_model(f: h5py.File, spec: FileSpec, record) -> None:
    mjcf, mjb, sig = record
    g = f.create_group("model")
    g.create_dataset("mjcf", data=mjcf, dtype=h5py.string_dtype())
    g.create_dataset("compat_log", data=json.dumps(spec.compat_log, default=str), dtype=h5py.string_dtype())
    if mjb is not None:
        ds = g.create_dataset("mjb", data=np.frombuffer(bytes(mjb), dtype=np.uint8))
        if sig is not None:
            ds.attrs["signature"] = np.uint64(sig)
    if spec.source_xml is not None:
        g.create_dataset("source_xml", data=spec.source_xml, dtype=h5py.string_dtype())
    if spec.assets:
        ag = g.create_group("assets")
        for name, data in spec.assets.items():
            ag.create_dataset(asset_key(name), data=np.frombuffer(bytes(data), dtype=np.uint8)).attrs["name"] = name
    if spec.model_params:
        pg = g.create_group("params")
        for name, v in spec.model_params.items():
            pg.create_dataset(name, data=np.asarray(v))


def create_rollout_file(path: str, spec: FileSpec) -> None:
    """Write the header, tables and empty datasets of a new rollout file (truncating ``path``).

    The spec is checked first: a bad one raises ``RolloutFileError`` before the file is touched.
    """
    x0, carry_layout, c0, record = _check_spec(spec)
    B, n = x0.shape
    T = spec.samples
    table = with_carry_rows(spec.layout, carry_layout)
    with h5py.File(path, "w") as f:
        for k, v in spec.attrs.items():
            set_attr(f, k, v)
        f.attrs["complete"] = False
        f.attrs["samples"] = 0
        _write_model(f, spec, record)
        f.create_dataset("layout", data=table)
        f.create_dataset("x0", data=x0)
        x_chunks = chunks(T, B, n, spec.time_chunk)
        f.create_dataset("time", shape=(T,), maxshape=(None,), dtype="f8", chunks=(x_chunks[0],), fillvalue=np.nan)
        create_samples_dataset(f, "x", (T, B, n), x_chunks, spec.compression)
        if c0 is not None:
            f.create_dataset("carry0", data=c0)
            create_samples_dataset(f, "carry", (T, B, c0.shape[1]), x_chunks[:2] + (max(c0.shape[1], 1),),
                                   spec.compression)
        f.create_dataset("status", data=np.zeros(B, dtype=np.int8))
        f.create_dataset("status_step", data=np.full(B, -1, dtype=np.int64))
        for name, seg in (("qpos", spec.qpos), ("qvel", spec.qvel)):
            if seg is not None:
                _virtual(f, name, seg, T, B, n)
        if spec.outputs:
            _create_outputs(f, spec, T, B)


def _label_scale(f: h5py.File, path: str, labels) -> h5py.Dataset:
    ds = f.create_dataset(path, data=np.array([str(v) for v in labels], dtype=h5py.string_dtype()))
    ds.make_scale(path.rsplit("/", 1)[-1])
    return ds


def _create_outputs(f: h5py.File, spec: FileSpec, T: int, B: int) -> None:
    """``/outputs/<name>`` (T, B, ...) with their attributes and dimension scales, the ``/sensors`` table
    and, per sensor, virtual datasets ``/sensors/<name>`` over ``/outputs/sensordata``."""
    g = f.create_group("outputs")
    f["time"].make_scale("time")
    world = f.create_dataset("world", data=np.arange(B, dtype=np.int64))
    world.make_scale("world")
    for name, shape, attrs, labels, comps in spec.outputs:
        shape = tuple(shape)
        width = int(np.prod(shape, dtype=np.int64))
        ch = chunks(T, B, width, spec.time_chunk)
        ds = g.create_dataset(name, shape=(T, B) + shape, maxshape=(None, B) + shape, dtype="f8",
                              chunks=ch[:2] + shape, fillvalue=np.nan, **compression_kwargs(spec.compression))
        for k, v in attrs.items():
            ds.attrs[k] = v
        ds.dims[0].attach_scale(f["time"])
        ds.dims[1].attach_scale(world)
        key = name.replace("/", "_").replace(":", "_")
        axes = [labels, comps] if len(shape) == 2 else [comps or labels]
        for i, lab in enumerate(axes):
            if lab and len(lab) == shape[i]:
                ds.dims[2 + i].attach_scale(_label_scale(f, f"outputs/_{key}_{2 + i}", lab))
    if spec.sensors:
        rows = np.array([(r["name"], r["type"], r["object"], r["adr"], r["dim"], r["cutoff"], r["noise"])
                         for r in spec.sensors], dtype=SENSOR_DTYPE)
        sg = f.create_group("sensors")
        sg.attrs["table"] = "sensors/table: name, type, object, adr, dim, cutoff, noise (MuJoCo sensor fields)"
        sg.create_dataset("table", data=rows)
        if "sensordata" in f["outputs"]:
            _sensor_views(f, T, B)


SENSOR_DTYPE = np.dtype([("name", h5py.string_dtype()), ("type", h5py.string_dtype()),
                         ("object", h5py.string_dtype()), ("adr", "i8"), ("dim", "i8"), ("cutoff", "f8"),
                         ("noise", "f8")])


def _sensor_views(f: h5py.File, T: int, B: int) -> None:
    src_ds = f["outputs/sensordata"]
    nsd = src_ds.shape[2]
    for r in f["sensors/table"][()]:
        name, adr, dim = r["name"].decode() if isinstance(r["name"], bytes) else r["name"], int(r["adr"]), int(r["dim"])
        path = f"sensors/{name}"
        if path in f:
            del f[path]
        lay = h5py.VirtualLayout(shape=(T, B, dim), dtype="f8")
        src = h5py.VirtualSource(".", "outputs/sensordata", shape=(T, B, nsd))
        if T and B:
            lay[:, :, :] = src[:, :, adr:adr + dim]
        vds = f.create_virtual_dataset(path, lay, fillvalue=np.nan)
        for k in ("semantics", "stage"):
            vds.attrs[k] = src_ds.attrs[k]
        vds.attrs["sensordata_columns"] = f"{adr}:{adr + dim}"
        # no dimension scales here: xarray refuses a variable with labeled and unlabeled axes mixed


def _virtual(f: h5py.File, name: str, seg: slice, T: int, B: int, n: int) -> None:
    if name in f:
        del f[name]
    width = seg.stop - seg.start
    lay = h5py.VirtualLayout(shape=(T, B, width), dtype="f8")
    # "." = this very file, so the virtual datasets survive renaming or moving the file.
    src = h5py.VirtualSource(".", "x", shape=(T, B, n))
    if T and B and width:
        lay[:, :, :] = src[:, :, seg.start:seg.stop]
    f.create_virtual_dataset(name, lay, fillvalue=np.nan)


def _vds_segment(ds) -> slice:
    src = ds.virtual_sources()[0]
    sel = src.src_space.get_select_bounds()
    return slice(int(sel[0][2]), int(sel[1][2]) + 1)


def extend_rollout_file(path: str, samples: int, attrs: dict) -> None:
    """Prepare an existing file for a resumed run: grow ``/x``, ``/carry`` and ``/time`` to ``samples``,
    update attrs."""
    with h5py.File(path, "r+", locking=False) as f:
        T_old, B, n = f["x"].shape
        if samples > T_old:
            f["x"].resize((samples, B, n))
            f["time"].resize((samples,))
            if "carry" in f:
                f["carry"].resize((samples,) + f["carry"].shape[1:])
            for name in ("qpos", "qvel"):
                if name in f:
                    _virtual(f, name, _vds_segment(f[name]), samples, B, n)
            for name, ds in (f["outputs"].items() if "outputs" in f else ()):
                if not name.startswith("_"):  # "_...": component labels
                    ds.resize((samples,) + ds.shape[1:])
            if "sensors/table" in f and "outputs/sensordata" in f:
                _sensor_views(f, samples, B)
        for k, v in attrs.items():
            set_attr(f, k, v)
        f.attrs["complete"] = False
        f.flush()


class RolloutWriter:
    """Writes chunks in a background thread: ``put`` returns at once (at most ``depth`` chunks wait).

    Each chunk: ``/x``, ``/carry`` (when the file has one) and ``/time`` rows, ``/status`` and
    ``/status_step`` as of the chunk's end, then the ``samples`` attribute, then a flush.
    ``close(complete)`` drains the queue and marks the file. An error in the thread is raised by the
    next ``put`` or by ``close``.
    """

    def __init__(self, path: str, depth: int = 2):
        self.path = path
        self._file = h5py.File(path, "r+", locking=False)
        self._shape = self._file["x"].shape[1:]
        self._carry_shape = self._file["carry"].shape[1:] if "carry" in self._file else None
        og = self._file["outputs"] if "outputs" in self._file else {}
        self._outputs = {k: v.shape[1:] for k, v in og.items() if not k.startswith("_")}
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mjharness-h5-writer", daemon=True)
        self._thread.start()

    def _run(self):
        f = self._file
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue
            try:
                j0, time, xs, status, status_step, carry, outputs = item
                j1 = j0 + len(time)
                f["x"][j0:j1] = xs
                for name, v in outputs.items():
                    f["outputs"][name][j0:j1] = v
                if carry is not None:
                    f["carry"][j0:j1] = carry
                f["time"][j0:j1] = time
                f["status"][...] = status
                f["status_step"][...] = status_step
                f.attrs["samples"] = j1  # last: a reader never sees a sample before all its rows
                f.flush()
            except BaseException as e:  # noqa: B036 - handed to the caller on its next call
                self._error = e

    def _raise(self):
        if self._error is not None:
            err, self._error = self._error, None
            raise RolloutFileError(f"{self.path}: writing a chunk failed: {err}") from err

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
        at the chunk's end."""
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

    def close(self, complete: bool, attrs: dict | None = None) -> None:
        self._queue.put(None)
        self._thread.join()
        try:
            if self._error is None:
                for k, v in (attrs or {}).items():
                    set_attr(self._file, k, v)
                self._file.attrs["complete"] = bool(complete)
                self._file.flush()
        finally:
            self._file.close()
        self._raise()
