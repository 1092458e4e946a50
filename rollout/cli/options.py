"""``mjharness run``'s command line, derived from the run specification's table of options.

Every option of the run spec (``rollout/engine/spec.py``: type, default, range, documentation, flag, whether
workers get it) that has a flag becomes a row of ``RUN_OPTIONS``; the rows the command itself consumes
(``--integrator``, ``--out``, ``--resume``, ``--ctrl``, ...: files to load, the output's numbering, the launcher)
are ``CLI_OPTIONS`` here. ``add_run_options`` builds the parser, ``forward_argv`` the workers' command line and
``rollout_kwargs`` the call, all from that table; the checks are the spec's (``check_args``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from mjharness.rollout.engine import spec as _spec
from mjharness.rollout.engine.checks import Bool, Choice, Compression, Dict, Outputs

from .common import AUTO, BACKEND_SUMMARIES, DEFAULT_SCENE
from .errors import CliError
from .loaders import bundled_example, object_path, parse_params, parse_randomize

DEFAULT_OUT = "rollout.h5"
# The command line's own defaults (a run that shows something: 1000 steps of 16 worlds, every 10th state, 5 chunks).
DEFAULTS = {name: o.cli_default for name, o in _spec.OPTIONS.items() if o.cli and o.cli_default is not None}


@dataclass(frozen=True)
class Option:
    """One ``mjharness run`` option.

    Attributes:
        flag: the command-line flag (``--steps``).
        kwargs: argparse keywords (``type``, ``choices``, ``nargs``, ``action``, ``help``).
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


def _help(name: str, o: _spec.Opt) -> str:
    default = o.cli_default if o.cli_default is not None else _spec.DEFAULTS[name]
    unit = f" [{o.unit}]" if o.unit else ""
    said = "" if isinstance(o.kind, Bool) or default in (None, (), "") else f" (default {default})"
    return (_backend_help() if name == "backend" else o.doc) + unit + said


def _argparse(name: str, o: _spec.Opt) -> dict:
    """The argparse keywords of a spec option: its kind says how it is typed; every default is None (unset), so
    that a resume can tell an option given from one left to the file."""
    kind = o.kind
    kw: dict[str, Any] = {"help": _help(name, o), "default": None}
    if isinstance(kind, Bool):
        kw.update(action="store_true", default=None)
    elif isinstance(kind, Compression):
        kw.update(choices=("none", "gzip", "lzf"))
    elif isinstance(kind, Choice):
        kw.update(choices=kind.values)
    elif isinstance(kind, Outputs):
        kw.update(nargs="+", metavar="NAME")
    elif isinstance(kind, Dict):
        kw.update(nargs="+", action="extend", metavar="KEY=DIST")
    elif kind.cli_type() is not str:
        kw.update(type=kind.cli_type())
    return kw


def _spec_rows() -> tuple[Option, ...]:
    return tuple(Option(_spec.cli_flag(name), _argparse(name, o), name, o.forward)
                 for name, o in _spec.OPTIONS.items() if o.cli)


# The rows the command consumes itself: files it loads, the output's numbering, the launcher.
CLI_OPTIONS: tuple[Option, ...] = (
    Option("--integrator", dict(help="integrator name (default: the one the scene names; see --list-integrators)")),
    Option("--list-integrators", dict(action="store_true", help="print the integrator names and exit"),
           forward=False),
    Option("--out", dict(help=f"output HDF5 file (default {DEFAULT_OUT}, numbered if it exists)")),
    Option("--resume", dict(metavar="FILE", help="continue FILE (killed or shorter) to --steps; options not given "
                                                 "are the file's")),
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
    Option("--reward", dict(metavar="FILE.py:NAME",
                            help="reward: NAME in FILE.py is fn(t, x) -> float (or a Reward), evaluated per world "
                                 "after each control period (the file's /reward; /episodes gets a return column)")),
    Option("--param", dict(action="append", metavar="FIELD[:NAME]=V1,V2,...",
                           help="per-world model parameter sweep, one world per value (e.g. body_mass:torso=1,2,4; "
                                "dof_damping:hinge=0.1,0.2); several --param zip (same count)")),
    Option("--local-processes", dict(type=int, metavar="N",
                                     help="run as N processes on this machine (JAX distributed runtime, one shard "
                                          "file each)"), forward=False),
    Option("--distributed", dict(action="store_true",
                                 help="this is one process of a multi-process run (MJHARNESS_* or cluster "
                                      "environment variables)"), forward=False),
)
RUN_OPTIONS: tuple[Option, ...] = CLI_OPTIONS[:2] + _spec_rows() + CLI_OPTIONS[2:]
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


def cli_value(name: str, v):
    """A parsed flag's value as ``rollout()`` takes it (None: not given)."""
    o = _spec.OPTIONS[name]
    if v is None:
        return None
    if name == "progress":
        return not v  # the flag is --no-progress
    if isinstance(o.kind, Dict):
        return parse_randomize(v)
    if isinstance(o.kind, Outputs):
        return tuple(v)
    return None if isinstance(o.kind, Compression) and v == "none" else v


def given_options(args) -> dict:
    """``rollout()``'s keywords of the spec's options given on the command line."""
    kw = {}
    for o in RUN_OPTIONS:
        if o.rollout is not None:
            v = cli_value(o.rollout, getattr(args, o.dest, None))
            if v is not None:
                kw[o.rollout] = v
    return kw


class _Given:
    """Stands for a value the command loads later (a --terminate rule, a --reward, a --ctrl file) in the early
    checks."""

    def __repr__(self):
        return "given"

    def __call__(self, t, x):
        return False


def check_args(args) -> None:
    """Every option value and combination (by the run spec's own checks), the output folder, the randomize and
    --param specs and the files named: before the scene loads or anything is printed, compiled or written (one
    ``CliError`` naming the option)."""
    from mjharness.rollout.errors import RolloutError

    kw = given_options(args)
    if args.resume:
        if not os.path.isfile(args.resume):
            raise CliError(f"--resume {args.resume}: no such file")
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise CliError(f"--resume {args.resume} continues that file; --out {args.out} names another (drop --out)")
    elif args.out is not None:
        check_out(args.out, bool(args.overwrite))
    if args.local_processes is not None and args.local_processes < 1:
        raise CliError(f"--local-processes must be >= 1, got {args.local_processes}")
    check_randomize(kw.get("randomize"))
    parse_params(args.param)
    for flag, arg in (("--controller", args.controller), ("--terminate", args.terminate), ("--reward", args.reward)):
        if arg:
            path = object_path(arg, flag)
            if bundled_example(path) is None and not os.path.isfile(path):
                raise CliError(f"{flag} {arg}: no such file {path!r} (bundled examples: `mjharness examples`)")
    if args.ctrl and not args.ctrl.startswith("key:") and not os.path.isfile(args.ctrl):
        raise CliError(f"--ctrl {args.ctrl}: no such file")
    fresh = {k: v for k, v in DEFAULTS.items() if k not in kw} if not args.resume else {}
    try:
        _spec.check_spec(_spec.RunSpec.from_options(
            **fresh, **kw, out=args.out or (None if args.resume else DEFAULT_OUT), resume=args.resume,
            terminate=_Given() if (args.terminate or args.resume) else None,
            reward=_Given() if args.reward else None, keep=False))
    except RolloutError as e:
        raise CliError(cli_spelling(str(e))) from None


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
    """What the command takes from the file being resumed, as ``h5.read_resume`` read it (the file, or a shard of
    it): the scene (the model that ran, bit for bit), the integrator, the float width; the engine takes every
    run option not given again from the file itself."""
    from mjharness.integrators import ContractError, resolve_integrator

    a = info.attrs
    cfg = a.get("integrator") or {}
    name = args.integrator or cfg.get("name")
    try:
        resolve_integrator(name)
    except ContractError as e:
        raise CliError(f"--resume {args.resume}: cannot rebuild integrator {cfg!r} ({e}); use the Python API") \
            from None
    for key, flag in (("controller", "--controller"), ("terminate", "--terminate"),
                      ("reward", "--reward")):  # code is not in the file
        if a.get(key) and not getattr(args, key):
            raise CliError(f"--resume {args.resume}: the run had a {key} ({a[key]}); pass {flag} FILE.py:NAME again "
                           f"(the same function)")
    return dict(scene=args.scene or info.model, label=args.scene or a.get("scene") or args.resume, integrator=name,
                out=None, dtype=args.dtype or {True: "float64", False: "float32"}.get(a.get("x64")),
                # the file's reason while --backend defers to the file (an explicit --backend is "asked for")
                backend_reason=f"the file's: {a['backend_reason']}" if a.get("backend_reason") and not args.backend
                else None, file=a)


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
    return dict(scene=args.scene or DEFAULT_SCENE, label=args.scene or DEFAULT_SCENE, integrator=args.integrator,
                out=out, dtype=args.dtype, backend_reason=None, file={})


def rollout_kwargs(args, s: dict) -> dict:
    """``rollout()``'s keywords from the parsed options ``args`` and the settings ``s`` (fresh or resumed): the
    options given, the command line's defaults for a fresh run (a resume's are the file's)."""
    kw = given_options(args)
    if not args.resume:
        kw = {**{k: v for k, v in DEFAULTS.items() if k not in kw}, **kw}
    return dict(kw, out=s["out"], resume=args.resume, keep=False)


def setting(kw: dict, s: dict, name: str):
    """A run option's value for the command's messages: given, else the resumed file's, else the default."""
    if kw.get(name) is not None:
        return kw[name]
    v = s["file"].get(name)
    return v if v not in (None, "") else _spec.DEFAULTS[name]


def cli_spelling(message: str) -> str:
    """A ``rollout()`` message in the command line's words: ``resume='f.h5'`` -> ``--resume f.h5``,
    ``steps=20000`` -> ``--steps 20000``, ``overwrite=True`` -> ``--overwrite``, for every option of the table."""
    import re

    flags = {o.rollout or o.dest: o.flag for o in RUN_OPTIONS}
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    message = re.sub(rf"\b({names})=True\b", lambda m: flags[m.group(1)], message)
    message = re.sub(rf"\b({names})='([^']*)'", lambda m: f"{flags[m.group(1)]} {m.group(2)}", message)
    message = re.sub(rf"(?<![\w.-])({names})=(?!=)", lambda m: f"{flags[m.group(1)]} ", message)
    message = re.sub(rf"^({names}) must be", lambda m: f"{flags[m.group(1)]} must be", message)  # "dt must be"
    return message.replace(" (CLI: --overwrite)", "").replace("--overwrite (CLI: --overwrite)", "--overwrite")
