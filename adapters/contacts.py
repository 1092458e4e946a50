"""Contacts of one world as a fixed table of K slots (the ``contacts`` output), and contact capacities.

A slot is one MuJoCo contact (``mjContact``): the geoms, the contact point, the contact frame (row 0 the
normal, from geom1 to geom2; rows 1-2 the tangents), the distance, and the 6 force components in the
contact frame as ``mj_contactForce`` returns them (normal, two tangential, torsional, two rolling; the
ones beyond the contact's condim are 0), a valid flag and the contact's index in MuJoCo's own array
(``d.contact`` in C, MJX's own contact array in MJX). Slots are sorted by (geom1, geom2), ties in MuJoCo's own
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

from .backends import mjx_private

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
    a, b = sorted((int(t1), int(t2)))
    ncon = mjx_private.collision_ncon(a, b)
    if ncon is None or _G.mjGEOM_HFIELD in (a, b):  # no table entry (SDF, flex) or a heightfield: C's own cap
        return int(mujoco.mjMAXCONPAIR)
    return max(ncon, _C_PAIR_CONTACTS.get((a, b), 0))


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
