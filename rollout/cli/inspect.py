"""``mjharness inspect SCENE``: a scene's kinematic topology (body tree, loop closures, supernodes), its
named states (offsets into x and dx, joints) and its MJX log; ``--json`` gives the same as data.

    mjharness inspect [SCENE] [--json] [--mjx adapt|strict] [--quaternion-update quaternion|quaternion_qdot]

The topology needs MuJoCo only, so it is shown for models MJX refuses too; the state layout then says
why it is missing.
"""

from __future__ import annotations

import json

from .common import DEFAULT_SCENE, MJX_MODES, QUATERNION_UPDATES, print_layout, scene_label


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="print a scene's topology, state layout and MJX compatibility log",
                       description="Print SCENE's body tree, loop-closing equalities (cutjoints) and supernodes, its "
                                   "named states (offsets into x and dx, joints) and its MJX log.")
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE)
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    p.add_argument("--mjx", choices=MJX_MODES, default="adapt")
    p.add_argument("--quaternion-update", choices=QUATERNION_UPDATES, default="quaternion")
    p.set_defaults(func=command, subject=lambda args: f"scene {scene_label(args.scene)!r}")


def _states(args):
    """(MjScene, None) or (None, the reason MJX cannot run the scene)."""
    from mjharness.rollout.engine import resolve_scene
    from mjharness.scenes import SceneError

    try:
        return resolve_scene(args.scene, mjx=args.mjx, quaternion_update=args.quaternion_update), None
    except SceneError as e:
        return None, str(e)


def command(args) -> int:
    from mjharness.scenes import format_topology, parse_spec, topology_report
    from mjharness.scenes.compat import format_compat_log

    topo = topology_report(parse_spec(args.scene)[0].compile())
    scene, refused = _states(args)
    rows = [] if scene is None else [dict(d, joint=scene.joint_of(d["name"])) for d in scene.layout.describe()]
    if args.json:
        out = dict(scene=scene_label(args.scene), topology=topo, mjx_refused=refused, states=rows)
        if scene is not None:
            out.update(integrator=_own_integrator(scene), timestep=float(scene.model.opt.timestep),
                       compat_log=list(scene.compat_log))
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(format_topology(topo))
    print()
    if scene is None:
        print(f"{scene_label(args.scene)}: no state layout: {refused}")
        return 0
    layout = scene.layout
    print(f"{scene_label(args.scene)}: {len(rows)} states")
    print_layout(rows)
    print(f"totals: nq={scene.nq} nv={scene.nv} nu={scene.nu} na={scene.na}  x: {layout.size}  "
          f"dx: {layout.deriv_size}  noise slots: {layout.noise_slots}")
    print(f"integrator the scene names: {_own_integrator(scene)}, timestep {scene.model.opt.timestep:g}")
    print("MJX compatibility log:")
    print("  " + format_compat_log(scene.compat_log).replace("\n", "\n  "))
    return 0


def _own_integrator(scene) -> str:
    from mjharness.integrators import ContractError

    try:
        return scene.default_integrator
    except ContractError as e:  # a scene naming an integrator we do not implement still inspects
        return f"none we implement ({e})"
