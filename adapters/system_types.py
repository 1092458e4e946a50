"""The vocabulary of a ``System`` (adapters/system.py): its error types, the two kinds of offset a registry
has (a member's own and the system's combined), one record per state, and a coupling between members."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mjharness.integrators import StateError
from mjharness.integrators.errors import UserError


class SystemSpecError(StateError):
    """A System was declared or used wrongly; the message names the model, state or coupling."""


class OffsetTypeError(UserError, TypeError):
    """A registry-local offset was given where an integrator-global one is expected, or vice versa."""


class LocalOffset(int):
    """Offset (in scalars) into one member's own value buffer."""

    def __repr__(self):
        return f"LocalOffset({int(self)})"


class GlobalOffset(int):
    """Offset (in scalars) into the system's combined value buffer ``x``."""

    def __repr__(self):
        return f"GlobalOffset({int(self)})"


def _require(value, kind: type[int], what: str) -> int:
    if type(value) is not kind:
        raise OffsetTypeError(f"{what} needs a {kind.__name__}, got {type(value).__name__} {value!r}")
    return int(value)


@dataclass(frozen=True)
class SystemRecord:
    """One state of the system: its member, its member-local name and both offsets."""

    name: str           # "<model>.<state>"
    model: str
    state: str
    size: int
    local: LocalOffset
    global_: GlobalOffset


@dataclass(frozen=True)
class Coupling:
    """``writes = fn(*values of reads)`` at every stage (pure, jit-able)."""

    reads: tuple[str, ...]
    writes: str
    fn: Callable

    def __post_init__(self):
        reads = (self.reads,) if isinstance(self.reads, str) else tuple(self.reads)
        object.__setattr__(self, "reads", reads)
        if not isinstance(self.writes, str) or "." not in self.writes:
            raise SystemSpecError(f"coupling writes must be '<model>.<input>', got {self.writes!r}")
        if not callable(self.fn):
            raise SystemSpecError(f"coupling -> {self.writes!r}: fn must be callable")
