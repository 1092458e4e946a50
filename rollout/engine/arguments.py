"""The types of the engine's public arguments, for annotations (nothing here runs at import beyond the names)."""

from __future__ import annotations

import os
from typing import TypeAlias

import mujoco

from mjharness.integrators import Integrator, Model

# A scene as ``rollout`` and ``make_plan`` take it: an ``MjScene`` or any model with ``.layout`` and ``.dynamics``
# (``integrators.contracts.Model``), an ``MjModel``, a path (MJCF, or a System spec .toml/.json), an XML string
# or a bundled scene's name; ``resolve_scene`` turns it into a model.
SceneLike: TypeAlias = "Model | mujoco.MjModel | str | os.PathLike[str]"

# An integrator as ``rollout`` takes it: an integrator object, its class, a registered name, or None (the scene's
# own); ``integrators.resolve_integrator`` turns it into an object.
IntegratorLike: TypeAlias = "Integrator | type[Integrator] | str | None"

# A file path as the file functions take it.
PathLike: TypeAlias = "str | os.PathLike[str]"
