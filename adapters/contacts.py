"""Contacts of one world as a fixed table of K slots (the ``contacts`` output), and contact capacities.

A slot is one MuJoCo contact (``mjContact``): the geoms, the contact point, the contact frame (row 0 the
normal, from geom1 to geom2; rows 1-2 the tangents), the distance, and the 6 force components in the
contact frame as ``mj_contactForce`` returns them (normal, two tangential, torsional, two rolling; the
ones beyond the contact's condim are 0), a valid flag and the contact's index in MuJoCo's own array
(``d.contact`` in C, ``d._impl.contact`` in MJX). Slots are sorted by (geom1, geom2), ties in MuJoCo's own
order (the collision function's), then the empty slots (geoms -1, everything else 0): a geom pair keeps
neighbouring slots from row to row, and each slot still names its MuJoCo contact.

Capacity: a collision function returns at most a fixed number of contacts for a pair of geom types
(MJX's per-function ``ncon``; MuJoCo C's box-box, capsule-capsule and plane-cylinder return more, pairs
with heightfields, SDFs or meshes under multi-CCD up to ``mjMAXCONPAIR``). ``model_contact_bound`` sums
that over the model's geom pairs that can collide: no world holds more contacts. The default K of the
output is that bound, at most ``DEFAULT_MAX_SLOTS`` (a slot costs 23 float64 per world and row); a world
with more contacts than K is flagged (``OVERFLOW``), never truncated silently.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

_G = mujoco.mjtGeom
COLUMNS = (("geom1", "geom2", "pos_x", "pos_y", "pos_z") + tuple(f"frame{r}{c}" for r in range(3) for c in range(3))
           + ("dist", "force_normal", "force_tangent1", "force_tangent2", "force_torsional", "force_rolling1",
              "force_rolling2", "valid", "id"))
COL = {c: i for i, c in enumerate(COLUMNS)}
POS, FRAME, FORCE = slice(COL["pos_x"], COL["pos_z"] + 1), slice(COL["frame00"], COL["frame22"] + 1), \
    slice(COL["force_normal"], COL["force_rolling2"] + 1)
# The per-row counts output ``<name>_ncon``: contacts, active constraint rows, overflow bits.
COUNT_COLUMNS = ("ncon", "nefc", "overflow")
# Overflow bits (``<name>_ncon[..., 2]``): why a world's row is flagged.
OVERFLOW = {1: "more contacts than the output's K slots",
            2: "MuJoCo C's contact buffer was full (mjWARN_CONTACTFULL): contacts were dropped",
            4: "MuJoCo C's constraint buffer was full (mjWARN_CNSTRFULL): constraints were dropped",
            8: "MuJoCo Warp's contact arena (naconmax, shared by all worlds) was full: contacts may have been dropped"}
OVER_SLOTS, OVER_CONTACTFULL, OVER_CNSTRFULL, OVER_ARENA = 1, 2, 4, 8
# The vmap axis of the engine's per-world output evaluation: MuJoCo Warp's contact arena is shared by the worlds of
# one call, each contact tagged with its world's index in that call (``contact.worldid``).
WORLD_AXIS = "worlds"
DEFAULT_MAX_SLOTS = 256
# Contacts per geom pair beyond MJX's own table, as MuJoCo C's collision functions return them.
_C_PAIR_CONTACTS = {(_G.mjGEOM_BOX, _G.mjGEOM_BOX): 8, (_G.mjGEOM_CAPSULE, _G.mjGEOM_CAPSULE): 2,
                    (_G.mjGEOM_PLANE, _G.mjGEOM_CYLINDER): 4}
# MJWarp sizes its contact arena for all worlds at once; MjScene does not know the batch when it builds it.
DEFAULT_WARP_WORLDS = 1024


def pair_contact_bound(t1: int, t2: int) -> int:
    """The most contacts MuJoCo (C or MJX) returns for one pair of geoms of types ``t1``, ``t2``."""
    from mujoco.mjx._src import collision_driver

    key = tuple(sorted((int(t1), int(t2))))
    fn = collision_driver._COLLISION_FUNC.get(tuple(collision_driver.GeomType(t) for t in key))
    if fn is None or _G.mjGEOM_HFIELD in key:  # no table entry (SDF, flex) or a heightfield: C's own cap
        return int(mujoco.mjMAXCONPAIR)
    return max(int(fn.ncon), _C_PAIR_CONTACTS.get(key, 0))


def model_contact_bound(m: mujoco.MjModel, pairs: np.ndarray) -> int:
    """Most contacts one world of ``m`` can hold: the per-pair bound summed over ``pairs`` (geom ids)."""
    if m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT:
        return 0
    return int(sum(pair_contact_bound(m.geom_type[a], m.geom_type[b]) for a, b in pairs))


def default_slots(m: mujoco.MjModel, pairs: np.ndarray) -> int:
    return max(1, min(model_contact_bound(m, pairs), DEFAULT_MAX_SLOTS))


def rows_per_contact(m: mujoco.MjModel) -> int:
    """Constraint rows of the largest contact: condim (elliptic cone), 2 (condim - 1) pyramidal (1 for condim 1)."""
    dim = int(max(np.max(m.geom_condim, initial=1), np.max(m.pair_dim, initial=1)))
    return dim if m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC or dim == 1 else 2 * (dim - 1)


def other_rows(m: mujoco.MjModel) -> int:
    """Constraint rows besides contacts, at most: equalities (6 a weld), dof friction loss, limits."""
    eq = int(sum(6 if t == mujoco.mjtEq.mjEQ_WELD else 3 if t == mujoco.mjtEq.mjEQ_CONNECT else 1
                 for t in m.eq_type))
    return (eq + int(np.sum(m.dof_frictionloss > 0)) + int(np.sum(m.jnt_limited)) + int(np.sum(m.tendon_limited))
            + int(np.sum(m.tendon_frictionloss > 0)))


def warp_buffers(m: mujoco.MjModel, pairs: np.ndarray, worlds: int = DEFAULT_WARP_WORLDS,
                 peak_ncon: int | None = None, peak_nefc: int | None = None, headroom: float = 1.0) -> dict:
    """MJWarp's ``naconmax`` (contacts of ALL worlds) and ``njmax`` (constraint rows per world).

    From a probe's peaks (``peak_ncon``/``peak_nefc``, scaled by ``headroom``) when given, else from the
    model: every world holding its model bound (``model_contact_bound``, what MJX allocates per world),
    each contact with the rows of the largest condim, plus the other constraints."""
    ncon = model_contact_bound(m, pairs) if peak_ncon is None else math.ceil(peak_ncon * headroom)
    nefc = ncon * rows_per_contact(m) + other_rows(m) if peak_nefc is None else math.ceil(peak_nefc * headroom)
    return dict(naconmax=max(1, ncon * worlds), njmax=max(1, nefc))


# -- one world's slots ----------------------------------------------------------------------------------

def slot_order(geom1: np.ndarray, geom2: np.ndarray, valid: np.ndarray, xp=np):
    """Indices of the contacts in slot order: valid ones by (geom1, geom2), ties in MuJoCo's order, then the rest."""
    # lexsort's last key is the primary one; stable, so ties keep MuJoCo's order. No 64-bit key: a float32 run
    # has no int64 in JAX.
    return xp.lexsort((geom2, geom1, ~valid))


def host_slots(m: mujoco.MjModel, d: mujoco.MjData, K: int, f6: np.ndarray) -> tuple[np.ndarray, int]:
    """(K, len(COLUMNS)) slots of MuJoCo C's ``d.contact`` after ``mj_forward``, and d.ncon."""
    out = np.zeros((K, len(COLUMNS)))
    out[:, COL["geom1"]] = out[:, COL["geom2"]] = out[:, COL["id"]] = -1
    n = int(d.ncon)
    if n == 0:
        return out, 0
    con = d.contact
    g1, g2 = np.asarray(con.geom1), np.asarray(con.geom2)
    ids = slot_order(g1, g2, np.ones(n, bool))[:K]
    k = len(ids)
    out[:k, COL["geom1"]], out[:k, COL["geom2"]] = g1[ids], g2[ids]
    out[:k, POS] = np.asarray(con.pos)[ids]
    out[:k, FRAME] = np.asarray(con.frame).reshape(n, 9)[ids]
    out[:k, COL["dist"]] = np.asarray(con.dist)[ids]
    for s, i in enumerate(ids):
        mujoco.mj_contactForce(m, d, int(i), f6)  # 0 for a contact excluded from the solve (efc_address -1)
        out[s, FORCE] = f6
    out[:k, COL["valid"]] = 1
    out[:k, COL["id"]] = ids
    return out, n


def mjx_slots(mx, d, K: int):
    """(slots (K, len(COLUMNS)), ncon, nefc) of MJX data after ``mjx.forward`` (JAX implementation).

    MJX holds one contact per candidate of every collision function; a candidate is a contact when its
    constraint is active, ``dist < includemargin`` (as MJX's constraint rows decide). The force is MJX's
    own ``support.contact_force`` (contact frame)."""
    import jax.numpy as jnp
    from mujoco.mjx._src import support

    impl = getattr(d, "_impl", None)
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
    force = jnp.stack([support.contact_force(mx, d, i) for i in range(n)])
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
    import jax.numpy as jnp

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


# -- reading them back ------------------------------------------------------------------------------------

def _name(m: mujoco.MjModel, obj, i: int) -> str:
    return (mujoco.mj_id2name(m, obj, i) or f"{obj.name[6:].lower()}{i}") if i >= 0 else ""


def contact_table(m: mujoco.MjModel | None, slots: np.ndarray) -> np.ndarray:
    """The valid slots of one world and row as a structured array: slot, id, geom1/geom2 (ids and names),
    body1/body2 (names), pos (3), frame (3, 3), dist, force (6, contact frame)."""
    dtype = [("slot", "i8"), ("id", "i8"), ("geom1", "i8"), ("geom2", "i8"), ("geom1_name", "U64"),
             ("geom2_name", "U64"), ("body1", "U64"), ("body2", "U64"), ("pos", "f8", (3,)), ("frame", "f8", (3, 3)),
             ("dist", "f8"), ("force", "f8", (6,))]
    slots = np.asarray(slots, np.float64)
    keep = np.nonzero(slots[:, COL["valid"]] == 1)[0]
    out = np.zeros(len(keep), dtype=dtype)
    s = slots[keep]
    out["slot"], out["id"] = keep, s[:, COL["id"]]
    out["geom1"], out["geom2"] = s[:, COL["geom1"]], s[:, COL["geom2"]]
    out["pos"], out["frame"], out["dist"] = s[:, POS], s[:, FRAME].reshape(-1, 3, 3), s[:, COL["dist"]]
    out["force"] = s[:, FORCE]
    if m is not None:
        geom, body = mujoco.mjtObj.mjOBJ_GEOM, mujoco.mjtObj.mjOBJ_BODY
        for k in ("1", "2"):
            ids = out["geom" + k].tolist()
            out[f"geom{k}_name"] = [_name(m, geom, g) for g in ids]
            out["body" + k] = [_name(m, body, int(m.geom_bodyid[g])) for g in ids]
    return out


def overflow_text(bits: int) -> str:
    return "; ".join(text for bit, text in OVERFLOW.items() if int(bits) & bit)


# -- probe: the peaks of a short run ----------------------------------------------------------------------

def probe_worlds(m: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray, steps: int) -> dict:
    """Step each world (rows of ``qpos``/``qvel``) ``steps`` times with ``mj_step`` (MuJoCo C, the model's own
    integrator) and return per world: the peak ``ncon`` and ``nefc`` over every step (after each step's
    mj_forward, as d.ncon/d.nefc hold them), the step of the peak contacts, and how many steps raised
    MuJoCo C's contact- and constraint-full warnings."""
    B = len(qpos)
    out = {k: np.zeros(B, np.int64) for k in ("ncon", "nefc", "ncon_step", "contactfull", "cnstrfull")}
    d = mujoco.MjData(m)
    full = (mujoco.mjtWarning.mjWARN_CONTACTFULL, mujoco.mjtWarning.mjWARN_CNSTRFULL)
    for w in range(B):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = qpos[w], qvel[w]
        mujoco.mj_forward(m, d)
        for k in range(steps + 1):  # k = 0: the initial state
            if k:
                mujoco.mj_step(m, d)
            if d.ncon > out["ncon"][w]:
                out["ncon"][w], out["ncon_step"][w] = d.ncon, k
            out["nefc"][w] = max(out["nefc"][w], d.nefc)
        out["contactfull"][w], out["cnstrfull"][w] = (d.warning[f].number for f in full)
    return out


def probe_advice(m: mujoco.MjModel, pairs: np.ndarray, peaks: dict, batch: int, headroom: float = 1.5) -> dict:
    """The buffer sizes to use after a probe: K of ``contacts:K``, MJWarp's naconmax (all ``batch`` worlds)
    and njmax (per world), each the peak times ``headroom``; and the model's bounds for comparison."""
    ncon, nefc = int(np.max(peaks["ncon"], initial=0)), int(np.max(peaks["nefc"], initial=0))
    warp = warp_buffers(m, pairs, worlds=batch, peak_ncon=max(ncon, 1), peak_nefc=max(nefc, 1), headroom=headroom)
    return dict(peak_ncon=ncon, peak_nefc=nefc, contacts_K=max(1, math.ceil(ncon * headroom)), **warp,
                model_contact_bound=model_contact_bound(m, pairs),
                model_warp=warp_buffers(m, pairs, worlds=batch))
