"""``mjharness show FILE``: a rollout file's attributes, datasets, layout and status; ``--plot`` draws states.

    mjharness show rollout.h5 [--plot STATE ...] [--world I ...] [--png out.png]
"""

from __future__ import annotations

import json
import os

import numpy as np

from .common import print_layout
from .errors import CliError

MAX_PLOTTED_WORLDS = 8
MAX_LEGEND = 12


def add_parser(sub) -> None:
    p = sub.add_parser("show", help="print a rollout file's attributes and layout; plot states",
                       description="Print the attributes, datasets and state layout of FILE; --plot draws states.")
    p.add_argument("file")
    p.add_argument("--plot", nargs="+", metavar="STATE",
                   help="state names (see the layout), qpos / qvel / x, or recorded outputs: sensor:<name>, "
                   "<output> or <output>:<object> (xpos:<body>)")
    p.add_argument("--world", nargs="+", type=int, default=None,
                   help=f"worlds to plot (default: up to {MAX_PLOTTED_WORLDS})")
    p.add_argument("--png", help="output PNG (default FILE with .png)")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def _row(r) -> dict:
    return {k: (r[k].decode() if isinstance(r[k], bytes) else int(r[k])) for k in r.dtype.names}


def _dataset_line(name, obj) -> str:
    return (f"  /{name:16s} {obj.shape} {obj.dtype}" + (f" chunks={obj.chunks}" if obj.chunks else "")
            + (f" {obj.compression}" if obj.compression else "") + (" virtual" if obj.is_virtual else ""))


def command(args) -> int:
    from mjharness.integrators.status import status_name
    from mjharness.rollout.h5 import open_rollout

    with open_rollout(args.file) as f:
        a = f.attrs
        print(f"{args.file}: {f.samples} of {f.h5['x'].shape[0]} samples, "
              f"{'complete' if f.complete else 'INCOMPLETE (complete=False)'}")
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
        if args.plot:
            png = args.png or os.path.splitext(args.file)[0] + ".png"
            _plot(f, args.plot, args.world, png)
            print(f"plot: {png}")
    return 0


def _series(f, names) -> list:
    out = []
    for name in names:
        if name in ("qpos", "qvel", "x"):
            if name != "x" and name not in f.h5:
                raise CliError(f"{f.path}: no /{name} in this file")
            out.append((name, getattr(f, name), None))
        elif name.startswith("sensor:") or name in f.output_names or name.split(":")[0] in f.output_names:
            v = _output_series(f, name)
            out.append((name, v, _component_labels(f, name, v.shape[2])))
        else:
            v = f.state(name)  # KeyError naming the state and the layout: a user error
            out.append((name, v.reshape(v.shape[:2] + (-1,)), None))
    return out


def _component_labels(f, name, n: int) -> list | None:
    """The output's last dimension scale (``x y z``, sensor columns), when it labels the plotted columns."""
    ds = f.h5["outputs"].get(name.split(":")[0] if ":" in name and name not in f.output_names else name)
    if ds is None or ds.ndim < 3 or not len(ds.dims[ds.ndim - 1]):
        return None
    labels = [x.decode() if isinstance(x, bytes) else str(x) for x in ds.dims[ds.ndim - 1][0][()]]
    return labels if len(labels) == n else None


def _output_series(f, name) -> np.ndarray:
    """``sensor:<name>``, a recorded output ``<field>``, or one row of it ``<field>:<object>`` (xpos:<body>)."""
    if name.startswith("sensor:"):
        if name in f.output_names:
            v = f.output(name)
        else:
            try:
                v = f.sensor(name[7:])
            except KeyError as e:
                raise CliError(str(e.args[0])) from None
    elif name in f.output_names:
        v = f.output(name)
    else:
        field, obj = name.split(":", 1)
        ds = f.h5["outputs"][field]
        labels = [x.decode() if isinstance(x, bytes) else str(x) for x in ds.dims[2][0][()]] if \
            len(ds.dims[2]) else []
        if obj not in labels:
            raise CliError(f"{f.path}: output {field!r} has no row {obj!r} (rows: {labels})")
        v = f.output(field)[:, :, labels.index(obj)]
    return v.reshape(v.shape[:2] + (-1,))


def _plot(f, names, worlds, png) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    B = f.h5["x"].shape[1]
    worlds = list(range(min(B, MAX_PLOTTED_WORLDS))) if worlds is None else worlds
    for w in worlds:
        if not 0 <= w < B:
            raise CliError(f"--world {w}: the file has worlds 0..{B - 1}")
    series = _series(f, names)
    t = f.time
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), sharex=True, squeeze=False)
    for ax, (name, v, comps) in zip(axes[:, 0], series):
        legend = len(worlds) * v.shape[2] <= MAX_LEGEND
        for w in worlds:
            for c in range(v.shape[2]):
                ax.plot(t, v[:, w, c], lw=0.8, label=f"w{w}[{comps[c] if comps else c}]" if legend else None)
        ax.set_ylabel(name)
        if legend:
            ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("time [s]")
    fig.suptitle(os.path.basename(f.path))
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
