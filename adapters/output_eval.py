"""How each kind of recorded output is evaluated: from MJX data (``_mjx_*``, traced) or from MuJoCo C's
``mjData`` on the host (``_host_*``); ``outputs.py`` binds them to the kinds (``KINDS``)."""

from __future__ import annotations

import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators.errors import UserError
from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from .backends import mjx_private
from .backends.mjx_contacts import mjx_slots, warp_slots
from .backends.mjx_contacts import warp_world as _warp_world


class OutputError(UserError, ValueError):
    """A bad output name or semantics; names the offending output."""


def _energy(mx, d) -> jnp.ndarray:
    pot = -jnp.sum(mx.body_mass[1:] * (d.xipos[1:] @ mx.opt.gravity))
    slide_hinge = (mx.jnt_type == int(mujoco.mjtJoint.mjJNT_SLIDE)) | (mx.jnt_type == int(mujoco.mjtJoint.mjJNT_HINGE))
    qadr = mx.jnt_qposadr
    dq = d.qpos[qadr] - mx.qpos_spring[qadr]
    pot = pot + 0.5 * jnp.sum(jnp.where(slide_hinge, mx.jnt_stiffness * dq * dq, 0.0))
    kin = 0.5 * jnp.dot(d.qvel, mjx.mul_m(mx, d, d.qvel))
    return jnp.stack([pot, kin])


_get = mjx_private.data_field  # d.<name>, where MJX keeps it (contact, cfrc_ext, ... live in its private half)


def _contact_force(mx, d, pairs: np.ndarray) -> jnp.ndarray:
    contact = _get(d, "contact")
    ncon = contact.geom.shape[0]
    if ncon == 0:
        return jnp.zeros(len(pairs))
    normal = jnp.stack([mjx_private.contact_force(mx, d, i)[0] for i in range(ncon)])
    active = contact.dist <= 0.0 if not hasattr(contact, "efc_address") else contact.efc_address >= 0
    g = jnp.sort(contact.geom, axis=-1)
    match = (g[None, :, 0] == pairs[:, None, 0]) & (g[None, :, 1] == pairs[:, None, 1]) & active[None, :]
    return jnp.sum(jnp.where(match, normal[None, :], 0.0), axis=1)


def _mjx_sensors(scene, t, x, d, s):
    return d.sensordata if not s.index else d.sensordata[s.index[0]:s.index[0] + s.index[1]]


def _host_sensors(m, d, s):
    a, n = s.index if s.index else (0, m.nsensordata)
    view = d.sensordata[a:a + n]
    return lambda: view


def _host_energy(m, d, s):
    def read():
        mujoco.mj_energyPos(m, d)
        mujoco.mj_energyVel(m, d)
        return d.energy
    return read


def _host_contact_force(m, d, s):
    pairs = np.array(dict(s.extra)["pair_geom"], dtype=np.int64).reshape(-1, 2)
    f6 = np.zeros(6)

    def read():
        """Normal force (contact frame, mj_contactForce) summed over each pair's active contacts."""
        out = np.zeros(len(pairs))
        if d.ncon == 0:
            return out
        con = d.contact
        geom, efc = np.sort(np.asarray(con.geom), axis=1), np.asarray(con.efc_address)
        for i in range(d.ncon):
            if efc[i] < 0:  # excluded from the constraint solve: no force
                continue
            hit = np.nonzero((pairs[:, 0] == geom[i, 0]) & (pairs[:, 1] == geom[i, 1]))[0]
            if len(hit):
                mujoco.mj_contactForce(m, d, i, f6)
                out[hit] += f6[0]
        return out
    return read


def _host_contacts(m, d, s):
    from .contacts import host_slots

    K, f6 = s.shape[0], np.zeros(6)
    return lambda: host_slots(m, d, K, f6)[0].reshape(-1)


_WARNINGS = ((mujoco.mjtWarning.mjWARN_CONTACTFULL, 2), (mujoco.mjtWarning.mjWARN_CNSTRFULL, 4))


def _host_contact_counts(m, d, s):
    """ncon, nefc and the overflow bits; a C warning counts when its number rose since this MjData's last read
    (only this reader runs mj_forward on it, so the rise is this evaluation's)."""
    K = dict(s.extra)["capacity"]
    seen = [int(d.warning[w].number) for w, _ in _WARNINGS]

    def read():
        now = [int(d.warning[w].number) for w, _ in _WARNINGS]
        bits = (d.ncon > K) * 1 + sum(bit for (_, bit), a, b in zip(_WARNINGS, seen, now) if b > a)
        seen[:] = now
        return np.array([d.ncon, d.nefc, bits], dtype=np.float64)
    return read


def _mjx_contacts(scene, t, x, d, s):
    world = _warp_world(d)
    if world is not None:
        return warp_slots(scene.mjx_model, d, s.shape[0], world)[0]
    return mjx_slots(scene.mjx_model, d, s.shape[0])[0]


def _mjx_contact_counts(scene, t, x, d, s):
    # MJX (JAX) holds every candidate contact in a fixed array: its only overflow is more contacts than K.
    # MuJoCo Warp's arena is shared by the worlds of a call and may fill (its own bit).
    from .contacts import OVER_ARENA, OVER_SLOTS

    world = _warp_world(d)
    if world is not None:
        _, ncon, nefc, full = warp_slots(scene.mjx_model, d, 1, world)
        bits = jnp.where(ncon > dict(s.extra)["capacity"], OVER_SLOTS, 0) + jnp.where(full, OVER_ARENA, 0)
        return jnp.stack([ncon, nefc, bits.astype(ncon.dtype)])
    _, ncon, nefc = mjx_slots(scene.mjx_model, d, 1)
    return jnp.stack([ncon, nefc, (ncon > dict(s.extra)["capacity"]).astype(ncon.dtype)])


def _host_field(m, d, s):
    view = getattr(d, s.field).reshape(-1)  # MjData's buffers do not move: one view for the whole run
    return lambda: view


def _no_host(m, d, s):
    raise OutputError(f"output {s.name!r} is a function of MJX data; MuJoCo C has none (use backend='mjx')")
