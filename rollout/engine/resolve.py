"""Resolving a run's scene, backend, integrator and timestep (the scene's own by default), and the backend
capabilities a run's arguments need.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from mjharness.adapters import MjScene
from mjharness.adapters.backends import AUTO, check_name, get_backend, requested
from mjharness.adapters.backends import choose as choose_backend
from mjharness.adapters.outputs import has_callables
from mjharness.integrators import ContractError, Model, resolve_integrator

from ..errors import RolloutError
from . import episodes as _ep
from .scene_view import BackendBound, SceneView

if TYPE_CHECKING:
    from .arguments import SceneLike


def resolve_scene(scene: SceneLike, *, mjx: str = "adapt", quaternion_update: str = "quaternion",
                  backend: str = AUTO, needs: dict | None = None, unsupported_contacts: str = "refuse",
                  need_sensors: bool = False) -> Model:
    """An ``MjScene`` (or any model with ``.layout`` and ``.dynamics``) from a scene, MjModel, path or name,
    on the backend ``choose_backend`` picks; see ``resolve_run_scene``."""
    return resolve_run_scene(scene, mjx=mjx, quaternion_update=quaternion_update, backend=backend, needs=needs,
                             unsupported_contacts=unsupported_contacts, need_sensors=need_sensors)[0]


def resolve_run_scene(scene, *, mjx="adapt", quaternion_update="quaternion", backend=AUTO, needs=None,
                      unsupported_contacts="refuse", need_sensors=False) -> tuple[Model, str]:
    """(scene, why this backend). ``backend``: a name of ``adapters.backends.BACKEND_NAMES``; ``"auto"``
    defers to the scene's own choice, else MJX on an accelerator and MuJoCo C on CPU unless ``needs``
    ({capability: what asks}) names one only MJX has. An explicit backend lacking a need is refused here."""
    backend = check_name(backend)  # a BackendName from here on
    needs = dict(needs or {})
    if isinstance(scene, Model):
        if not isinstance(scene, BackendBound):  # a System or a user's JAX model: it evaluates itself
            return scene, "the model's own dynamics (JAX)"
        asked = requested((scene.requested_backend, "the MjScene"), (backend, "the run"))
        name, why = choose_backend(asked, {**scene.needs(), **needs})
        return scene.on_backend(name), (scene.backend_note or why)
    if isinstance(scene, (str, os.PathLike)) and str(scene).endswith((".toml", ".json")):
        from mjharness.adapters.system_spec import system_from_spec  # a System spec file (adapters/system_spec.py)

        return system_from_spec(scene), "the system's members (JAX)"
    name, why = choose_backend(backend, needs)
    model = get_backend(name).load(scene, mjx=mjx, unsupported_contacts=unsupported_contacts,
                                   need_sensors=need_sensors)
    return MjScene(model, quaternion_update=quaternion_update, backend=name), why


def scene_integrator(scene, integrator):
    """``integrator``, or (None) the scene's own (``MjScene.default_integrator``), as an object."""
    if integrator is None:
        try:
            own = getattr(scene, "default_integrator", None)
        except ContractError as e:
            raise RolloutError(str(e)) from None
        if own is None:
            raise RolloutError(f"integrator=None means the scene's own integrator, but {type(scene).__name__} names "
                               f"none: pass an integrator (e.g. 'rk4')")
        integrator = own
    try:
        return resolve_integrator(integrator)
    except ContractError as e:
        raise RolloutError(str(e)) from None


def scene_timestep(scene, dt) -> float:
    if dt is None:
        model = SceneView.of(scene).model
        if model is None:
            raise RolloutError(f"dt=None means the scene's timestep, but {type(scene).__name__} has no MuJoCo "
                               f"model: pass dt")
        dt = float(model.opt.timestep)
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise RolloutError(f"dt must be a number > 0, got {dt!r}") from None
    if not (math.isfinite(dt) and dt > 0):
        raise RolloutError(f"dt must be a finite number > 0, got {dt!r}")
    return dt


def run_needs(model_params, outputs, randomize=None) -> dict[str, str]:
    """The backend capabilities a run's own arguments need ({capability: what asks}); the scene adds its own."""
    needs = {}
    if model_params:
        needs["per_world_params"] = f"model_params {sorted(model_params)}"
    elif randomize:
        needs["per_world_params"] = f"randomize {sorted(randomize)}"
    if (model_params or randomize) and outputs:
        needs["per_world_outputs"] = "recorded outputs with per-world model fields (model_params, randomize)"
    if outputs:
        needs["outputs"] = "recorded outputs"
    if has_callables(outputs):
        needs["callable_outputs"] = "an output function"
    return needs


def needs_sensors(outputs, ctrl=None, terminate=None, reward=None) -> bool:
    """Whether recorded outputs or a closed loop read sensors (then loading must keep them:
    ``load_scene(need_sensors=True)``)."""
    return any(isinstance(o, str) and (o == "sensordata" or o.startswith("sensor:")) for o in outputs or ()) or \
        _ep.wants_sensors(ctrl, terminate, reward)
