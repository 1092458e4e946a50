"""``mjharness fit FILE --params body_mass:link1 dof_damping:shoulder``: fit model parameters to a rollout file.

Prints the loss, each estimate and its change per iteration, and writes the estimates (and the history)
as JSON (``--json-out``, default FILE with ``.fit.json``).
"""

from __future__ import annotations

import json
import os


def add_parser(sub) -> None:
    p = sub.add_parser("fit", help="fit named model parameters to the states of a rollout file (optax)",
                       description="Fit named model parameters (field:name, e.g. body_mass:link1, dof_damping:shoulder)"
                                   " to the recorded states of FILE, all worlds at once.")
    p.add_argument("file")
    p.add_argument("--params", nargs="+", required=True, metavar="FIELD:NAME")
    p.add_argument("--start", nargs="*", default=[], metavar="FIELD:NAME=VALUE",
                   help="starting values (default: the file's model values)")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--integrator", default=None, help="default: the file's integrator")
    p.add_argument("--target", default="x", metavar="x|outputs:NAME",
                   help="what to fit: the file's states (x, default) or a recorded output, e.g. outputs:sensordata")
    p.add_argument("--json-out", default=None)
    p.add_argument("--every", type=int, default=10, help="print every k-th iteration")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file!r}")


def _start(items) -> dict:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep:
            raise ValueError(f"--start {it!r}: expected FIELD:NAME=VALUE")
        out[k] = float(v)
    return out


def command(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    from mjharness.rollout.fit import fit

    start = _start(args.start)
    unknown = sorted(set(start) - set(args.params))
    if unknown:
        raise ValueError(f"--start names {unknown}, which are not in --params")

    def show(rec):
        i = rec["iteration"]
        if i == 1 or i % max(1, args.every) == 0 or i == args.iterations:
            parts = [f"{p}={_fmt(v)} ({_fmt(rec['change'][p], sign=True)})" for p, v in rec["estimates"].items()]
            print(f"iter {i:4d}  loss {rec['loss']:.4e}  " + "  ".join(parts), flush=True)

    res = fit(args.file, args.params, integrator=args.integrator, iterations=args.iterations, lr=args.lr,
              start=start or None, callback=show, target=args.target)
    out = args.json_out or os.path.splitext(args.file)[0] + ".fit.json"
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print("estimates: " + ", ".join(f"{p}={_fmt(v)}" for p, v in res["params"].items()) + f"  -> {out}")
    return 0


def _fmt(v, sign=False):
    vals = v if isinstance(v, list) else [v]
    s = ",".join(f"{x:+.3e}" if sign else f"{x:.6g}" for x in vals)
    return s if len(vals) == 1 else f"[{s}]"
