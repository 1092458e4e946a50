"""The rollout file format (version 2; version 1 files read the same): constants, ``FileSpec``, attributes,
chunking.

Layout of a file::

    /             attrs: format, format_version, versions, model_sha256, integrator (JSON), dt,
                  record_every, steps, batch, seed, created, complete, samples (flushed so far), ...
    /model/mjcf   the scene XML as saved by MuJoCo (readable, numbers rounded)
    /model/mjb    MuJoCo's binary model (``mj_saveModel`` bytes, uint8): the model that ran, lossless;
                  attr ``signature`` (uint64) the compiler's signature, the one field MJB leaves out
    /model/source_xml   the XML the model was compiled from, when known
    /model/assets/<name>  asset bytes (uint8; attr ``name`` holds the asset's name, the dataset name
                  escapes ``/``)                          /model/compat_log  JSON list
    /model_params/<field>  per-world model fields (B, ...) when worlds differ (model_params, randomize): attr
                  ``randomize`` (JSON {KEY: DIST}) on the randomized fields; older files keep
                  them in /model/params/<field> (read the same)
    /layout_table the layout table (a group, one 1-D dataset per column on ``layout_row``): one row per
                  state, then one row per carry entry (update "carry"); version 1: ``/layout``, compound
    /x0  (B, n) initial states          /carry0  (B, nc) initial carry (only when nc > 0)
    /time (T,)    /x (T, B, n) chunked along T           /carry (T, B, nc) chunked like /x
    /qpos, /qvel  virtual datasets over /x               /status (B,)  /status_step (B,)

``/x``, ``/carry`` and ``/time`` are created at their full length T (unwritten samples read as NaN);
the root attribute ``samples`` says how many leading samples are flushed and valid, ``complete``
whether the run finished. ``/carry[j]`` is the carry after the step that produced ``/x[j]``, so a
resume from sample j restarts exactly where the run was. Every addition since the first files
(``/model/mjb``, ``/model/source_xml``, ``/model/assets``, ``/carry``, ``/carry0``, carry rows) is
optional: files without them are the same format version and open unchanged.

Version 2 changed what netCDF readers could not open (version 1 files keep reading): tables are groups
of columns (``tables``), 2-D attributes are datasets, every dataset has named axes and the CF
attributes ``long_name``/``units`` (``cf``), ``/code`` keeps the source of the functions a run called
(``provenance``). Files are written in the HDF5 1.10 format (``LIBVER``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import h5py
import mujoco
import numpy as np
from numpy.typing import ArrayLike

from .errors import RolloutFileError  # noqa: F401 - re-exported: where callers have always imported it

FORMAT = "mjharness-rollout"
FORMAT_VERSION = 2
# The scale name netCDF-4 gives an axis that has no coordinate values (netCDF-C's ``DIM_WITHOUT_VARIABLE``):
# readers see a dimension, not a variable.
NC_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable."
READABLE_VERSIONS = (1, 2)

# The oldest HDF5 file format that has everything the files use (SWMR, virtual datasets, checksummed
# chunks): HDF5 1.10. The upper bound keeps HDF5 >= 2.0 from writing its newer layout messages, which
# HDF5 1.10/1.12/1.14 (h5dump, HDFView, MATLAB, older h5py) cannot decode.
LIBVER = ("v110", "v114")


# Files written since the integrity change (``integrity`` root attribute): every chunked dataset carries
# HDF5's Fletcher-32 checksum, ``content_sha256`` digests the model and the settings, ``/progress`` is
# the SWMR-safe [samples, complete] pair that readers trust. Older files have none of them and still open.
INTEGRITY = 1
CHECKSUM = dict(fletcher32=True)


def checksum_kwargs() -> dict:
    """The chunk-checksum keywords of new datasets (``without_checksums`` turns them off, for the bench)."""
    return CHECKSUM


@contextlib.contextmanager
def without_checksums():
    """Files created inside have no chunk checksums: only to measure what the checksums cost
    (``mjharness bench``'s ``rollout_h5_nocheck`` peer); every user-facing file has them."""
    global CHECKSUM
    saved, CHECKSUM = CHECKSUM, {}
    try:
        yield
    finally:
        CHECKSUM = saved


# Root attributes that change during a file's life (a resume grows ``steps``; a join sets ``batch`` and
# ``shards`` and recomputes the digest): left out of the settings digest.
VOLATILE_ATTRS = ("samples", "complete", "steps", "content_sha256")


@dataclass(frozen=True, kw_only=True)
class FileSpec:
    """Everything that goes into a new rollout file before the first chunk (keyword arguments).

    ``layout`` is ``layout_table(...)`` of the states (carry rows in it are replaced by those of
    ``carry_layout``). The model: ``model``, the ``MjModel`` that ran, from which the file takes the
    binary model, its signature and (unless ``mjcf`` is given) the saved XML; or, for callers that
    hold no model (a copy of another file), ``mjcf`` and optionally ``mjb`` (``model_mjb(model)``)
    with ``model_signature`` (``model.signature``). ``source_xml`` and ``assets`` (name -> bytes): what
    the model was compiled from, when known. ``carry_layout``: ordered (name, size) pairs (a shape
    tuple instead of a size is kept in the table and flattened), e.g. the engine's carry spec; empty
    means no carry and no ``/carry``. ``carry0``: the initial carry, (B, nc) or a dict name -> (B, ...).
    """

    attrs: dict
    compat_log: list
    layout: np.ndarray          # layout_table(...)
    x0: np.ndarray              # (B, n)
    model_params: dict          # field -> (B, ...)
    samples: int                # T
    qpos: slice | None
    qvel: slice | None
    time_chunk: int             # HDF5 chunk length along T
    compression: object = None  # None, "gzip", "lzf" or a gzip level 0-9
    sample_dtype: str = "f8"    # dtype of the recorded samples (/x, /carry, /outputs): the run's float width
    model: mujoco.MjModel | None = None
    mjcf: str = ""
    mjb: bytes | None = None
    model_signature: int | None = None  # model.signature: the compiler's hash, which the MJB does not hold
    source_xml: str | None = None
    assets: dict = field(default_factory=dict)
    carry_layout: tuple = ()
    carry0: ArrayLike | Mapping[str, ArrayLike] | None = None  # (B, nc) or name -> (B, ...); None: no carry
    outputs: tuple = ()         # ((name, per-world shape, attrs dict, row labels, component labels), ...)
    sensors: tuple = ()         # rows of adapters.outputs.sensor_table (written when "sensordata" is an output)
    model_param_attrs: dict = field(default_factory=dict)  # field -> {attr: value} on /model_params/<field>
    carry_views: tuple = ()     # carry entries also shown at the root (virtual over /carry): "ctrl", "episode"
    code: dict = field(default_factory=dict)  # role -> function the run called (/code: source text, sha256)
    ctrl_input: np.ndarray | None = None  # (B, steps, nu) controls given as an array (/inputs/ctrl: a rerun's input)
    history: str | None = None  # CF history: the command line or call (None: this process's command line or
                                # a rollout(...) call rebuilt from attrs)


# Datasets of ``/outputs`` that are not outputs: its axes for generic readers (``time`` a view of ``/time``,
# ``world``) and component labels (``_<output>_<axis>``).
OUTPUT_AXES = ("time", "world")


def is_output(name: str) -> bool:
    return not name.startswith("_") and name not in OUTPUT_AXES


def set_attr(f, key, value) -> None:
    """Store one attribute: None as "null", containers as JSON, everything else as HDF5 stores it."""
    if value is None:
        value = "null"
    elif isinstance(value, (dict, list, tuple)):
        value = json.dumps(value)
    f.attrs[key] = value


def decode_attr(v: Any) -> Any:
    """An attribute or scalar dataset value as a plain Python value (bytes -> str, numpy -> builtin)."""
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


def array_attr(ds, key: str):
    """An array-valued attribute of ``ds``: on the dataset itself (version 1) or, for the 2-D ones netCDF cannot
    read (``pair_geom``), in the dataset whose path the attribute holds (version 2). None when absent."""
    v = ds.attrs.get(key)
    path = decode_attr(v) if isinstance(v, (str, bytes)) else None
    return ds.file[path][()] if path and path in ds.file else v


def compression_kwargs(compression) -> dict:
    if compression is None or compression is False:
        return {}
    if isinstance(compression, (int, np.integer)) and not isinstance(compression, bool):
        return dict(compression="gzip", compression_opts=int(compression), shuffle=True)
    return dict(compression=compression, shuffle=True)


def _largest_divisor_at_most(m: int, cap: int) -> int:
    return max(d for d in range(1, max(1, min(m, cap)) + 1) if m % d == 0)


def chunks(T: int, B: int, n: int, time_chunk: int) -> tuple[int, int, int]:
    """HDF5 chunk shape of a (T, B, n) dataset: at most about 1 MiB, the time extent a divisor of the
    engine's chunk so every write covers whole HDF5 chunks (a checksummed chunk is never read back to
    be patched, and a resume never reads a chunk a failed write left half-written)."""
    nb = max(1, min(B, (1 << 20) // max(1, 8 * n)))
    cap = max(1, min(max(T, 1), (1 << 20) // max(1, 8 * n * nb)))
    # Always a divisor, even a small one: a chunk written in two parts is rewritten in place, and a live
    # reader could read it half-written (raw data is not ordered by SWMR).
    return _largest_divisor_at_most(max(time_chunk, 1), cap), nb, max(n, 1)


def create_samples_dataset(f: h5py.File, name: str, shape: tuple, chunk: tuple, compression, dtype="f8") -> None:
    """A (T, B, n) float dataset growable along T, unwritten samples NaN (``/x``, ``/carry``); float32 when the
    run computed in float32 (``FileSpec.sample_dtype``)."""
    f.create_dataset(name, shape=shape, maxshape=(None,) + tuple(shape[1:]), dtype=dtype, chunks=chunk,
                     fillvalue=np.nan, **compression_kwargs(compression), **checksum_kwargs())


def create_small(g, name: str, data) -> h5py.Dataset:
    """A small fixed-size dataset (x0, statuses, the layout table, the binary model) as one checksummed
    chunk; empty or scalar data (which HDF5 cannot chunk) as is."""
    data = np.asarray(data)
    if data.ndim == 0 or data.size == 0 or data.dtype.kind == "O":
        return g.create_dataset(name, data=data)
    return g.create_dataset(name, data=data, chunks=data.shape, **checksum_kwargs())

