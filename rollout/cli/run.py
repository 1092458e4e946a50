"""``mjharness run``: roll a scene out for many worlds and stream the states to an HDF5 file.

    mjharness run [SCENE] [--integrator NAME] [--dt DT] [--steps 1000] [--batch 16] [--record-every 10]
                  [--seed 0] [--out rollout.h5]
    mjharness run --resume rollout.h5 [--steps N]       # continue a killed or shorter run
    mjharness run --list-integrators

With no arguments it rolls out the bundled default scene (``DEFAULT_SCENE``) with the scene's own
integrator (``<option integrator=...>``: Euler -> semi_implicit_euler, RK4 -> rk4, implicitfast ->
implicit_fast) at the scene's timestep, to ``rollout.h5`` in the current directory; if that file
exists it writes ``rollout-1.h5``, ``rollout-2.h5``, ... instead (never replacing a file it was not
told to). An explicit ``--out`` that exists is refused unless ``--overwrite``.
"""

from __future__ import annotations

import math
import os
import sys

from mjharness.rollout.bench.report import format_bytes

from .common import DEFAULT_SCENE, MJX_MODES, QUATERNION_UPDATES, scene_label
from .errors import CliError

DEFAULT_OUT = "rollout.h5"
# chunk 200 steps: the default 1000-step run streams 5 chunks (the progress bar and the file move).
DEFAULTS = dict(steps=1000, batch=16, record_every=10, seed=0, chunk=200)


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="roll a scene out for many worlds and write HDF5",
                       description="Roll SCENE out for --batch worlds and --steps steps; stream to --out.")
    p.add_argument("scene", nargs="?", default=None,
                   help=f"bundled scene name, MJCF path or XML (default {DEFAULT_SCENE}; with --resume: the file's)")
    p.add_argument("--integrator", help="integrator name (default: the one the scene names; see --list-integrators)")
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
    p.add_argument("--backend", choices=("mjx", "mujoco", "warp"), default="mjx",
                   help="dynamics evaluation: mjx (default), mujoco (MuJoCo C on CPU threads; runs models MJX "
                        "refuses; not differentiable), warp (MJX impl='warp', needs mjharness[warp])")
    p.add_argument("--mjx", choices=MJX_MODES, default="adapt",
                   help="adapt: apply and log MJX substitutions; strict: refuse models MJX cannot run")
    p.add_argument("--quaternion-update", choices=QUATERNION_UPDATES,
                   help="policy of ball/free attitudes (default quaternion)")
    p.add_argument("--devices", type=int, help="number of devices to shard the batch over (default all)")
    p.add_argument("--watchdog-s", type=float, help="stall limit per chunk in seconds (0 = off)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--outputs", nargs="+", metavar="NAME", help="recorded outputs: sensordata, sensor:<name>, xpos, "
                   "site_xpos, cfrc_ext, energy, contact_force, ... (file: /outputs/<name>)")
    p.add_argument("--output-semantics", choices=("live", "sampled"), default="live",
                   help="live: at the recorded state; sampled: at the state before the last step (mj_step's)")
    p.add_argument("--local-processes", type=int, metavar="N",
                   help="run as N processes on this machine (JAX distributed runtime, one shard file each)")
    p.add_argument("--distributed", action="store_true",
                   help="this is one process of a multi-process run (MJHARNESS_* or cluster environment variables)")
    p.set_defaults(func=command, subject=subject)


def subject(args) -> str:
    if args.resume and not args.scene:
        return f"the scene of {args.resume}"
    return f"scene {scene_label(args.scene or DEFAULT_SCENE)!r}"


def next_free(path: str) -> str:
    """``path``, or the first of ``stem-1.ext``, ``stem-2.ext``, ... that does not exist."""
    if not os.path.exists(path):
        return path
    stem, ext = os.path.splitext(path)
    i = 1
    while os.path.exists(f"{stem}-{i}{ext}"):
        i += 1
    return f"{stem}-{i}{ext}"


def _resume_settings(args) -> dict:
    """Unset options from the file being resumed (scene, integrator, dt, record_every, seed, chunk)."""
    from mjharness.integrators import ContractError, resolve_integrator
    from mjharness.rollout.h5 import open_rollout

    with open_rollout(args.resume) as f:
        a = f.attrs
        scene = args.scene or f.model()  # the model that ran, bit for bit
    cfg = a.get("integrator") or {}
    name = args.integrator or cfg.get("name")
    try:
        resolve_integrator(name)
    except ContractError as e:
        raise CliError(f"--resume {args.resume}: cannot rebuild integrator {cfg!r} ({e}); use the Python API") \
            from None
    return dict(scene=scene, label=args.scene or a.get("scene") or args.resume, integrator=name,
                dt=args.dt or a["dt"], steps=args.steps or a["steps"],
                record_every=args.record_every or a["record_every"],
                seed=a["seed"] if args.seed is None else args.seed, batch=args.batch, out=None,
                quaternion_update=args.quaternion_update or a.get("quaternion_update") or "quaternion",
                chunk=args.chunk or a.get("chunk") or DEFAULTS["chunk"])


def _fresh_settings(args) -> dict:
    """The run asked for; None integrator and dt mean the scene's own (the engine resolves them)."""
    from mjharness.integrators import resolve_integrator

    if args.integrator is not None:
        resolve_integrator(args.integrator)  # an unknown name fails before the scene is compiled
    out = args.out
    if out is None:
        out = DEFAULT_OUT if args.overwrite else next_free(DEFAULT_OUT)
        if out != DEFAULT_OUT:
            print(f"mjharness run: {DEFAULT_OUT} exists; writing {out} (give --out, or --overwrite to replace)",
                  file=sys.stderr)

    def pick(name):
        v = getattr(args, name)
        return DEFAULTS[name] if v is None else v

    return dict(scene=args.scene or DEFAULT_SCENE, label=args.scene or DEFAULT_SCENE, integrator=args.integrator,
                dt=args.dt, steps=pick("steps"), record_every=pick("record_every"), seed=pick("seed"),
                batch=pick("batch"), out=out, quaternion_update=args.quaternion_update or "quaternion",
                chunk=pick("chunk"))


def _header(s: dict, scene) -> str:
    from mjharness.integrators import resolve_integrator

    name = resolve_integrator(s["integrator"]).name if s["integrator"] else f"{scene.default_integrator} (the scene's)"
    dt = f"{s['dt']:g}" if s["dt"] is not None else f"{scene.model.opt.timestep:g} (the scene's)"
    batch = s["batch"] if s["batch"] is not None else "(the file's)"
    return (f"mjharness run: {scene_label(s['label'])}, {name}, dt={dt}, {s['steps']} steps, batch {batch}, "
            f"record every {s['record_every']}")


def command(args) -> int:
    from mjharness.integrators import integrator_names
    from mjharness.rollout.engine import resolve_scene, rollout

    if args.list_integrators:
        print("\n".join(integrator_names()))
        return 0
    if args.dt is not None and not (math.isfinite(args.dt) and args.dt > 0):
        raise CliError(f"--dt must be > 0, got {args.dt}")
    if args.local_processes or args.distributed:
        from . import launch

        return launch.launch_local(args) if args.local_processes else launch.run_distributed(args)
    s = _resume_settings(args) if args.resume else _fresh_settings(args)
    scene = resolve_scene(s["scene"], mjx=args.mjx, quaternion_update=s["quaternion_update"],
                          backend=getattr(args, "backend", "mjx"))
    print(_header(s, scene), file=sys.stderr)
    r = rollout(scene, s["integrator"], dt=s["dt"], steps=s["steps"], batch=s["batch"], seed=s["seed"],
                record_every=s["record_every"], out=s["out"], overwrite=args.overwrite, resume=args.resume,
                chunk=s["chunk"], perturb=args.perturb, compression=None if args.compression == "none" else
                args.compression, devices=args.devices, watchdog_s=args.watchdog_s, progress=not args.no_progress,
                keep=False, outputs=args.outputs, output_semantics=args.output_semantics)
    _summary(r)
    return 0


def _summary(r) -> None:
    from mjharness.integrators.status import status_name

    st, B = r.stats, len(r.status)
    failed = ""
    if st["worlds_failed"]:
        bad = [i for i, code in enumerate(r.status) if code]
        failed = " (" + "; ".join(f"world {i}: {status_name(r.status[i])} at step {int(r.status_step[i])}"
                                  for i in bad[:5]) + (", ..." if len(bad) > 5 else "") + ")"
    print(f"  worlds: {st['worlds_ok']}/{B} ok, {st['worlds_failed']} failed{failed}")
    print(f"  wall {st['wall_s']:.2f} s, compile {st['compile_s']:.2f} s (trace {st['trace_s']:.2f} s, "
          f"{st['trace_cache']}), run {st['run_s']:.2f} s, "
          f"{st['steps_per_s']:.0f} steps/s ({st['world_steps_per_s']:.0f} world-steps/s) on {st['devices']} device(s)")
    print(f"  file {r.path} ({format_bytes(st['file_bytes'])}, {len(r.time)} samples x {B} worlds x {r.layout.size} "
          f"states, complete)")
