"""``mjharness fit FILE... --params body_mass:link1 dof_damping:shoulder``: fit model parameters to rollout files.

Prints the cost and each estimate per iteration, then a table of estimates with standard errors, 95 % intervals
and the unidentifiable flag, the condition number and the residuals' statistics, and writes the whole result
as JSON (``--json-out``, default FILE with ``.fit.json``).
"""

from __future__ import annotations

import json
import os


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="fit named model parameters to a rollout file (bounded least squares, with "
                                   "confidence intervals)",
                       description="Fit named model parameters (field:name, e.g. body_mass:link1, dof_damping:shoulder)"
                                   " to the recorded states or outputs of FILE, all worlds at once, by bounded "
                                   "Levenberg-Marquardt with the exact Jacobian; report 95 %% intervals.")
    p.add_argument("file", nargs="+", help="one rollout file, or several fitted jointly")
    p.add_argument("--params", nargs="+", required=True, metavar="FIELD:NAME")
    p.add_argument("--start", nargs="*", default=[], metavar="FIELD:NAME=VALUE",
                   help="starting values (default: the file's model values)")
    p.add_argument("--per-file", nargs="*", default=[], metavar="FIELD:NAME",
                   help="with several files: parameters fitted once per file (the others are shared)")
    p.add_argument("--bounds", nargs="*", default=[], metavar="FIELD:NAME=LO:HI",
                   help="bounds (default: 0 below for fields that cannot be negative)")
    p.add_argument("--noise", type=float, default=None, metavar="SIGMA",
                   help="measurement noise std of the target (default: estimated from the fit)")
    p.add_argument("--window", nargs=2, type=float, default=None, metavar=("T_START", "T_END"),
                   help="fit only the recorded samples between these times [s]")
    p.add_argument("--iterations", type=int, default=100, help="the solver's iteration limit")
    p.add_argument("--integrator", default=None, help="default: the file's integrator")
    p.add_argument("--target", default="x", metavar="x|outputs:NAME",
                   help="what to fit: the file's states (x, default) or a recorded output, e.g. outputs:sensordata")
    p.add_argument("--jacobian", default="auto", choices=("auto", "exact", "differences"),
                   help="exact (through MJX), differences (batched finite differences of rollouts) or auto: exact "
                        "on an accelerator, differences on MuJoCo C on a CPU (docs/fit.md)")
    p.add_argument("--json-out", default=None)
    p.add_argument("--report", default=None, metavar="DIR",
                   help="write a report: fit.h5 (result and inputs), plots of parameters, residuals and predictions, "
                        "index.html")
    p.add_argument("--every", type=int, default=1, help="print every k-th iteration")
    p.set_defaults(func=command, subject=lambda args: f"file {', '.join(args.file)!r}")


def _pairs(items, flag: str, parse) -> dict:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep:
            raise ValueError(f"{flag} {it!r}: expected FIELD:NAME=VALUE")
        try:
            out[k] = parse(v)
        except ValueError:
            raise ValueError(f"{flag} {it!r}: cannot read {v!r}") from None
    return out


def _range(v: str) -> tuple[float, float]:
    lo, sep, hi = v.partition(":")
    if not sep:
        raise ValueError(v)
    return float(lo), float(hi)


def command(args) -> int:
    from mjharness.rollout.fit import fit
    from mjharness.rollout.fit_report import fmt, summary_lines

    start = _pairs(args.start, "--start", float)
    bounds = _pairs(args.bounds, "--bounds", _range)
    for flag, given in (("--start", start), ("--bounds", bounds)):
        unknown = sorted(set(given) - set(args.params))
        if unknown:
            raise ValueError(f"{flag} names {unknown}, which are not in --params")

    def show(rec):
        i = rec["iteration"]
        if i == 1 or i % max(1, args.every) == 0:
            parts = [f"{p}={fmt(v)}" for p, v in rec["estimates"].items()]
            print(f"iter {i:4d}  cost {rec['cost']:.4e}  " + "  ".join(parts), flush=True)

    files = args.file[0] if len(args.file) == 1 else args.file
    res = fit(files, args.params, per_file=args.per_file, window=args.window, integrator=args.integrator,
              iterations=args.iterations, bounds=bounds or None, noise=args.noise, start=start or None, callback=show,
              target=args.target, report=args.report, jacobian=args.jacobian)
    out = args.json_out or os.path.splitext(args.file[0])[0] + ".fit.json"
    with open(out, "w") as f:
        json.dump(res.to_dict(), f, indent=1)
    for line in summary_lines(res):
        print(line)
    print(f"-> {out}" + (f", report in {args.report}" if args.report else ""))
    return 0
