"""What ``verify`` reports (``VerifyReport``), and how it opens a file it may find damaged, foreign or still being
written: whether the bytes are ours at all, HDF5's SWMR open with retries, the plain open."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py

from . import digest as dg
from .superblock import SIGNATURE, superblock_state


@dataclass
class VerifyReport:
    path: str
    status: str                      # "intact" | "corrupt" | "foreign"
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    chunks: int = 0
    written: tuple | None = None     # (samples written, samples planned) of a run that did not complete

    @property
    def exit_code(self) -> int:
        return {"intact": 0, "corrupt": 1}.get(self.status, 2)

    def summary(self) -> str:
        head = {"intact": "intact", "corrupt": "CORRUPT", "foreign": "not a rollout file"}[self.status]
        if self.status == "intact" and self.written is not None:  # sound bytes, but not a whole run
            done, planned = self.written
            head = (f"INCOMPLETE: {done} of {planned} samples written" + (" (the run never wrote its first chunk)"
                    if done == 0 else "") + "; what is written is intact; `mjharness run --resume` continues it")
        lines = [f"{self.path}: {head} ({self.chunks} chunks read)"]
        lines += [f"  problem: {p}" for p in self.problems] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _err(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text}" if not isinstance(e, OSError) else text


# -- is it ours? --------------------------------------------------------------------------------------

def carries_marker(path: str, block: int = 1 << 24) -> bool:
    """Whether the bytes ``mjharness-rollout`` occur anywhere in ``path`` (read in blocks, overlapping)."""
    keep = len(dg.MARKER) - 1
    tail = b""
    with open(path, "rb") as fh:
        while True:
            buf = fh.read(block)
            if not buf:
                return False
            if dg.MARKER in tail + buf:
                return True
            tail = buf[-keep:]


def _has_signature(path: str) -> bool:
    with open(path, "rb") as fh:
        for at in (0, 512, 1024, 2048, 4096):  # HDF5 looks at 0 and powers of two (a user block before it)
            fh.seek(at)
            if fh.read(8) == SIGNATURE:
                return True
    return False


def _unopenable(path: str, e: BaseException) -> VerifyReport:
    """A file that does not open as HDF5: damaged (it carries our identity) or foreign."""
    if not carries_marker(path):
        why = "not an HDF5 file" if not _has_signature(path) else "an HDF5 file that does not open and holds no " \
                                                                 "trace of a rollout file"
        return VerifyReport(path, "foreign", problems=[f"{why} ({_err(e)})"])
    st = superblock_state(path)
    if st is not None and st["checksum_ok"] and st["size"] < st["eoa"]:
        what = f"truncated: the file is {st['size']} bytes, its superblock says {st['eoa']}"
    elif not _has_signature(path):
        what = "the HDF5 signature at the start of the file is damaged"
    elif st is not None and not st["checksum_ok"]:
        what = "the superblock is damaged (its checksum fails)"
    else:
        what = "its header does not read"
    return VerifyReport(path, "corrupt", problems=[f"/: {what} ({_err(e)})"])


# A SWMR reader retries a metadata checksum failure (a torn read of a live writer's update) 100 times with
# growing sleeps: on a killed run's damaged file that is a hang. verify allows a few.
SWMR_READ_ATTEMPTS = 8


def _hdf5_lib():
    """The HDF5 library h5py runs on (for the one property h5py does not wrap), or None."""
    import ctypes

    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({ln.split()[-1] for ln in fh if "libhdf5" in ln and "hdf5_hl" not in ln and "/" in ln})
        lib = ctypes.CDLL(paths[0])
        fn = lib.H5Pset_metadata_read_attempts
    except (OSError, IndexError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.c_uint], ctypes.c_int
    return fn


def _open_swmr(path: str, attempts: int) -> h5py.File:
    set_attempts = _hdf5_lib()
    if set_attempts is None:
        return h5py.File(path, "r", libver="latest", swmr=True, locking=False)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    fapl.set_file_locking(False, True)
    set_attempts(fapl.id, attempts)
    return h5py.File(h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ, fapl=fapl))


def _open(path: str) -> h5py.File:
    """Read-only, no HDF5 file lock; a SWMR reader (few retries) for a file a writer has open or left open."""
    st = superblock_state(path)
    if st is not None and st["checksum_ok"] and st["flags"] != 0:
        try:
            return _open_swmr(path, SWMR_READ_ATTEMPTS)
        except OSError:
            pass
    return h5py.File(path, "r", locking=False)
