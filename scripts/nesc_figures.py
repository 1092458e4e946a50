"""The figures of docs/nesc.md: every NESC case with RK4 at 0.01 s and an adaptive method, on MuJoCo C and MJX.

    python scripts/nesc_figures.py [--backends mujoco mjx] [--methods rk4 dormand_prince] [--rtol 1e-10]
                                   [--cases nesc_atmos_01 ...] [--json out.json]

Prints two Markdown tables: per case, backend and method, the columns passed and the tightest column (our
largest deviation from the tools' mean against the tools' spread, or the floor where every tool prints the same
value); then every column of every case for the first method on the first backend. The figures are
``run_nesc``'s, over each case's whole published duration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mjharness.rollout.verify.nesc import NESC_CASES, run_nesc


def _worst(columns: dict) -> tuple[str, dict]:
    """The column whose deviation is the largest fraction of its tolerance (0/0 counts as 0)."""
    def ratio(f):
        return f["deviation"] / f["tolerance"] if f["tolerance"] > 0 else 0.0
    name = max(columns, key=lambda c: ratio(columns[c]))
    return name, dict(columns[name], ratio=ratio(columns[name]))


def summary_rows(results) -> list[str]:
    rows = ["| case | backend | method | columns inside | tightest column | ours − tools' mean | tools' spread "
            "(floor) | ratio | run s |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    for r in results:
        cols = r.details["columns"]
        ok = sum(f["deviation"] <= f["tolerance"] for f in cols.values())
        name, f = _worst(cols)
        tol = f"{f['spread']:.2e}" if f["spread"] >= f["floor"] else f"({f['floor']:.0e})"
        rows.append(f"| {r.case} | {r.details['backend']} | {r.integrator} | {ok}/{len(cols)} | {name} "
                    f"[{f['unit']}] | {f['deviation']:.2e} | {tol} | {f['ratio']:.2f} | {r.seconds:.1f} |")
    return rows


def column_rows(results) -> list[str]:
    rows = ["| case | column | unit | ours − tools' mean | tools' spread | nearest tool: ours − it | pass on |",
            "|---|---|---|---:|---:|---:|---|"]
    for r in results:
        for i, (c, f) in enumerate(r.details["columns"].items()):
            on = "spread" if f["deviation"] <= f["spread"] else "floor" if f["deviation"] <= f["floor"] else "FAIL"
            rows.append(f"| {r.case if i == 0 else ''} | {c} | {f['unit']} | {f['deviation']:.2e} | "
                        f"{f['spread']:.2e} | {f['nearest']} {f['nearest_deviation']:.2e} | {on} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["mujoco", "mjx"])
    ap.add_argument("--methods", nargs="+", default=["rk4", "dormand_prince"])
    ap.add_argument("--rtol", type=float, default=1e-10, help="rtol = atol of the adaptive methods")
    ap.add_argument("--cases", nargs="+", default=list(NESC_CASES))
    ap.add_argument("--json", help="write every result (CaseResult.to_dict) here")
    args = ap.parse_args(argv)
    results = []
    for backend in args.backends:
        for name in args.cases:
            for method in args.methods:
                tol = {} if method == "rk4" else dict(rtol=args.rtol, atol=args.rtol)
                results.append(run_nesc(name, method, backend=backend, **tol))
                r = results[-1]
                print(f"{name} {backend} {r.integrator}: {'pass' if r.passed else 'FAIL'} ({r.seconds:.1f} s)",
                      file=sys.stderr)
    load = os.getloadavg()
    print(f"Measured {len(results)} runs; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} cores).\n")
    print("\n".join(summary_rows(results)) + "\n")
    first = [r for r in results if r.details["backend"] == args.backends[0] and r.integrator == args.methods[0]]
    print("\n".join(column_rows(first)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.to_dict() for r in results], fh, indent=1, default=float)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
