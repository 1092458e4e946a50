"""Reading a rollout file: ``open_rollout(path)`` -> ``RolloutFile`` (also while it is being written).

A file a writer has open (its superblock says so) is opened as a SWMR reader (``libver="latest"``,
``swmr=True``), a closed one plainly (a damaged closed file then fails at once instead of in HDF5's SWMR
retry loop); never with HDF5's file lock. Every read refreshes ``/progress`` first, then the dataset, and
reads rows ``[0, samples)``: a consistent prefix at any moment. A read that hits a chunk whose
Fletcher-32 checksum fails raises ``CorruptFileError`` naming the dataset and the chunk; a file that
cannot be read at this instant (being created, or between two steps of its writer) raises
``FileNotReadyError``, which says to retry.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, TypeVar

import h5py
import mujoco
import numpy as np

from mjharness.integrators import StateError, StateLayout

from .episodes import cut_episodes, episode_table
from .errors import CorruptFileError, RolloutFileError
from .format import FORMAT, decode_attr, is_output
from .layout import (
    carry_dict,
    carry_layout_from_table,
    carry_size,
    carry_slots_of_table,
    layout_from_table,
    vds_segment,
)
from .model import asset_name, saved_model
from .provenance import read_code
from .reading import _AXIS_KEYS, _fields, open_h5, read_error
from .tables import read_table, table_sha256

if TYPE_CHECKING:
    import pandas
    import xarray

MODEL_SOURCES = ("auto", "mjb", "xml")
# Where each table is, by format version: the version 2 group first, then version 1's compound dataset.
TABLES = {"layout": ("layout_table", "layout"), "episodes": ("episodes",), "sensors": ("sensors/table",)}
# Reads of a file being written that fail (a checksum of a chunk its writer is rewriting) are retried this
# often before the error is raised: a torn read resolves as soon as the writer's write completes.
LIVE_READ_ATTEMPTS = 20


_File = TypeVar("_File", bound="RolloutFile")


class RolloutFile:
    """A rollout file opened for reading (also while it is being written, or after a killed run).

    ``.time`` (T,), ``.x`` (T, B, n), ``.qpos``, ``.qvel``, ``.state(name)`` (T, B, *shape) and
    ``.carry`` (T, B, nc) hold the ``samples`` flushed so far; ``.carry_at(j)`` is sample j's carry by
    name. ``.x0``, ``.carry0``, ``.status``, ``.status_step``, ``.layout`` (a rebuilt ``StateLayout``
    of the states), ``.carry_layout`` ((name, size) pairs), ``.attrs`` (JSON attributes decoded),
    ``.complete``, ``.mjcf``, ``.mjb``, ``.model_signature``, ``.source_xml``, ``.assets``,
    ``.model()`` (the MjModel that ran), ``.compat_log``, ``.model_params``. Arrays are read on
    access; use as a context manager or call ``close()``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise RolloutFileError(f"{path}: no such file")
        self.path = path
        self._f, self._swmr = open_h5(path)
        try:
            fmt = decode_attr(self._f.attrs.get("format"))
        except OSError as e:
            self._f.close()
            raise CorruptFileError(f"{path}: the root attributes do not read ({e})", path=path, dataset="/") from None
        if fmt != FORMAT:
            self._f.close()
            raise RolloutFileError(f"{path}: not an mjharness rollout file (no format={FORMAT!r} attribute)")
        self._refuse_missing_shards()
        self._layout: StateLayout | None = None
        self._carry_layout: tuple[tuple[str, int], ...] | None = None

    @classmethod
    def of_handle(cls, f: h5py.File, path: str) -> RolloutFile:
        """A reader over a file another part of the package already holds open (not closed by this reader)."""
        self = cls.__new__(cls)
        self.path, self._f, self._swmr = os.fspath(path), f, False
        self._layout = None
        self._carry_layout = None
        return self

    def _refuse_missing_shards(self):
        """A joined file reads its data from its shards: without them every value would be a fill value."""
        from .integrity import missing_shards

        missing = missing_shards(self.path, {"shards": self._f.attrs.get("shards")})
        if missing:
            self._f.close()
            raise CorruptFileError(f"{self.path}: joined file whose shard{'s' if len(missing) > 1 else ''} "
                                   f"{', '.join(missing)} {'are' if len(missing) > 1 else 'is'} missing beside it "
                                   f"(its data live in them: copy or move the shards with the file)",
                                   path=self.path, dataset=missing[0])

    def close(self) -> None:
        self._f.close()

    def __enter__(self: _File) -> _File:  # a subclass's (rollout.replay.RolloutFile's) own type
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def attrs(self) -> dict:
        out = {}
        for k, v in self._f.attrs.items():
            v = decode_attr(v)
            if k == "integrator" and isinstance(v, str):
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            out[k] = v
        if "progress" in self._f:
            out["samples"], out["complete"] = self.samples, self.complete
        return out

    def _progress(self) -> tuple[int, bool]:
        """(samples, complete): ``/progress`` (refreshed; the writer publishes it last) or, in files written
        before it, the root attributes."""
        a = self._f.attrs
        if "progress" not in self._f:
            return int(a["samples"]), bool(a["complete"])
        p = self.read("progress")
        return int(p[0]), bool(p[1])  # the root attributes lag behind while written, after a kill or a failure

    @property
    def samples(self) -> int:
        return self._progress()[0]

    @property
    def complete(self) -> bool:
        return self._progress()[1]

    @property
    def checksummed(self) -> bool:
        """Whether the file was written with chunk checksums and a content digest (``integrity`` attribute)."""
        return "integrity" in self._f.attrs

    def read(self, name: str, sel: Any = ()) -> np.ndarray:
        """``/name[sel]``, refreshed under SWMR; a failed read raises ``CorruptFileError`` (naming the dataset
        and the chunk) or, for a file still being written, ``FileNotReadyError``."""
        for attempt in range(LIVE_READ_ATTEMPTS if self._swmr else 1):
            if attempt:
                time.sleep(0.001 * attempt)  # at most ~0.2 s in all
            try:
                ds = self._f[name]
                if self._swmr and not ds.is_virtual:
                    ds.refresh()
                return ds[sel]
            except OSError as e:
                err = e  # live: /status, /progress are rewritten in place each chunk; a read can catch one torn
        raise read_error(self.path, self._f, name, sel, err, live=self._live()) from None

    def _live(self) -> bool:
        try:
            return not self._progress()[1]
        except (OSError, RolloutFileError):
            return True

    @property
    def batch(self) -> int:
        return int(self._f["x"].shape[1])

    @property
    def time(self) -> np.ndarray:
        return self.read("time", np.s_[: self.samples])

    @property
    def x(self) -> np.ndarray:
        return self.read("x", np.s_[: self.samples])

    def _vds(self, name):
        if name not in self._f:
            raise KeyError(f"{self.path}: no /{name} (the rolled-out model is not a MuJoCo scene)")
        if self._swmr:  # read the segment of /x itself: a virtual dataset is not refreshed under SWMR
            return self.read("x", np.s_[: self.samples, :, vds_segment(self._f[name])])
        return self.read(name, np.s_[: self.samples])

    @property
    def qpos(self) -> np.ndarray:
        return self._vds("qpos")

    @property
    def qvel(self) -> np.ndarray:
        return self._vds("qvel")

    @property
    def x0(self) -> np.ndarray:
        return self.read("x0")

    @property
    def status(self) -> np.ndarray:
        return self.read("status")

    @property
    def status_step(self) -> np.ndarray:
        return self.read("status_step")

    @property
    def layout(self) -> StateLayout:
        if self._layout is None:
            self._layout = layout_from_table(self.table("layout"))
        return self._layout

    @property
    def layout_table(self) -> np.ndarray:
        return self.table("layout")

    def table(self, name: str) -> np.ndarray:
        """Table ``name`` ("layout", "episodes" or "sensors") as a numpy structured array, strings as bytes,
        from a file of either format version (version 2: a group of columns; version 1: a compound dataset)."""
        if name not in TABLES:
            raise KeyError(f"{self.path}: no table {name!r} (tables: {', '.join(TABLES)})")
        path = next((p for p in TABLES[name] if p in self._f), None)
        if path is None:
            raise KeyError(f"{self.path}: no /{TABLES[name][0]} table in this file")
        for attempt in range(LIVE_READ_ATTEMPTS if self._swmr else 1):
            try:
                rows = read_table(self._f[path])
                break
            except OSError as e:
                err = e
                time.sleep(0.001 * (attempt + 1))
        else:
            raise read_error(self.path, self._f, path, (), err, live=self._live()) from None
        want = decode_attr(self._f.attrs.get(f"{name}_sha256"))
        if want and table_sha256(rows) != want:
            raise CorruptFileError(f"{self.path}: /{path} does not match its {name}_sha256 attribute (a row "
                                   f"changed since the file was written); `mjharness verify {self.path}`",
                                   path=self.path, dataset=f"/{path}")
        return rows

    def state(self, name: str) -> np.ndarray:
        """One named state over time: (T, B, *shape)."""
        r = self.layout[name]
        T = self.samples
        return self.read("x", np.s_[:T, :, r.offset:r.offset + r.size]).reshape((T, self.batch) + r.spec.shape)

    # -- the carry ----------------------------------------------------------------------------------

    @property
    def carry_layout(self) -> tuple:
        """The carry's (name, size) pairs in vector order; () for a file without a carry."""
        if self._carry_layout is None:
            try:
                cl = carry_layout_from_table(self.table("layout"))
            except StateError as e:
                raise RolloutFileError(f"{self.path}: {e}") from None
            nc_file = self._f["carry"].shape[2] if "carry" in self._f else 0
            if (cl and "carry" not in self._f) or carry_size(cl) != nc_file:
                raise RolloutFileError(f"{self.path}: /layout lists a carry of {carry_size(cl)} values per world, "
                                       f"/carry holds {nc_file}")
            self._carry_layout = cl
        return self._carry_layout

    @property
    def carry0(self) -> np.ndarray:
        """The initial carry (B, nc) (nc = 0 for a file without a carry)."""
        return self.read("carry0") if self.carry_layout else np.zeros((self.batch, 0))

    @property
    def carry(self) -> np.ndarray:
        """The carry after each flushed sample's step: (T, B, nc)."""
        if not self.carry_layout:
            return np.zeros((self.samples, self.batch, 0))
        return self.read("carry", np.s_[: self.samples])

    def carry_at(self, j: int) -> dict:
        """The carry after sample ``j`` (0 <= j < samples) by name: name -> (B, size) ({} without a carry)."""
        if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < self.samples:
            raise IndexError(f"{self.path}: sample {j!r} is not among the {self.samples} flushed samples")
        if not self.carry_layout:
            return {}
        return carry_dict(self.carry_layout, self.read("carry", int(j)))

    def carry_entry(self, name: str) -> np.ndarray:
        """One carry entry over the flushed samples, (T, B, *declared shape) (e.g. a closed loop's ``ctrl``)."""
        slots = carry_slots_of_table(self.table("layout"))
        if name not in slots:
            raise KeyError(f"{self.path}: the carry has no entry {name!r} (entries: {sorted(slots)})")
        shape, off, size = slots[name]
        T = self.samples
        return self.read("carry", np.s_[:T, :, off:off + size]).reshape((T, self.batch) + shape)

    # -- a closed loop's controls and episodes (rollout(ctrl=Controller(...), terminate=...)) ------------

    @property
    def ctrl(self) -> np.ndarray:
        """The controls a ``Controller`` applied during each flushed sample's step, (T, B, nu)."""
        if "ctrl" not in carry_slots_of_table(self.table("layout")):
            raise KeyError(f"{self.path}: no /ctrl: the run had no Controller (its controls were inputs)")
        return self.carry_entry("ctrl")

    @property
    def reward(self) -> np.ndarray:
        """The reward of the last control period ended at or before each flushed sample, (T, B) (a run with
        ``reward=``; 0 before an episode's first evaluation)."""
        if "reward" not in carry_slots_of_table(self.table("layout")):
            raise KeyError(f"{self.path}: no /reward: the run had no reward (rollout(reward=fn))")
        return self.carry_entry("reward")

    def _returns(self) -> np.ndarray | None:
        """The carry's ``episode_return`` (T, B), None for a run without a reward."""
        if "episode_return" not in carry_slots_of_table(self.table("layout")):
            return None
        return self.carry_entry("episode_return")

    @property
    def episode(self) -> np.ndarray:
        """The episode index of each flushed sample, (T, B) int64 (a run with a termination rule)."""
        return self._loop_entry("episode").astype(np.int64)

    def _loop_entry(self, name):
        try:
            return self.carry_entry(name)
        except KeyError:
            raise KeyError(f"{self.path}: the run had no termination rule (no /episode)") from None

    def episode_table(self) -> list[dict]:
        """Every world's episodes: ``{world, episode, start_step, end_step, end, samples}`` (``engine.episodes``)."""
        a = self.attrs
        return episode_table(self.episode, self._loop_entry("episode_start"), self._loop_entry("terminated"),
                             self.status, self.status_step, record_every=int(a["record_every"]),
                             steps=int(a["steps"]), samples_done=self.samples, complete=self.complete,
                             world_offset=int(a.get("world_offset", 0) or 0), returns=self._returns())

    def episodes(self, world: int) -> list[dict]:
        """The episodes of ``world``: ``{episode, start_step, end_step, end, samples, time, x}`` each, ``time``
        (m,) and ``x`` (m, n) the recorded samples of the episode (its terminal state is the last; a reset
        episode's first state is not a sample). ``end``: "terminated", "failed", "truncated" or "running";
        ``return``: the sum of the episode's rewards (a run with ``reward=``)."""
        a = self.attrs
        if not isinstance(world, (int, np.integer)) or isinstance(world, bool) or not 0 <= world < self.batch:
            raise IndexError(f"{self.path}: world {world!r} is not one of the file's {self.batch} worlds")
        w = int(world)
        return cut_episodes(self.episode, self._loop_entry("episode_start"), self._loop_entry("terminated"),
                            self.status, self.status_step, w, time=self.time,
                            x=self.read("x", np.s_[: self.samples, w]), record_every=int(a["record_every"]),
                            steps=int(a["steps"]), complete=self.complete, returns=self._returns())

    # -- the model ----------------------------------------------------------------------------------

    @property
    def mjcf(self) -> str:
        return decode_attr(self._f["model/mjcf"][()])

    @property
    def mjb(self) -> bytes | None:
        """MuJoCo's binary model of the model that ran (None in files written before it was stored)."""
        return None if "model/mjb" not in self._f else self.read("model/mjb").tobytes()

    @property
    def model_signature(self) -> int | None:
        """``signature`` of the model that ran (MJB leaves it out; None where the file does not hold it)."""
        ds = self._f.get("model/mjb")
        sig = None if ds is None else ds.attrs.get("signature")
        return None if sig is None else int(sig)

    @property
    def code(self) -> dict:
        """{role: {module, qualname, file, sha256, importable, source}} of the functions the run called
        (``/code``; {} for files written before it): ``ctrl``, ``controller.init``, ``controller.step``,
        ``terminate``, ``output.<name>``."""
        return read_code(self._f)

    @property
    def source_xml(self) -> str | None:
        ds = self._f.get("model/source_xml")
        return None if ds is None else decode_attr(ds[()])

    @property
    def assets(self) -> dict:
        g = self._f.get("model/assets")
        if g is None:
            return {}
        return {decode_attr(g[k].attrs.get("name", asset_name(k))): self.read(f"model/assets/{k}").tobytes()
                for k in _fields(g)}

    def model(self, source: str = "auto") -> mujoco.MjModel:
        """The ``MjModel`` that ran. ``source``: ``"mjb"`` the lossless binary model (bit for bit in
        every field but ``signature``, see ``model_signature``); ``"xml"`` compiles ``/model/mjcf``
        with the file's assets (numbers rounded as the XML prints them); ``"auto"`` (default) the
        MJB when the file holds one, else the XML (older files)."""
        if source not in MODEL_SOURCES:
            raise ValueError(f"source must be one of {MODEL_SOURCES}, got {source!r}")
        mjb = self.mjb if source != "xml" else None
        return saved_model(self.path, mjb, source, self.mjcf, lambda: self.assets,
                           self.attrs.get("mujoco_version", "(unknown)"))

    @property
    def compat_log(self) -> list:
        return json.loads(decode_attr(self._f["model/compat_log"][()]))

    @property
    def model_params(self) -> dict:
        """Per-world model fields {field: (B, ...)}: ``/model_params`` (``/model/params`` in older files)."""
        where = next((p for p in ("model_params", "model/params") if p in self._f), None)
        return {} if where is None else {k: self.read(f"{where}/{k}") for k in _fields(self._f[where])}

    @property
    def model_param_attrs(self) -> dict:
        """{field: {attr: value}} of the per-world model fields (``randomize``: the distributions, JSON)."""
        g = self._f.get("model_params")
        return {} if g is None else {k: {a: decode_attr(v) for a, v in g[k].attrs.items() if a not in _AXIS_KEYS}
                                     for k in _fields(g)}

    @property
    def output_names(self) -> tuple:
        """Names of the recorded outputs (``/outputs/<name>``), in file order."""
        g = self._f.get("outputs")
        return tuple(k for k in g if is_output(k)) if g is not None else ()  # not its axes and labels

    def output(self, name: str) -> np.ndarray:
        """Recorded output ``name`` (T, B, ...) over the flushed samples (attributes: ``.h5["outputs"][name]``)."""
        if name not in self.output_names:
            raise KeyError(f"{self.path}: no output {name!r} (recorded: {list(self.output_names)})")
        return self.read(f"outputs/{name}", np.s_[: self.samples])

    def contacts_output(self) -> str:
        """The name of the recorded ``contacts`` output (``contacts`` or ``contacts:K``)."""
        field = lambda n: decode_attr(self._f["outputs"][n].attrs.get("mujoco_field"))  # noqa: E731
        names = [n for n in self.output_names if field(n) == "contacts"]
        if not names:
            raise KeyError(f"{self.path}: no contacts recorded (recorded: {list(self.output_names)}; "
                           f"record 'contacts')")
        return names[0]

    def contacts(self, world: int, row: int = -1) -> np.ndarray:
        """The contacts of ``world`` at recorded ``row`` (negative: from the last flushed row) as a structured
        array (``adapters.contacts.contact_table``): slot, id, geom ids and names, body names, pos, frame,
        dist, force (contact frame). ``contact_counts(name)`` gives ncon, nefc and overflow bits per row."""
        from mjharness.adapters.contacts import contact_table

        name = self.contacts_output()
        row = row + self.samples if row < 0 else row
        if not (0 <= row < self.samples and 0 <= world < self.batch):
            raise IndexError(f"{self.path}: no row {row} of world {world} ({self.samples} rows x {self.batch} worlds)")
        return contact_table(self.model(), self.read(f"outputs/{name}", np.s_[row, world]))

    def contact_counts(self) -> np.ndarray:
        """(T, B, 3) ncon, nefc and overflow bits (``adapters.contacts.OVERFLOW``) of the contacts output."""
        return self.output(f"{self.contacts_output()}_ncon")

    @property
    def sensors(self) -> list[dict]:
        """The ``/sensors/table`` rows (name, type, object, adr, dim, cutoff, noise); [] without sensordata."""
        if "sensors/table" not in self._f:
            return []
        return [{k: decode_attr(r[k]) for k in r.dtype.names} for r in self.table("sensors")]

    def sensor(self, name: str) -> np.ndarray:
        """Sensor ``name`` (T, B, dim): the virtual dataset ``/sensors/<name>`` over ``/outputs/sensordata``."""
        names = [r["name"] for r in self.sensors]
        if name not in names:
            raise KeyError(f"{self.path}: no sensor {name!r} recorded (sensors: {names}; record 'sensordata')")
        if self._swmr:  # the columns of /outputs/sensordata itself (virtual datasets are not refreshed)
            cols = decode_attr(self._f["sensors"][name].attrs["sensordata_columns"])
            a, b = (int(v) for v in cols.split(":"))
            return self.read("outputs/sensordata", np.s_[: self.samples, :, a:b])
        return self.read(f"sensors/{name}", np.s_[: self.samples])

    # -- generic readers --------------------------------------------------------------------------------

    def to_xarray(self, group: str | None = None) -> xarray.Dataset:
        """The datasets of ``group`` (root by default; "outputs", "sensors", "episodes", ...) as an
        ``xarray.Dataset`` with the file's dimension names, coordinates and CF attributes, over the samples
        flushed so far: safe on a file being written (``frames.to_xarray``)."""
        from .frames import to_xarray

        return to_xarray(self, group)

    def to_pandas(self, table: str) -> pandas.DataFrame:
        """Table ``"episodes"``, ``"contacts"`` or ``"sensors"`` as a ``pandas.DataFrame``: one row per episode,
        per valid contact (of every flushed sample and world; vector columns split ``pos_x``, ...) or per
        sensor, strings as ``str`` (``frames.to_pandas``)."""
        from .frames import to_pandas

        return to_pandas(self, table)

    @property
    def h5(self) -> h5py.File:
        """The open ``h5py.File`` (read-only)."""
        return self._f

    def __repr__(self):
        T, B, n = self._f["x"].shape
        return (f"RolloutFile({self.path!r}, samples={self.samples}/{T}, batch={B}, n={n}, "
                f"nc={carry_size(self.carry_layout)}, complete={self.complete})")


def open_rollout(path: str | os.PathLike[str]) -> RolloutFile:
    """Open a rollout file for reading (see ``RolloutFile``)."""
    return RolloutFile(path)
