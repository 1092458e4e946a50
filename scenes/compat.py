"""MJX compatibility: checks run before MJX sees a model, and meaning-preserving adaptations.

(Placeholder until issue 8 lands: validates arguments and passes the model through.)
"""

from __future__ import annotations

MODES = ("adapt", "strict")
CONTACT_MODES = ("refuse", "exclude")


def apply(spec, model, source, *, mode="adapt", unsupported_contacts="refuse"):
    from . import SceneError

    if mode not in MODES:
        raise SceneError(source, f"mjx must be one of {MODES}, got {mode!r}")
    if unsupported_contacts not in CONTACT_MODES:
        raise SceneError(source, f"unsupported_contacts must be one of {CONTACT_MODES}, got {unsupported_contacts!r}")
    return model, []
