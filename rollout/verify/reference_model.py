"""The reference rigid-body model as a cross-check peer: a single free body re-simulated with RK4.

Which scenes it covers (one free joint, no other mass, no damping, actuators, constraints, fluid or
possible contacts) is checked first, and every reason it does not is named in one error.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from numpy.typing import ArrayLike

from mjharness.adapters import RigidBody, rigid_body_from_mjcf

from .recorded import CrossCheckError, Recorded, no_model_params, partial_reference, sample_grid, value_index

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)


def _free_joint_problems(model: mujoco.MjModel) -> list[str]:
    if model.njnt != 1 or model.jnt_type[0] != _FREE:
        kinds = [mujoco.mjtJoint(int(t)).name for t in model.jnt_type]
        return [f"it must have exactly one joint, a free joint (it has {model.njnt}: {kinds})"]
    why = []
    b = int(model.jnt_bodyid[0])
    extra = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}" for i in range(1, model.nbody)
             if i != b and model.body_mass[i] > 0]
    if extra:
        why.append(f"bodies other than the free body carry mass: {extra}")
    if model.body_weldid[b] != b or any(model.body_parentid[i] == b for i in range(model.nbody) if i != b):
        why.append("the free body has welded child bodies")
    d = int(model.jnt_dofadr[0])
    for f, label in (("dof_damping", "joint damping"), ("dof_armature", "armature"),
                     ("dof_frictionloss", "friction loss")):
        if np.any(getattr(model, f)[d:d + 6] != 0):
            why.append(f"the free joint has {label}")
    contact_on = not (model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT))
    collides = [bool(model.geom_contype[g] or model.geom_conaffinity[g]) for g in range(model.ngeom)]
    mine = [c for g, c in enumerate(collides) if model.geom_bodyid[g] == b]
    others = [c for g, c in enumerate(collides) if model.geom_bodyid[g] != b]
    if contact_on and any(mine) and any(others):
        why.append("contacts are possible (other collidable geoms; disable contact to cross-check)")
    return why


def single_free_body(model: mujoco.MjModel, path: str) -> tuple[int, str]:
    """(body id, body name) of the scene's only free body; refuses anything the reference does not model."""
    why = _free_joint_problems(model)
    if model.nu:
        why.append(f"it has {model.nu} actuator(s)")
    if model.neq or model.ntendon:
        why.append("it has equality constraints or tendons")
    if model.opt.density != 0 or model.opt.viscosity != 0:
        why.append("it has fluid forces (option density/viscosity)")
    if why:
        raise CrossCheckError(f"{path}: the reference rigid-body model covers a single free body only, and this "
                              "scene is not one: " + "; ".join(why) + ". Give reference='mujoco' or a reference "
                              "HDF5 file instead.")
    b = int(model.jnt_bodyid[0])
    return b, mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or ""


def _rigid_body(rec: Recorded, model: mujoco.MjModel) -> tuple[RigidBody, dict]:
    """The reference body: inertia from the MJCF by our own formulas, else MuJoCo's compiled inertia."""
    bid, name = single_free_body(model, rec.path)
    body = None
    info: dict[str, object]
    if not name:
        info = {"inertia": "MuJoCo compiled (the free body has no name)"}
    else:
        try:
            body = rigid_body_from_mjcf(rec.mjcf, name)
            info = {"inertia": "MJCF (rigid_body_from_mjcf)"}
        except (ValueError, NotImplementedError) as e:
            info = {"inertia": f"MuJoCo compiled (MJCF reader refused: {e})"}
    if body is None:
        body = RigidBody.from_mujoco(model, bid)
    info.update(body=name or f"body{bid}", mass=float(body.inertia.mass), com=np.asarray(body.inertia.com).tolist(),
                gravity=np.asarray(body.gravity).tolist())
    return body, info


@partial(jax.jit, static_argnames=("n_sub", "samples"))
def _ref_samples(body, x, h, n_sub, samples):
    """``samples`` samples (each after ``n_sub`` RK4 steps of ``h``) for a batch of 13-vectors x (B, 13)."""
    step = jax.vmap(lambda y: body.stepped_rk4(y, None, h))

    def outer(y, _):
        y = jax.lax.fori_loop(0, n_sub, lambda i, z: step(z), y)
        return y, y

    return jax.lax.scan(outer, x, None, length=samples)


def reference_model_trajectory(body: RigidBody, x0: ArrayLike, samples: int, steps_per_sample: int, dt: float,
                               chunk: int = 1000) -> np.ndarray:
    """RK4 trajectory of the reference ``body`` from x0 (B, 13): (samples, B, 13), sample j after
    (j + 1) * steps_per_sample steps of ``dt`` (one compiled scan reused for every chunk)."""
    x = jnp.asarray(np.asarray(x0, np.float64))
    out = np.empty((samples,) + x.shape)
    chunk = max(1, min(chunk, samples))
    j = 0
    while j < samples:
        x, ys = _ref_samples(body, x, jnp.float64(dt), steps_per_sample, chunk)
        k = min(chunk, samples - j)
        out[j:j + k] = np.asarray(ys)[:k]
        j += k
    return out


def _free_joint_index(rec: Recorded, model) -> np.ndarray:
    """The 13 value indices [qpos(7); qvel(6)] of the free body in the file's x."""
    j = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, 0) or "joint0"
    names = [f"{j}/pos", f"{j}/quat", f"{j}/vel", f"{j}/angvel"]
    missing = [n for n in names if n not in rec.layout.names]
    if missing:
        raise CrossCheckError(f"{rec.path}: the layout has no free-joint states {missing}")
    return value_index(rec.layout, names)


def reference_from_model(rec: Recorded, model, ref_dt=1e-3):
    """(reference like rec.x, covered value indices, info) from the reference model."""
    no_model_params(rec, "the reference model")
    body, info = _rigid_body(rec, model)
    _, R, dt = sample_grid(rec)
    idx = _free_joint_index(rec, model)
    # Reference step: the file's dt, split into equal substeps no longer than ref_dt (so a file rolled
    # at a coarse step, or an adaptive run's output interval, is compared with an accurate reference).
    n_sub = max(1, math.ceil(dt / ref_dt - 1e-9)) if ref_dt else 1
    ref13 = reference_model_trajectory(body, rec.x0[:, idx], len(rec.time), R * n_sub, dt / n_sub)
    info.update(method="reference RigidBody.stepped_rk4 (4-component quaternion rate, normalised per step)",
                dt=dt / n_sub, steps_per_sample=R * n_sub)
    return partial_reference(rec, idx, ref13), set(idx.tolist()), info
