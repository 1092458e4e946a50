"""Opening a rollout file for reading (under SWMR while a writer may hold it) and the errors a read turns into:
which dataset, which chunk, whether the file is being written or damaged; which members of a group are data."""

from __future__ import annotations

from typing import Any

import h5py

from .errors import CorruptFileError, FileInUseError, FileNotReadyError, RolloutFileError
from .format import decode_attr
from .lock import check_not_in_use

_AXIS_KEYS = ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "long_name", "units")


def _fields(g) -> list[str]:
    """The data of a group, not its axes (dimension scales: ``world``, ``_<field>_<axis>``, ``_<asset>_byte``)."""
    return [k for k in g if not is_scale(g[k])]


def is_scale(ds) -> bool:
    return decode_attr(ds.attrs.get("CLASS")) == "DIMENSION_SCALE"


def _if_being_created(path: str) -> None:
    """``FileNotReadyError`` when a live writer holds ``path``'s lock: a file without its HDF5 signature yet is one
    that writer is creating (between taking its lock and HDF5's first write of the superblock), not a foreign file."""
    try:
        check_not_in_use(path)
    except FileInUseError as e:
        raise FileNotReadyError(f"{path}: a writer is creating this file right now ({e}); retry in a moment") from None


def open_h5(path: str) -> tuple[h5py.File, bool]:
    """(the file opened read-only, whether as a SWMR reader): SWMR for files in the latest format (readable
    while written), plain for older ones; no HDF5 file lock either way (readers never block the writer).
    Open failures become ``FileNotReadyError`` (being created or prepared: retry) or ``RolloutFileError``."""
    from .superblock import superblock_state

    errors = []
    # SWMR only for a file a writer has open (or left open): a SWMR reader retries a metadata checksum failure
    # with growing sleeps for hours, so a damaged closed file must fail fast in a plain open instead.
    st = superblock_state(path)
    live = st is not None and st["checksum_ok"] and st["flags"] != 0
    attempts: list[tuple[bool, dict[str, Any]]] = []
    if live:
        attempts.append((True, dict(libver="latest", swmr=True, locking=False)))
    # The last: this process already holds the file open another way (e.g. xarray), HDF5 wants the same flags.
    attempts += [(False, dict(locking=False)), (False, {})]
    for swmr, kw in attempts:
        try:
            return h5py.File(path, "r", **kw), swmr
        except OSError as e:
            errors.append(e)
    text = "; ".join(dict.fromkeys(str(e) for e in errors))
    if "already open for write" in text:
        raise FileNotReadyError(f"{path}: a writer is creating or preparing this file right now; retry in a moment "
                                f"({errors[-1]})")
    if "signature" in text or "not an hdf5" in text.lower():
        _if_being_created(path)
        raise RolloutFileError(f"{path}: not a readable HDF5 file (no HDF5 signature): not a rollout file")
    if "truncated" in text or "eof" in text.lower():
        raise FileNotReadyError(f"{path}: the file is shorter than its header says: it is being created (retry in a "
                                f"moment) or it was cut short (then it cannot be read) ({errors[0]})")
    raise CorruptFileError(f"{path}: not a readable HDF5 file: its header is damaged ({errors[0]})", path=path,
                           dataset="/")


def _chunk_of(ds, sel) -> tuple | None:
    """The index (per axis) of the first chunk in ``ds[sel]`` that fails to read, or None."""
    if ds.chunks is None:
        return None
    try:
        parts = ds.iter_chunks(sel) if sel != () else ds.iter_chunks()
        for part in parts:
            try:
                ds[part]
            except OSError:
                return tuple(s.start // c for s, c in zip(part, ds.chunks))
    except (TypeError, ValueError):  # a selection iter_chunks does not take (an int): scan all chunks
        return _chunk_of(ds, ()) if sel != () else None
    return None


def read_error(path: str, f: h5py.File, name: str, sel, e: OSError, *, live: bool) -> RolloutFileError:
    """The named error of a failed read of ``/name``: a checksum failure (with the chunk) or, while the
    file is being written, ``FileNotReadyError``."""
    text = str(e)
    checksum = any(w in text.lower() for w in ("checksum", "fletcher", "filter", "edc"))
    if live and not checksum:
        return FileNotReadyError(f"{path}: /{name} cannot be read at this instant ({text}); the file is being "
                                 f"written: retry")
    chunk = _chunk_of(f[name], sel) if name in f else None
    where = f" chunk {chunk}" if chunk is not None else ""
    return CorruptFileError(f"{path}: /{name}{where} is corrupt ({'checksum mismatch' if checksum else text}); "
                            f"`mjharness verify {path}` lists every damaged chunk", path=path, dataset=f"/{name}",
                            chunk=chunk)
