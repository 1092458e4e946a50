"""Long work started from Python says so, as ``rollout`` does: a JAX compile can take minutes on a CPU (a
gradient through a few hundred MJX steps: two minutes on two cores), and silence looks like a hang.

``compiling(label)`` prints, when a function is traced, that its compile follows; the end of that compile is
printed by a listener on JAX's own compile events (``/jax/core/compile/backend_compile_duration``, and the
persistent cache's retrieval), so a compile started by the user's ``jax.jit`` / ``jax.grad`` around our
function is announced too. Compiles shorter than ``MIN_S`` are not worth a line and do not consume the label.
Lines go to stderr through tqdm (they do not break a progress bar).
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["compiling", "say", "MIN_S"]

MIN_S = 1.0          # seconds: a compile this long is announced
_EXPIRE_S = 3600.0   # a label whose compile never came (an abandoned trace) is forgotten after this long
_waiting: list[tuple[str, float]] = []
_lock = threading.Lock()
_listening: list[bool] = []


def say(text: str) -> None:
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr)


def _take() -> str | None:
    with _lock:
        now = time.monotonic()
        _waiting[:] = [(label, t) for label, t in _waiting if now - t < _EXPIRE_S]
        return _waiting.pop(0)[0] if _waiting else None


def _on_duration(event: str, duration_secs: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration" and duration_secs >= MIN_S:
        label = _take()
        if label is not None:
            say(f"{label}: compiled in {duration_secs:.1f} s")
    elif event == "/jax/compilation_cache/cache_retrieval_time_sec":
        label = _take()
        if label is not None:
            say(f"{label}: loaded from the compile cache in {duration_secs:.1f} s")


def compiling(label: str, progress: bool = True) -> None:
    """Say that ``label`` was traced and its compile follows; its end is said when JAX reports it."""
    if not progress:
        return
    with _lock:
        if not _listening:
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(_on_duration)
            _listening.append(True)
        _waiting.append((label, time.monotonic()))
    say(f"{label}: traced; compiling (seconds to minutes on a CPU, under jax.jit / jax.grad too)...")
