"""The named errors of rollout files: what went wrong, with which file, dataset or holder.

``RolloutFileError`` (a user error: not a rollout file, does not fit the run) is the base of the
file-side user errors; ``RolloutWriteError`` is a fault (the disk filled, the directory vanished):
the run stops at once and the file stays valid and resumable.
"""

from __future__ import annotations

from ..errors import RolloutFaultError, UserError


class RolloutFileError(UserError, ValueError):
    """A rollout file is missing, not a rollout file, or does not fit the requested run; names the file."""


class CorruptFileError(RolloutFileError):
    """A checksum or structure check failed: names the file, the dataset and (when known) the chunk."""

    def __init__(self, message: str, *, path: str = "", dataset: str = "", chunk: tuple | None = None):
        super().__init__(message)
        self.path, self.dataset, self.chunk = path, dataset, chunk


class FileNotReadyError(RolloutFileError):
    """The file cannot be read at this moment (its writer is between two steps of an update): retry."""


class FileInUseError(RolloutFileError):
    """Another run holds the file's writer lock; names the holder (host, pid, start time)."""

    def __init__(self, message: str, *, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


class RolloutWriteError(RolloutFaultError):
    """Writing a chunk failed (ENOSPC, EIO, quota, a vanished directory): names the file, the dataset and
    the OS error. The run stopped at once; the file holds every chunk flushed before, ``complete=False``."""

    def __init__(self, message: str, *, path: str = "", dataset: str = "", os_error: BaseException | None = None):
        super().__init__(message)
        self.path, self.dataset, self.os_error = path, dataset, os_error
