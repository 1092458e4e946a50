"""HDF5 rollout files (format version 1, DESIGN.md section 5): a streaming writer thread and a reader.

Layout of a file::

    /             attrs: format, format_version, versions, model_sha256, integrator (JSON), dt,
                  record_every, steps, batch, seed, created, complete, samples (flushed so far), ...
    /model/mjcf   the scene XML as saved by MuJoCo        /model/compat_log  JSON list
    /model/params/<field>  per-world model parameters (B, ...) when the rollout randomized them
    /layout       compound table of the state layout       /x0  (B, n) initial states
    /time (T,)    /x (T, B, n) chunked along T              /qpos, /qvel  virtual datasets over /x
    /status (B,)  /status_step (B,)

``/x`` and ``/time`` are created at their full length T (unwritten samples read as NaN); the root
attribute ``samples`` says how many leading samples are flushed and valid, ``complete`` whether the
run finished. Every chunk is written and flushed by one background thread, so a reader (which opens
the file without HDF5's file lock) sees a consistent prefix at any time, and a killed run leaves a
file holding every flushed chunk.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from dataclasses import dataclass

import h5py
import numpy as np

from mjharness.integrators import StateError, StateLayout, StateRegistry, StateSpec

FORMAT = "mjharness-rollout"
FORMAT_VERSION = 1

__all__ = ["RolloutWriter", "RolloutFile", "open_rollout", "create_rollout_file", "layout_table",
           "layout_from_table", "RolloutFileError", "FORMAT", "FORMAT_VERSION"]


class RolloutFileError(ValueError):
    """A rollout file is missing, not a rollout file, or does not fit the requested run; names the file."""


# -- the /layout table --------------------------------------------------------------------------

_STR_FIELDS = ("name", "model", "joint", "update", "shape", "deriv_shape", "diffusion_shape", "error_control",
               "noise_slots")
_INT_FIELDS = ("offset", "size", "deriv_offset", "deriv_size", "diffusion_offset", "diffusion_size", "noise_count")


def _shape_str(shape) -> str:
    return ",".join(str(int(d)) for d in shape)


def _parse_shape(s: str) -> tuple[int, ...]:
    return tuple(int(d) for d in s.split(",")) if s else ()


def layout_table(layout: StateLayout, joint_of=None) -> np.ndarray:
    """The layout as a numpy structured array (the ``/layout`` compound table)."""
    rows = []
    for r in layout.records:
        rows.append(dict(
            name=r.name, model=r.model, joint=(joint_of(r.name) if joint_of else None) or "", update=r.update,
            shape=_shape_str(r.spec.shape), deriv_shape=_shape_str(r.spec.deriv_shape),
            diffusion_shape=_shape_str(r.spec.diffusion_shape), error_control=r.spec.error_control,
            noise_slots=_shape_str(r.noise_slots), offset=r.offset, size=r.size, deriv_offset=r.deriv_offset,
            deriv_size=r.deriv_size, diffusion_offset=r.diffusion_offsets[0] if r.diffusion_offsets else -1,
            diffusion_size=r.diffusion_size, noise_count=r.spec.noise_count))
    width = {f: max([len(row[f].encode()) for row in rows] + [1]) for f in _STR_FIELDS}
    dtype = np.dtype([(f, f"S{width[f]}") for f in _STR_FIELDS[:8]] + [(f, "<i8") for f in _INT_FIELDS]
                     + [("noise_slots", f"S{width['noise_slots']}")])
    table = np.zeros(len(rows), dtype=dtype)
    for i, row in enumerate(rows):
        table[i] = tuple(row[f].encode() if f in _STR_FIELDS else row[f] for f in dtype.names)
    return table


def layout_from_table(table) -> StateLayout:
    """Rebuild the ``StateLayout`` a ``/layout`` table describes (and check every offset matches)."""
    def s(row, f):
        v = row[f]
        return v.decode() if isinstance(v, bytes) else str(v)

    rows = sorted(table, key=lambda row: int(row["offset"]))
    reg = StateRegistry()
    for row in rows:
        spec = StateSpec(_parse_shape(s(row, "shape")), _parse_shape(s(row, "deriv_shape")),
                         _parse_shape(s(row, "diffusion_shape")), int(row["noise_count"]),
                         s(row, "error_control"), s(row, "update"))
        reg.register(s(row, "name"), spec, model=s(row, "model"))
    by_slot: dict[int, list] = {}
    for row in rows:
        for j, slot in enumerate(_parse_shape(s(row, "noise_slots"))):
            by_slot.setdefault(slot, []).append((s(row, "name"), j))
    for group in by_slot.values():
        if len(group) > 1:
            reg.share_noise(group)
    layout = reg.finalize()
    for row in rows:
        r = layout[s(row, "name")]
        if (r.offset, r.deriv_offset, r.noise_slots) != (int(row["offset"]), int(row["deriv_offset"]),
                                                        _parse_shape(s(row, "noise_slots"))):
            raise StateError(f"/layout row {r.name!r} does not rebuild to the same offsets (table "
                             f"{int(row['offset'])}/{int(row['deriv_offset'])}, rebuilt {r.offset}/{r.deriv_offset})")
    return layout


# -- creating a file ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileSpec:
    """Everything that goes into a new rollout file before the first chunk."""

    attrs: dict
    mjcf: str
    compat_log: list
    layout: np.ndarray          # layout_table(...)
    x0: np.ndarray              # (B, n)
    model_params: dict          # field -> (B, ...)
    samples: int                # T
    qpos: slice | None
    qvel: slice | None
    time_chunk: int             # HDF5 chunk length along T
    compression: object = None  # None, "gzip", "lzf" or a gzip level 0-9


def model_sha256(xml: str) -> str:
    return hashlib.sha256(xml.encode()).hexdigest()


def _compression_kwargs(compression) -> dict:
    if compression is None or compression is False:
        return {}
    if isinstance(compression, (int, np.integer)) and not isinstance(compression, bool):
        return dict(compression="gzip", compression_opts=int(compression), shuffle=True)
    return dict(compression=compression, shuffle=True)


def _chunks(T: int, B: int, n: int, time_chunk: int) -> tuple[int, int, int]:
    # About 1 MiB per HDF5 chunk at most; the time extent follows the engine's chunk so one write
    # touches whole HDF5 chunks.
    nb = max(1, min(B, (1 << 20) // max(1, 8 * n)))
    nt = max(1, min(max(T, 1), time_chunk, (1 << 20) // max(1, 8 * n * nb)))
    return nt, nb, max(n, 1)


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


def _set_attr(f, key, value):
    if value is None:
        value = "null"
    elif isinstance(value, (dict, list, tuple)):
        value = json.dumps(value)
    f.attrs[key] = value


def create_rollout_file(path: str, spec: FileSpec) -> None:
    """Write the header, tables and empty datasets of a new rollout file (truncating ``path``)."""
    B, n = spec.x0.shape
    T = spec.samples
    with h5py.File(path, "w") as f:
        for k, v in spec.attrs.items():
            _set_attr(f, k, v)
        f.attrs["complete"] = False
        f.attrs["samples"] = 0
        g = f.create_group("model")
        g.create_dataset("mjcf", data=spec.mjcf, dtype=h5py.string_dtype())
        g.create_dataset("compat_log", data=json.dumps(spec.compat_log, default=str), dtype=h5py.string_dtype())
        if spec.model_params:
            pg = g.create_group("params")
            for name, v in spec.model_params.items():
                pg.create_dataset(name, data=np.asarray(v))
        f.create_dataset("layout", data=spec.layout)
        f.create_dataset("x0", data=spec.x0)
        comp = _compression_kwargs(spec.compression)
        chunks = _chunks(T, B, n, spec.time_chunk)
        f.create_dataset("time", shape=(T,), maxshape=(None,), dtype="f8", chunks=(chunks[0],), fillvalue=np.nan)
        f.create_dataset("x", shape=(T, B, n), maxshape=(None, B, n), dtype="f8", chunks=chunks,
                         fillvalue=np.nan, **comp)
        f.create_dataset("status", data=np.zeros(B, dtype=np.int8))
        f.create_dataset("status_step", data=np.full(B, -1, dtype=np.int64))
        for name, seg in (("qpos", spec.qpos), ("qvel", spec.qvel)):
            if seg is not None:
                _virtual(f, name, seg, T, B, n)


def extend_rollout_file(path: str, samples: int, attrs: dict) -> None:
    """Prepare an existing file for a resumed run: grow ``/x`` and ``/time`` to ``samples``, update attrs."""
    with h5py.File(path, "r+", locking=False) as f:
        T_old, B, n = f["x"].shape
        if samples > T_old:
            f["x"].resize((samples, B, n))
            f["time"].resize((samples,))
            for name in ("qpos", "qvel"):
                if name in f:
                    seg = _vds_segment(f[name])
                    _virtual(f, name, seg, samples, B, n)
        for k, v in attrs.items():
            _set_attr(f, k, v)
        f.attrs["complete"] = False
        f.flush()


def _vds_segment(ds) -> slice:
    src = ds.virtual_sources()[0]
    sel = src.src_space.get_select_bounds()
    return slice(int(sel[0][2]), int(sel[1][2]) + 1)


# -- the writer thread ------------------------------------------------------------------------------

class RolloutWriter:
    """Writes chunks in a background thread: ``put`` returns at once (at most ``depth`` chunks wait).

    Each chunk: ``/x`` and ``/time`` rows, ``/status`` and ``/status_step`` as of the chunk's end, the
    ``samples`` attribute, then a flush. ``close(complete)`` drains the queue and marks the file.
    An error in the thread is raised by the next ``put`` or by ``close``.
    """

    def __init__(self, path: str, depth: int = 2):
        self.path = path
        self._file = h5py.File(path, "r+", locking=False)
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
                j0, time, xs, status, status_step = item
                j1 = j0 + len(time)
                f["x"][j0:j1] = xs
                f["time"][j0:j1] = time
                f["status"][...] = status
                f["status_step"][...] = status_step
                f.attrs["samples"] = j1
                f.flush()
            except BaseException as e:  # noqa: B036 - handed to the caller on its next call
                self._error = e

    def _raise(self):
        if self._error is not None:
            err, self._error = self._error, None
            raise RolloutFileError(f"{self.path}: writing a chunk failed: {err}") from err

    def put(self, j0: int, time, xs, status, status_step) -> None:
        self._raise()
        self._queue.put((j0, np.asarray(time), np.asarray(xs), np.asarray(status), np.asarray(status_step)))

    def close(self, complete: bool, attrs: dict | None = None) -> None:
        self._queue.put(None)
        self._thread.join()
        try:
            if self._error is None:
                for k, v in (attrs or {}).items():
                    _set_attr(self._file, k, v)
                self._file.attrs["complete"] = bool(complete)
                self._file.flush()
        finally:
            self._file.close()
        self._raise()


# -- reading ------------------------------------------------------------------------------------------

def _decode(v):
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


class RolloutFile:
    """A rollout file opened for reading (also while it is being written, or after a killed run).

    ``.time`` (T,), ``.x`` (T, B, n), ``.qpos``, ``.qvel``, ``.state(name)`` (T, B, *shape) hold the
    ``samples`` flushed so far; ``.x0``, ``.status``, ``.status_step``, ``.layout`` (a rebuilt
    ``StateLayout``), ``.attrs`` (JSON attributes decoded), ``.complete``, ``.mjcf``, ``.compat_log``,
    ``.model_params``. Arrays are read on access; use as a context manager or call ``close()``.
    """

    def __init__(self, path):
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise RolloutFileError(f"{path}: no such file")
        try:
            # No HDF5 file lock: a reader must be able to open a file a running rollout is writing.
            self._f = h5py.File(path, "r", locking=False)
        except OSError as e:
            raise RolloutFileError(f"{path}: not a readable HDF5 file ({e})") from None
        if _decode(self._f.attrs.get("format")) != FORMAT:
            self._f.close()
            raise RolloutFileError(f"{path}: not an mjharness rollout file (no format={FORMAT!r} attribute)")
        self.path = path
        self._layout = None

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def attrs(self) -> dict:
        out = {}
        for k, v in self._f.attrs.items():
            v = _decode(v)
            if k == "integrator" and isinstance(v, str):
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            out[k] = v
        return out

    @property
    def samples(self) -> int:
        return int(self._f.attrs["samples"])

    @property
    def complete(self) -> bool:
        return bool(self._f.attrs["complete"])

    @property
    def time(self) -> np.ndarray:
        return self._f["time"][: self.samples]

    @property
    def x(self) -> np.ndarray:
        return self._f["x"][: self.samples]

    def _vds(self, name):
        if name not in self._f:
            raise KeyError(f"{self.path}: no /{name} (the rolled-out model is not a MuJoCo scene)")
        return self._f[name][: self.samples]

    @property
    def qpos(self) -> np.ndarray:
        return self._vds("qpos")

    @property
    def qvel(self) -> np.ndarray:
        return self._vds("qvel")

    @property
    def x0(self) -> np.ndarray:
        return self._f["x0"][()]

    @property
    def status(self) -> np.ndarray:
        return self._f["status"][()]

    @property
    def status_step(self) -> np.ndarray:
        return self._f["status_step"][()]

    @property
    def layout(self) -> StateLayout:
        if self._layout is None:
            self._layout = layout_from_table(self._f["layout"][()])
        return self._layout

    @property
    def layout_table(self) -> np.ndarray:
        return self._f["layout"][()]

    def state(self, name: str) -> np.ndarray:
        """One named state over time: (T, B, *shape)."""
        r = self.layout[name]
        return self._f["x"][: self.samples, :, r.offset:r.offset + r.size].reshape(
            (self.samples, self._f["x"].shape[1]) + r.spec.shape)

    @property
    def mjcf(self) -> str:
        return _decode(self._f["model/mjcf"][()])

    @property
    def compat_log(self) -> list:
        return json.loads(_decode(self._f["model/compat_log"][()]))

    @property
    def model_params(self) -> dict:
        g = self._f.get("model/params")
        return {} if g is None else {k: g[k][()] for k in g}

    @property
    def h5(self) -> h5py.File:
        """The open ``h5py.File`` (read-only)."""
        return self._f

    def __repr__(self):
        T, B, n = self._f["x"].shape
        return (f"RolloutFile({self.path!r}, samples={self.samples}/{T}, batch={B}, n={n}, "
                f"complete={self.complete})")


def open_rollout(path) -> RolloutFile:
    """Open a rollout file for reading (see ``RolloutFile``)."""
    return RolloutFile(path)
