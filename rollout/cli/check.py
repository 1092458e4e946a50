"""``mjharness check FILE``: cross-check a rollout file against the reference model, MuJoCo C or a file.

    mjharness check run.h5 [--reference model|mujoco|REF.h5] [--fields ...] [--tol 1e-8 | --tol FIELD=1e-8 ...]
                           [--energy-tol X] [--momentum-tol X] [--out PREFIX] [--no-plot] [--save-reference PEER.h5]

Exit status 0 when every tolerance holds, 1 when one is exceeded (or the file is corrupt), 2 on an error.
Without ``--tol`` the documented default tolerances apply (``verify.comparison.DEFAULT_TOL``); the MuJoCo C
reference runs the file's own scheme unless ``--mujoco-integrator`` says otherwise.
"""

from __future__ import annotations

import os

from .errors import CliError


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="cross-check a rollout file against the reference model, MuJoCo C or a file",
                       description="Re-simulate FILE's initial states with the reference rigid-body model "
                                   "(single free body), MuJoCo C, or read a reference file; report the max "
                                   "difference per field and world, energy and angular-momentum drift; exit 1 "
                                   "when a tolerance is exceeded.")
    p.add_argument("file")
    p.add_argument("--reference", default=None,
                   help="'model' (the independent rigid-body model: a single free body), 'mujoco' (MuJoCo C) or a "
                        "reference rollout file; default: the model where it covers the scene, else MuJoCo C "
                        "(the choice is printed)")
    p.add_argument("--fields", nargs="+", help="states to compare (layout names, qpos, qvel); default all")
    p.add_argument("--tol", nargs="+", metavar="TOL|FIELD=TOL",
                   help="max allowed |diff| (one value or per field); default: documented tolerances per field "
                        "kind (docs/files.md), tight against MuJoCo C on the file's own scheme")
    p.add_argument("--energy-tol", type=float, help="max allowed |E(t) - E(0)|")
    p.add_argument("--momentum-tol", type=float, help="max allowed |L(t) - L(0)| (about the centre of mass)")
    p.add_argument("--mujoco-integrator", default=None, choices=("RK4", "Euler", "implicit", "implicitfast"),
                   help="integrator of the MuJoCo C peer (--reference mujoco); default the file's own scheme "
                        "(semi_implicit_euler: Euler, rk4: RK4, implicit_fast: implicitfast; others: RK4)")
    p.add_argument("--ref-dt", type=float, default=1e-3,
                   help="longest step of the reference model (the file's dt is split into equal substeps; 1e-3)")
    p.add_argument("--no-invariants", action="store_true", help="skip energy/momentum")
    p.add_argument("--out", help="report prefix: writes PREFIX.json and PREFIX.png (default FILE-check)")
    p.add_argument("--no-plot", action="store_true", help="JSON only")
    p.add_argument("--save-reference", metavar="REF.h5", help="also write the reference trajectory as a rollout file")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def parse_tol(values):
    """``--tol``: one number for every field, or FIELD=NUMBER pairs (a dict); None when not given."""
    if not values:
        return None
    per_field, scalar = {}, None
    for v in values:
        k, _, t = v.rpartition("=")
        try:
            if k:
                per_field[k] = float(t)
            else:
                scalar = float(t)
        except ValueError:
            raise CliError(f"--tol {v!r}: give a number or FIELD=NUMBER") from None
    if per_field and scalar is not None:
        raise CliError("give either one --tol for every field or FIELD=TOL pairs, not both")
    return per_field or scalar


def command(args) -> int:
    from mjharness.rollout.h5 import CorruptFileError
    from mjharness.rollout.verify import crosscheck

    if args.reference is None:
        args.reference, why = default_reference(args.file)
        print(f"reference: {why}")
    out = args.out or os.path.splitext(args.file)[0] + "-check"
    ref_dt = args.ref_dt if args.ref_dt and args.ref_dt > 0 else None
    try:
        rep = _crosscheck(crosscheck, args, out, ref_dt)
    except CorruptFileError as e:  # a damaged file fails the check (it is not an error of the command)
        print(f"{args.file}: FAIL: the file is corrupt: {e}")
        return 1
    print(rep.summary())
    print(f"report: {out}.json" + ("" if args.no_plot else f", {out}.png"))
    return 0 if rep.passed else 1


def default_reference(path: str) -> tuple[str, str]:
    """("model" | "mujoco", why): the independent reference model when it covers the file's scene (a single
    free body without actuators, contacts with others, ...), else MuJoCo C on the file's own scheme."""
    from mjharness.rollout.h5 import open_rollout
    from mjharness.rollout.verify.recorded import CrossCheckError
    from mjharness.rollout.verify.reference_model import single_free_body

    with open_rollout(path) as f:
        model = f.model()
    try:
        single_free_body(model, path)
    except CrossCheckError as e:
        reason = str(e).partition("scene is not one: ")[2].partition(". Give")[0] or str(e)
        return "mujoco", (f"MuJoCo C (--reference mujoco), since the independent rigid-body model covers a single "
                          f"free body and this scene is not one: {reason}")
    return "model", "the independent rigid-body model (--reference model): the scene is a single free body"


def _crosscheck(crosscheck, args, out, ref_dt):
    return crosscheck(args.file, reference=args.reference, fields=args.fields, tol=parse_tol(args.tol),
                      energy_tol=args.energy_tol, momentum_tol=args.momentum_tol, invariants=not args.no_invariants,
                      out=out, plot=not args.no_plot, mujoco_integrator=args.mujoco_integrator,
                      save_reference=args.save_reference, ref_dt=ref_dt)
