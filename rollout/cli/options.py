"""The one mapping between ``mjharness run``'s command line and ``rollout()``'s run specification.

Every option of ``run`` is one row of ``RUN_OPTIONS``: its flag, its argparse keywords, the
``rollout()`` keyword it sets (or None for options the command itself consumes) and whether a
``--local-processes`` launcher forwards it to its workers. ``add_run_options`` builds the parser,
``forward_argv`` the workers' command line and ``rollout_kwargs`` the call, all from that table, so
an option cannot reach one and miss another (tests/test_cli_options.py checks every row).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

from .common import AUTO, BACKEND_NAMES, BACKEND_SUMMARIES, DEFAULT_SCENE, MJX_MODES, QUATERNION_UPDATES
from .errors import CliError

DEFAULT_OUT = "rollout.h5"
# chunk 200 steps: the default 1000-step run streams 5 chunks (the progress bar and the file move).
DEFAULTS = dict(steps=1000, batch=16, record_every=10, seed=0, chunk=200)


@dataclass(frozen=True)
class Option:
    """One ``mjharness run`` option.

    Attributes:
        flag: the command-line flag (``--steps``).
        kwargs: argparse keywords (``type``, ``choices``, ``nargs``, ``action``, ``default``, ``help``).
        rollout: the ``rollout()`` keyword it sets; None when the command consumes it itself.
        forward: whether a ``--local-processes`` launcher passes it to every worker.
    """

    flag: str
    kwargs: dict = field(default_factory=dict)
    rollout: str | None = None
    forward: bool = True

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


def _backend_help() -> str:
    rows = "; ".join(f"{name}: {summary}" for name, summary in BACKEND_SUMMARIES.items())
    return (f"dynamics backend (default {AUTO}: MJX on a GPU/TPU, MuJoCo C on CPU unless the run needs an "
            f"MJX-only capability; a resume keeps the file's). {rows}")


RUN_OPTIONS: tuple[Option, ...] = (
    Option("--integrator", dict(help="integrator name (default: the one the scene names; see --list-integrators)")),
    Option("--list-integrators", dict(action="store_true", help="print the integrator names and exit"),
           forward=False),
    Option("--dt", dict(type=float, help="step (adaptive: output interval); default the scene's timestep")),
    Option("--steps", dict(type=int, help=f"number of steps (default {DEFAULTS['steps']})")),
    Option("--batch", dict(type=int, help=f"number of worlds (default {DEFAULTS['batch']})")),
    Option("--record-every", dict(type=int, help=f"keep every k-th state (default {DEFAULTS['record_every']})")),
    Option("--seed", dict(type=int, help="seed of the initial perturbation and of noise (default 0)")),
    Option("--perturb", dict(type=float, default=0.01,
                             help="std-dev of the initial-state perturbation of velocities (default 0.01)"),
           "perturb"),
    Option("--perturb-qpos", dict(type=float, default=0.0,
                                  help="std-dev of the initial-state perturbation of positions (default 0: a resting "
                                       "scene starts on its support)"), "perturb_qpos"),
    Option("--out", dict(help=f"output HDF5 file (default {DEFAULT_OUT}, numbered if it exists)")),
    Option("--overwrite", dict(action="store_true", help="replace an existing --out"), "overwrite"),
    Option("--require-space", dict(action="store_true", help="refuse (not just warn) when the planned file is "
                                                              "larger than the free disk space"), "require_space"),
    Option("--resume", dict(metavar="FILE", help="continue FILE (killed or shorter) to --steps")),
    Option("--chunk", dict(type=int, help=f"steps per compiled call; device memory holds one chunk of samples "
                                          f"(default {DEFAULTS['chunk']})")),
    Option("--compression", dict(choices=("none", "gzip", "lzf"), default="none", help="HDF5 compression"),
           "compression"),
    Option("--backend", dict(choices=BACKEND_NAMES, default=AUTO, help=_backend_help()), "backend"),
    Option("--mjx", dict(choices=MJX_MODES, default="adapt",
                         help="adapt: apply and log MJX substitutions; strict: refuse models MJX cannot run"), "mjx"),
    Option("--unsupported-contacts", dict(choices=("refuse", "exclude"), default="refuse",
                                          help="MJX: refuse a model with geom pairs MJX cannot collide, or exclude "
                                               "exactly those pairs (logged)"), "unsupported_contacts"),
    Option("--quaternion-update", dict(choices=QUATERNION_UPDATES,
                                       help="policy of ball/free attitudes (default quaternion)")),
    Option("--devices", dict(type=int, help="number of devices to shard the batch over (default all)"), "devices"),
    Option("--watchdog-s", dict(type=float, help="stall limit per chunk in seconds (0 = off)"), "watchdog_s"),
    Option("--no-progress", dict(action="store_true", help="no progress bar")),
    Option("--dtype", dict(choices=("float64", "float32"),
                           help="float width of the dynamics and of the file's samples (default float64; "
                                "MJHARNESS_X64=0 also gives float32)")),
    Option("--ctrl", dict(metavar="FILE|key:NAME",
                          help="controls: a .npy/.npz/.csv file of (steps, nu) (every world) or (batch, steps, nu), "
                               "or key:NAME for a keyframe's ctrl held constant (default: none, motors get zero)")),
    Option("--controller", dict(metavar="FILE.py:NAME",
                                help="a controller with state: NAME in FILE.py is a Controller, or a function "
                                     "make() / make(model) returning one (its applied controls: the file's /ctrl)")),
    Option("--terminate", dict(metavar="FILE.py:NAME",
                               help="termination rule: NAME in FILE.py is fn(t, x) -> bool (or fn(t, x, sensordata) "
                                    "or a Termination), checked per world after each step")),
    Option("--on-terminate", dict(choices=("freeze", "reset"),
                                  help="what a terminated world does: freeze (stops, status terminated; the default) "
                                       "or reset (a new episode; the file's /episode and /episodes)")),
    Option("--reset-to", dict(metavar="x0|draw|key:NAME",
                              help="where a reset episode starts: the world's x0 (default), a fresh draw of the "
                                   "initial perturbation (seed, world, episode), or a keyframe")),
    Option("--param", dict(action="append", metavar="FIELD[:NAME]=V1,V2,...",
                           help="per-world model parameter sweep, one world per value (e.g. body_mass:torso=1,2,4; "
                                "dof_damping:hinge=0.1,0.2); several --param zip (same count)")),
    Option("--randomize", dict(nargs="+", action="extend", metavar="KEY=DIST",
                               help="per-world model fields drawn from (seed, world, KEY): KEY field[:name][[i]] "
                                    "(body_mass:torso, geom_friction:floor[0]), DIST uniform(a,b), normal(mu,sigma), "
                                    "loguniform(a,b), choice(v1,...), prefixed * (scale) or + (add): --randomize "
                                    "'body_mass:torso=*uniform(0.8,1.2)'; derived constants as mj_setConst")),
    Option("--outputs", dict(nargs="+", metavar="NAME",
                             help="recorded outputs: sensordata, sensor:<name>, xpos, site_xpos, cfrc_ext, energy, "
                                  "contact_force, ... (file: /outputs/<name>)"), "outputs"),
    Option("--output-semantics", dict(choices=("live", "sampled"), default="live",
                                      help="live: at the recorded state; sampled: at the state before the last step "
                                           "(mj_step's)"), "output_semantics"),
    Option("--local-processes", dict(type=int, metavar="N",
                                     help="run as N processes on this machine (JAX distributed runtime, one shard "
                                          "file each)"), forward=False),
    Option("--distributed", dict(action="store_true",
                                 help="this is one process of a multi-process run (MJHARNESS_* or cluster "
                                      "environment variables)"), forward=False),
)
OPTIONS = {o.dest: o for o in RUN_OPTIONS}


def add_run_options(p) -> None:
    p.add_argument("scene", nargs="?", default=None,
                   help=f"bundled scene name, MJCF path or XML (default {DEFAULT_SCENE}; with --resume: the file's)")
    for o in RUN_OPTIONS:
        p.add_argument(o.flag, **o.kwargs)


def forward_argv(args) -> list[str]:
    """The command-line tokens that give a worker process the same options as ``args`` (scene first)."""
    argv = [args.scene] if args.scene else []
    for o in RUN_OPTIONS:
        if not o.forward:
            continue
        v = getattr(args, o.dest)
        if v is None or v is False:
            continue
        if v is True:
            argv.append(o.flag)
        elif o.kwargs.get("action") == "append":
            argv += [tok for item in v for tok in (o.flag, item)]
        elif isinstance(v, (list, tuple)):
            argv += [o.flag, *map(str, v)]
        else:
            argv += [o.flag, repr(v) if isinstance(v, float) else str(v)]  # repr: floats round-trip exactly
    return argv


# Integer options and their least value (what rollout() would refuse after the scene loads).
_AT_LEAST = {"steps": 1, "batch": 1, "record_every": 1, "chunk": 1, "devices": 1, "local_processes": 1, "seed": 0}


def check_args(args) -> None:
    """Every option value, the output folder, the randomize and --param specs and the files named: before the
    scene loads or anything is printed, compiled or written (one ``CliError`` naming the option)."""
    for name, least in _AT_LEAST.items():
        v = getattr(args, name, None)
        if v is not None and v < least:
            raise CliError(f"--{name.replace('_', '-')} must be >= {least}, got {v}")
    if args.dt is not None and not (math.isfinite(args.dt) and args.dt > 0):
        raise CliError(f"--dt must be > 0, got {args.dt}")
    for name in ("perturb", "perturb_qpos", "watchdog_s"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise CliError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if args.resume:
        if not os.path.isfile(args.resume):
            raise CliError(f"--resume {args.resume}: no such file")
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise CliError(f"--resume {args.resume} continues that file; --out {args.out} names another (drop --out)")
    elif args.out is not None:
        check_out(args.out, args.overwrite)
    check_randomize(parse_randomize(args.randomize))
    parse_params(args.param)
    for flag, arg in (("--controller", args.controller), ("--terminate", args.terminate)):
        if arg:
            path = object_path(arg, flag)
            if _bundled_example(path) is None and not os.path.isfile(path):
                raise CliError(f"{flag} {arg}: no such file {path!r} (bundled examples: `mjharness examples`)")
    if args.ctrl and not args.ctrl.startswith("key:") and not os.path.isfile(args.ctrl):
        raise CliError(f"--ctrl {args.ctrl}: no such file")
    if args.reset_to and not (args.reset_to in ("x0", "draw") or args.reset_to.startswith("key:")):
        raise CliError(f"--reset-to {args.reset_to}: give x0, draw or key:NAME (a keyframe)")
    for flag, value in (("--on-terminate", args.on_terminate == "reset" and "reset"), ("--reset-to", args.reset_to)):
        if value and not (args.terminate or args.resume):
            raise CliError(f"{flag} {value}: needs --terminate FILE.py:NAME (the rule that ends an episode)")


def check_out(out: str, overwrite: bool) -> None:
    """``--out``: an HDF5 file name in a folder that exists and takes files; an existing file only with
    --overwrite."""
    from .common import check_folder

    if not out.lower().endswith((".h5", ".hdf5")):
        raise CliError(f"--out {out}: give an HDF5 file name ending in .h5 (or .hdf5)")
    check_folder(out, "--out")
    if os.path.exists(out) and not overwrite:
        raise CliError(f"--out {out} exists: add --overwrite to replace it, or `mjharness run --resume {out}` to "
                       f"continue it")


def check_randomize(spec: dict | None) -> None:
    """Each ``--randomize KEY=DIST``: KEY's syntax and DIST parsed (no model needed; the names are checked when
    the scene loads)."""
    if not spec:
        return
    from mjharness.rollout.engine.randomize import KEY_SYNTAX, parse_dist

    for key, dist in spec.items():
        if KEY_SYNTAX.match(key) is None:
            raise CliError(f"--randomize {key}={dist}: {key!r} is not FIELD[:NAME][[i]] (e.g. body_mass:torso, "
                           f"geom_friction:floor[0])")
        try:
            parse_dist(key, dist)
        except ValueError as e:
            raise CliError(f"--randomize {key}={dist}: {str(e).split(': ', 1)[-1]}") from None


def next_free(path: str) -> str:
    """``path``, or the first of ``stem-1.ext``, ``stem-2.ext``, ... that does not exist."""
    if not os.path.exists(path):
        return path
    stem, ext = os.path.splitext(path)
    i = 1
    while os.path.exists(f"{stem}-{i}{ext}"):
        i += 1
    return f"{stem}-{i}{ext}"


def resume_settings(args, info) -> dict:
    """Unset options from the file being resumed, as ``h5.read_resume`` read it (the file, or a shard of it):
    scene, integrator, dt, steps, record_every, seed, chunk, quaternion policy, backend, outputs."""
    from mjharness.adapters.backends import requested
    from mjharness.integrators import ContractError, resolve_integrator

    a = info.attrs
    scene = args.scene or info.model  # the model that ran, bit for bit
    cfg = a.get("integrator") or {}
    name = args.integrator or cfg.get("name")
    try:
        resolve_integrator(name)
    except ContractError as e:
        raise CliError(f"--resume {args.resume}: cannot rebuild integrator {cfg!r} ({e}); use the Python API") \
            from None
    outputs = args.outputs or [o for o in str(a.get("outputs") or "").split(",") if o] or None
    for key, flag in (("controller", "--controller"), ("terminate", "--terminate")):  # code is not in the file
        if a.get(key) and not getattr(args, key):
            raise CliError(f"--resume {args.resume}: the run had a {key} ({a[key]}); pass {flag} FILE.py:NAME again "
                           f"(the same function)")
    return dict(scene=scene, label=args.scene or a.get("scene") or args.resume, integrator=name,
                dt=args.dt or a["dt"], steps=args.steps or a["steps"],
                record_every=args.record_every or a["record_every"],
                seed=a["seed"] if args.seed is None else args.seed, batch=args.batch, out=None,
                quaternion_update=args.quaternion_update or a.get("quaternion_update") or "quaternion",
                chunk=args.chunk or a.get("chunk") or DEFAULTS["chunk"],
                backend=requested((a.get("backend") or AUTO, f"--resume {args.resume}"), (args.backend, "--backend")),
                # the file's reason while --backend defers to the file (an explicit --backend is "asked for")
                backend_reason={AUTO: f"the file's: {a['backend_reason']}" if a.get("backend_reason") else None
                                }.get(args.backend),
                outputs=outputs,
                output_semantics=a.get("output_semantics") or args.output_semantics,
                dtype=args.dtype or {True: "float64", False: "float32"}.get(a.get("x64")),
                on_terminate=args.on_terminate or a.get("on_terminate") or "freeze",
                reset_to=args.reset_to or a.get("reset_to") or "x0")


def fresh_settings(args, *, number_out: bool = True) -> dict:
    """The run asked for; None integrator and dt mean the scene's own (the engine resolves them)."""
    from mjharness.integrators import resolve_integrator

    if args.integrator is not None:
        resolve_integrator(args.integrator)  # an unknown name fails before the scene is compiled
    out = args.out
    if out is None:
        if not number_out:
            raise CliError("--distributed / --local-processes need --out")
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
                chunk=pick("chunk"), backend=args.backend, outputs=args.outputs,
                output_semantics=args.output_semantics, dtype=args.dtype, on_terminate=args.on_terminate or "freeze",
                reset_to=args.reset_to or "x0")


def rollout_kwargs(args, s: dict) -> dict:
    """``rollout()``'s keywords from the parsed options ``args`` and the settings ``s`` (fresh or resumed)."""
    kw = {o.rollout: getattr(args, o.dest) for o in RUN_OPTIONS if o.rollout}
    kw.update(dt=s["dt"], steps=s["steps"], batch=s["batch"], seed=s["seed"], record_every=s["record_every"],
              out=s["out"], resume=args.resume, chunk=s["chunk"], quaternion_update=s["quaternion_update"],
              backend=s["backend"], outputs=s["outputs"], output_semantics=s["output_semantics"],
              compression=None if args.compression == "none" else args.compression,
              progress=not args.no_progress, keep=False, randomize=parse_randomize(args.randomize),
              on_terminate=s["on_terminate"], reset_to=s["reset_to"])
    return kw


def cli_spelling(message: str) -> str:
    """A ``rollout()`` message in the command line's words: ``resume='f.h5'`` -> ``--resume f.h5``,
    ``steps=20000`` -> ``--steps 20000``, ``overwrite=True`` -> ``--overwrite``, for every option of the table."""
    import re

    flags = {o.rollout or o.dest: o.flag for o in RUN_OPTIONS}
    flags.update(resume="--resume", out="--out", steps="--steps", batch="--batch", dt="--dt", seed="--seed",
                 record_every="--record-every", chunk="--chunk", integrator="--integrator")
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    message = re.sub(rf"\b({names})=True\b", lambda m: flags[m.group(1)], message)
    message = re.sub(rf"\b({names})='([^']*)'", lambda m: f"{flags[m.group(1)]} {m.group(2)}", message)
    message = re.sub(rf"(?<![\w.-])({names})=(?!=)", lambda m: f"{flags[m.group(1)]} ", message)
    return message.replace(" (CLI: --overwrite)", "").replace("--overwrite (CLI: --overwrite)", "--overwrite")


# -- controls and parameter sweeps from the command line ---------------------------------------------------

def load_ctrl(arg: str, model, batch: int, steps: int):
    """``--ctrl``: (batch, steps, nu) controls from a file of (steps, nu) or (batch, steps, nu), or a keyframe."""
    import numpy as np

    nu = model.nu
    if nu == 0:
        raise CliError(f"--ctrl {arg}: the scene has no actuators (nu=0)")
    if arg.startswith("key:"):
        import mujoco

        k = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, arg[4:])
        if k < 0:
            raise CliError(f"--ctrl {arg}: no keyframe named {arg[4:]!r} ({model.nkey} keyframes)")
        return np.broadcast_to(model.key_ctrl[k], (batch, steps, nu)).copy()
    if not os.path.isfile(arg):
        raise CliError(f"--ctrl {arg}: no such file")
    try:
        if arg.endswith(".npz"):
            with np.load(arg) as z:
                names = list(z.files)
                if "ctrl" not in names and len(names) != 1:
                    raise CliError(f"--ctrl {arg}: an .npz needs one array or one named 'ctrl' (has {names})")
                a = z["ctrl" if "ctrl" in names else names[0]]
        elif arg.endswith(".npy"):
            a = np.load(arg)
        else:
            a = np.loadtxt(arg, delimiter=",", ndmin=2)
    except (OSError, ValueError) as e:
        raise CliError(f"--ctrl {arg}: cannot read it ({e})") from None
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1 and nu == 1:
        a = a[:, None]
    if a.ndim == 2 and a.shape == (steps, nu):
        return np.broadcast_to(a, (batch, steps, nu)).copy()
    if a.shape != (batch, steps, nu):
        raise CliError(f"--ctrl {arg}: shape {a.shape}; expected (steps, nu) = {(steps, nu)} or (batch, steps, nu) = "
                       f"{(batch, steps, nu)}")
    return a


def parse_randomize(items) -> dict | None:
    """``--randomize KEY=DIST ...`` -> {KEY: DIST} (the distributions are checked by the run specification)."""
    out = {}
    for item in items or ():
        key, eq, dist = item.partition("=")
        if not eq or not key.strip() or not dist.strip():
            raise CliError(f"--randomize {item!r}: give KEY=DIST, e.g. 'body_mass:torso=*uniform(0.8, 1.2)'")
        if key.strip() in out:
            raise CliError(f"--randomize {item!r}: {key.strip()!r} is given twice")
        out[key.strip()] = dist.strip()
    return out or None


def parse_params(specs) -> tuple[list[tuple[str, list[float]]], int]:
    """``--param`` values -> ([(field[:name], values)], number of worlds); checked before anything loads."""
    out, n = [], None
    for spec in specs or ():
        key, eq, vals = spec.partition("=")
        try:
            values = [float(v) for v in vals.split(",")] if eq and vals else None
        except ValueError:
            values = None
        if not key or values is None:
            raise CliError(f"--param {spec!r}: give FIELD[:NAME]=V1,V2,... (numbers)")
        if n is not None and len(values) != n:
            raise CliError(f"--param {spec!r}: {len(values)} values, the other --param have {n} (they zip: one world "
                           f"per value)")
        n = len(values)
        out.append((key, values))
    return out, n or 0


def param_arrays(params, scene) -> dict:
    """model_params (B, *field shape) from the nominal values with each ``--param`` index set per world."""
    import numpy as np

    from mjharness.rollout.engine.params import resolve_param
    from mjharness.rollout.engine.plan import _field, backend_model

    arrays = {}
    for key, values in params:
        field, idx = resolve_param(scene.model, scene.mjx_model, key)
        base = arrays.get(field)
        if base is None:
            nominal = np.asarray(_field(backend_model(scene), field), np.float64)
            base = arrays[field] = np.broadcast_to(nominal, (len(values),) + nominal.shape).copy()
        for w, v in enumerate(values):
            base[(w, *idx)] = v
    return arrays



# -- a controller / termination rule from a Python file (--controller, --terminate) -------------------------

def _bundled_example(name: str) -> str | None:
    """The file of bundled example ``name`` (``arm_reach``), or None: a name without a folder or ``.py``."""
    if os.sep in name or "/" in name or name.endswith(".py"):
        return None
    from importlib import resources

    try:
        path = resources.files("mjharness.examples") / f"{name}.py"
    except ModuleNotFoundError:
        return None
    return str(path) if path.is_file() else None


def bundled_examples() -> dict[str, str]:
    """name -> file of every example that ships with the package (``mjharness examples``)."""
    from importlib import resources

    try:
        root = resources.files("mjharness.examples")
    except ModuleNotFoundError:  # an install from before the examples shipped (editable: its path map is old)
        raise CliError("the bundled examples are not installed with this mjharness: reinstall it "
                       "(pip install -e . in a checkout)") from None
    return {p.name[:-3]: str(p) for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".py") and not p.name.startswith("_")}


def object_path(arg: str, flag: str) -> str:
    """The file of ``FILE.py:NAME`` or of a bundled example ``EXAMPLE:NAME`` (as given: not resolved)."""
    path, sep, name = arg.rpartition(":")
    if not sep or not path or not name:
        raise CliError(f"{flag} {arg}: expected FILE.py:NAME or EXAMPLE:NAME (a bundled example: `mjharness "
                       f"examples`)")
    return path


def load_object(arg: str, flag: str):
    """The object ``NAME`` of ``FILE.py:NAME`` (or of a bundled example, ``arm_reach:make``), the file imported as
    module ``mjharness_user.<stem>`` (a stable name: a resumed run's file attributes name the same function)."""
    import importlib.util

    path, name = object_path(arg, flag), arg.rpartition(":")[2]
    path = _bundled_example(path) or path
    if not os.path.isfile(path):
        raise CliError(f"{flag} {arg}: no such file {path!r}")
    mod_name = f"mjharness_user.{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"{flag} {arg}: {path!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # so dataclasses and pickling inside it find their module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - a user's file: say which and why
        raise CliError(f"{flag} {arg}: importing {path!r} failed: {type(e).__name__}: {e}") from None
    if not hasattr(module, name):
        public = sorted(k for k in vars(module) if not k.startswith("_"))
        raise CliError(f"{flag} {arg}: {path!r} has no {name!r} (it defines {public})")
    return getattr(module, name)


def load_controller(arg: str, model):
    """``--controller FILE.py:NAME``: a ``Controller``, or what ``NAME()`` / ``NAME(model)`` returns."""
    import inspect

    from mjharness.rollout.engine import Controller

    obj = load_object(arg, "--controller")
    if not isinstance(obj, Controller) and callable(obj):
        try:
            takes = len(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            takes = 0
        obj = obj(model) if takes else obj()
    if not isinstance(obj, Controller):
        raise CliError(f"--controller {arg}: expected a Controller (or a function returning one), got "
                       f"{type(obj).__name__}")
    return obj


def load_terminate(arg: str):
    """``--terminate FILE.py:NAME``: the rule ``NAME`` (a function fn(t, x[, sensordata]) -> bool or a Termination)."""
    from mjharness.rollout.engine import Termination

    obj = load_object(arg, "--terminate")
    if not (isinstance(obj, Termination) or callable(obj)):
        raise CliError(f"--terminate {arg}: expected a function fn(t, x) -> bool or a Termination, got "
                       f"{type(obj).__name__}")
    return obj
