"""Per-world status codes: what the engine stores in ``/status`` and what adaptive integrators return."""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """Why a world stopped (0: it did not). The values are the file format's ``/status`` codes."""

    OK = 0
    NONFINITE = 1       # non-finite state, derivative or candidate: no step size helps
    UNDERFLOW = 2       # adaptive step rejected below h_min, or no representable progress in t
    MAX_STEPS = 3       # adaptive max_steps attempts spent inside one advance() call
    TERMINATED = 4      # the run's termination rule ended the world (on_terminate="freeze"): not a failure
    NONFINITE_CTRL = 5  # a control function or Controller returned a non-finite control: the world froze before it

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {Status.OK: "ok", Status.NONFINITE: "non-finite state", Status.UNDERFLOW: "step-size underflow",
                 Status.MAX_STEPS: "max steps", Status.TERMINATED: "terminated",
                 Status.NONFINITE_CTRL: "non-finite control"}

STATUS_NAMES = {int(s): s.description for s in Status}


def status_name(code) -> str:
    """Description of a status code (an unknown code is shown as itself)."""
    try:
        return Status(int(code)).description
    except ValueError:
        return f"status {int(code)}"

def failed(status):
    """Where a world failed: a non-zero status other than ``TERMINATED`` (a termination rule's, not a failure)."""
    return (status != Status.OK) & (status != Status.TERMINATED)


# Plain-int aliases (the traced code compares arrays against them).
STATUS_OK, STATUS_NONFINITE, STATUS_UNDERFLOW, STATUS_MAX_STEPS, STATUS_TERMINATED, STATUS_NONFINITE_CTRL = (
    int(s) for s in Status)
