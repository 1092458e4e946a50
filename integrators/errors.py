"""The one base class of every exception mjharness raises on purpose.

It lives in the bottom layer (``integrators`` imports nothing of ours) so that every subpackage can
derive from it without an import cycle. Each concrete class also derives from the builtin a caller
would expect (``ValueError`` for bad input, ``RuntimeError`` for a fault of the machine), so existing
``except ValueError`` code keeps working; the CLI classifies errors by this type, not by module.
"""

from __future__ import annotations

__all__ = ["MjHarnessError", "UserError", "FaultError"]


class MjHarnessError(Exception):
    """Base of every exception mjharness raises on purpose (its message is written for the user)."""


class UserError(MjHarnessError):
    """Something the user asked for cannot be done as asked; nothing was compiled or written."""


class FaultError(MjHarnessError):
    """A fault of the machine (disk full, killed peer, stalled device); files stay valid and resumable."""
