"""MJX compatibility: our own checks, run before MJX sees a model, and meaning-preserving adaptations.

``mjx.put_model`` (mujoco-mjx 3.17.0) refuses many models MuJoCo compiles, one bare
``NotImplementedError`` at a time. ``check_mjx`` mirrors every refusal of ``put_model`` (JAX backend)
and of ``make_data`` (read from MJX's ``io.py`` ``_put_option``/``_put_model_jax``/``_make_data_jax``
and the collision table and pair filter of MJX's ``collision_driver.py``), so all reasons are
reported together, each with a stable code, the elements it concerns and a fix. ``apply`` is the hook
``load_scene`` calls: ``strict`` refuses, ``adapt`` edits the ``MjSpec`` (only substitutions that keep
the model's meaning, or contact exclusions the user opted into), recompiles and logs every change.
Both modes then trace ``mjx.forward`` abstractly (``check_mjx_trace``, in ``scenes/mjx_trace.py``) for
what put_model accepts but MJX cannot trace (codes ``MJX_TRACE_SENSOR``, ``MJX_TRACE_FAILED``).

A log entry is a plain, JSON-serialisable dict ``{severity, code, message, context}``; ``severity`` is
``"info"`` (adapted, same results), ``"warning"`` (adapted or accepted, results differ in a way worth
knowing) or ``"error"`` (MJX would refuse the model). ``context["fix"]`` says what to do.
"""

from __future__ import annotations

import json

import mujoco
import numpy as np

from mjharness.integrators.names import ContactMode, MjxMode

from .errors import SceneError
from .mjx_support import (  # noqa: F401  (re-exported: tests read them here)
    _DIAGNOSTIC_FLAGS,
    _E,
    _ENUM_CHECKS,
    _ENUM_OBJ,
    _G,
    _NO_MARGIN,
    _PHYSICS_FLAGS,
    COLLIDABLE_GEOMS,
    COLLISION_PAIRS,
    SUPPORTED_CONES,
    SUPPORTED_ENABLEBITS,
    SUPPORTED_INTEGRATORS,
    SUPPORTED_JACOBIANS,
    SUPPORTED_SOLVERS,
    _body_label,
    _codes,
    _entry,
    _enum_name,
    _geom_ctx,
    _geom_label,
    _jsonable,
    _label,
    _name,
    _pair_condim,
    _refusal_message,
    _unsupported,
    mjx_geom_pairs,
)
from .mjx_trace import check_mjx_trace

__all__ = ["CODES", "MODES", "CONTACT_MODES", "check_mjx", "check_mjx_trace", "mjx_geom_pairs",
           "format_compat_log", "compat_log_to_json", "compat_log_from_json", "is_refused", "require_mjx_compatible"]

MODES = MjxMode.values()
CONTACT_MODES = ContactMode.values()

# Stable codes (documented in README, "MJX compatibility").
CODES = {
    "MJX_SOLVER_UNSUPPORTED": "constraint solver MJX does not implement (PGS)",
    "MJX_INTEGRATOR_UNSUPPORTED": "integrator MJX does not implement (implicit)",
    "MJX_OPTION_UNSUPPORTED": "option value or combination MJX refuses (implicitfast with fluid drag, "
                              "cone or jacobian type outside MJX's set)",
    "MJX_FLAG_UNSUPPORTED": "enable flag MJX refuses (energy, fwdinv, override, diagexact, speculative)",
    "MJX_CONDIM_UNSUPPORTED": "frictionless (condim 1) contacts with the elliptic cone",
    "MJX_COLLISION_PAIR_UNSUPPORTED": "a geom pair that can collide, of types MJX has no collider for",
    "MJX_GEOM_UNSUPPORTED": "a colliding geom of a type MJX cannot collide at all (sdf)",
    "MJX_MARGIN_UNSUPPORTED": "nonzero margin on a mesh or height-field collision pair",
    "MJX_FLEX_UNSUPPORTED": "flex objects (deformables)",
    "MJX_ACTUATOR_UNSUPPORTED": "actuator transmission, dynamics, gain or bias type MJX does not implement",
    "MJX_EQUALITY_UNSUPPORTED": "equality constraint type MJX does not implement",
    "MJX_TENDON_UNSUPPORTED": "tendon wrap type MJX does not implement",
    "MJX_SENSOR_UNSUPPORTED": "sensor type, or contact-sensor matching/reduction, MJX does not implement",
    "MJX_FEATURE_IGNORED": "accepted by put_model but ignored or not implemented later by MJX (warning)",
    # found by tracing mjx.forward abstractly (scenes/mjx_trace.py), after every check above passed
    "MJX_TRACE_SENSOR": "MJX accepts the model but cannot trace its sensor evaluation; adapt switches sensors off "
                        "(sensor disable flag) when no sensor output is needed",
    "MJX_TRACE_FAILED": "MJX accepts the model (put_model) but fails while tracing mjx.forward outside the sensors",
}



# ---- the checks ---------------------------------------------------------------------------------------
def _contacts_off(m) -> bool:
    return bool(m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT)


def _check_option(m, out):
    o = m.opt
    if int(o.solver) not in SUPPORTED_SOLVERS:
        out.append(_entry(
            "error", "MJX_SOLVER_UNSUPPORTED",
            f"solver {_enum_name(mujoco.mjtSolver, o.solver)} is not implemented by MJX",
            "set <option solver=\"Newton\"/> (or \"CG\"); adapt does this: all MuJoCo solvers solve the same "
            "convex problem, so only the iterates differ (results agree to solver tolerance, not bit for bit)",
            element="option", solver=_enum_name(mujoco.mjtSolver, o.solver), adapt="automatic"))
    if int(o.integrator) not in SUPPORTED_INTEGRATORS:
        out.append(_entry(
            "error", "MJX_INTEGRATOR_UNSUPPORTED",
            f"integrator {_enum_name(mujoco.mjtIntegrator, o.integrator)} is not implemented by MJX",
            "set <option integrator=\"implicitfast\"/> (drops the Coriolis/centripetal terms of the implicit "
            "velocity derivative, which changes the step) or \"RK4\"/\"Euler\"; not adapted automatically",
            element="option", integrator=_enum_name(mujoco.mjtIntegrator, o.integrator), adapt="none"))
    if int(o.cone) not in SUPPORTED_CONES:
        out.append(_entry("error", "MJX_OPTION_UNSUPPORTED",
                          f"friction cone {_enum_name(mujoco.mjtCone, o.cone)} is not implemented by MJX",
                          "use cone=\"pyramidal\" or \"elliptic\"", element="option",
                          cone=_enum_name(mujoco.mjtCone, o.cone), adapt="none"))
    if int(o.jacobian) not in SUPPORTED_JACOBIANS:
        out.append(_entry("error", "MJX_OPTION_UNSUPPORTED",
                          f"jacobian {_enum_name(mujoco.mjtJacobian, o.jacobian)} is not implemented by MJX",
                          "use jacobian=\"auto\"", element="option",
                          jacobian=_enum_name(mujoco.mjtJacobian, o.jacobian), adapt="none"))
    fluid = o.density > 0 or o.viscosity > 0 or bool(np.any(o.wind))
    if int(o.integrator) == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST) and fluid:
        out.append(_entry(
            "error", "MJX_OPTION_UNSUPPORTED",
            f"MJX does not implement the implicitfast integrator with fluid drag (density={o.density:g}, "
            f"viscosity={o.viscosity:g}, wind={list(map(float, o.wind))})",
            "use integrator=\"Euler\" or \"RK4\", or remove density/viscosity/wind; not adapted automatically "
            "(both change the dynamics)",
            element="option", integrator="implicitfast", density=o.density, viscosity=o.viscosity,
            wind=o.wind, adapt="none"))
    for i in range(int(mujoco.mjtEnableBit.mjNENABLE)):
        bit = 1 << i
        if not (o.enableflags & bit) or bit in SUPPORTED_ENABLEBITS:
            continue
        if bit in _DIAGNOSTIC_FLAGS:
            flag, why = _DIAGNOSTIC_FLAGS[bit]
            fix, adapt = f"remove <flag {flag}=\"enable\"/>; adapt turns it off: it {why}", "automatic"
        else:
            flag, fix = _PHYSICS_FLAGS.get(bit, (_enum_name(mujoco.mjtEnableBit, bit), "remove the flag"))
            fix, adapt = fix + "; not adapted automatically (it changes the physics)", "none"
        out.append(_entry("error", "MJX_FLAG_UNSUPPORTED", f"enable flag {flag!r} is not implemented by MJX",
                          fix, element="option/flag", flag=flag, adapt=adapt))


def _check_enums(m, out):
    for field, enum, bad, code, what in _ENUM_CHECKS:
        values = np.asarray(getattr(m, field))
        if not values.size or not bad.intersection(int(v) for v in values):
            continue
        kind = field.split("_")[0]
        obj = _ENUM_OBJ.get(kind)
        if kind == "wrap":
            # wraps belong to tendons: name the tendon
            tendons = [t for t in range(m.ntendon) for w in range(m.tendon_adr[t], m.tendon_adr[t] + m.tendon_num[t])
                       if int(values[w]) in bad]
            items = [{"tendon": _name(m, mujoco.mjtObj.mjOBJ_TENDON, t), "tendon_id": t,
                      "wrap_type": _enum_name(enum, values[w])}
                     for t in sorted(set(tendons))
                     for w in range(m.tendon_adr[t], m.tendon_adr[t] + m.tendon_num[t]) if int(values[w]) in bad]
            labels = [_label(m, mujoco.mjtObj.mjOBJ_TENDON, it["tendon_id"], "tendon") for it in items]
            out.append(_entry("error", code, f"tendon wrap type not implemented by MJX in {', '.join(labels)}",
                              "remove or rewrite these tendons", element="tendon", items=items, adapt="none"))
            continue
        for i in np.flatnonzero(np.isin(values, list(bad))):
            label = _label(m, obj, i, {"actuator": "actuator", "eq": "equality", "sensor": "sensor"}[kind])
            t = _enum_name(enum, values[i])
            fix = {"MJX_ACTUATOR_UNSUPPORTED": f"replace the {what} type {t!r} of this actuator by one MJX "
                                               "implements (e.g. a joint/tendon/site transmission, a fixed/"
                                               "affine gain, no/integrator/filter dynamics) or remove it",
                   "MJX_EQUALITY_UNSUPPORTED": "remove this equality constraint or replace it by a connect/weld/"
                                               "joint/tendon equality",
                   "MJX_SENSOR_UNSUPPORTED": "remove this sensor (sensors do not affect the dynamics, but "
                                             "removing one changes sensordata, so it is not done automatically)",
                   }[code]
            out.append(_entry("error", code, f"{label}: {what} type {t!r} is not implemented by MJX", fix,
                              element=kind if kind != "eq" else "equality", id=int(i),
                              name=_name(m, obj, i), type=t, adapt="none"))


def _check_contact_sensors(m, out):
    is_contact = m.sensor_type == mujoco.mjtSensor.mjSENS_CONTACT
    if not is_contact.any():
        return
    site, body, xbody = (int(mujoco.mjtObj.mjOBJ_SITE), int(mujoco.mjtObj.mjOBJ_BODY),
                         int(mujoco.mjtObj.mjOBJ_XBODY))
    for i in np.flatnonzero(is_contact):
        ot, rt = int(m.sensor_objtype[i]), int(m.sensor_reftype[i])
        why = []
        if ot == site:
            why.append("site matching")
        if body in (ot, rt):
            why.append("body matching")
        if xbody in (ot, rt):
            why.append("subtree matching")
        if int(m.sensor_intprm[i, 1]) == 3:
            why.append("netforce reduction")
        if why:
            out.append(_entry(
                "error", "MJX_SENSOR_UNSUPPORTED",
                f"{_label(m, mujoco.mjtObj.mjOBJ_SENSOR, i, 'contact sensor')}: MJX does not implement "
                f"{' and '.join(why)}",
                "match by geom (geom1/geom2) with reduce=\"mindist\"/\"maxforce\"/\"none\", or remove the sensor",
                element="sensor", id=int(i), name=_name(m, mujoco.mjtObj.mjOBJ_SENSOR, i), type="contact",
                semantics=why, adapt="none"))


def _check_collisions(m, out):
    if m.nflex:
        names = [_name(m, mujoco.mjtObj.mjOBJ_FLEX, f) for f in range(m.nflex)]
        out.append(_entry("error", "MJX_FLEX_UNSUPPORTED",
                          f"{m.nflex} flex object(s) {names}: MJX's JAX backend has no flex",
                          "remove the flex/deformable elements, or run this model with MuJoCo C",
                          element="flex", names=names, adapt="none"))
    off = _contacts_off(m)
    adapt = "automatic" if off else "opt-in: unsupported_contacts=\"exclude\""
    bad_geom: dict[int, list] = {}
    elliptic = int(m.opt.cone) == int(mujoco.mjtCone.mjCONE_ELLIPTIC)
    condim1: list = []
    all_condims: set = set()
    gtype = m.geom_type.tolist()
    check_condim = elliptic and not off
    for g1, g2, ip in mjx_geom_pairs(m):
        t1, t2 = gtype[g1], gtype[g2]
        ok, margin_check = (t1, t2) in COLLISION_PAIRS, t1 in _NO_MARGIN or t2 in _NO_MARGIN
        if ok and not margin_check and not check_condim:
            continue  # the common case, kept cheap: nothing to report
        pair_ctx = {"geom1": _geom_ctx(m, g1), "geom2": _geom_ctx(m, g2), "pair": ip if ip >= 0 else None}
        if not ok:
            _unsupported_pair(m, out, (g1, t1), (g2, t2), ip, pair_ctx, bad_geom, off, adapt)
            continue
        if margin_check:
            _check_margin(m, out, g1, g2, ip, pair_ctx, off)
        if check_condim:
            condim = _pair_condim(m, g1, g2, ip)
            all_condims.add(condim)
            if condim == 1:
                condim1.append(pair_ctx)
    for g, pairs in bad_geom.items():
        out.append(_entry(
            "error", "MJX_GEOM_UNSUPPORTED",
            f"MJX cannot collide geoms of type {_enum_name(mujoco.mjtGeom, m.geom_type[g])}: {_geom_label(m, g)} "
            f"can collide with {len(pairs)} geom(s)",
            "set contype=\"0\" conaffinity=\"0\" on this geom, replace it by a primitive or mesh, or load with "
            "unsupported_contacts=\"exclude\" (drops exactly its pairs)", element="geom", geom=_geom_ctx(m, g),
            pairs=pairs, adapt=adapt))
    if check_condim and condim1:
        _condim1_entry(m, out, condim1, all_condims == {1})


def _unsupported_pair(m, out, gt1, gt2, ip, pair_ctx, bad_geom, off, adapt):
    """A pair MJX has no collider for: each geom type MJX cannot collide at all is gathered per geom (reported
    once, with its pairs), else the pair of types is reported."""
    (g1, t1), (g2, t2) = gt1, gt2
    unsupported = [g for g, t in (gt1, gt2) if t not in COLLIDABLE_GEOMS]
    for g in unsupported:
        bad_geom.setdefault(g, []).append(pair_ctx)
    if unsupported:
        return
    pair_fix = ("add <contact><exclude body1=.. body2=../></contact> for these bodies, change the geom types, "
                "or load with unsupported_contacts=\"exclude\" (drops exactly these geom pairs and logs each)")
    if off:
        pair_fix += "; contacts are disabled by <flag contact=\"disable\"/>, so adapt excludes them automatically"
    where = f" (explicit <pair> #{ip})" if ip >= 0 else ""
    out.append(_entry(
        "error", "MJX_COLLISION_PAIR_UNSUPPORTED",
        f"MJX has no collider for {_enum_name(mujoco.mjtGeom, t1)}-{_enum_name(mujoco.mjtGeom, t2)}: "
        f"{_geom_label(m, g1)} and {_geom_label(m, g2)} can collide{where}",
        pair_fix, element="geom pair", **pair_ctx, adapt=adapt))


def _check_margin(m, out, g1, g2, ip, pair_ctx, off):
    """MJX has no margins on mesh/height-field collisions."""
    margin = float(m.pair_margin[ip]) if ip >= 0 else float(m.geom_margin[g1] + m.geom_margin[g2])
    if margin == 0.0:
        return
    out.append(_entry(
        "error", "MJX_MARGIN_UNSUPPORTED",
        f"MJX does not implement margins on mesh/height-field collisions: {_geom_label(m, g1)} and "
        f"{_geom_label(m, g2)} have margin {margin:g}",
        "set margin=\"0\" on these geoms (or on their <pair>); this changes when contacts activate, so "
        "it is not adapted automatically" + ("; contacts are disabled by flag, so adapt zeroes the "
                                             "margins automatically" if off else ""),
        element="geom pair", **pair_ctx, margin=margin,
        adapt="automatic" if off else "none"))


def _condim1_entry(m, out, condim1, only1: bool):
    """MJX's make_data refuses condim=1 contacts with the elliptic cone."""
    out.append(_entry(
        "error", "MJX_CONDIM_UNSUPPORTED",
        f"MJX (make_data) refuses condim=1 contacts with the elliptic cone: {len(condim1)} geom pair(s), e.g. "
        f"{_geom_label(m, condim1[0]['geom1']['id'])} and {_geom_label(m, condim1[0]['geom2']['id'])}",
        "use cone=\"pyramidal\", or condim 3 or more on these geoms"
        + ("; every contact of this model is frictionless, where the cone type makes no difference, so "
           "adapt switches to the pyramidal cone" if only1 else
           "; not adapted automatically (other contacts have friction, whose cone would change)"),
        element="geom pair", pairs=condim1, adapt="automatic" if only1 else "none"))


def _check_ignored(m, out):
    """What put_model accepts but MJX later ignores or cannot run: warnings, not refusals."""
    o = m.opt
    if o.noslip_iterations > 0:
        out.append(_entry("warning", "MJX_FEATURE_IGNORED",
                          f"MJX has no noslip solver: noslip_iterations={o.noslip_iterations} is ignored, so "
                          "MJX's contacts may slip more than MuJoCo C's",
                          "set noslip_iterations=\"0\" to make MuJoCo C match MJX", element="option",
                          noslip_iterations=o.noslip_iterations))
    if int(o.integrator) == int(mujoco.mjtIntegrator.mjINT_DISCRETE):
        out.append(_entry("warning", "MJX_FEATURE_IGNORED",
                          "integrator 'discrete' passes put_model but mjx.step raises NotImplementedError "
                          "(mjx.forward and this harness's own integrators are unaffected)",
                          "use integrator=\"Euler\", \"RK4\" or \"implicitfast\" to step with MJX",
                          element="option", integrator="discrete"))
    if o.enableflags & mujoco.mjtEnableBit.mjENBL_SLEEP:
        out.append(_entry("warning", "MJX_FEATURE_IGNORED",
                          "MJX's JAX backend does not put bodies to sleep: the sleep flag is ignored",
                          "remove <flag sleep=\"enable\"/> to make MuJoCo C match MJX", element="option/flag",
                          flag="sleep"))


def check_mjx(model: mujoco.MjModel) -> list[dict]:
    """Every reason MJX (put_model + make_data, JAX backend) would refuse ``model``, plus warnings.

    Returns log entries: ``severity="error"`` for each refusal (``context["adapt"]`` says whether
    ``load_scene(mjx="adapt")`` fixes it: ``"automatic"``, ``"opt-in: ..."`` or ``"none"``), and
    ``severity="warning"`` for what MJX accepts but ignores. Works on any compiled ``MjModel``.
    """
    out: list[dict] = []
    _check_option(model, out)
    _check_collisions(model, out)
    _check_enums(model, out)
    _check_contact_sensors(model, out)
    _check_ignored(model, out)
    return out


def require_mjx_compatible(model: mujoco.MjModel, source: str = "MjModel") -> list[dict]:
    """Raise one ``SceneError`` listing every reason MJX would refuse ``model`` (for an MjModel that did not
    come through ``load_scene``); returns the warnings otherwise. Changes nothing."""
    entries = check_mjx(model)
    errors = [e for e in entries if e["severity"] == "error"]
    if errors:
        fixable = [e for e in errors if e["context"].get("adapt", "none") != "none"]
        msg = _refusal_message(errors, [], False)
        if fixable:
            msg += (f"\n  (load the MJCF with load_scene(..., mjx=\"adapt\") to fix "
                    f"{', '.join(sorted({e['code'] for e in fixable}))} automatically or by opt-in)")
        raise SceneError(source, msg, codes=_codes(errors))
    return entries


def is_refused(entries) -> bool:
    """True when the entries contain a refusal (severity ``"error"``)."""
    return any(e["severity"] == "error" for e in entries)


# ---- presentation and storage ------------------------------------------------------------------------
def format_compat_log(log) -> str:
    """Human-readable compatibility log (for ``mjharness inspect``); one entry per line, fix indented."""
    if not log:
        return "MJX compatibility: no changes, nothing to report"
    lines = [f"MJX compatibility log ({len(log)} entr{'y' if len(log) == 1 else 'ies'}):"]
    for e in log:
        lines.append(f"  {e['severity'].upper():7s} {e['code']}: {e['message']}")
        fix = e.get("context", {}).get("fix")
        if fix and e["severity"] != "info":
            lines.append(f"          fix: {fix}")
    return "\n".join(lines)


def compat_log_to_json(log) -> str:
    """The log as a JSON string (what ``/model/compat_log`` stores in HDF5)."""
    return json.dumps([_jsonable(e) for e in log], sort_keys=True)


def compat_log_from_json(text) -> list[dict]:
    """Inverse of ``compat_log_to_json`` (accepts ``str`` or ``bytes``)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    log = json.loads(text)
    if not isinstance(log, list) or not all(isinstance(e, dict) and {"severity", "code", "message", "context"}
                                            <= set(e) for e in log):
        raise ValueError("not an MJX compatibility log: expected a JSON list of {severity, code, message, context}")
    return log
