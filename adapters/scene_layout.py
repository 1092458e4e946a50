"""``MjScene``'s state layout (see ``mjscene.py``): how the joints of a MuJoCo model map onto named registry
states, and what a swap of the model (``MjScene.recompile``, ``on_backend``) checks and carries over."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax.numpy as jnp
import mujoco

from mjharness.integrators import StateError, StateRegistry, StateSpec
from mjharness.integrators.policies import quat_dot

_JNT = mujoco.mjtJoint


@dataclass(frozen=True)
class JointStates:
    """How one MuJoCo joint maps onto registry states."""

    name: str
    id: int
    type: int
    qposadr: int
    dofadr: int
    nq: int
    nv: int
    positions: tuple[str, ...]
    velocities: tuple[str, ...]


def model_name(model: mujoco.MjModel) -> str:
    """The MJCF ``<mujoco model="...">`` name (the first entry of MuJoCo's names buffer)."""
    return bytes(model.names).split(b"\0", 1)[0].decode() or "mujoco"


def joint_name(model: mujoco.MjModel, j: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"


def joint_states(model: mujoco.MjModel) -> tuple[JointStates, ...]:
    out = []
    pos: tuple[str, ...]
    vel: tuple[str, ...]
    for j in range(model.njnt):
        name, t = joint_name(model, j), int(model.jnt_type[j])
        if t == _JNT.mjJNT_FREE:
            pos, vel, nq, nv = (f"{name}/pos", f"{name}/quat"), (f"{name}/vel", f"{name}/angvel"), 7, 6
        elif t == _JNT.mjJNT_BALL:
            pos, vel, nq, nv = (f"{name}/qpos",), (f"{name}/qvel",), 4, 3
        else:
            pos, vel, nq, nv = (f"{name}/qpos",), (f"{name}/qvel",), 1, 1
        out.append(JointStates(name, j, t, int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j]), nq, nv,
                               pos, vel))
    return tuple(out)


def _mujoco_specs(model: mujoco.MjModel, quaternion_update: str) -> list[tuple[str, StateSpec]]:
    """(name, spec) of every MuJoCo state, positions first, velocities second, then act."""
    quat = StateSpec((4,), update=quaternion_update)
    pos, vel = [], []
    for js in joint_states(model):
        if js.type == _JNT.mjJNT_FREE:
            pos += [(js.positions[0], StateSpec((3,))), (js.positions[1], quat)]
            vel += [(js.velocities[0], StateSpec((3,))), (js.velocities[1], StateSpec((3,)))]
        elif js.type == _JNT.mjJNT_BALL:
            pos.append((js.positions[0], quat))
            vel.append((js.velocities[0], StateSpec((3,))))
        else:
            pos.append((js.positions[0], StateSpec((1,))))
            vel.append((js.velocities[0], StateSpec((1,))))
    act = [("act", StateSpec((model.na,)))] if model.na > 0 else []
    return pos + vel + act


def qdot_positions(joints: tuple[JointStates, ...], x, qvel) -> list:
    """The position-derivative blocks under ``quaternion_qdot``: qvel, with 1/2 q * [0, w] for each ball/free
    attitude, q the stage quaternion as given (x), not from d.qpos, which mjx.forward normalises: MuJoCo C's
    RK4 differentiates the unnormalised stage value."""
    pos = []
    for js in joints:
        v = qvel[js.dofadr:js.dofadr + js.nv]
        if js.type == _JNT.mjJNT_FREE:
            q = x[js.qposadr + 3:js.qposadr + 7]
            pos += [v[:3], quat_dot(q, v[3:])]
        elif js.type == _JNT.mjJNT_BALL:
            pos.append(quat_dot(x[js.qposadr:js.qposadr + 4], v))
        else:
            pos.append(v)
    return pos


def check_same_layout(registry: StateRegistry, extras, new_model: mujoco.MjModel, quaternion_update: str) -> None:
    """Raise ``StateError`` unless ``new_model``'s MuJoCo states are those of ``registry`` (less ``extras``)."""
    # Noise sources are not part of the MuJoCo layout (they survive a recompile).
    old = [(n, dataclasses.replace(registry.spec(n), noise_count=0)) for n in registry.names if n not in extras]
    new = _mujoco_specs(new_model, quaternion_update)
    if old != new:
        diff = next(((a, b) for a, b in zip(old, new) if a != b), None)
        detail = (f"first difference: {diff[0][0]!r} {diff[0][1].shape}/{diff[0][1].update} vs "
                  f"{diff[1][0]!r} {diff[1][1].shape}/{diff[1][1].update}" if diff else
                  f"{len(old)} states before, {len(new)} after")
        raise StateError(f"recompile: the new model's state layout differs ({detail})")


def carried_data(data: mujoco.MjData, model: mujoco.MjModel) -> mujoco.MjData:
    """New ``MjData`` of ``model`` holding ``data``'s runtime values (where the shapes agree), after ``mj_forward``."""
    new = mujoco.MjData(model)
    for f in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart", "qfrc_applied", "xfrc_applied", "mocap_pos",
              "mocap_quat", "userdata"):
        src, dst = getattr(data, f), getattr(new, f)
        if src.shape == dst.shape:
            dst[:] = src
    new.time = data.time
    mujoco.mj_forward(model, new)
    return new


def clamp_activations(model: mujoco.MjModel, x, o: int):
    """``x`` with its limited activations (from offset ``o``) clamped to actrange, as MuJoCo's mj_advance does."""
    lim = [(int(model.actuator_actadr[i]), int(model.actuator_actnum[i]), model.actuator_actrange[i])
           for i in range(model.nu) if model.actuator_actadr[i] >= 0 and model.actuator_actlimited[i]]
    for adr, num, (lo, hi) in lim if model.na else ():
        sl = slice(o + adr, o + adr + num)
        x = x.at[sl].set(jnp.clip(x[sl], lo, hi))
    return x
