"""What MJX 3.17.0 supports (read from MJX's own ``types.py``, ``io.py`` and ``collision_driver.py``), the
compatibility log's entries, and MJX's collision pair filter: the data ``compat``'s checks run against.

Tests compare these tables with MJX's own behaviour, so an MJX upgrade that changes them shows up.
"""

from __future__ import annotations

import mujoco
import numpy as np

# ---- what MJX 3.17.0 supports (MJX's types.py enums; tests compare these with MJX's own) --------------
_E = mujoco
SUPPORTED_INTEGRATORS = frozenset(int(v) for v in (_E.mjtIntegrator.mjINT_EULER, _E.mjtIntegrator.mjINT_RK4,
                                                   _E.mjtIntegrator.mjINT_IMPLICITFAST,
                                                   _E.mjtIntegrator.mjINT_DISCRETE))
SUPPORTED_SOLVERS = frozenset(int(v) for v in (_E.mjtSolver.mjSOL_CG, _E.mjtSolver.mjSOL_NEWTON))
SUPPORTED_CONES = frozenset(int(v) for v in (_E.mjtCone.mjCONE_PYRAMIDAL, _E.mjtCone.mjCONE_ELLIPTIC))
SUPPORTED_JACOBIANS = frozenset(int(v) for v in _E.mjtJacobian.__members__.values())
SUPPORTED_ENABLEBITS = frozenset(int(v) for v in (_E.mjtEnableBit.mjENBL_INVDISCRETE,
                                                  _E.mjtEnableBit.mjENBL_SLEEP, _E.mjtEnableBit.mjENBL_IPC))
_G = _E.mjtGeom
COLLIDABLE_GEOMS = frozenset(int(t) for t in (_G.mjGEOM_PLANE, _G.mjGEOM_HFIELD, _G.mjGEOM_SPHERE,
                                              _G.mjGEOM_CAPSULE, _G.mjGEOM_ELLIPSOID, _G.mjGEOM_CYLINDER,
                                              _G.mjGEOM_BOX, _G.mjGEOM_MESH))
# collision_driver._COLLISION_FUNC keys, (type1 <= type2)
COLLISION_PAIRS = frozenset((int(a), int(b)) for a, b in (
    (_G.mjGEOM_PLANE, _G.mjGEOM_SPHERE), (_G.mjGEOM_PLANE, _G.mjGEOM_CAPSULE), (_G.mjGEOM_PLANE, _G.mjGEOM_BOX),
    (_G.mjGEOM_PLANE, _G.mjGEOM_ELLIPSOID), (_G.mjGEOM_PLANE, _G.mjGEOM_CYLINDER),
    (_G.mjGEOM_PLANE, _G.mjGEOM_MESH),
    (_G.mjGEOM_HFIELD, _G.mjGEOM_SPHERE), (_G.mjGEOM_HFIELD, _G.mjGEOM_CAPSULE),
    (_G.mjGEOM_HFIELD, _G.mjGEOM_BOX), (_G.mjGEOM_HFIELD, _G.mjGEOM_MESH),
    (_G.mjGEOM_SPHERE, _G.mjGEOM_SPHERE), (_G.mjGEOM_SPHERE, _G.mjGEOM_CAPSULE),
    (_G.mjGEOM_SPHERE, _G.mjGEOM_CYLINDER), (_G.mjGEOM_SPHERE, _G.mjGEOM_ELLIPSOID),
    (_G.mjGEOM_SPHERE, _G.mjGEOM_BOX), (_G.mjGEOM_SPHERE, _G.mjGEOM_MESH),
    (_G.mjGEOM_CAPSULE, _G.mjGEOM_CAPSULE), (_G.mjGEOM_CAPSULE, _G.mjGEOM_BOX),
    (_G.mjGEOM_CAPSULE, _G.mjGEOM_ELLIPSOID), (_G.mjGEOM_CAPSULE, _G.mjGEOM_CYLINDER),
    (_G.mjGEOM_CAPSULE, _G.mjGEOM_MESH),
    (_G.mjGEOM_ELLIPSOID, _G.mjGEOM_ELLIPSOID), (_G.mjGEOM_ELLIPSOID, _G.mjGEOM_CYLINDER),
    (_G.mjGEOM_CYLINDER, _G.mjGEOM_CYLINDER),
    (_G.mjGEOM_BOX, _G.mjGEOM_BOX), (_G.mjGEOM_BOX, _G.mjGEOM_MESH), (_G.mjGEOM_MESH, _G.mjGEOM_MESH),
))
_NO_MARGIN = frozenset((int(_G.mjGEOM_MESH), int(_G.mjGEOM_HFIELD)))


def _unsupported(enum, supported_names):
    return frozenset(int(v) for k, v in enum.__members__.items() if k not in supported_names)


# (model field, MuJoCo enum, unsupported values, code, what)
_ENUM_CHECKS = (
    ("actuator_trntype", _E.mjtTrn, _unsupported(_E.mjtTrn, {"mjTRN_JOINT", "mjTRN_JOINTINPARENT", "mjTRN_TENDON",
                                                              "mjTRN_SITE"}),
     "MJX_ACTUATOR_UNSUPPORTED", "transmission"),
    ("actuator_dyntype", _E.mjtDyn, _unsupported(_E.mjtDyn, {"mjDYN_NONE", "mjDYN_INTEGRATOR", "mjDYN_FILTER",
                                                              "mjDYN_FILTEREXACT", "mjDYN_MUSCLE"}),
     "MJX_ACTUATOR_UNSUPPORTED", "dynamics"),
    ("actuator_gaintype", _E.mjtGain, _unsupported(_E.mjtGain, {"mjGAIN_FIXED", "mjGAIN_AFFINE", "mjGAIN_MUSCLE"}),
     "MJX_ACTUATOR_UNSUPPORTED", "gain"),
    ("actuator_biastype", _E.mjtBias, _unsupported(_E.mjtBias, {"mjBIAS_NONE", "mjBIAS_AFFINE", "mjBIAS_MUSCLE"}),
     "MJX_ACTUATOR_UNSUPPORTED", "bias"),
    ("eq_type", _E.mjtEq, _unsupported(_E.mjtEq, {"mjEQ_CONNECT", "mjEQ_WELD", "mjEQ_JOINT", "mjEQ_TENDON"}),
     "MJX_EQUALITY_UNSUPPORTED", "equality"),
    ("wrap_type", _E.mjtWrap, frozenset({int(_E.mjtWrap.mjWRAP_NONE)}), "MJX_TENDON_UNSUPPORTED", "wrap"),
    ("sensor_type", _E.mjtSensor, _unsupported(_E.mjtSensor, {
        "mjSENS_TOUCH", "mjSENS_ACCELEROMETER", "mjSENS_VELOCIMETER", "mjSENS_GYRO", "mjSENS_FORCE",
        "mjSENS_TORQUE", "mjSENS_MAGNETOMETER", "mjSENS_RANGEFINDER", "mjSENS_CAMPROJECTION",
        "mjSENS_JOINTPOS", "mjSENS_JOINTVEL", "mjSENS_TENDONPOS", "mjSENS_TENDONVEL", "mjSENS_ACTUATORPOS",
        "mjSENS_ACTUATORVEL", "mjSENS_ACTUATORFRC", "mjSENS_JOINTACTFRC", "mjSENS_TENDONACTFRC",
        "mjSENS_BALLQUAT", "mjSENS_BALLANGVEL", "mjSENS_FRAMEPOS", "mjSENS_FRAMEQUAT", "mjSENS_FRAMEXAXIS",
        "mjSENS_FRAMEYAXIS", "mjSENS_FRAMEZAXIS", "mjSENS_FRAMELINVEL", "mjSENS_FRAMEANGVEL",
        "mjSENS_FRAMELINACC", "mjSENS_FRAMEANGACC", "mjSENS_SUBTREECOM", "mjSENS_SUBTREELINVEL",
        "mjSENS_SUBTREEANGMOM", "mjSENS_CONTACT", "mjSENS_CLOCK", "mjSENS_TACTILE"}),
     "MJX_SENSOR_UNSUPPORTED", "sensor"),
)
_ENUM_OBJ = {"actuator": _E.mjtObj.mjOBJ_ACTUATOR, "eq": _E.mjtObj.mjOBJ_EQUALITY,
             "sensor": _E.mjtObj.mjOBJ_SENSOR}

_DIAGNOSTIC_FLAGS = {  # enable flags that only compute diagnostics: turning them off changes no state
    int(_E.mjtEnableBit.mjENBL_ENERGY): ("energy", "computes d.energy only (kinetic/potential energy "
                                                   "diagnostics); the dynamics do not use it"),
    int(_E.mjtEnableBit.mjENBL_FWDINV): ("fwdinv", "records the forward/inverse solver comparison "
                                                   "(d.solver_fwdinv) only; the dynamics do not use it"),
}
_PHYSICS_FLAGS = {  # enable flags that change the physics: never adapted
    int(_E.mjtEnableBit.mjENBL_OVERRIDE): ("override", "remove the override flag and put the o_margin/"
                                           "o_solref/o_solimp/o_friction values on the geoms or <pair>s"),
    int(_E.mjtEnableBit.mjENBL_DIAGEXACT): ("diagexact", "remove the diagexact flag (MJX uses MuJoCo's "
                                            "default approximate constraint-inertia diagonal, which changes "
                                            "constraint softness slightly)"),
    int(_E.mjtEnableBit.mjENBL_SPECULATIVE): ("speculative", "remove the speculative-contacts flag (MJX has "
                                              "no speculative contacts)"),
}


# ---- entries ----------------------------------------------------------------------------------------
def _entry(severity: str, code: str, message: str, fix: str | None = None, **context) -> dict:
    ctx = {k: _jsonable(v) for k, v in context.items()}
    if fix is not None:
        ctx["fix"] = fix
    return {"severity": severity, "code": code, "message": message, "context": ctx}


def _codes(entries) -> tuple[str, ...]:
    return tuple(dict.fromkeys(e["code"] for e in entries))


def _refusal_message(errors, fixable, exclude) -> str:
    lines = [f"MJX cannot run this model ({len(errors)} problem{'s' if len(errors) != 1 else ''}):"]
    last = None
    for e in errors:
        lines.append(f"  - [{e['code']}] {e['message']}")
        fix = e["context"].get("fix")
        if fix:
            lines.append("      fix: as above" if fix == last else f"      fix: {fix}")
        last = fix
    if fixable:
        codes = sorted({e["code"] for e in fixable})
        lines.append(f"  ({len(fixable)} further problem(s) that mjx=\"adapt\" would fix: {', '.join(codes)})")
    return "\n".join(lines)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return v if v is None or isinstance(v, str) else str(v)


def _enum_name(enum, value: int) -> str:
    try:
        return enum(int(value)).name.split("_", 1)[1].lower()
    except ValueError:
        return f"<{enum.__name__} {int(value)}>"


def _name(m, obj, i: int) -> str | None:
    return mujoco.mj_id2name(m, obj, int(i)) or None


def _label(m, obj, i: int, kind: str) -> str:
    n = _name(m, obj, i)
    return f"{kind} {n!r}" if n else f"{kind} #{int(i)} (unnamed)"


def _geom_ctx(m, g: int) -> dict:
    b = int(m.geom_bodyid[g])
    return {"id": int(g), "name": _name(m, mujoco.mjtObj.mjOBJ_GEOM, g),
            "type": _enum_name(mujoco.mjtGeom, m.geom_type[g]),
            "body": _name(m, mujoco.mjtObj.mjOBJ_BODY, b) or ("world" if b == 0 else None), "body_id": b}


def _body_label(m, b: int) -> str:
    return "body 'world'" if b == 0 else _label(m, mujoco.mjtObj.mjOBJ_BODY, b, "body")


def _geom_label(m, g: int) -> str:
    c = _geom_ctx(m, g)
    return f"{_label(m, mujoco.mjtObj.mjOBJ_GEOM, g, 'geom')} ({c['type']}, {_body_label(m, c['body_id'])})"


# ---- MJX's collision pair filter (collision_driver.geom_pairs) ----------------------------------------
def mjx_geom_pairs(m: mujoco.MjModel) -> list[tuple[int, int, int]]:
    """The geom pairs MJX prepares colliders for: ``(geom1, geom2, pair index or -1)``, geom1's type <= geom2's.

    Mirrors MJX's ``collision_driver.geom_pairs``: every ``<pair>`` first, then every body pair that
    is not ``<exclude>``d, not welded together, not parent-child (unless filterparent is disabled), and
    each geom pair of theirs whose contype/conaffinity match. The ``contact`` disable flag is not
    consulted (MJX does not either: ``put_model`` refuses such a model all the same).
    """
    pairs, out = set(), []
    for i in range(m.npair):
        g1, g2 = int(m.pair_geom1[i]), int(m.pair_geom2[i])
        if m.geom_type[g1] > m.geom_type[g2]:
            g1, g2 = g2, g1
        pairs.add((g1, g2))
        out.append((g1, g2, i))
    exclude = {int(s) for s in m.exclude_signature}
    # plain lists: this loop is O(nbody^2) in Python, as in MJX; numpy scalar indexing would dominate it
    gtype, ctype, caff = m.geom_type.tolist(), m.geom_contype.tolist(), m.geom_conaffinity.tolist()
    weld, parent = m.body_weldid.tolist(), m.body_parentid.tolist()
    filterparent = not (m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT)
    start, num = m.body_geomadr.tolist(), m.body_geomnum.tolist()
    plane, hfield = int(_G.mjGEOM_PLANE), int(_G.mjGEOM_HFIELD)
    geoms = [[g for g in range(start[b], start[b] + num[b]) if ctype[g] | caff[g]] for b in range(m.nbody)]
    for b1 in range(m.nbody):
        if not geoms[b1]:
            continue
        w1 = weld[b1]
        w1p = weld[parent[w1]]
        for b2 in range(b1, m.nbody):
            if not geoms[b2] or ((b1 << 16) + b2) in exclude:
                continue
            w2 = weld[b2]
            if w1 == w2:
                continue
            w2p = weld[parent[w2]]
            if filterparent and w1 != 0 and w2 != 0 and (w1 == w2p or w2 == w1p):
                continue
            for g1 in geoms[b1]:
                for g2 in geoms[b2]:
                    a, b = (g1, g2) if gtype[g1] <= gtype[g2] else (g2, g1)
                    t1, t2 = gtype[a], gtype[b]
                    if t1 == plane and t2 in (plane, hfield):
                        continue
                    if not ((ctype[a] & caff[b]) | (ctype[b] & caff[a])):
                        continue
                    if (a, b) not in pairs:
                        pairs.add((a, b))
                        out.append((a, b, -1))
    return out


def _pair_condim(m, g1, g2, ip) -> int:
    if ip >= 0:
        return int(m.pair_dim[ip])
    p1, p2 = m.geom_priority[g1], m.geom_priority[g2]
    if p1 != p2:
        return int(m.geom_condim[g1] if p1 > p2 else m.geom_condim[g2])
    return int(max(m.geom_condim[g1], m.geom_condim[g2]))
