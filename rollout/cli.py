"""The ``mjharness`` command line: ``run``, ``show``, ``inspect`` (+ ``check``, ``cases``, ``bench`` when present).

    mjharness run [SCENE] --integrator rk4 --dt 0.002 --steps 1000 --batch 16 --record-every 10 \\
                  --seed 0 --out rollout.h5
    mjharness run --resume rollout.h5 [--steps N]       # continue a killed or shorter run
    mjharness show rollout.h5 [--plot STATE ...] [--world I ...] [--png out.png]
    mjharness inspect SCENE

With no arguments ``mjharness run`` rolls out the bundled default scene (``DEFAULT_SCENE``) to
``rollout.h5`` in the current directory; if that file exists it writes ``rollout-1.h5``,
``rollout-2.h5``, ... instead (never replacing a file it was not told to). An explicit ``--out`` that
exists is refused unless ``--overwrite``.

Adding a subcommand: a module exposing ``add_parser(subparsers)``, which calls
``subparsers.add_parser(name, ...)`` and ``set_defaults(func=handler)`` with ``handler(args) -> int``
(the exit status), listed in ``SUBCOMMANDS``. Modules are imported guarded: a missing or broken one
leaves its subcommand answering with the reason, and the rest of the CLI works.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

DEFAULT_SCENE = "box_on_plane"
DEFAULT_OUT = "rollout.h5"
# chunk 200 steps: the default 1000-step run streams 5 chunks (the progress bar and the file move).
DEFAULTS = dict(integrator="rk4", steps=1000, batch=16, record_every=10, seed=0, chunk=200)

# name -> module providing add_parser(subparsers); the first three live here.
SUBCOMMANDS = {
    "run": "mjharness.rollout.cli",
    "show": "mjharness.rollout.cli",
    "inspect": "mjharness.rollout.cli",
    "check": "mjharness.rollout.crosscheck",
    "cases": "mjharness.rollout.cases",
    "bench": "mjharness.rollout.bench",
}


class CliError(Exception):
    """A user error the CLI reports in one line (exit status 2)."""


def _user_errors():
    from mjharness.integrators import StateError
    from mjharness.scenes import SceneError

    from .engine import RolloutError
    from .h5 import RolloutFileError

    return (CliError, RolloutError, RolloutFileError, SceneError, StateError, FileExistsError, FileNotFoundError)


# -- run ------------------------------------------------------------------------------------------

def _add_run(sub):
    p = sub.add_parser("run", help="roll a scene out for many worlds and write HDF5",
                       description="Roll SCENE out for --batch worlds and --steps steps; stream to --out.")
    p.add_argument("scene", nargs="?", default=None,
                   help=f"bundled scene name, MJCF path or XML (default {DEFAULT_SCENE}; with --resume: the file's)")
    p.add_argument("--integrator", help=f"integrator name (default {DEFAULTS['integrator']}; see --list-integrators)")
    p.add_argument("--list-integrators", action="store_true", help="print the integrator names and exit")
    p.add_argument("--dt", type=float, help="step (adaptive: output interval); default the scene's timestep")
    p.add_argument("--steps", type=int, help=f"number of steps (default {DEFAULTS['steps']})")
    p.add_argument("--batch", type=int, help=f"number of worlds (default {DEFAULTS['batch']})")
    p.add_argument("--record-every", type=int, help=f"keep every k-th state (default {DEFAULTS['record_every']})")
    p.add_argument("--seed", type=int, help="seed of the initial perturbation and of noise (default 0)")
    p.add_argument("--perturb", type=float, default=0.01, help="std-dev of the initial-state perturbation (0.01)")
    p.add_argument("--out", help=f"output HDF5 file (default {DEFAULT_OUT}, numbered if it exists)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--resume", metavar="FILE", help="continue FILE (killed or shorter) to --steps")
    p.add_argument("--chunk", type=int, help=f"steps per compiled call; device memory holds one chunk of samples "
                                             f"(default {DEFAULTS['chunk']})")
    p.add_argument("--compression", choices=("none", "gzip", "lzf"), default="none", help="HDF5 compression")
    p.add_argument("--mjx", choices=("adapt", "strict"), default="adapt",
                   help="adapt: apply and log MJX substitutions; strict: refuse models MJX cannot run")
    p.add_argument("--quaternion-update", choices=("quaternion", "quaternion_highorder"),
                   help="policy of ball/free attitudes (default quaternion)")
    p.add_argument("--devices", type=int, help="number of devices to shard the batch over (default all)")
    p.add_argument("--watchdog-s", type=float, help="stall limit per chunk in seconds (0 = off)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def _next_free(path: str) -> str:
    if not os.path.exists(path):
        return path
    stem, ext = os.path.splitext(path)
    i = 1
    while os.path.exists(f"{stem}-{i}{ext}"):
        i += 1
    return f"{stem}-{i}{ext}"


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _resume_settings(args):
    """Fill unset options from the file being resumed (scene, integrator, dt, record_every, batch, seed)."""
    from mjharness.integrators import get_integrator

    from .h5 import open_rollout

    with open_rollout(args.resume) as f:
        a, mjcf = f.attrs, f.mjcf
    cfg = a.get("integrator") or {}
    integ = args.integrator or cfg.get("name")
    try:
        integ_obj = get_integrator(integ)
    except (KeyError, TypeError) as e:
        raise CliError(f"--resume {args.resume}: cannot rebuild integrator {cfg!r} ({e}); use the Python API") from None
    scene = args.scene or (mjcf if mjcf else None)
    if scene is None:
        raise CliError(f"--resume {args.resume}: the file holds no MJCF; give SCENE")
    return dict(scene=scene, integrator=integ_obj, dt=args.dt or a["dt"], steps=args.steps or a["steps"],
                record_every=args.record_every or a["record_every"], seed=a["seed"] if args.seed is None else args.seed,
                quaternion_update=args.quaternion_update or a.get("quaternion_update") or "quaternion",
                chunk=a.get("chunk"))


def cmd_run(args) -> int:
    from mjharness.adapters import MjScene
    from mjharness.scenes import load_scene

    from .engine import integrator_names, resolve_integrator, rollout

    if args.list_integrators:
        print("\n".join(integrator_names()))
        return 0
    if args.resume:
        s = _resume_settings(args)
        out, batch = None, args.batch
        scene_arg = s["scene"]
    else:
        scene_arg = args.scene or DEFAULT_SCENE
        # Check the integrator name before paying for the scene compile.
        s = dict(integrator=resolve_integrator(args.integrator or DEFAULTS["integrator"]), dt=args.dt,
                 steps=DEFAULTS["steps"] if args.steps is None else args.steps,
                 record_every=DEFAULTS["record_every"] if args.record_every is None else args.record_every,
                 seed=DEFAULTS["seed"] if args.seed is None else args.seed,
                 quaternion_update=args.quaternion_update or "quaternion")
        batch = DEFAULTS["batch"] if args.batch is None else args.batch
        if args.out is None:
            out = _next_free(DEFAULT_OUT) if not args.overwrite else DEFAULT_OUT
            if out != DEFAULT_OUT:
                print(f"mjharness: {DEFAULT_OUT} exists; writing {out} (give --out, or --overwrite to replace)",
                      file=sys.stderr)
        else:
            out = args.out
    if s["dt"] is not None and not s["dt"] > 0:
        raise CliError(f"--dt must be > 0, got {s['dt']}")
    model = load_scene(scene_arg, mjx=args.mjx)
    scene = MjScene(model, quaternion_update=s["quaternion_update"])
    dt = s["dt"] if s["dt"] is not None else float(model.opt.timestep)
    integ = s["integrator"]
    name = getattr(integ, "name", type(integ).__name__)
    print(f"mjharness run: {_scene_label(scene_arg)}, {name}, dt={dt:g}, {s['steps']} steps, "
          f"batch {batch if batch is not None else '(file)'}, record every {s['record_every']}", file=sys.stderr)
    r = rollout(scene, integ, dt=dt, steps=s["steps"], batch=batch, seed=s["seed"], record_every=s["record_every"],
                out=out, overwrite=args.overwrite, resume=args.resume,
                chunk=args.chunk or s.get("chunk") or DEFAULTS["chunk"], perturb=args.perturb,
                compression=None if args.compression == "none" else args.compression, devices=args.devices,
                watchdog_s=args.watchdog_s, progress=not args.no_progress, keep=False)
    st = r.stats
    B = len(r.status)
    print(f"  worlds: {st['worlds_ok']}/{B} ok, {st['worlds_failed']} failed"
          + (_failed_detail(r) if st["worlds_failed"] else ""))
    print(f"  wall {st['wall_s']:.2f} s, compile {st['compile_s']:.2f} s (trace {st['trace_s']:.2f} s, "
          f"{st['trace_cache']}), run {st['run_s']:.2f} s, "
          f"{st['steps_per_s']:.0f} steps/s ({st['world_steps_per_s']:.0f} world-steps/s) on {st['devices']} device(s)")
    print(f"  file {r.path} ({_fmt_bytes(st['file_bytes'])}, {len(r.time)} samples x {B} worlds x {r.layout.size} "
          f"states, complete)")
    return 0


def _scene_label(s: str) -> str:
    one = " ".join(str(s).split())
    return one if len(one) < 60 else one[:57] + "..."


def _failed_detail(r) -> str:
    import numpy as np

    from .engine import STATUS_NAMES

    bad = np.flatnonzero(r.status)
    parts = [f"world {i}: {STATUS_NAMES.get(int(r.status[i]), r.status[i])} at step {int(r.status_step[i])}"
             for i in bad[:5]]
    return " (" + "; ".join(parts) + (", ..." if len(bad) > 5 else "") + ")"


# -- show -----------------------------------------------------------------------------------------

def _add_show(sub):
    p = sub.add_parser("show", help="print a rollout file's attributes and layout; plot states",
                       description="Print the attributes, datasets and state layout of FILE; --plot draws states.")
    p.add_argument("file")
    p.add_argument("--plot", nargs="+", metavar="STATE", help="state names (see the layout) or qpos / qvel / x")
    p.add_argument("--world", nargs="+", type=int, default=None, help="worlds to plot (default: up to 8)")
    p.add_argument("--png", help="output PNG (default FILE with .png)")
    p.set_defaults(func=cmd_show)


def cmd_show(args) -> int:
    import numpy as np

    from .h5 import open_rollout

    with open_rollout(args.file) as f:
        a = f.attrs
        print(f"{args.file}: {f.samples} of {f.h5['x'].shape[0]} samples, "
              f"{'complete' if f.complete else 'INCOMPLETE (complete=False)'}")
        print("attributes:")
        for k in sorted(a):
            v = json.dumps(a[k]) if isinstance(a[k], dict) else a[k]
            print(f"  {k:18s} {v}")
        print("datasets:")
        f.h5.visititems(lambda name, obj: print(f"  /{name:16s} {obj.shape} {obj.dtype}"
                                                 + (f" chunks={obj.chunks}" if obj.chunks else "")
                                                 + (f" {obj.compression}" if obj.compression else "")
                                                 + (" virtual" if obj.is_virtual else ""))
                        if hasattr(obj, "shape") else None)
        print("layout:")
        _print_layout([_row(r) for r in f.layout_table])
        status = f.status
        print(f"status: {int((status == 0).sum())}/{status.size} ok"
              + "".join(f", world {i}: {int(status[i])} at step {int(f.status_step[i])}"
                        for i in np.flatnonzero(status)[:5]))
        if args.plot:
            png = args.png or os.path.splitext(args.file)[0] + ".png"
            _plot(f, args.plot, args.world, png)
            print(f"plot: {png}")
    return 0


def _row(r) -> dict:
    d = {k: (r[k].decode() if isinstance(r[k], bytes) else int(r[k])) for k in r.dtype.names}
    return d


def _print_layout(rows):
    head = f"  {'state':28s} {'update':20s} {'value':>11s} {'deriv':>11s}  joint"
    print(head)
    for r in rows:
        print(f"  {r['name']:28s} {r['update']:20s} {r['offset']:>5d}+{r['size']:<5d} "
              f"{r['deriv_offset']:>5d}+{r['deriv_size']:<5d}  {r.get('joint') or '-'}")


def _plot(f, names, worlds, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = f.time
    B = f.h5["x"].shape[1]
    worlds = list(range(min(B, 8))) if worlds is None else worlds
    for w in worlds:
        if not 0 <= w < B:
            raise CliError(f"--world {w}: the file has worlds 0..{B - 1}")
    series = []
    for name in names:
        if name in ("qpos", "qvel", "x"):
            if name != "x" and name not in f.h5:
                raise CliError(f"{f.path}: no /{name} in this file")
            series.append((name, getattr(f, name)))
        else:
            try:
                v = f.state(name)
            except KeyError as e:
                raise CliError(str(e).strip('"')) from None
            series.append((name, v.reshape(v.shape[:2] + (-1,))))
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), sharex=True, squeeze=False)
    for ax, (name, v) in zip(axes[:, 0], series):
        for w in worlds:
            for c in range(v.shape[2]):
                ax.plot(t, v[:, w, c], lw=0.8, label=f"w{w}[{c}]" if len(worlds) * v.shape[2] <= 12 else None)
        ax.set_ylabel(name)
        if len(worlds) * v.shape[2] <= 12:
            ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("time [s]")
    fig.suptitle(os.path.basename(f.path))
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


# -- inspect --------------------------------------------------------------------------------------

def _add_inspect(sub):
    p = sub.add_parser("inspect", help="print a scene's state layout and MJX compatibility log",
                       description="Print SCENE's named states (offsets into x and dx, joints) and its MJX log.")
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE)
    p.add_argument("--mjx", choices=("adapt", "strict"), default="adapt")
    p.add_argument("--quaternion-update", choices=("quaternion", "quaternion_highorder"), default="quaternion")
    p.set_defaults(func=cmd_inspect)


def format_log(log) -> str:
    try:
        from mjharness.scenes.compat import format_compat_log
    except ImportError:
        format_compat_log = None
    if format_compat_log is not None:
        return format_compat_log(log)
    if not log:
        return "no MJX substitutions"
    return "\n".join(json.dumps(e, default=str) for e in log)


def cmd_inspect(args) -> int:
    from mjharness.adapters import MjScene
    from mjharness.scenes import load_scene

    scene = MjScene(load_scene(args.scene, mjx=args.mjx), quaternion_update=args.quaternion_update)
    layout = scene.layout
    rows = [dict(d, joint=scene.joint_of(d["name"])) for d in layout.describe()]
    print(f"{_scene_label(args.scene)}: {len(rows)} states")
    _print_layout(rows)
    print(f"totals: nq={scene.nq} nv={scene.nv} nu={scene.nu} na={scene.na}  x: {layout.size}  "
          f"dx: {layout.deriv_size}  noise slots: {layout.noise_slots}")
    print("MJX compatibility log:")
    print("  " + format_log(scene.compat_log).replace("\n", "\n  "))
    return 0


# -- the parser -----------------------------------------------------------------------------------

def add_parser(sub):
    """This module's subcommands (same protocol as the others)."""
    _add_run(sub)
    _add_show(sub)
    _add_inspect(sub)


def _unavailable(sub, name, module, err):
    p = sub.add_parser(name, help=f"(unavailable: {module})", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def fail(args):
        raise CliError(f"subcommand {name!r} is unavailable: importing {module} failed ({err})")

    p.set_defaults(func=fail)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mjharness", description="Batched MuJoCo/MJX rollouts with our integrators.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    done = set()
    for name, module in SUBCOMMANDS.items():
        if module in done:
            continue
        done.add(module)
        if module == __name__ or module == "mjharness.rollout.cli":
            add_parser(sub)
            continue
        try:
            mod = importlib.import_module(module)
            mod.add_parser(sub)
        except ModuleNotFoundError as e:
            if e.name != module:  # the module exists but something it imports does not
                _unavailable(sub, name, module, e)
        except Exception as e:  # a teammate's module must not take the whole CLI down
            _unavailable(sub, name, module, e)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not argv:
        argv = ["run"]  # `mjharness` alone: the README's first command
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except _user_errors() as e:
        msg = str(e)
        if isinstance(e, KeyError):
            msg = msg.strip('"')
        print(f"mjharness: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mjharness: interrupted (the file holds every flushed chunk; --resume continues it)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
