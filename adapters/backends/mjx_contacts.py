"""Contacts of MJX data as the ``contacts`` output's slots (``adapters/contacts.py``): MJX's own contact array and
MuJoCo Warp's shared contact arena, both in the ``_impl`` half of MJX's Data."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco

from ..contacts import COL, COLUMNS, WORLD_AXIS, slot_order
from .mjx_private import contact_force


def warp_world(d):
    """This world's index in MuJoCo Warp's shared contact arena (None for MJX's own data)."""
    if not hasattr(d._impl, "contact__worldid"):
        return None
    try:
        return jax.lax.axis_index(WORLD_AXIS)
    except NameError:
        raise ValueError("output 'contacts' on MuJoCo Warp reads its shared contact arena by world: evaluate it "
                         f"under the engine's per-world vmap (axis {WORLD_AXIS!r}), as rollout(outputs=...) does") \
            from None


def mjx_slots(mx, d, K: int):
    """(slots (K, len(COLUMNS)), ncon, nefc) of MJX data after ``mjx.forward`` (JAX implementation).

    MJX holds one contact per candidate of every collision function; a candidate is a contact when its
    constraint is active, ``dist < includemargin`` (as MJX's constraint rows decide). The force is MJX's
    own ``support.contact_force`` (contact frame)."""
    impl: Any = getattr(d, "_impl", None)
    con = getattr(impl, "contact", None)
    if con is None:
        raise ValueError("output 'contacts' reads MJX's own contact array (d._impl.contact); this MJX data has "
                         "none (MuJoCo Warp holds every world's contacts in one arena): use backend 'mjx' or "
                         "'mujoco'")
    n, f = con.dist.shape[0], con.pos.dtype  # the run's float width (float32 in a float32 run)
    nefc = jnp.sum(jnp.any(impl.efc_J != 0, axis=-1)) if impl.efc_J.size else jnp.asarray(0)
    empty = jnp.zeros((K, len(COLUMNS))).at[:, jnp.array([COL["geom1"], COL["geom2"], COL["id"]])].set(-1.0)
    if n == 0:
        return empty, jnp.asarray(0.0), nefc.astype(f)
    valid = con.dist < con.includemargin
    force = jnp.stack([contact_force(mx, d, i) for i in range(n)])
    rows = jnp.concatenate([con.geom1[:, None].astype(f), con.geom2[:, None].astype(f), con.pos,
                            con.frame.reshape(n, 9), con.dist[:, None], force, jnp.ones((n, 1)),
                            jnp.arange(n, dtype=f)[:, None]], axis=1)
    ids = slot_order(con.geom1, con.geom2, valid, xp=jnp)[:K]
    take = jnp.where(valid[ids][:, None], rows[ids], empty[:len(ids)])
    slots = empty.at[:len(ids)].set(take)
    return slots, jnp.sum(valid).astype(f), nefc.astype(f)


def warp_slots(mx, d, K: int, world):
    """(slots (K, len(COLUMNS)), ncon, nefc, arena full) of world ``world`` (its index in the vmapped call) from
    MuJoCo Warp data after ``mjx.forward`` (``impl="warp"``).

    MJWarp keeps one contact arena for every world of the call (``contact__worldid`` says whose) and each world's
    constraint rows apart; a contact's force is decoded from its rows as ``mj_contactForce`` does: pyramidal
    cones by ``mju_decodePyramid`` (normal = the sum of the 2 (dim - 1) edge forces, tangent i = their difference
    times friction i), elliptic cones row by row."""
    impl = d._impl
    n, f = impl.contact__dist.shape[0], impl.contact__pos.dtype
    nefc = jnp.reshape(impl.nefc, ()).astype(f)
    nacon = jnp.reshape(impl.nacon, (-1,))[0]
    full = nacon >= impl.contact__dist.shape[0]
    empty = jnp.zeros((K, len(COLUMNS)), f).at[:, jnp.array([COL["geom1"], COL["geom2"], COL["id"]])].set(-1.0)
    if n == 0:
        return empty, jnp.asarray(0.0, f), nefc, full
    idx = jnp.arange(n)
    mine = (idx < nacon) & (impl.contact__worldid == world)
    geom = impl.contact__geom
    dim, adr, mu = impl.contact__dim, impl.contact__efc_address, impl.contact__friction
    efc = impl.efc__force
    rows_f = jnp.where(adr >= 0, efc[jnp.clip(adr, 0, max(efc.shape[0] - 1, 0))], 0.0) if efc.shape[0] else \
        jnp.zeros(adr.shape, f)
    width = adr.shape[1]
    force = jnp.zeros((n, 6), f)
    if int(mx.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL):
        edges = jnp.arange(width)[None, :] < 2 * (dim[:, None] - 1)
        normal = jnp.where(dim == 1, rows_f[:, 0], jnp.sum(jnp.where(edges, rows_f, 0.0), axis=1))
        force = force.at[:, 0].set(normal)
        for i in range(min(width // 2, 5)):
            tang = (rows_f[:, 2 * i] - rows_f[:, 2 * i + 1]) * mu[:, i]
            force = force.at[:, i + 1].set(jnp.where(i + 1 < dim, tang, 0.0))
    else:  # elliptic: one row per force component
        for i in range(min(width, 6)):
            force = force.at[:, i].set(jnp.where(i < dim, rows_f[:, i], 0.0))
    order = jnp.cumsum(mine) - 1  # the contact's index among its world's, in MJWarp's order
    rows = jnp.concatenate([geom[:, :1].astype(f), geom[:, 1:2].astype(f), impl.contact__pos,
                            impl.contact__frame.reshape(n, 9), impl.contact__dist[:, None], force,
                            jnp.ones((n, 1), f), order[:, None].astype(f)], axis=1)
    ids = slot_order(geom[:, 0], geom[:, 1], mine, xp=jnp)[:K]
    take = jnp.where(mine[ids][:, None], rows[ids], empty[:len(ids)])
    return empty.at[:len(ids)].set(take), jnp.sum(mine).astype(f), nefc, full
