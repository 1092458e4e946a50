"""What the engine reads of a model beyond the integrators' contract, declared once and read once.

Every integrator needs ``layout`` and ``dynamics`` (``integrators.contracts.Model``). The engine
also uses, where a model has them, the features of the table ``FEATURES``: an ``MjScene`` has all,
a ``System`` most, a user's JAX model none. ``SceneView.of(scene)`` reads and type-checks each one
once, when a run is planned (a wrong type is one ``ContractError`` naming the feature), and the
engine reads the frozen view, never the scene's attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import mujoco
import numpy as np

from mjharness.integrators import ContractError


def _is(*types):
    return lambda v: isinstance(v, types)


# feature -> (what it is for, its value when the model has none, a check of a given value)
FEATURES: dict[str, tuple[str, Any, Callable[[Any], bool]]] = {
    "model": ("the MjModel that runs (the file's /model, outputs)", None, _is(mujoco.MjModel)),
    "name": ("a name for messages", None, _is(str)),
    "nu": ("number of controls (ctrl arrays and functions)", 0, lambda v: isinstance(v, (int, np.integer))),
    "qpos_segment": ("MuJoCo's qpos inside x (/qpos, position perturbation)", None, _is(slice)),
    "qvel_segment": ("MuJoCo's qvel inside x (/qvel, velocity perturbation)", None, _is(slice)),
    "quaternion_update": ("the attitude policy (file attribute)", "", _is(str)),
    "backend": ("the dynamics backend (file attribute)", "jax", _is(str)),
    "compat_log": ("the MJX compatibility log (file /model/compat_log)", (), _is(list, tuple)),
    "joint_of": ("state name -> joint name (file /layout)", None, callable),
    "x0": ("the default state (initial states)", None, callable),
    "describe": ("a System's members, order and couplings (file attributes)", None, callable),
    "chunk_runner": ("whole chunks run by the backend on the host (Backend.chunk_runner)", None, callable),
}


@dataclass(frozen=True)
class SceneView:
    """The features of ``FEATURES`` of one model (None / defaults where it has none)."""

    model: Any
    name: str | None
    nu: int
    qpos_segment: slice | None
    qvel_segment: slice | None
    quaternion_update: str
    backend: str
    compat_log: tuple
    joint_of: Callable | None
    x0: Callable | None
    describe: Callable | None
    chunk_runner: Callable | None

    @classmethod
    def of(cls, scene) -> SceneView:
        values = {}
        for f in fields(cls):
            what, default, ok = FEATURES[f.name]
            v = getattr(scene, f.name, None)
            if v is None:
                v = default
            elif not ok(v):
                raise ContractError(f"{type(scene).__name__}.{f.name} ({what}) has the wrong type: "
                                    f"{type(v).__name__}")
            values[f.name] = v
        values["nu"] = int(values["nu"])
        values["compat_log"] = tuple(values["compat_log"])
        values["name"] = values["name"] or type(scene).__name__
        return cls(**values)


assert set(FEATURES) == {f.name for f in fields(SceneView)}


# -- capabilities a run may ask of a model, as Protocols (checked with isinstance, once, when planning) --

@runtime_checkable
class BackendBound(Protocol):
    """A model whose dynamics backend a run resolves (``MjScene``: ``adapters/backends``)."""

    requested_backend: str
    backend_note: str

    def on_backend(self, name: str): ...

    def needs(self) -> dict: ...


@runtime_checkable
class PerWorldModel(Protocol):
    """A model evaluated with per-world model fields (``model_params``)."""

    mjx_model: Any

    def with_model(self, mjx_model): ...


@runtime_checkable
class Forward(Protocol):
    """A model whose forward evaluation recorded outputs read."""

    def forward(self, t, x, ctrl=None, qacc_warmstart=None): ...
