"""Closed sets of names (integrator kinds, control modes, backends, MJX modes, ...) as enums.

A ``Name`` is a ``str``: it compares equal to its value, so a user may pass ``"adaptive"`` or
``Kind.ADAPTIVE``, and files, the CLI and JSON see the plain string. ``str()`` and f-strings give the value
on every Python we support (3.12 changed how mixed-in enums format, so both are pinned here).
"""

from __future__ import annotations

from enum import Enum


class Name(str, Enum):
    """Base of our string enums: the member *is* its value wherever a string is expected."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The allowed values, in declaration order (error messages, CLI choices, docs)."""
        return tuple(m.value for m in cls)


class IntegratorKind(Name):
    """How the engine drives an integrator: every kind has the same ``step``; the kind says what ``key`` is
    (None, or the step's noise) and what ``h`` means (one step, or an output interval the integrator's
    step-size controller fills with steps of its own)."""

    FIXED = "fixed"
    STOCHASTIC = "stochastic"
    ADAPTIVE = "adaptive"


# The names below are here, not in the modules that act on them, because they must be importable without JAX or
# MuJoCo (the run spec and the CLI parser) and from ``scenes`` (which imports nothing of adapters or rollout).


class MjxMode(Name):
    """``load_scene(mjx=)``: apply and log the meaning-preserving substitutions MJX needs, or refuse."""

    ADAPT = "adapt"
    STRICT = "strict"


class ContactMode(Name):
    """``load_scene(unsupported_contacts=)``: refuse geom pairs MJX cannot collide, or exclude exactly those."""

    REFUSE = "refuse"
    EXCLUDE = "exclude"


class BackendName(Name):
    """A dynamics backend (``adapters.backends``), or AUTO: chosen when a run knows what it needs. The order is
    the CLI's and the docs' (the default's candidates first)."""

    AUTO = "auto"
    MJX = "mjx"
    MUJOCO = "mujoco"
    WARP = "warp"


class OutputSemantics(Name):
    """When recorded outputs are evaluated: LIVE at the recorded state; SAMPLED at the state before the last
    step of the sample (what ``mj_step`` leaves in mjData)."""

    LIVE = "live"
    SAMPLED = "sampled"
