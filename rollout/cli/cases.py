"""``mjharness cases``: the check-case suite (small scenes with analytic answers) as a table.

    mjharness cases                         # every case with its documented integrator and step
    mjharness cases dzhanibekov free_fall   # some cases
    mjharness cases --all-integrators       # also every other registered fixed-step method (stochastic
                                            # ones for the OU case), documented but not gated
    mjharness cases --list | --json out.json | --duration 2.0
    mjharness cases --nesc                  # NASA's NESC 2015 atmospheric cases against the six tools' data
    mjharness cases nesc_atmos_06           # one of them (nesc_atmos_01 ... nesc_atmos_10), RK4 and Dormand-Prince
    mjharness cases --cases-dir DIR atmos_x # a NESC case file DIR/atmos_x.json naming its tools' CSVs
    mjharness cases --nesc --backend mjx    # the NESC cases on MJX (float64)

Exit status 0 when every gated case passes, 1 when one fails, 2 on an error.
"""

from __future__ import annotations

import json
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("cases", help="run the check-case suite (analytic references) and print a table",
                       description="Run the check cases of data/cases with their documented integrator and step; "
                                   "print case, metric, integrator, max error, tolerance, pass/fail; exit 1 "
                                   "when a case fails.")
    p.add_argument("names", nargs="*", help="cases to run (default all; see --list)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--all-integrators", action="store_true",
                   help="also run the other fixed (or stochastic) methods, documented but not gated")
    p.add_argument("--duration", type=float, help="override every case's horizon [s] (shorter: quicker)")
    p.add_argument("--nesc", action="store_true",
                   help="run the NESC 2015 atmospheric check cases (nesc_atmos_01 ...: RK4 at 0.01 s, each column "
                        "against the published tools' spread); they also run by name")
    p.add_argument("--backend", choices=("mujoco", "mjx"), default="mujoco",
                   help="backend of the NESC cases (default mujoco: MuJoCo C; mjx: float64)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--cases-dir", help="directory of case files (default: the packaged data/cases, or "
                                       "MJHARNESS_CASES_DIR)")
    p.set_defaults(func=command, subject=lambda args: "case(s) " + (" ".join(args.names) or "(all)"))


def command(args) -> int:
    from mjharness.rollout.verify.cases import format_table, list_cases, load_case, run_suite
    from mjharness.rollout.verify.nesc import NESC_CASES, nesc_table
    from mjharness.rollout.verify.nesc_case import load_nesc, nesc_path

    nesc = list(NESC_CASES) if args.nesc else []
    names = args.names + nesc if args.names or nesc else list_cases(args.cases_dir)

    def is_nesc(n):
        return nesc_path(n, args.cases_dir) is not None

    if args.list:
        for n in (n for n in names if not is_nesc(n)):
            c = load_case(n, args.cases_dir)
            print(f"{n:26s} {c['integrator']:16s} dt={c['dt']:<8g} {c['duration']:>5g} s  {c['feature']}")
        for n in [n for n in names if is_nesc(n) and n not in NESC_CASES] + list(NESC_CASES):
            c = load_nesc(n, args.cases_dir)
            print(f"{n:26s} {'rk4, dopri5':16s} dt={0.01:<8g} {c['run']['duration_s']:>5g} s  "
                  f"NESC 2015: {c.get('title', c['case'])}")
        return 0
    print(f"mjharness cases: {len(names)} case(s)" + (" x all methods" if args.all_integrators else ""),
          file=sys.stderr)

    def progress(r):
        print(f"  {r.case} / {r.integrator}: {r.seconds:.1f} s", file=sys.stderr)

    results = run_suite(names, args.all_integrators, args.duration, cases_dir=args.cases_dir, progress=progress,
                        backend=args.backend)
    print(format_table(results))
    nesc_results = [r for r in results if "columns" in r.details]
    if nesc_results:
        print(nesc_table(nesc_results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.to_dict() for r in results], fh, indent=1, default=float)
    gated = [r for r in results if r.gated]
    failed = [r for r in gated if not r.passed]
    print(f"{len(gated) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
