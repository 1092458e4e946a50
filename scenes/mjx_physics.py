"""Known MJX physics differences: models MJX runs, with results that are not MuJoCo C's.

``compat.check_mjx`` finds what MJX refuses or ignores. Some models MJX accepts still evolve differently,
because MJX's own colliders and constraint construction are not MuJoCo C's (measured with mujoco 4.0 and
mujoco-mjx 3.17, docs/scenes.md):

- ``MJX_PHYSICS_PYRAMIDAL_CONE``: pyramidal friction cones (MuJoCo's default ``cone``) on capsule–plane and
  sphere–plane contacts with friction (condim >= 3). MJX orients the cone's tangent axes differently, so the
  constraint forces and ``qacc`` differ on the same state (gymnasium's Ant-v5: up to 38 % of |qacc|).
  With ``cone="elliptic"`` the two agree to ~1e-6.
- ``MJX_PHYSICS_BOX_PLANE``: box–plane contacts. MJX's box–plane collider returns other contact points than
  MuJoCo C's, so contact forces differ (a box-and-capsule rig: ``cfrc_ext`` 140 apart).

``known_differences(model)`` lists the cases that apply to the model's geom pairs and options (cheap, static);
``measure(model)`` gives their size on the scene's own initial state: ``mjx.forward`` against ``mj_forward``
on one state (``qacc``), the initial state or, when no flagged contact is active there, the first state of a
passive MuJoCo C fall from it that has one. Each entry's fix names ``cone="elliptic"`` or ``backend="mujoco"``.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .mjx_support import _entry, mjx_geom_pairs

__all__ = ["CODES", "known_differences", "flagged_pairs", "measure", "compare_qacc", "format_differences"]

_G = mujoco.mjtGeom
CODES = {
    "MJX_PHYSICS_PYRAMIDAL_CONE": "pyramidal friction cone on capsule/sphere–plane contacts: MJX orients the "
                                  "cone's tangent axes differently (forces and qacc differ)",
    "MJX_PHYSICS_BOX_PLANE": "box–plane contacts: MJX's collider returns other contact points (forces differ)",
}
# code -> (geom type pairs it concerns (plane first), whether only pyramidal cones with friction, the fix)
_CASES = {
    "MJX_PHYSICS_PYRAMIDAL_CONE": ({(_G.mjGEOM_PLANE, _G.mjGEOM_CAPSULE), (_G.mjGEOM_PLANE, _G.mjGEOM_SPHERE)}, True,
                                   'cone="elliptic" (<option cone="elliptic"/>: MJX and MuJoCo C then agree), or '
                                   'backend="mujoco" (--backend mujoco) for MuJoCo C\'s own results'),
    "MJX_PHYSICS_BOX_PLANE": ({(_G.mjGEOM_PLANE, _G.mjGEOM_BOX)}, False,
                              'backend="mujoco" (--backend mujoco) for MuJoCo C\'s contacts; hold MJX results to '
                              'raw MJX'),
}
_SHOWN = 4  # pairs named per entry


def _geom_name(m: mujoco.MjModel, g: int) -> str:
    return mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom {g}"


def _pair_kind(m: mujoco.MjModel, g1: int, g2: int) -> tuple:
    t1, t2 = int(m.geom_type[g1]), int(m.geom_type[g2])
    return (t1, t2) if t1 <= t2 else (t2, t1)


def _condim(m: mujoco.MjModel, g1: int, g2: int, ip: int) -> int:
    return int(m.pair_dim[ip]) if ip >= 0 else max(int(m.geom_condim[g1]), int(m.geom_condim[g2]))


def flagged_pairs(m: mujoco.MjModel) -> dict[str, list[tuple[int, int]]]:
    """code -> the geom pairs (MJX's own pair filter) each known difference concerns."""
    pyramidal = int(m.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
    if m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT):
        return {}
    out: dict[str, list] = {}
    for g1, g2, ip in mjx_geom_pairs(m):
        kind = _pair_kind(m, g1, g2)
        for code, (kinds, cone_only, _) in _CASES.items():
            if kind in kinds and (not cone_only or (pyramidal and _condim(m, g1, g2, ip) >= 3)):
                out.setdefault(code, []).append((int(g1), int(g2)))
    return out


def known_differences(m: mujoco.MjModel, measured: dict | None = None) -> list[dict]:
    """Log entries (``severity="warning"``, ``compat`` format) of the known differences that apply to ``m``;
    ``measured`` (``measure(m)``) adds the size found on the scene's state to each message."""
    out = []
    for code, pairs in flagged_pairs(m).items():
        names = ", ".join(f"{_geom_name(m, a)}–{_geom_name(m, b)}" for a, b in pairs[:_SHOWN])
        more = f" and {len(pairs) - _SHOWN} more" if len(pairs) > _SHOWN else ""
        size = "; not measured (mjharness inspect --measure, or measure(model))"
        if measured is not None:
            size = f"; {measured['text']}"
        out.append(_entry("warning", code, f"{CODES[code]}: {len(pairs)} geom pair(s) ({names}{more}){size}",
                          _CASES[code][2], element="geom pair", pairs=pairs, measured=measured))
    return out


def _active(m: mujoco.MjModel, d: mujoco.MjData, pairs: set) -> int:
    return sum(1 for c in d.contact[:d.ncon] if (int(c.geom1), int(c.geom2)) in pairs
               or (int(c.geom2), int(c.geom1)) in pairs)


def _state_with_contact(m: mujoco.MjModel, pairs: set, max_time: float = 3.0):
    """(MjData, time): the initial state (keyframe 0, else qpos0), or the first state of a passive MuJoCo C fall
    from it with a contact of ``pairs``; (None, None) when there is none within ``max_time``."""
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    if _active(m, d, pairs):
        return d, 0.0
    for _ in range(int(max_time / m.opt.timestep)):
        mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        if _active(m, d, pairs):
            return d, float(d.time)
    return None, None


def measure(m: mujoco.MjModel) -> dict | None:
    """The size of the known differences on the scene's own state: ``{"time", "ncon", "max_abs", "relative",
    "text"}`` from ``qacc`` of ``mjx.forward`` and ``mj_forward`` on one state (None: no flagged pair, or no
    such contact within 3 s of falling). Compiles ``mjx.forward`` once (seconds)."""
    flagged = flagged_pairs(m)
    if not flagged:
        return None
    pairs = {p for ps in flagged.values() for p in ps}
    d, t = _state_with_contact(m, pairs)
    if d is None:
        return {"time": None, "ncon": 0, "max_abs": 0.0, "relative": 0.0,
                "text": "no flagged contact is active on the initial state or in 3 s of falling: not measured"}
    diff, rel = compare_qacc(m, d)
    where = "the initial state" if t == 0.0 else f"t = {t:.3g} s of a passive fall from the initial state"
    return {"time": t, "ncon": int(d.ncon), "max_abs": diff, "relative": rel,
            "text": f"measured: max |qacc(mjx.forward) - qacc(mj_forward)| = {diff:.3g} ({100 * rel:.3g} % of "
                    f"max |qacc|) at {where}, {int(d.ncon)} contacts"}


def compare_qacc(m: mujoco.MjModel, d: mujoco.MjData) -> tuple[float, float]:
    """(max |qacc(mjx.forward) - qacc(mj_forward)|, that over max |qacc|) on the state of ``d`` (after
    ``mj_forward``), in float64."""
    import jax

    from .settings import configure, mjx

    configure()  # float64, as every run here
    dx = jax.jit(mjx.forward)(mjx.put_model(m), mjx.put_data(m, d))
    qacc_mjx, qacc_c = np.asarray(dx.qacc, np.float64), np.array(d.qacc)
    diff = float(np.max(np.abs(qacc_mjx - qacc_c)))
    return diff, diff / max(float(np.max(np.abs(qacc_c))), 1e-300)


def format_differences(entries) -> str:
    if not entries:
        return "MJX physics: no known difference from MuJoCo C for this model's geom pairs and options"
    lines = [f"MJX physics differences ({len(entries)}):"]
    for e in entries:
        lines.append(f"  WARNING {e['code']}: {e['message']}")
        lines.append(f"          fix: {e['context']['fix']}")
    return "\n".join(lines)
