"""Ctrl-C and SIGTERM as one exception that is never lost, for the ``mjharness`` program.

``install()`` makes SIGINT raise ``KeyboardInterrupt`` and SIGTERM ``Terminated`` (a ``KeyboardInterrupt``), so a
run unwinds the same way for both and its writer closes the file. Python runs a signal handler between two
bytecodes of the main thread, wherever they are; inside a garbage-collector or weakref callback (JAX's
``_xla_gc_callback``, a ``__del__``) the exception is printed as "Exception ignored" and dropped, and the run
would go on (measured: a SIGINT 0.8 s into ``mjharness run`` was lost that way). So the handler also records
the signal, and ``check()`` raises it again at the next safe point: the engine calls it at every chunk, and the
CLI after a command that returned as if nothing happened.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["Terminated", "install", "check", "pending", "exception", "held", "deferred"]

_PENDING: list[int] = []   # signals received since install()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that everything unwinds as for Ctrl-C."""


def exception(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


_DEFERRING = [0]           # > 0 inside deferred(): a signal is recorded, raised on leaving


def _handler(signum, frame):
    _PENDING.append(signum)
    if not _DEFERRING[0]:
        raise exception(signum)


@contextlib.contextmanager
def deferred():
    """A signal inside is only recorded, and raised by the next ``check()`` (the engine's, at the next chunk,
    where the file is closed on the way out): for steps that must not stop half done, such as creating a
    file's datasets (a half-created file would be neither a rollout file nor absent)."""
    _DEFERRING[0] += 1
    try:
        yield
    finally:
        _DEFERRING[0] -= 1


def install(*, keep_pending: bool = False):
    """Handle SIGINT and SIGTERM as above (main thread only); returns a function that restores the previous
    handlers. Forgets signals received before unless ``keep_pending`` (the program's entry point installed the
    handlers first, and a signal it recorded still counts)."""
    if not keep_pending:
        _PENDING.clear()
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def pending() -> int | None:
    """The first signal received since ``install()``, or None."""
    return _PENDING[0] if _PENDING else None


def check() -> None:
    """Raise the interrupt received since ``install()`` (if any): one a callback swallowed is not lost."""
    if _PENDING:
        raise exception(_PENDING[0])


@contextlib.contextmanager
def held():
    """SIGINT and SIGTERM blocked (``pthread_sigmask``) inside, delivered on leaving. A child process started
    inside inherits the mask: ``import mujoco`` runs GLFW's version probe as a child Python, which a terminal's
    Ctrl-C (sent to the whole process group) would otherwise stop with a traceback of its own."""
    signals = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
