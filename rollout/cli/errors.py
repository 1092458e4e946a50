"""How a command's exception reaches the user: one paragraph on stderr and exit status 2.

- A user error (an exception class of mjharness, e.g. ``RolloutError``, ``SceneError``,
  ``ContractError``, or a file-system error naming its file) keeps its own message:
  ``mjharness run: error: steps must be an int >= 1, got 0``.
- Anything else (MJX cannot trace a model, XLA runs out of memory, a JAX tracing error, a bug of
  ours) becomes one paragraph: what failed and where it was raised, on which scene or file, and what
  to try. ``--debug`` prints the traceback instead.
"""

from __future__ import annotations

import os
import sys
import textwrap
import traceback

from mjharness.integrators.errors import UserError

__all__ = ["CliError", "is_user_error", "user_message", "origin", "explain"]


class CliError(UserError, ValueError):
    """A user error found by the command line itself (a bad option combination, a missing state)."""


def _our_dirs() -> tuple[str, ...]:
    pkgs = [sys.modules.get(f"mjharness.{name}") for name in ("scenes", "adapters", "integrators", "rollout")]
    return tuple(os.path.join(os.path.realpath(p.__path__[0]), "") for p in pkgs if p is not None)


def _part(filename: str, ours: tuple[str, ...]) -> str | None:
    """Which code a source file belongs to: "mjharness", "mjx", "jax", "mujoco" (or None: Python, numpy, ...)."""
    if os.path.realpath(filename).startswith(ours):
        return "mjharness"
    path = filename.replace("\\", "/")
    for marker, name in (("/mujoco/mjx/", "mjx"), ("/jax/", "jax"), ("/jaxlib/", "jax"), ("/mujoco/", "mujoco")):
        if marker in path:
            return name
    return None


def _parts(e: BaseException) -> list[tuple[str | None, traceback.FrameSummary]]:
    ours = _our_dirs()
    return [(_part(f.filename, ours), f) for f in traceback.extract_tb(e.__traceback__)]


def is_user_error(e: BaseException) -> bool:
    """Our own exception classes, file-system errors naming their file, and the ValueError / TypeError /
    LookupError / RuntimeError our code raises itself (the innermost frame is ours): their messages
    are written for the user."""
    if isinstance(e, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return True
    if not isinstance(e, Exception):
        return False
    if type(e).__module__.split(".", 1)[0] == "mjharness":
        return True
    tb = traceback.extract_tb(e.__traceback__)
    raised_by_us = bool(tb) and _part(tb[-1].filename, _our_dirs()) == "mjharness"
    return raised_by_us and isinstance(e, (ValueError, TypeError, LookupError, RuntimeError))


def user_message(e: BaseException) -> str:
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]  # str(KeyError) quotes its message
    msg = str(e)
    if type(e).__name__ == "SceneError" and "MJX" in msg and "--backend" not in msg:
        msg += " (MuJoCo C runs models MJX refuses: try --backend mujoco)"
    return msg


def origin(e: BaseException) -> tuple[str, traceback.FrameSummary | None]:
    """(where the failure comes from: "mjx" | "xla" | "jax" | "mujoco" | "memory" | "ours", the frame to cite).

    Decided by the frames inside our innermost one: MJX code there means MJX (it calls into JAX, so
    JAX frames below it are MJX's), else JAX or MuJoCo code, else our own code failed.
    """
    if isinstance(e, MemoryError):
        return "memory", None
    parts = _parts(e)
    ours = [i for i, (p, _) in enumerate(parts) if p == "mjharness"]
    inner = parts[ours[-1] + 1:] if ours else parts
    root = type(e).__module__.split(".", 1)[0]
    if root in ("jaxlib", "jax") and "Runtime" in type(e).__name__:
        return "xla", None
    for lib in ("mjx", "jax", "mujoco"):
        hits = [f for p, f in inner if p == lib]
        if hits:
            return lib, hits[-1]
    if root in ("jax", "jaxlib", "mujoco"):
        return ("jax" if root != "mujoco" else "mujoco"), None
    return "ours", (parts[-1][1] if parts else None)


def _advice(kind: str, message: str, command: str) -> str:
    if kind == "memory" or "RESOURCE_EXHAUSTED" in message or "out of memory" in message.lower():
        smaller = {"run": "a smaller --batch, or a smaller --chunk (the device holds one chunk of samples at a time)",
                   "bench": "a smaller --batch"}.get(command, "a smaller problem")
        return f"The device or host ran out of memory: try {smaller}."
    if kind == "mjx":
        return ("MJX cannot run this model as it is: `mjharness inspect SCENE` shows what MJX was given (its "
                "compatibility log), `--mjx strict` refuses unsupported features before anything is compiled, "
                "and the same model in MuJoCo C (mujoco.MjModel.from_xml_path) tells whether it is the model.")
    if kind == "xla":
        return ("XLA failed compiling or running the program: try a smaller --chunk or --devices 1; if it "
                "happens only on a second run, an empty compile cache (MJHARNESS_CACHE_DIR=$(mktemp -d)) rules "
                "out a stale cached executable.")
    if kind == "jax":
        return ("JAX could not trace the computation: a custom model's dynamics must be jit-able (no Python "
                "branches on array values); for a MuJoCo scene, `mjharness inspect SCENE` shows what MJX was given.")
    if kind == "mujoco":
        return "MuJoCo refused the model or its data: check the model in MuJoCo C (python -m mujoco.viewer)."
    return "This looks like a bug in mjharness, not in your input: please report it with the traceback."


def explain(e: BaseException, command: str, subject: str | None) -> str:
    """The paragraph for a non-user exception ``e`` of ``mjharness COMMAND`` on ``subject``."""
    kind, frame = origin(e)
    message = " ".join(str(e).split()).rstrip(".") or "(no message)"
    if len(message) > 300:
        message = message[:297] + "..."
    who = {"mjx": "MJX", "xla": "XLA", "jax": "JAX", "mujoco": "MuJoCo", "memory": "memory",
           "ours": "mjharness"}[kind]
    where = ""
    if frame is not None:
        where = f", raised in {os.path.basename(frame.filename)}:{frame.lineno} ({frame.name})"
    on = f" on {subject}" if subject else ""
    text = (f"mjharness {command}: error: {who} failed{on}: {type(e).__name__}: {message}{where}. "
            f"{_advice(kind, message, command)} `mjharness --debug {command} ...` prints the traceback.")
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False)
