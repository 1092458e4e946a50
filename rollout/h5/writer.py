"""Extending and streaming into a rollout file (``create.py`` makes it).

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

import queue
import threading
from collections.abc import Mapping

import h5py
import numpy as np

from .axes import _carry_views, _sensor_views, _virtual
from .create import _os_text, ensure_space
from .digest import ChunkDigests, seal, seal_path
from .errors import RolloutFileError, RolloutWriteError
from .format import (
    LIBVER,
    decode_attr,
    is_output,
    set_attr,
)
from .layout import vds_segment
from .tables import write_table


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

    def put(self, j0: int, time: np.ndarray, xs: np.ndarray, status: np.ndarray, status_step: np.ndarray,
            carry: np.ndarray | None = None, outputs: Mapping[str, np.ndarray] | None = None) -> None:
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


_EPISODE_FIELDS = [("world", "<i8"), ("episode", "<i8"), ("start_step", "<i8"), ("end_step", "<i8"),
                   ("end", h5py.string_dtype())]
EPISODE_ROW = np.dtype(_EPISODE_FIELDS)
EPISODE_ROW_RETURN = np.dtype(_EPISODE_FIELDS + [("return", "<f8")])  # a run with a reward
EPISODE_COLUMNS = {c: {"long_name": d, "units": "1"} for c, d in (
    ("world", "world index"), ("episode", "episode index within the world"),
    ("start_step", "global index of the episode's first step (-1: between two samples)"),
    ("end_step", "global index of the episode's last step"),
    ("end", "how the episode ended: terminated | failed | truncated (the run ended) | running"))}
RETURN_COLUMN = {"long_name": "sum of the episode's rewards (rollout(reward=...))"}


def _episode_rows(rows: list[dict]) -> np.ndarray:
    """The rows as ``EPISODE_ROW`` records, with a ``return`` column when they have one (a run with a reward)."""
    dtype = EPISODE_ROW_RETURN if rows and "return" in rows[0] else EPISODE_ROW
    names = tuple(dtype.names or ())
    return np.array([tuple(d[k] for k in names) for d in rows], dtype=dtype)


def write_episode_table(path: str, rows: list[dict] | None = None) -> None:
    """``/episodes`` of a finished run with a termination rule: one row per world and episode (world, episode,
    start_step, end_step, end), as ``RolloutFile.episode_table`` derives them from the recorded carry (``rows``
    None: derived from the file in the same open)."""
    try:
        with open_rw(path) as f:
            if rows is None:
                from .reader import RolloutFile

                rows = RolloutFile.of_handle(f, path).episode_table()
            table = _episode_rows(rows)
            for name in ("episodes", "episode_row"):
                if name in f:
                    del f[name]
            if int(decode_attr(f.attrs.get("format_version", 1))) < 2:  # a resumed version 1 file keeps its form
                ds = f.create_dataset("episodes", data=table)
                ds.attrs["end"] = "terminated | failed | truncated (the run ended) | running"
                row_axis = f.create_dataset("episode_row", data=np.arange(len(table), dtype=np.int64))
                row_axis.make_scale("episode_row")  # a named axis for generic readers (xarray), not a phony one
                ds.dims[0].attach_scale(row_axis)
            else:
                columns = dict(EPISODE_COLUMNS)
                if "return" in (table.dtype.names or ()):
                    columns["return"] = dict(RETURN_COLUMN, units=str(decode_attr(f.attrs.get("reward_units", "1"))))
                g = write_table(f, "episodes", table, "episode_row", column_attrs=columns)
                g.attrs["long_name"] = "episodes of every world: one row per world and episode"
            seal(f, create=False)  # the content hashes cover the table
    except OSError as e:
        raise RolloutWriteError(f"{path}: writing /episodes failed: {_os_text(e)}; the samples are complete, "
                                f"open_rollout(path).episodes(world) derives them", path=path, dataset="episodes",
                                os_error=e) from None
