"""``mjharness probe SCENE``: the peak contacts and constraints of a short run, and the buffer sizes to use.

    mjharness probe box_on_plane --batch 16 --steps 500 [--seed 0] [--perturb 0.01] [--perturb-qpos 0]

The worlds start as ``mjharness run`` starts them (the same seed and perturbations) and are stepped by
MuJoCo C (``mj_step``, the scene's own integrator and timestep); every step's ``d.ncon``/``d.nefc`` counts.
It prints per world the peaks and MuJoCo C's contact/constraint-full warnings, then K for the
``contacts:K`` output and MJWarp's ``naconmax`` (all worlds) / ``njmax`` (per world), peak x headroom.
Exit status 1 when a world raised a MuJoCo C contact- or constraint-full warning, else 0.
"""

from __future__ import annotations

from .common import DEFAULT_SCENE, scene_label


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="peak contacts/constraints per world of a short run; buffer sizes to use",
                       description="Step SCENE for --batch worlds and --steps steps with MuJoCo C and report the "
                                   "peak contacts (d.ncon) and constraint rows (d.nefc) per world, with the "
                                   "contacts:K output and MJWarp naconmax/njmax sizes to use.")
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE, help=f"scene name or MJCF path (default {DEFAULT_SCENE})")
    p.add_argument("--batch", type=int, default=16, help="number of worlds (default 16)")
    p.add_argument("--steps", type=int, default=500, help="steps per world (default 500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial perturbation (as mjharness run)")
    p.add_argument("--perturb", type=float, default=0.01, help="std-dev of the initial qvel perturbation")
    p.add_argument("--perturb-qpos", type=float, default=0.0, help="std-dev of the initial qpos perturbation")
    p.add_argument("--headroom", type=float, default=1.5, help="factor on the peaks for the sizes (default 1.5)")
    p.add_argument("--worlds-shown", type=int, default=16, help="worlds listed one per line (default 16)")
    p.set_defaults(func=command, subject=lambda args: f"scene {scene_label(args.scene)!r}")


def probe(scene_src, batch: int, steps: int, *, seed=0, perturb=0.01, perturb_qpos=0.0, headroom=1.5):
    """(model, per-world peaks, advice) of a probe run (``adapters.contacts.probe_worlds``/``probe_advice``)."""
    from mjharness.adapters import MjScene
    from mjharness.adapters.contacts import probe_advice, probe_worlds
    from mjharness.adapters.outputs import _contact_pairs
    from mjharness.rollout.engine.plan import initial_states

    from .errors import CliError

    if batch < 1 or steps < 0 or not headroom >= 1:
        raise CliError(f"probe: --batch >= 1, --steps >= 0 and --headroom >= 1, got {batch}, {steps}, {headroom}")
    scene = MjScene(scene_src, backend="mujoco")
    x0 = initial_states(scene, batch, seed, perturb, perturb_qpos)
    m = scene.model
    peaks = probe_worlds(m, x0[:, scene.qpos_segment], x0[:, scene.qvel_segment], steps)
    return m, peaks, probe_advice(m, _contact_pairs(m), peaks, batch, headroom)


def report(peaks: dict, advice: dict, shown: int) -> list[str]:
    B = len(peaks["ncon"])
    lines = [f"  {'world':>5s} {'ncon':>6s} {'at step':>8s} {'nefc':>6s}  warnings"]
    for w in range(min(B, shown)):
        warn = ", ".join(f"{k} x{int(peaks[k][w])}" for k in ("contactfull", "cnstrfull") if peaks[k][w])
        lines.append(f"  {w:>5d} {int(peaks['ncon'][w]):>6d} {int(peaks['ncon_step'][w]):>8d} "
                     f"{int(peaks['nefc'][w]):>6d}  {warn or '-'}")
    if B > shown:
        lines.append(f"  ... {B - shown} more worlds")
    warned = [w for w in range(B) if peaks["contactfull"][w] or peaks["cnstrfull"][w]]
    a = advice
    lines += [f"peak over {B} worlds: ncon {a['peak_ncon']} (model bound {a['model_contact_bound']}), "
              f"nefc {a['peak_nefc']}",
              f"worlds with MuJoCo C buffer warnings: {warned or 'none'}",
              f"use: --outputs contacts:{a['contacts_K']}; warp: naconmax={a['naconmax']} (all {B} worlds), "
              f"njmax={a['njmax']} (per world); the model's own default for {B} worlds: "
              f"naconmax={a['model_warp']['naconmax']}, njmax={a['model_warp']['njmax']}"]
    return lines


def command(args) -> int:
    _, peaks, advice = probe(args.scene, args.batch, args.steps, seed=args.seed, perturb=args.perturb,
                             perturb_qpos=args.perturb_qpos, headroom=args.headroom)
    print(f"mjharness probe: {scene_label(args.scene)}, {args.batch} worlds x {args.steps} steps (MuJoCo C)")
    print("\n".join(report(peaks, advice, args.worlds_shown)))
    import numpy as np

    return int(np.any(peaks["contactfull"]) or np.any(peaks["cnstrfull"]))
