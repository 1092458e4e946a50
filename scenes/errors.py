"""``SceneError`` and its stable load codes, in a module that imports nothing of ``scenes``.

The loader (``scenes/__init__.py``), the MJX checks (``compat.py``) and the trace (``mjx_trace.py``) all
raise it; keeping it here lets them import it directly instead of reaching back up into the package
``__init__`` (an import cycle). ``from mjharness.scenes import SceneError`` keeps working.
"""

from __future__ import annotations

from mjharness.integrators.errors import UserError

__all__ = ["SceneError", "LOAD_CODES"]


# Stable codes of load failures that are not MJX's (those are compat.CODES); every SceneError has one.
LOAD_CODES = {
    "SCENE_NOT_FOUND": "no such file, and no bundled scene of that name",
    "SCENE_SOURCE_INVALID": "not a path, an XML string, a bundled name or an MjModel",
    "MJCF_PARSE_FAILED": "MuJoCo's MJCF parser refused the file or string (its message says why)",
    "MJCF_COMPILE_FAILED": "MuJoCo's compiler refused the model (its message says why: a missing asset, ...)",
    "SCENE_OPTION_INVALID": "a load_scene option (mjx=, unsupported_contacts=) has a value outside its set",
    "MJX_ADAPT_INTERNAL": "internal error: an MJX adaptation left the model invalid (please report)",
}


class SceneError(UserError, ValueError):
    """An MJCF scene could not be loaded; names the source and carries MuJoCo's own message, and
    ``codes``: the stable codes of the reasons (``LOAD_CODES`` or ``compat.CODES``)."""

    def __init__(self, source: str, message: str, codes: tuple[str, ...] = ()):
        self.source = source
        self.message = message
        self.codes = tuple(codes)
        super().__init__(f"{source}: {message}")
