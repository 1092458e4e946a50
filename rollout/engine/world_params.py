"""Per-world model fields of a run: the explicit ``model_params`` and the ``randomize`` draws on top of them
(a resumed run reuses its file's drawn values).
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import RolloutError
from .force_params import draw_force_params, is_force_key
from .inputs import backend_model
from .params import field_value, has_field
from .randomize import randomized_params
from .scene_view import PerWorldModel, SceneView


def draw_params(scene, randomize: dict, seed: int, world_offset: int, B: int, explicit: dict) -> dict:
    """Per-world fields of worlds ``world_offset .. world_offset + B`` drawn by ``randomize`` on top of the explicit
    ``model_params`` (``engine.randomize``), restricted to the fields the scene's backend model has. A System
    draws each key ``"<member>.<field>[:name]"`` on that MjScene member's model; its fields are
    ``"<member>.<field>"``."""
    worlds = world_offset + np.arange(B)

    def member_draws(sc, keys: dict, mine: dict, member: str) -> dict:
        sc.backend_impl.require("per_world_params", f"randomize {sorted(keys)} (model fields set per world)")
        target = backend_model(sc)

        def keep(field, shape):
            if not has_field(target, field):
                return False
            ref = np.asarray(field_value(target, field))
            return np.issubdtype(ref.dtype, np.floating) and ref.shape == tuple(shape)

        return randomized_params(sc.model, keys, seed, worlds, mine, keep, member=member)

    owner = getattr(scene, "param_owner", None)
    if owner is not None:  # a System (adapters/system.py)
        from mjharness.adapters.system_types import SystemSpecError

        groups: dict[str, tuple[str, dict]] = {}
        for key, dist in randomize.items():
            try:
                name, member, _ = owner(key if isinstance(key, str) else "")
            except SystemSpecError as e:
                raise RolloutError(f"randomize[{key!r}]: {e}") from None
            groups.setdefault(name, (member, {}))[1][key] = dist
        out = dict(explicit)
        for name, (member, keys) in groups.items():
            mine = {k.partition(".")[2]: v for k, v in explicit.items() if k.partition(".")[0] == name}
            out.update({f"{name}.{f}": v for f, v in member_draws(member, keys, mine, name).items()})
        return out
    view = SceneView.of(scene)
    if view.model is None or not isinstance(scene, PerWorldModel):
        raise RolloutError(f"randomize needs an MjScene (a MuJoCo model evaluated per world) or a System of them; "
                           f"got {type(scene).__name__}")
    # force provider parameters ("force:<provider>.<param>", engine/force_params.py) beside the model fields
    forces = {k: v for k, v in randomize.items() if is_force_key(k)}
    fixed = {k: v for k, v in explicit.items() if is_force_key(k)}
    keys = {k: v for k, v in randomize.items() if not is_force_key(k)}
    mine = {k: v for k, v in explicit.items() if not is_force_key(k)}
    out = member_draws(scene, keys, mine, "") if keys or mine else {}
    if forces:
        impl = getattr(scene, "backend_impl", None)
        if impl is None:  # a System: its members' providers are not addressed by these keys
            raise RolloutError(f"randomize {sorted(forces)}: force parameters belong to an MjScene's providers; "
                               f"a {type(scene).__name__} has none of its own")
        impl.require("per_world_params", f"randomize {sorted(forces)} (force parameters per world)")
    out.update(draw_force_params(scene, forces, seed, worlds, fixed) if forces else fixed)
    return out


def check_resumed_randomize(asked, in_file, resume):
    """The randomization a run carries: the one asked for, or a resumed file's (which must equal a repeated ask)."""
    if resume is None:
        return asked
    if in_file is not None:
        in_file = json.loads(in_file)
    if asked and asked != in_file:
        raise RolloutError(f"resume={resume!r}: the file was randomized with {in_file}, randomize={asked} was asked "
                           f"(a resume reuses the file's drawn values; pass the same or none)")
    return in_file
