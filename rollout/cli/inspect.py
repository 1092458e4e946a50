"""``mjharness inspect SCENE``: what a scene holds and whether ``run`` would take it.

    mjharness inspect [SCENE] [--json] [--mjx adapt|strict] [--backend auto|mujoco|mjx|warp]
                      [--unsupported-contacts refuse|exclude] [--quaternion-update quaternion|quaternion_qdot]

It lists the model's sensors (name, MuJoCo type, object, adr, dim), actuators (target, dynamics, gain,
bias, ctrl range), sites and cameras, its kinematic topology (body tree, loop closures, supernodes), its
named states (offsets into x and dx, joints), the integrator it names and its MJX log.

It loads the scene with the function ``run`` uses (``resolve_run_scene``, same options, same defaults), so
it exits like ``run`` would on the model: 0, or 2 with run's own message when run would refuse it (an MJX
refusal under ``--mjx strict``, a model MuJoCo cannot compile, a backend the model cannot use). What needs
MuJoCo only (sensors, actuators, sites, cameras, topology) is still printed before the refusal when the
model compiles.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

from .common import AUTO, CONTACT_MODES, DEFAULT_SCENE, MJX_MODES, QUATERNION_UPDATES, print_layout, scene_label

if TYPE_CHECKING:  # MuJoCo loads when the command runs, not with the parser (mjharness --help stays light)
    import mujoco


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="print a scene's sensors, actuators, sites, cameras, topology, states and "
                       "MJX log; exit 2 where run would refuse it",
                       description="Print SCENE's sensors, actuators, sites and cameras, its body tree, loop-closing "
                                   "equalities (cutjoints) and supernodes, its named states and its MJX log. Loads "
                                   "the scene as `mjharness run` does: exit 2, with run's message, where run would "
                                   "refuse it.")
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE)
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    p.add_argument("--mjx", choices=MJX_MODES, default=MJX_MODES[0],
                   help="as for run: adapt (apply and log MJX substitutions) or strict (refuse what MJX refuses)")
    p.add_argument("--backend", default=AUTO, help="as for run (default auto)")
    p.add_argument("--unsupported-contacts", choices=CONTACT_MODES, default=CONTACT_MODES[0],
                   help="as for run: exclude drops exactly the geom pairs MJX cannot collide")
    p.add_argument("--quaternion-update", choices=QUATERNION_UPDATES, default="quaternion")
    p.add_argument("--measure", action="store_true",
                   help="also measure the known MJX physics differences on the scene's own state (mjx.forward vs "
                        "mj_forward qacc; compiles mjx.forward once: seconds to a minute)")
    p.set_defaults(func=command, subject=lambda args: f"scene {scene_label(args.scene)!r}")


def _name(m, obj, i: int, prefix: str) -> str:
    import mujoco

    return mujoco.mj_id2name(m, obj, int(i)) or f"{prefix}{int(i)}"


def _enum(enum, value: int, prefix: str) -> str:
    return enum(int(value)).name.removeprefix(prefix).lower()


def sensors(m: mujoco.MjModel) -> list[dict]:
    """name, type (as MuJoCo spells it), object, adr, dim: the file's ``/sensors`` table."""
    from mjharness.adapters.outputs import sensor_table

    return [{k: r[k] for k in ("name", "type", "object", "adr", "dim")} for r in sensor_table(m)]


@functools.cache
def _trn_obj() -> dict:
    """Transmission type -> (object type of its target, word)."""
    import mujoco

    obj, trn = mujoco.mjtObj, mujoco.mjtTrn
    return {trn.mjTRN_JOINT: (obj.mjOBJ_JOINT, "joint"), trn.mjTRN_JOINTINPARENT: (obj.mjOBJ_JOINT, "joint"),
            trn.mjTRN_TENDON: (obj.mjOBJ_TENDON, "tendon"), trn.mjTRN_SITE: (obj.mjOBJ_SITE, "site"),
            trn.mjTRN_BODY: (obj.mjOBJ_BODY, "body"), trn.mjTRN_SLIDERCRANK: (obj.mjOBJ_SITE, "site")}


def actuators(m: mujoco.MjModel) -> list[dict]:
    """name, transmission target (``joint:elbow``), dynamics/gain/bias types, ctrl range (None if unlimited)."""
    import mujoco

    objs = mujoco.mjtObj
    rows = []
    for i in range(m.nu):
        obj, kind = _trn_obj().get(mujoco.mjtTrn(int(m.actuator_trntype[i])), (None, "?"))
        target = _name(m, obj, m.actuator_trnid[i, 0], kind) if obj is not None else "?"
        rows.append(dict(name=_name(m, objs.mjOBJ_ACTUATOR, i, "actuator"), target=f"{kind}:{target}",
                         dyn=_enum(mujoco.mjtDyn, m.actuator_dyntype[i], "mjDYN_"),
                         gain=_enum(mujoco.mjtGain, m.actuator_gaintype[i], "mjGAIN_"),
                         bias=_enum(mujoco.mjtBias, m.actuator_biastype[i], "mjBIAS_"),
                         ctrlrange=[float(v) for v in m.actuator_ctrlrange[i]] if m.actuator_ctrllimited[i] else None))
    return rows


def sites(m: mujoco.MjModel) -> list[dict]:
    import mujoco

    objs = mujoco.mjtObj
    return [dict(name=_name(m, objs.mjOBJ_SITE, i, "site"), body=_name(m, objs.mjOBJ_BODY, m.site_bodyid[i], "body"),
                 type=_enum(mujoco.mjtGeom, m.site_type[i], "mjGEOM_")) for i in range(m.nsite)]


def cameras(m: mujoco.MjModel) -> list[dict]:
    import mujoco

    objs = mujoco.mjtObj
    return [dict(name=_name(m, objs.mjOBJ_CAMERA, i, "camera"), body=_name(m, objs.mjOBJ_BODY, m.cam_bodyid[i], "body"),
                 mode=_enum(mujoco.mjtCamLight, m.cam_mode[i], "mjCAMLIGHT_")) for i in range(m.ncam)]


def elements(m: mujoco.MjModel) -> dict:
    """Everything above, by kind."""
    return dict(sensors=sensors(m), actuators=actuators(m), sites=sites(m), cameras=cameras(m))


def format_elements(elems: dict) -> str:
    """One block per kind: a header with the count, then one aligned row per element."""
    out = []
    for kind, rows in elems.items():
        out.append(f"{kind} ({len(rows)})" + (":" if rows else ""))
        cols = list(rows[0]) if rows else []
        cells = [[("-" if r[c] is None else str(r[c])) for c in cols] for r in rows]
        widths = [max(len(c), *(len(row[k]) for row in cells)) for k, c in enumerate(cols)]
        if rows:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
        out += ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(out)


def _compile(scene):
    """The plain MuJoCo model (no MJX checks), or None when MuJoCo itself cannot compile the scene."""
    from mjharness.scenes import SceneError, parse_spec

    try:
        return parse_spec(scene)[0].compile()
    except (SceneError, ValueError, OSError):
        return None


def _resolve(args):
    """(scene, None) as run would build it, or (None, the exception run would fail with)."""
    from mjharness.rollout.engine.plan import resolve_run_scene

    try:
        scene, _ = resolve_run_scene(args.scene, mjx=args.mjx, quaternion_update=args.quaternion_update,
                                     backend=args.backend, unsupported_contacts=args.unsupported_contacts)
        return scene, None
    except Exception as e:  # noqa: BLE001 -- re-raised below, after what MuJoCo alone can show
        return None, e


def command(args) -> int:
    from mjharness.scenes import format_topology, topology_report

    scene, refusal = _resolve(args)
    model = scene.model if scene is not None else _compile(args.scene)
    if model is None:
        raise refusal  # MuJoCo cannot compile it: run's own error, nothing to list
    elems, topo = elements(model), topology_report(model)
    rows = [] if scene is None else [dict(d, joint=scene.joint_of(d["name"])) for d in scene.layout.describe()]
    if args.json:
        out = dict(scene=scene_label(args.scene), **elems, topology=topo, states=rows,
                   refused=None if refusal is None else str(refusal))
        if scene is not None:
            out.update(backend=scene.backend, integrator=_own_integrator(scene),
                       timestep=float(model.opt.timestep), compat_log=list(scene.compat_log),
                       mjx_physics=_physics(model, args))
        print(json.dumps(out, indent=1, default=str))
    else:
        print(f"{scene_label(args.scene)}: nq={model.nq} nv={model.nv} nu={model.nu} na={model.na} "
              f"nbody={model.nbody} ngeom={model.ngeom}")
        print(format_elements(elems))
        print()
        print(format_topology(topo))
        if scene is not None:
            _print_states(scene, rows)
            from mjharness.scenes.mjx_physics import format_differences

            print("  " + format_differences(_physics(model, args)).replace("\n", "\n  "))
    if refusal is not None:
        raise refusal  # exit 2 with run's message (the CLI's error handler prints it)
    return 0


def _physics(model, args) -> list[dict]:
    """The known MJX physics differences of the scene (``scenes/mjx_physics.py``), measured with --measure."""
    from mjharness.scenes.mjx_physics import flagged_pairs, known_differences, measure

    if not flagged_pairs(model):
        return []
    return known_differences(model, measure(model) if args.measure else None)


def _print_states(scene, rows) -> None:
    from mjharness.scenes.compat import format_compat_log

    layout = scene.layout
    print()
    print(f"{len(rows)} states (backend {scene.backend}):")
    print_layout(rows)
    print(f"totals: x: {layout.size}  dx: {layout.deriv_size}  noise slots: {layout.noise_slots}")
    print(f"integrator the scene names: {_own_integrator(scene)}, timestep {scene.model.opt.timestep:g}")
    print("MJX compatibility log:")
    print("  " + format_compat_log(scene.compat_log).replace("\n", "\n  "))


def _own_integrator(scene) -> str:
    from mjharness.integrators import ContractError

    try:
        return scene.default_integrator
    except ContractError as e:  # a scene naming an integrator we do not implement still inspects
        return f"none we implement ({e})"
