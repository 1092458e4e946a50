"""Named model parameters: ``field:name`` -> (field path, index), and reading/writing a field by its path.

The one naming ``fit``, ``--param`` sweeps and ``randomize`` share: ``body_mass:torso``, ``dof_damping:hinge``
(a joint names its dofs), ``geom_friction:floor``, ``site_pos:tip``, ``actuator_gear:motor``,
``tendon_stiffness:cable`` or a bare field (``opt.gravity``). Paths are looked up on an MJX model or on
the MuJoCo ``MjModel`` (whose field names MJX keeps), so the names work on every backend.
"""

from __future__ import annotations

import mujoco
import numpy as np

from ..errors import RolloutError

# field prefix -> the object type whose name indexes the field's first axis
OBJECTS = (("body_", mujoco.mjtObj.mjOBJ_BODY), ("jnt_", mujoco.mjtObj.mjOBJ_JOINT),
           ("geom_", mujoco.mjtObj.mjOBJ_GEOM), ("site_", mujoco.mjtObj.mjOBJ_SITE),
           ("actuator_", mujoco.mjtObj.mjOBJ_ACTUATOR), ("tendon_", mujoco.mjtObj.mjOBJ_TENDON))
DOFS_OF_JOINT = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3}


def has_field(obj, path: str) -> bool:
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def field_value(obj, path: str, what: str = "model_params"):
    """The value at dotted ``path`` (``body_mass``, ``opt.gravity``) of a model, or RolloutError naming it."""
    for part in path.split("."):
        if not hasattr(obj, part):
            raise RolloutError(f"{what}: the model has no field {path!r} (at {part!r})")
        obj = getattr(obj, part)
    return obj


def set_field(obj, path: str, value) -> None:
    """Write ``value`` into the field at ``path`` of an ``MjModel`` (arrays in place, scalars by attribute)."""
    parent, _, name = path.rpartition(".")
    owner = field_value(obj, parent) if parent else obj
    cur = getattr(owner, name)
    if isinstance(cur, np.ndarray):
        cur[...] = np.reshape(value, cur.shape)
    else:
        setattr(owner, name, float(np.reshape(value, ())))


def resolve_param(model: mujoco.MjModel, mjx_model, spec: str, what: str = "--params"):
    """``field:name`` -> (field path, index tuple into the field). ``mjx_model`` None: the field is looked up
    on ``model`` (MuJoCo C). Raises RolloutError naming the problem."""
    field, _, name = spec.partition(":")
    ref = np.asarray(field_value(model if mjx_model is None else mjx_model, field, f"{what} {spec!r}"))
    if not np.issubdtype(ref.dtype, np.floating):
        raise RolloutError(f"{what} {spec!r}: {field} is {ref.dtype}, not a floating field")
    if not name:
        return field, ()
    if field.startswith("dof_"):
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            raise RolloutError(f"{what} {spec!r}: no joint named {name!r} (dof fields are named by their joint)")
        adr = int(model.jnt_dofadr[j])
        return field, (slice(adr, adr + DOFS_OF_JOINT.get(int(model.jnt_type[j]), 1)),)
    for prefix, obj in OBJECTS:
        if field.startswith(prefix):
            i = mujoco.mj_name2id(model, obj, name)
            if i < 0:
                raise RolloutError(f"{what} {spec!r}: no {prefix.rstrip('_')} named {name!r}")
            return field, (i,)
    raise RolloutError(f"{what} {spec!r}: {field} is not indexed by a named object; give the bare field")
