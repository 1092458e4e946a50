"""Known-benign XLA log lines, dropped from the C++ side of stderr; every other line passes unchanged.

Two lines come with every executable that JAX's persistent compilation cache hands back:

- ``E... cpu_aot_loader.cc:...] Loading XLA:CPU AOT result. Target machine feature +prefer-no-gather
  is not supported on the host machine. ... This could lead to execution errors such as SIGILL.``
  (and the same for ``+prefer-no-scatter``), on CPUs with AVX-512. The cause: XLA:CPU adds these two
  LLVM *tuning* features to every compile when the host has any AVX-512 feature (gathers and
  scatters are slow there; ``IrCompiler::build_target_machine``), the cache stores them with the
  executable, and on load ``CpuAotLoader`` compares the stored features with
  ``llvm::sys::getHostCPUFeatures()``, which lists instruction-set features only, never tuning
  ones. So the loader complains on the very machine that compiled the entry. No XLA flag removes
  the tuning features short of ``--xla_cpu_max_isa=AVX2`` (which gives up AVX-512 code), TSL/absl
  have no per-file severity filter (``TF_CPP_VMODULE`` sets VLOG verbosity only) and
  ``TF_CPP_MIN_LOG_LEVEL=3`` would hide real errors too. A genuine instruction-set mismatch (e.g.
  ``+avx512f`` in a cache made on another machine) names another feature and still shows.
- ``W... pjrt_executable.cc:...] Assume version compatibility. PjRt-IFRT does not track XLA
  executable versions.`` on every load of a serialized executable.

``install()`` makes file descriptor 2 a pipe read by a daemon thread, which drops exactly those lines
and writes everything else to the original stderr; Python's ``sys.stderr``, when it is the interpreter's
own, is re-opened on the original stderr, so Python output (messages, the progress bar, tracebacks)
does not pass the filter and keeps its terminal. A ``sys.stderr`` someone else set (Jupyter, pytest's
capture) is left alone, and so is a file descriptor 2 that someone else replaced after us.

It is installed by ``configure()`` (``scenes/settings.py``: rollout(), the CLI and the model constructors call it), so
library users see the same stderr as the CLI; the CLI's ``--debug`` uninstalls it, and
``MJHARNESS_XLA_LOG=all`` keeps it off everywhere. It lives in the bottom layer because the scene
loader's MJX trace applies the settings without importing upward.
"""

from __future__ import annotations

import atexit
import fcntl
import io
import os
import re
import select
import sys
import threading

__all__ = ["BENIGN", "is_benign", "drop_benign", "install", "uninstall", "ENV_VAR"]

ENV_VAR = "MJHARNESS_XLA_LOG"
_HEADER = rb"\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ "
BENIGN = (
    re.compile(rb"E" + _HEADER + rb"cpu_aot_loader\.cc:\d+\] Loading XLA:CPU AOT result\. Target machine feature "
               rb"\+prefer-no-(?:gather|scatter) is not +supported on the host machine\. Machine type used for "
               rb"XLA:CPU compilation doesn't match the machine type for execution\. Compile machine features: "
               rb"\[[^\]]*\] vs host machine features: \[[^\]]*\]\. This could lead to execution errors such as "
               rb"SIGILL\."),
    re.compile(rb"W" + _HEADER + rb"pjrt_executable\.cc:\d+\] Assume version compatibility\. PjRt-IFRT does not "
               rb"track XLA executable versions\."),
)
_HOLD_S = 0.2        # a line without its newline yet waits this long for the rest, then passes as it is
_PIPE_BYTES = 1 << 20  # room for bursts while the reader thread waits for the GIL
_F_SETPIPE_SZ = 1031   # Linux fcntl


def is_benign(line: bytes) -> bool:
    """True for exactly the known-benign lines above (``line`` with or without its newline)."""
    body = line.rstrip(b"\r\n")
    return any(p.fullmatch(body) for p in BENIGN)


def drop_benign(data: bytes) -> tuple[bytes, bytes]:
    """(complete lines of ``data`` less the benign ones, the trailing partial line)."""
    *lines, rest = data.split(b"\n")
    return b"".join(line + b"\n" for line in lines if not is_benign(line)), rest


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the original stderr is gone (a closed pipe): nothing left to tell
        pass


def _pump(read_fd: int, out_fd: int) -> None:
    pending = b""
    while True:
        ready, _, _ = select.select([read_fd], [], [], _HOLD_S if pending else None)
        if not ready:  # a partial line waited long enough
            _write_all(out_fd, pending)
            pending = b""
            continue
        data = os.read(read_fd, 1 << 16)
        if not data:
            break
        kept, pending = drop_benign(pending + data)
        _write_all(out_fd, kept)
    _write_all(out_fd, pending)
    os.close(read_fd)


def _inode(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _own_stderr() -> bool:
    """Is ``sys.stderr`` the interpreter's own, on file descriptor 2 (not Jupyter's or pytest's)?"""
    try:
        return sys.stderr is sys.__stderr__ and sys.stderr is not None and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


class _Installed:
    def __init__(self):
        if sys.stderr is not None:
            sys.stderr.flush()
        self.saved_fd = os.dup(2)
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:  # not Linux, or over the system's limit: the default pipe size
            pass
        self.pipe = _inode(write_fd)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self.thread = threading.Thread(target=_pump, args=(read_fd, self.saved_fd), name="mjharness-xla-log",
                                       daemon=True)
        self.thread.start()
        self.stderr = sys.stderr
        self.ours = None
        if _own_stderr():
            self.ours = io.TextIOWrapper(io.FileIO(self.saved_fd, "w", closefd=False),
                                         encoding=getattr(self.stderr, "encoding", None) or "utf-8",
                                         errors="backslashreplace", line_buffering=True, write_through=True)
            sys.stderr = self.ours

    def alive(self) -> bool:
        """Still in place: file descriptor 2 is our pipe (a test harness may have put its own back)."""
        try:
            return _inode(2) == self.pipe
        except OSError:
            return False

    def close(self) -> None:
        if sys.stderr is not None:
            sys.stderr.flush()
        if self.alive():
            os.dup2(self.saved_fd, 2)  # closes the pipe's write end: the thread drains it and stops
            self.thread.join(timeout=2.0)
        if self.ours is not None and sys.stderr is self.ours:
            sys.stderr = self.stderr


_ACTIVE: list[_Installed] = []


def install() -> bool:
    """Filter fd 2 for the rest of the process (idempotent); False when ``MJHARNESS_XLA_LOG=all``."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "all":
        return False
    if _ACTIVE and not _ACTIVE[-1].alive():
        uninstall()  # fd 2 was replaced behind our back: start again on the new one
    if not _ACTIVE:
        _ACTIVE.append(_Installed())
        atexit.register(uninstall)
    return True


def uninstall() -> None:
    """Put fd 2 and ``sys.stderr`` back and pass on what is still in the pipe."""
    while _ACTIVE:
        _ACTIVE.pop().close()
