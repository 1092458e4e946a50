"""The run specification: every option of a run in one table, with its type, default, range, unit,
combinations, documentation, command-line spelling and file attribute.

Each option is a field of one of the frozen groups below (``Start``, ``Recording``, ``Storage``,
``Execution``, ``Loading``) or of ``RunSpec`` itself (``steps``, ``dt``); its ``Opt`` metadata (made by
``option``) is the one place that says how it is checked (``checks.py``), what it means, how
``mjharness run`` spells it and whether a ``--local-processes`` launcher forwards it, whether the file
records it as a root attribute, and whether a resume takes it from the file. ``rollout()``'s keywords,
the CLI parser, the workers' argv, the file's attributes, the resume matching and the option reference
(docs/options.md, ``scripts/options_doc.py``) are all derived from here: an option is added in this file.

``RunSpec.from_options(**keywords)`` sorts keywords into their groups and remembers which were given;
``check_spec`` checks every value and combination that does not need the scene, before anything is
loaded, compiled or written, raising one ``RolloutError`` naming the option.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mjharness.integrators.names import BackendName, ContactMode, MjxMode, OutputSemantics

from ..errors import RolloutError
from .checks import (
    Bool,
    Choice,
    Compression,
    Devices,
    Dict,
    Float,
    Free,
    Int,
    Kind,
    Outputs,
    Path,
    Pattern,
    RolloutTypeError,
)

# The allowed values of the enums in integrators/names.py (importable without JAX or MuJoCo), as plain strings.
AUTO = BackendName.AUTO.value
BACKEND_NAMES = BackendName.values()
SEMANTICS = OutputSemantics.values()
MJX_MODES = MjxMode.values()
CONTACT_MODES = ContactMode.values()
# Copies of tables of modules that load JAX or MuJoCo, so that the CLI builds its parser from this module without
# either (tests/test_spec_options.py checks that they agree with engine.episodes and the others).
ON_TERMINATE = ("freeze", "reset")
COMPRESSIONS = (None, "gzip", "lzf")
QUATERNION_UPDATES = ("quaternion", "quaternion_qdot")
SEED_MAX = 2**63 - 1    # seeds are int64 file attributes and PRNG keys


class Resume(enum.Enum):
    """What a resume does with an option: nothing; take it from the file when not given (FILE); or that, and
    refuse a given value that differs from the file's (MATCH)."""

    NONE = "none"
    FILE = "file"
    MATCH = "match"


@dataclass(frozen=True)
class Needs:
    """A combination rule: when this option is given (and ``when`` holds for its value), ``option``'s value must
    satisfy ``test``, else the option has no effect or no meaning: refused with ``text``."""

    option: str
    test: Callable[[Any], bool]
    text: str
    when: Callable[[Any], bool] = lambda v: True
    unless: str | None = None           # another option that, when set, satisfies the rule as well


@dataclass(frozen=True)
class Opt:
    """Everything about one run option (``option`` makes the field)."""

    kind: Kind
    doc: str
    unit: str = ""
    cli: bool = True                    # a flag of ``mjharness run``
    flag: str | None = None             # its spelling, when not ``--name-with-dashes``
    cli_default: Any = None             # the command line's default, when it differs from rollout()'s
    forward: bool = True                # a --local-processes launcher passes it to its workers
    attr: str | None = None             # recorded as a root attribute: "always", or "if set" (omitted when falsy)
    encode: Callable[[Any], Any] | None = None   # value -> attribute (None: as is)
    decode: Callable[[Any], Any] | None = None   # attribute -> value (None: as is)
    resume: Resume = Resume.NONE
    needs: tuple[Needs, ...] = ()


def option(default: Any, kind: Kind, doc: str, **meta: Any) -> Any:
    """A spec field with its ``Opt``."""
    return field(default=default, metadata={"opt": Opt(kind, doc, **meta)})


def _names_attr(v) -> str:
    return ",".join(v)


def _names_value(a) -> tuple:
    return tuple(o for o in str(a or "").split(",") if o)


def _json_attr(v) -> str:
    return json.dumps(v, sort_keys=True)


def _json_value(a):
    return json.loads(a) if a else None


_ONE_FILE = Needs("out", lambda v: v is not None, "needs out= (a file to write)")
_TERMINATE = Needs("terminate", lambda v: v is not None, "needs a terminate rule (terminate=fn(t, x) -> bool)")
_RESET = Needs("on_terminate", lambda v: v == "reset", 'has an effect only with on_terminate="reset"')


@dataclass(frozen=True)
class Start:
    """Where and how the worlds start (and what drives them)."""

    batch: int | None = option(
        None, Int(lo=1, none=True), "number of worlds (copies of the scene's default state, perturbed); None with x0",
        cli_default=16, attr="always", resume=Resume.MATCH)
    x0: Any = option(None, Free(text="None or an array (B, n), or (n,) with batch"),
                     "explicit initial states (B, n), or (n,) copied to every world with batch", cli=False)
    seed: int = option(
        0, Int(lo=0, hi=SEED_MAX), "seed of the initial perturbation, of noise and of randomize (per world: "
        "(seed, world))", attr="always", resume=Resume.MATCH)
    perturb: float = option(
        0.01, Float(lo=0.0), "std-dev of the initial perturbation of velocities (qvel; every state of a model "
        "without a qvel segment; with explicit x0: what reset_to='draw' draws)", attr="always",
        resume=Resume.MATCH)
    perturb_qpos: float = option(
        0.0, Float(lo=0.0), "std-dev of the initial perturbation of positions (qpos; quaternions renormalised)",
        attr="always", resume=Resume.MATCH)
    t0: float = option(0.0, Float(), "time of x0", unit="s", cli=False, attr="always", resume=Resume.MATCH)
    ctrl: Any = option(
        None, Free(text="None, an array (B, steps, nu), a function ctrl(t, x[, world]) -> (nu,) or a Controller"),
        "controls: an array (one per step), a jit-able function, or a Controller with state (its applied controls "
        "are recorded as /ctrl; docs/episodes.md)", cli=False)
    model_params: dict | None = option(
        None, Dict(none=True, values="array (B, *field shape)"),
        "per-world model fields {field path: (B, *shape)}, e.g. {'opt.gravity': (B, 3)}; set as given", cli=False)
    randomize: dict | None = option(
        None, Dict(none=True, values="distribution text", str_values=True),
        "per-world model fields drawn from distributions {KEY: DIST}: KEY field[:name][[i]] (body_mass:torso, "
        "geom_friction:floor[0]), DIST uniform(a,b), normal(mu,sigma), loguniform(a,b) or choice(v1,...), prefixed "
        "* (scale) or + (add); keyed by (seed, world, KEY); derived constants recomputed as mj_setConst "
        "(docs/randomize.md)", flag="--randomize", attr="if set", encode=_json_attr, decode=_json_value,
        resume=Resume.FILE)
    carry: dict | None = option(
        None, Dict(none=True, values="array (B, *shape)"),
        "initial carry (e.g. a previous result's carry, to continue a run in memory); None = cold", cli=False)
    terminate: Any = option(
        None, Free(text="None, fn(t, x[, sensordata | world]) -> bool or a Termination"),
        "termination rule, checked per world after each step (docs/episodes.md)", cli=False)
    reward: Any = option(
        None, Free(text="None, fn(t, x[, sensordata | world]) -> float or a Reward"),
        "reward per world, evaluated on the state after each control period (the Controller's every; "
        "docs/episodes.md): the file's /reward and the return column of /episodes", cli=False)
    on_terminate: str = option(
        "freeze", Choice(choices=ON_TERMINATE), "what a terminated world does: freeze (stops, status TERMINATED) or "
        "reset (a new episode starts)", resume=Resume.FILE, needs=(_TERMINATE,))
    reset_to: str = option(
        "x0", Pattern(regex=r"x0|draw|key:.+", text="'x0', 'draw' or 'key:NAME'"),
        "where a reset episode starts: the world's x0, a fresh draw of the initial perturbation (seed, world, "
        "episode), or a keyframe", resume=Resume.FILE, needs=(_TERMINATE, _RESET))


@dataclass(frozen=True)
class Recording:
    """What is kept."""

    record_every: int = option(
        1, Int(lo=1), "keep every k-th state: T = steps / k samples, at t0 + (j+1) k dt", cli_default=10,
        attr="always", resume=Resume.MATCH)
    outputs: tuple = option(
        (), Outputs(), "recorded MuJoCo outputs (sensordata, sensor:<name>, xpos, site_xpos, cfrc_ext, energy, "
        "contact_force, ...): result.outputs[name] (T, B, ...), the file's /outputs/<name>", attr="if set",
        encode=_names_attr, decode=_names_value, resume=Resume.FILE)
    output_semantics: str = option(
        OutputSemantics.LIVE.value, Choice(choices=OutputSemantics), "live: outputs at the recorded state; sampled: "
        "at the state before the last step (what mj_step leaves in mjData)", resume=Resume.FILE, needs=(
            Needs("outputs", bool, "has an effect only with outputs"),))
    keep: bool = option(
        True, Bool(), "hold the trajectory in memory (keep=False with out: read it from the file)", cli=False,
        needs=(Needs("out", lambda v: v is not None, "keep=False needs out= or resume= (the trajectory would be "
                                                      "kept nowhere)", when=lambda v: not v, unless="resume"),))


@dataclass(frozen=True)
class Storage:
    """Where it goes."""

    out: Any = option(None, Path(none=True), "HDF5 path streamed during the run (an existing file is refused "
                      "unless overwrite)", cli=False)
    overwrite: bool = option(False, Bool(), "replace an existing out", needs=(_ONE_FILE,))
    resume: Any = option(None, Path(none=True), "path of a partial (or shorter) rollout file to continue to steps; "
                         "unset options are the file's, given ones must match it", cli=False)
    compression: Any = option(None, Compression(none=True), "HDF5 compression of the samples",
                              needs=(_ONE_FILE,))
    require_space: bool = option(False, Bool(), "refuse (not just warn) when the planned file exceeds the free disk "
                                 "space", needs=(_ONE_FILE,))


@dataclass(frozen=True)
class Execution:
    """How it runs."""

    backend: str = option(
        AUTO, Choice(choices=BackendName), "dynamics backend: auto (the scene's choice, else MJX on a GPU/TPU and "
        "MuJoCo C on CPU unless the run needs an MJX-only capability), or one by name (adapters.backends); a "
        "resume keeps the file's", attr="always", resume=Resume.MATCH)
    devices: Any = option(None, Devices(none=True), "None (all), a count or a device list: the batch is sharded "
                          "over them")
    chunk: int | None = option(
        None, Int(lo=1, none=True), "steps per compiled call, rounded up to a multiple of record_every (default "
        "max(1000 steps, 100 samples)); device memory holds one chunk of samples", cli_default=200, attr="always",
        resume=Resume.FILE)
    watchdog_s: float | None = option(None, Float(lo=0.0, none=True), "stall limit per chunk (None: environment or "
                                      "default; 0: off)", unit="s")
    progress: bool = option(True, Bool(), "a progress bar on stderr", flag="--no-progress")


@dataclass(frozen=True)
class Loading:
    """How a scene given by name, path, XML or MjModel is loaded."""

    mjx: str = option(MjxMode.ADAPT.value, Choice(choices=MjxMode), "adapt: apply and log the meaning-preserving "
                      "substitutions MJX needs; strict: refuse models MJX cannot run")
    quaternion_update: str = option(
        "quaternion", Choice(choices=QUATERNION_UPDATES), "update policy of ball and free-joint attitudes",
        attr="always", resume=Resume.MATCH)
    unsupported_contacts: str = option(
        ContactMode.REFUSE.value, Choice(choices=ContactMode), "MJX: refuse a model with geom pairs MJX cannot "
        "collide, or exclude exactly those pairs (logged)")


GROUP_TYPES: dict[str, type] = {"start": Start, "recording": Recording, "storage": Storage,
                                "execution": Execution, "loading": Loading}


@dataclass(frozen=True)
class RunSpec:
    """A whole run: ``steps`` of ``dt`` and the groups above; ``given``: the options the caller gave."""

    steps: int = option(None, Int(lo=1, none=True), "number of steps (a resume: the file's unless given)",
                        cli_default=1000, attr="always", resume=Resume.FILE)
    dt: float | None = option(None, Float(lo=0.0, gt=True, none=True), "the step (adaptive integrators: the "
                              "output interval); None: the scene's timestep", unit="s", attr="always",
                              resume=Resume.MATCH)
    start: Start = field(default_factory=Start)
    recording: Recording = field(default_factory=Recording)
    storage: Storage = field(default_factory=Storage)
    execution: Execution = field(default_factory=Execution)
    loading: Loading = field(default_factory=Loading)
    given: frozenset = field(default=frozenset(), compare=False)

    @classmethod
    def from_options(cls, **options: Any) -> RunSpec:
        """The spec of ``rollout()``'s keywords (each keyword names one option of ``OPTIONS``)."""
        _refuse_unknown(options)
        if options.get("steps") is None and options.get("resume") is None:
            raise RolloutTypeError("steps is required (the number of steps, an int >= 1)")
        groups = {name: t(**{k: v for k, v in options.items() if OPTION_GROUP[k] == name})
                  for name, t in GROUP_TYPES.items()}
        top = {k: options[k] for k in ("steps", "dt") if k in options}
        return cls(**top, **groups, given=frozenset(options))

    def options(self) -> dict:
        """The flat keywords (``from_options``'s inverse, every option)."""
        return {name: self.get(name) for name in OPTIONS}

    def get(self, name: str) -> Any:
        group = OPTION_GROUP[name]
        return getattr(self if group is None else getattr(self, group), name)

    def replace(self, **options: Any) -> RunSpec:
        """A copy with some options changed (they count as given)."""
        _refuse_unknown(options)
        return dataclasses.replace(self.with_values(options), given=self.given | frozenset(options))

    def with_values(self, values: dict) -> RunSpec:
        """A copy with some options set without counting as given (defaults filled in, e.g. from a file)."""
        out = dataclasses.replace(self, **{k: v for k, v in values.items() if OPTION_GROUP[k] is None})
        for name in GROUP_TYPES:
            mine = {k: v for k, v in values.items() if OPTION_GROUP[k] == name}
            if mine:
                out = dataclasses.replace(out, **{name: dataclasses.replace(getattr(out, name), **mine)})
        return out


def _refuse_unknown(options: dict) -> None:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        import difflib

        hints = {k: difflib.get_close_matches(k, OPTIONS, n=1) for k in unknown}
        said = ", ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
        raise RolloutTypeError(f"unknown run option(s) {said}; the options: docs/options.md")


def _table() -> Iterator[tuple[str, str | None, dataclasses.Field]]:
    for f in dataclasses.fields(RunSpec):
        if "opt" in f.metadata:
            yield f.name, None, f
    for group, t in GROUP_TYPES.items():
        for f in dataclasses.fields(t):
            yield f.name, group, f


OPTIONS: dict[str, Opt] = {name: f.metadata["opt"] for name, _, f in _table()}
OPTION_GROUP: dict[str, str | None] = {name: group for name, group, _ in _table()}
DEFAULTS: dict[str, Any] = {name: f.default for name, _, f in _table()}


def cli_flag(name: str) -> str:
    """An option's command-line flag."""
    return OPTIONS[name].flag or "--" + name.replace("_", "-")


def option_line(name: str) -> str:
    """One line of the option reference: ``name (unit, default): doc``."""
    o, d = OPTIONS[name], DEFAULTS[name]
    said = ", ".join(x for x in (o.unit, "required" if name == "steps" else f"default {d!r}") if x)
    return f"{name} ({said}): {o.doc}"


# -- checks that need no scene ---------------------------------------------------------------------

def check_int(name: str, v: Any, lo: int) -> int:
    return Int(lo=lo).check(name, v)


def _combinations(values: dict, given: frozenset) -> None:
    """Every ``Needs`` rule of the options given a value other than their default: one error naming both options."""
    for name in sorted(given):
        for need in OPTIONS[name].needs:
            v = values[name]
            if _same(v, DEFAULTS[name]):
                continue
            if need.unless is not None and values[need.unless] is not None:
                continue
            if need.when(v) and not need.test(values[need.option]):
                raise RolloutError(f"{name}={v!r} {need.text} ({need.option}={values[need.option]!r})")


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an array
        return False


def check_spec(spec: RunSpec) -> RunSpec:
    """The spec with every scene-independent value and combination checked and normalised (one ``RolloutError``
    naming the first bad option); nothing is loaded, compiled or written."""
    values = {name: OPTIONS[name].kind.check(name, spec.get(name)) for name in OPTIONS}
    if values["terminate"] is not None:  # imported only when needed: the CLI checks its flags before JAX loads
        from .episodes import as_termination

        values["terminate"] = as_termination(values["terminate"])
    if values["reward"] is not None:
        from .episodes import as_reward

        values["reward"] = as_reward(values["reward"])
    if values["randomize"]:  # the distributions' syntax, before any scene is loaded
        from .randomize import parse_dist

        for key, text in values["randomize"].items():
            parse_dist(key, text)
    steps, record_every = values["steps"], values["record_every"]
    if steps is None and values["resume"] is None:
        raise RolloutTypeError("steps is required (the number of steps, an int >= 1)")
    if steps is None:  # a resume: the file's steps (checked again once they are read)
        pass
    elif record_every > steps:
        raise RolloutError(f"record_every={record_every} > steps={steps}: nothing would be recorded")
    elif steps % record_every:
        raise RolloutError(f"steps={steps} is not a multiple of record_every={record_every}: the last "
                           f"{steps % record_every} steps would run unrecorded; give steps="
                           f"{steps - steps % record_every} or {steps + record_every - steps % record_every}")
    _combinations(values, spec.given)
    if values["resume"] is not None and values["out"] is not None:
        import os

        resume = getattr(values["resume"], "path", values["resume"])
        if os.path.abspath(os.fspath(values["out"])) != os.path.abspath(os.fspath(resume)):
            raise RolloutError(f"resume={resume!r} continues that file; out={values['out']!r} must be None or the "
                               f"same path")
    return dataclasses.replace(spec.with_values(values), given=spec.given)


def file_settings(spec: RunSpec, attrs: dict) -> RunSpec:
    """A resumed run's spec: each option a resume takes from the file (``Resume.FILE``) and the caller did not
    give, set to the file's value (``attrs``: the file's decoded root attributes)."""
    taken = {}
    for name, o in OPTIONS.items():
        if o.resume is not Resume.NONE and name not in spec.given and attrs.get(name) not in (None, ""):
            a = attrs[name]
            taken[name] = o.decode(a) if o.decode else a
    return check_spec(spec.with_values(taken)) if taken else spec


def attr_values(settings: dict) -> dict:
    """The file's root attributes of the options it records, from the run's resolved ``settings``."""
    out = {}
    for name, o in OPTIONS.items():
        if o.attr is None or name not in settings:
            continue
        v = settings[name]
        if o.attr == "if set" and not v:
            continue
        out[name] = o.encode(v) if o.encode else v
    return out


# The file attributes a resumed run must match: the options so marked, and what says which model, code and
# float width ran (on_terminate/reset_to/outputs are compared with the closed loop's and the outputs' rules).
RESUME_MUST_MATCH = ("model_sha256", "integrator", "ctrl", "x64") + tuple(
    name for name, o in OPTIONS.items() if o.resume is Resume.MATCH and o.attr is not None)
