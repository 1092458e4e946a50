"""MJX compatibility, the adaptations: the meaning-preserving substitutions (and, with
``unsupported_contacts="exclude"``, the exclusions of exactly the geom pairs MJX cannot collide) that ``apply``
makes to a model MJX would otherwise refuse, each logged; ``compat.py`` holds the checks they answer."""

from __future__ import annotations

import mujoco
import numpy as np

from mjharness.integrators.names import ContactMode, MjxMode

from .compat import CONTACT_MODES, MODES, _contacts_off, check_mjx
from .errors import SceneError
from .mjx_support import (
    _DIAGNOSTIC_FLAGS,
    _body_label,
    _codes,
    _entry,
    _enum_name,
    _geom_ctx,
    _geom_label,
    _refusal_message,
    mjx_geom_pairs,
)
from .mjx_trace import check_mjx_trace


# ---- adaptation --------------------------------------------------------------------------------------
def _fixable(e, exclude: bool) -> bool:
    a = e["context"].get("adapt", "none")
    return a == "automatic" or (exclude and a.startswith("opt-in"))


def _mixed_pair_params(m, g1, g2) -> dict:
    """MuJoCo C's mj_contactParam mixing + getMargin/getGap, as explicit <pair> values (same contact)."""
    p1, p2 = m.geom_priority[g1], m.geom_priority[g2]
    if p1 != p2:
        g = g1 if p1 > p2 else g2
        condim, solref, solimp, fri = m.geom_condim[g], m.geom_solref[g], m.geom_solimp[g], m.geom_friction[g]
    else:
        condim = max(m.geom_condim[g1], m.geom_condim[g2])
        s1, s2, eps = m.geom_solmix[g1], m.geom_solmix[g2], mujoco.mjMINVAL
        if s1 >= eps and s2 >= eps:
            mix = s1 / (s1 + s2)
        elif s1 < eps and s2 < eps:
            mix = 0.5
        else:
            mix = 0.0 if s1 < eps else 1.0
        r1, r2 = m.geom_solref[g1], m.geom_solref[g2]
        solref = mix * r1 + (1 - mix) * r2 if (r1[0] > 0 and r2[0] > 0) else np.minimum(r1, r2)
        solimp = mix * m.geom_solimp[g1] + (1 - mix) * m.geom_solimp[g2]
        fri = np.maximum(m.geom_friction[g1], m.geom_friction[g2])
    return {"condim": int(condim), "solref": [float(x) for x in solref], "solimp": [float(x) for x in solimp],
            "friction": [float(fri[0]), float(fri[0]), float(fri[1]), float(fri[2]), float(fri[2])],
            "solreffriction": [0.0, 0.0],
            "margin": float(m.geom_margin[g1] + m.geom_margin[g2]), "gap": float(m.geom_gap[g1] + m.geom_gap[g2])}


def _unique_name(taken: set, base: str) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _plan_exclusions(m, entries) -> tuple[list, list, list]:
    """Split the pair entries into: explicit <pair>s to delete, body pairs to exclude (with the supported
    geom pairs between them that must come back as explicit <pair>s), and refusals (not exactly excludable)."""
    bad_pairs: dict[tuple[int, int, int], str] = {}  # (geom1, geom2, pair index or -1) -> code
    for e in entries:
        c = e["context"]
        for p in c["pairs"] if e["code"] == "MJX_GEOM_UNSUPPORTED" else [c]:
            bad_pairs[(p["geom1"]["id"], p["geom2"]["id"], -1 if p["pair"] is None else p["pair"])] = e["code"]
    delete_pairs = sorted((ip, code) for (_, _, ip), code in bad_pairs.items() if ip >= 0)
    all_pairs = mjx_geom_pairs(m)
    bodies: dict[tuple[int, int], list] = {}
    for (g1, g2, ip), code in bad_pairs.items():
        if ip < 0:
            lo, hi = sorted((int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])))
            bodies.setdefault((lo, hi), []).append((g1, g2, code))
    plan, refusals = [], []
    for (b1, b2), bad in sorted(bodies.items()):
        bad_set = {(g1, g2) for g1, g2, _ in bad}
        keep = [(g1, g2) for g1, g2, ip in all_pairs if ip < 0
                and {int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])} == {b1, b2} and (g1, g2) not in bad_set]
        # a <pair> reproduces a dynamic contact exactly only without adhesion/surface velocity
        odd = [g for pr in keep for g in pr if np.any(m.geom_adhesion[g]) or np.any(m.geom_surfacevel[g])]
        if odd:
            odd_labels = ", ".join(_geom_label(m, g) for g in sorted(set(odd)))
            refusals.append(_entry(
                "error", "MJX_COLLISION_PAIR_UNSUPPORTED",
                f"cannot exclude exactly the unsupported geom pairs between {_body_label(m, b1)} and "
                f"{_body_label(m, b2)}: the other geom pairs of these bodies use adhesion or surface velocity "
                f"({odd_labels}), which an explicit <pair> cannot reproduce",
                "exclude the whole body pair with <exclude>, or change the geom types",
                element="body pair", body1_id=b1, body2_id=b2, adapt="none"))
            continue
        plan.append(((b1, b2), sorted(bad), keep))
    return delete_pairs, plan, refusals


def _apply_exclusions(spec, m, delete_pairs, plan, log, why):
    body_names = {b.name for b in spec.bodies if b.name}
    geom_names = {g.name for g in spec.geoms if g.name}
    spec_bodies = {b.id: b for b in spec.bodies}
    spec_geoms = {g.id: g for g in spec.geoms}
    spec_pairs = {p.id: p for p in spec.pairs}
    sev = "info" if _contacts_off(m) else "warning"  # with contacts off, dropping pairs changes nothing

    def body_name(b):
        sb = spec_bodies[b]
        if not sb.name:
            sb.name = _unique_name(body_names, f"compat_body{b}")
        return sb.name

    def geom_name(g):
        sg = spec_geoms[g]
        if not sg.name:
            sg.name = _unique_name(geom_names, f"compat_geom{g}")
        return sg.name

    for ip, code in delete_pairs:
        g1, g2 = int(m.pair_geom1[ip]), int(m.pair_geom2[ip])
        spec.delete(spec_pairs[ip])
        log.append(_entry(sev, code,
                          f"removed explicit <pair> #{ip} of {_geom_label(m, g1)} and {_geom_label(m, g2)}: MJX has "
                          f"no collider for it; these two geoms no longer collide ({why})",
                          element="pair", pair=ip, geom1=_geom_ctx(m, g1), geom2=_geom_ctx(m, g2), action="exclude"))
    for (b1, b2), bad, keep in plan:
        n1, n2 = body_name(b1), body_name(b2)
        spec.add_exclude(bodyname1=n1, bodyname2=n2)
        readded = []
        for g1, g2 in keep:
            prm = _mixed_pair_params(m, g1, g2)
            spec.add_pair(geomname1=geom_name(g1), geomname2=geom_name(g2), condim=prm["condim"],
                          friction=prm["friction"], solref=prm["solref"], solimp=prm["solimp"],
                          solreffriction=prm["solreffriction"], margin=prm["margin"], gap=prm["gap"])
            readded.append({"geom1": _geom_ctx(m, g1), "geom2": _geom_ctx(m, g2), **prm})
        for g1, g2, code in bad:
            log.append(_entry(
                sev, code,
                f"excluded {_enum_name(mujoco.mjtGeom, m.geom_type[g1])}-{_enum_name(mujoco.mjtGeom, m.geom_type[g2])} "
                f"contacts between {_geom_label(m, g1)} and {_geom_label(m, g2)}: MJX has no collider for them; these "
                f"two geoms no longer collide ({why})",
                element="geom pair", geom1=_geom_ctx(m, g1), geom2=_geom_ctx(m, g2), action="exclude",
                exclude=[n1, n2], readded_pairs=readded))
        if readded:
            log.append(_entry(
                "info", "MJX_COLLISION_PAIR_UNSUPPORTED",
                f"<exclude body1={n1!r} body2={n2!r}/> also covers {len(readded)} supported geom pair(s); each came "
                "back as an explicit <pair> with the parameters MuJoCo mixes for it (condim, friction, solref, "
                "solimp, margin, gap), so it collides as before (only the order of contacts in d.contact changes)",
                element="body pair", exclude=[n1, n2], readded_pairs=readded, action="readd"))


def _adapt(spec, m, fixes, exclude_opted, log):
    o = spec.option
    why = ("contacts are disabled by flag, so this changes nothing" if _contacts_off(m)
           else "opted in with unsupported_contacts=\"exclude\"")
    pair_entries = []
    for e in fixes:
        code, c = e["code"], e["context"]
        if code == "MJX_SOLVER_UNSUPPORTED":
            o.solver = mujoco.mjtSolver.mjSOL_NEWTON
            log.append(_entry("warning", code,
                              f"solver {c['solver']} -> Newton: both solve the same convex constraint problem, so "
                              "the solution agrees to solver tolerance, but results are not bit-identical to "
                              "MuJoCo C with the original solver", element="option", action="solver",
                              before=c["solver"], after="newton"))
        elif code == "MJX_FLAG_UNSUPPORTED":
            bit = next(b for b, (f, _) in _DIAGNOSTIC_FLAGS.items() if f == c["flag"])
            o.enableflags &= ~bit
            log.append(_entry("info", code, f"turned off the diagnostic-only enable flag {c['flag']!r}: it "
                              f"{_DIAGNOSTIC_FLAGS[bit][1]}; results are unchanged", element="option/flag",
                              action="flag", flag=c["flag"]))
        elif code == "MJX_CONDIM_UNSUPPORTED":
            o.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
            log.append(_entry("info", code, "cone elliptic -> pyramidal: every contact is frictionless "
                              "(condim 1), where both cones give the same single normal constraint",
                              element="option", action="cone", before="elliptic", after="pyramidal"))
        elif code == "MJX_MARGIN_UNSUPPORTED":
            g1, g2, ip = c["geom1"]["id"], c["geom2"]["id"], c["pair"]
            if ip is not None:
                next(p for p in spec.pairs if p.id == ip).margin = 0.0
            else:  # MJX checks the sum of both geoms' margins
                for g in spec.geoms:
                    if g.id in (g1, g2):
                        g.margin = 0.0
            log.append(_entry("info", code, f"zeroed the margin of {_geom_label(m, g1)} and {_geom_label(m, g2)}: "
                              "contacts are disabled by flag, so margins have no effect", element="geom pair",
                              action="margin", geom1=c["geom1"], geom2=c["geom2"]))
        elif code in ("MJX_COLLISION_PAIR_UNSUPPORTED", "MJX_GEOM_UNSUPPORTED"):
            pair_entries.append(e)
    return pair_entries, why


def apply(spec, model, source, *, mode="adapt", unsupported_contacts="refuse", need_sensors=False):
    """The ``load_scene`` hook: returns ``(model, log)`` or raises one ``SceneError`` listing every reason.

    ``mode="strict"``: any refusal raises (the log then holds only warnings). ``mode="adapt"``: the
    documented, meaning-preserving fixes are applied to ``spec`` and the model is recompiled; pairs MJX
    cannot collide are excluded only with ``unsupported_contacts="exclude"`` (or when contacts are
    disabled by flag, where excluding them changes nothing). Then ``check_mjx_trace`` traces
    ``mjx.forward`` (no compile); in adapt mode a model whose sensors alone fail to trace, with
    ``need_sensors`` false, gets the ``sensor`` disable flag (on ``spec`` too, so its XML says so).
    Nothing is changed when it raises.
    """
    if mode not in MODES:
        raise SceneError(source, f"mjx must be one of {MODES}, got {mode!r}", codes=("SCENE_OPTION_INVALID",))
    if unsupported_contacts not in CONTACT_MODES:
        raise SceneError(source, f"unsupported_contacts must be one of {CONTACT_MODES}, got {unsupported_contacts!r}",
                         codes=("SCENE_OPTION_INVALID",))
    mode = MjxMode(mode)
    model, log = _apply_checks(spec, model, source, mode, ContactMode(unsupported_contacts) is ContactMode.EXCLUDE)
    traced, trace_log = check_mjx_trace(model, source, need_sensors=need_sensors, adapt=mode is MjxMode.ADAPT)
    if traced is not model:  # sensors switched off on the model; the spec's XML must say the same
        spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
    return traced, log + trace_log


def _apply_checks(spec, model, source, mode: MjxMode, exclude):
    entries = check_mjx(model)
    errors = [e for e in entries if e["severity"] == "error"]
    warnings = [e for e in entries if e["severity"] != "error"]
    if mode is MjxMode.STRICT:
        if errors:
            raise SceneError(source, _refusal_message(errors, [], exclude), codes=_codes(errors))
        return model, warnings
    fixes = [e for e in errors if _fixable(e, exclude)]
    blocking = [e for e in errors if not _fixable(e, exclude)]
    delete_pairs, plan, refusals = _plan_exclusions(model, [e for e in fixes if e["code"] in (
        "MJX_COLLISION_PAIR_UNSUPPORTED", "MJX_GEOM_UNSUPPORTED")])
    blocking += refusals
    if blocking:
        raise SceneError(source, _refusal_message(blocking, fixes, exclude), codes=_codes(blocking))
    if not fixes:
        return model, warnings
    log: list[dict] = []
    _, why = _adapt(spec, model, fixes, exclude, log)
    if delete_pairs or plan:
        _apply_exclusions(spec, model, delete_pairs, plan, log, why)
    try:
        new = spec.compile()
    except Exception as e:  # SHOULD NOT OCCUR: our edits keep the spec valid
        raise SceneError(source, f"internal error: the MJX-adapted model failed to compile: {e}",
                         codes=("MJX_ADAPT_INTERNAL",)) from None
    left = [e for e in check_mjx(new) if e["severity"] == "error"]
    if left:  # SHOULD NOT OCCUR: every fix above removes its reason
        raise SceneError(source, "internal error: after adaptation MJX would still refuse the model:\n"
                         + _refusal_message(left, [], exclude), codes=("MJX_ADAPT_INTERNAL",) + _codes(left))
    return new, log + [e for e in check_mjx(new) if e["severity"] != "error"]
