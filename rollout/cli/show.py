"""``mjharness show FILE``: a rollout file's attributes, datasets, layout and status; ``--plot`` draws states.

    mjharness show rollout.h5 [--plot NAME ...] [--worlds 0:8 | I ...] [--band] [--png out.png]

The plots are drawn by ``plots.py`` (units, component legends, the worlds in the title, mean ± band).
"""

from __future__ import annotations

import json
import os

from . import plots
from .common import check_folder, import_mujoco, print_layout
from .rerun import rerun_lines
from .summary import episode_lines, flagged_lines


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="print a rollout file's attributes and layout; plot states",
                       description="Print the attributes, datasets and state layout of FILE; --plot draws states.")
    p.add_argument("file")
    p.add_argument("--plot", nargs="+", metavar="STATE",
                   help="state names (see the layout), qpos / qvel / x, or recorded outputs: sensor:<name>, "
                   "<output> or <output>:<object> (xpos:<body>)")
    p.add_argument("--worlds", "--world", nargs="+", dest="worlds", default=None, metavar="W",
                   help=f"worlds to plot: indices, ranges or lists (3, 0:8, 0,3,7; default: the first "
                   f"{plots.MAX_PLOTTED_WORLDS}, or all with --band)")
    p.add_argument("--band", action="store_true", help="plot the mean over the worlds with a ± 1 std band")
    p.add_argument("--png", help="output PNG (default FILE with .png)")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def _row(r) -> dict:
    return {k: (r[k].decode() if isinstance(r[k], bytes) else int(r[k])) for k in r.dtype.names}


def _dataset_line(name, obj) -> str:
    return (f"  /{name:16s} {obj.shape} {obj.dtype}" + (f" chunks={obj.chunks}" if obj.chunks else "")
            + (f" {obj.compression}" if obj.compression else "") + (" virtual" if obj.is_virtual else ""))


def param_lines(f) -> list[str]:
    """The per-world model fields: per randomize KEY its distribution and min/mean/max over the worlds (and the
    key's elements), then the other per-world fields (explicit, derived by mj_setConst) by shape."""
    params = f.model_params
    if not params:
        return []
    import numpy as np

    from mjharness.rollout.engine.randomize import resolve_targets

    rand = f.attrs.get("randomize") or {}
    rand = json.loads(rand) if isinstance(rand, str) else rand
    lines = [f"model_params: {len(params)} per-world field(s)"]
    if f.attrs.get("system"):  # keys name System members ("arm.body_mass:link1"); /model is only the first one's
        for key, dist in rand.items():
            field = key.partition(":")[0].partition("[")[0]
            v = np.asarray(params.get(field, np.zeros(0)))
            stats = f"min {v.min():.6g}  mean {v.mean():.6g}  max {v.max():.6g} (whole field {field})" if v.size else ""
            lines.append(f"  {key:28s} {dist:24s} {stats}")
        rand = {}
    for t in resolve_targets(f.model(), rand) if rand else ():
        v = np.asarray(params[t.field]).reshape(len(params[t.field]), -1)[:, t.flat]
        lines.append(f"  {t.key:28s} {rand[t.key]:24s} min {v.min():.6g}  mean {v.mean():.6g}  max {v.max():.6g}")
    drawn = {t.field for t in resolve_targets(f.model(), rand)} if rand else set()
    rest = [f"{k} {tuple(np.shape(v))}" for k, v in params.items() if k not in drawn]
    if rest:
        lines.append("  also per world: " + ", ".join(rest))
    return lines


def flag_lines(f) -> list[str]:
    """The contact overflow of the file's contacts output(s), recomputed from their ``overflow`` column (as
    ``mjharness run``'s summary reports it): per output, the flagged worlds or that none was flagged."""
    from mjharness.rollout.h5.flags import flagged_in_file, flagging_outputs


    names = flagging_outputs(f)
    if not names:
        return []
    flagged = flagged_in_file(f)
    return ["contacts:"] + flagged_lines(flagged) + [
        f"  {name}: no contact overflow ({f.samples} rows x {f.batch} worlds)" for name in names if name not in flagged]


def command(args) -> int:
    from mjharness.integrators.status import status_name
    from mjharness.rollout.h5 import open_rollout

    with open_rollout(args.file) as f:
        if args.plot:  # every --plot argument checked before anything is printed
            plots.check_names(f, args.plot)
            plots.parse_worlds(args.worlds, f.batch)
            png = args.png or os.path.splitext(args.file)[0] + ".png"
            check_folder(png, "--png")
        import_mujoco(args)
        a = f.attrs
        print(f"{args.file}: {f.samples} of {f.h5['x'].shape[0]} samples, "
              f"{'complete' if f.complete else 'INCOMPLETE (complete=False)'}")
        print("  chunk checksums and content digest: `mjharness verify` checks them" if f.checksummed else
              "  no checksums (written before format integrity 1): `mjharness verify` finds unreadable data only")
        print("attributes:")
        for k in sorted(a):
            v = json.dumps(a[k]) if isinstance(a[k], dict) else a[k]
            print(f"  {k:18s} {v}")
        print("datasets:")
        f.h5.visititems(lambda name, obj: print(_dataset_line(name, obj)) if hasattr(obj, "shape") else None)
        print("layout:")
        print_layout([_row(r) for r in f.layout_table])
        status = f.status
        bad = [i for i, code in enumerate(status) if code]
        print(f"status: {status.size - len(bad)}/{status.size} ok"
              + "".join(f", world {i}: {status_name(status[i])} at step {int(f.status_step[i])}" for i in bad[:5]))
        for line in flag_lines(f):
            print(line)
        for line in episode_lines(args.file):
            print(line)
        for line in param_lines(f):
            print(line)
        for line in rerun_lines(f):
            print(line)
        if args.plot:
            plots.write_png(f, args.plot, png, plots.parse_worlds(args.worlds, f.batch), args.band)
            print(f"plot: {png}")
    return 0
