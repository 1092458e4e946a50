"""One writer per file: an exclusive OS lock on a sidecar ``<file>.lock``, held for the writer's whole life.

HDF5's own file locking is per process and does not reach across NFS; ``flock`` on a sidecar does
(Linux emulates it with POSIX byte-range locks on NFS) and the kernel drops it when the holder dies,
so a killed run leaves no lock that blocks ``--resume`` (the sidecar file may stay; its lock is free).
The sidecar's body is JSON ``{host, pid, started}`` so a refused writer can name the holder.
Readers never take the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import datetime, timezone

from .errors import FileInUseError


def lock_path(path: str) -> str:
    return os.fspath(path) + ".lock"


def _holder_text(path: str) -> tuple[dict, str]:
    try:
        with open(lock_path(path)) as fh:
            holder = json.loads(fh.read() or "{}")
    except (OSError, ValueError):
        holder = {}
    text = (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, started {holder.get('started', '?')}"
            if holder else "holder unknown")
    return holder, text


def _in_use(path: str) -> FileInUseError:
    holder, text = _holder_text(path)
    return FileInUseError(f"{path} is being written by another run ({text}); wait for it to finish or stop it "
                          f"(a killed run's lock frees itself), then --resume or --overwrite", holder=holder)


class FileLock:
    """The writer lock of ``path``: ``acquire()`` (or ``with``) raises ``FileInUseError`` naming the holder."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        while True:
            fd = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise _in_use(self.path) from None
            # The previous holder may have removed the sidecar between our open and our flock: then we
            # hold a lock on a file nobody else can see; take the one at the path instead.
            try:
                same = os.fstat(fd).st_ino == os.stat(lock_path(self.path)).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        body = dict(host=socket.gethostname(), pid=os.getpid(),
                    started=datetime.now(timezone.utc).isoformat(timespec="seconds"), file=self.path)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(body).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.remove(lock_path(self.path))  # while still locked, so nobody locks the file we remove
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_not_in_use(path: str | os.PathLike[str]) -> None:
    """Raise ``FileInUseError`` when a live writer holds ``path``'s lock (a probe: takes and drops it)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(lock_path(path)):
        return
    try:
        fd = os.open(lock_path(path), os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path) from None
    finally:
        os.close(fd)
