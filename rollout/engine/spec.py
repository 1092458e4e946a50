"""The run specification: what ``rollout()`` is asked to do, as small frozen objects checked once.

``rollout()``'s keywords are a convenience layer over ``RunSpec``: ``RunSpec.from_options(**keywords)``
sorts each keyword into its group (the table ``GROUPS``), and ``check_spec`` validates everything
that does not need the scene, before anything is loaded, compiled or written. ``make_plan`` then
resolves the scene-dependent parts (backend, integrator, timestep, initial states) into a ``Plan``.
A multi-process run hands the same spec to every process (``distributed_rollout``), and the CLI
builds its keywords from one option table (``rollout/cli/options.py``), so an option has one path.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mjharness.adapters.backends import AUTO, BACKEND_NAMES

from ..errors import RolloutError
from .episodes import ON_TERMINATE, as_termination
from .randomize import parse_dist

SEMANTICS = ("live", "sampled")
COMPRESSIONS = (None, "gzip", "lzf")
MJX_MODES = ("adapt", "strict")
CONTACT_MODES = ("refuse", "exclude")


@dataclass(frozen=True)
class Start:
    """Where and how the worlds start.

    Attributes:
        batch: number of worlds (copies of the scene's default state), or None with ``x0``.
        x0: explicit initial states (B, n), or (n,) with ``batch``.
        seed: seed of the initial perturbation (per world: (seed, world)) and of noise.
        perturb: std-dev of the initial perturbation of velocities (qvel; every state of a model
            without ``qvel_segment``).
        perturb_qpos: std-dev of the initial perturbation of positions (qpos; quaternions renormalised).
        t0: time of x0.
        ctrl: None, an array (B, steps, nu), a jit-able ``ctrl(t, x) -> (nu,)`` or a ``Controller`` (a
            controller with state, ``engine.episodes``; its applied controls are recorded as ``/ctrl``).
        model_params: per-world model fields {field path: (B, *shape)}.
        randomize: per-world model fields drawn from distributions {KEY: DIST} (``engine.randomize``),
            keyed by (seed, global world, KEY); derived constants recomputed as ``mj_setConst`` would.
        carry: initial carry (e.g. a previous result's ``carry``); None = cold.
        terminate: None, ``fn(t, x[, sensordata]) -> bool`` or a ``Termination``: ends a world's episode
            after a step (``engine.episodes``).
        on_terminate: "freeze" (the world stops, status ``TERMINATED``) or "reset" (a new episode starts).
        reset_to: where a reset episode starts: "x0" (the world's x0), "draw" (a fresh draw of the initial
            perturbation keyed by (seed, world, episode)) or "key:NAME" (a keyframe).
    """

    batch: int | None = None
    x0: Any = None
    seed: int = 0
    perturb: float = 0.01
    perturb_qpos: float = 0.0
    t0: float = 0.0
    ctrl: Any = None
    model_params: dict | None = None
    randomize: dict | None = None
    carry: dict | None = None
    terminate: Any = None
    on_terminate: str = "freeze"
    reset_to: str = "x0"


@dataclass(frozen=True)
class Recording:
    """What is kept.

    Attributes:
        record_every: keep every k-th state (T = steps // k samples).
        outputs: recorded MuJoCo outputs (``adapters.outputs`` names).
        output_semantics: "live" (at the recorded state) or "sampled" (before the last step, as mj_step).
        keep: hold the trajectory in memory (``keep=False`` with ``out``: read it from the file).
    """

    record_every: int = 1
    outputs: tuple = ()
    output_semantics: str = "live"
    keep: bool = True


@dataclass(frozen=True)
class Storage:
    """Where it goes.

    Attributes:
        out: HDF5 path streamed during the run, or None.
        overwrite: replace an existing ``out``.
        resume: path of a partial (or shorter) file to continue.
        compression: None, "gzip" or "lzf".
        require_space: refuse (instead of warn) when the planned file exceeds the free disk space.
    """

    out: Any = None
    overwrite: bool = False
    resume: Any = None
    compression: str | None = None
    require_space: bool = False


@dataclass(frozen=True)
class Execution:
    """How it runs.

    Attributes:
        backend: "auto" or a name of ``adapters.backends.BACKENDS``.
        devices: None (all), a count or a device list (the batch is sharded over them).
        chunk: steps per compiled call (None: max(1000 steps, 100 samples)).
        watchdog_s: stall limit per chunk (None: environment/default; 0: off).
        progress: a progress bar.
    """

    backend: str = AUTO
    devices: Any = None
    chunk: int | None = None
    watchdog_s: float | None = None
    progress: bool = True


@dataclass(frozen=True)
class Loading:
    """How a scene given by name, path, XML or MjModel is loaded.

    Attributes:
        mjx: "adapt" (meaning-preserving substitutions MJX needs, logged) or "strict".
        quaternion_update: "quaternion" or "quaternion_qdot".
        unsupported_contacts: "refuse" or "exclude" (MJX: drop the pairs it cannot collide).
    """

    mjx: str = "adapt"
    quaternion_update: str = "quaternion"
    unsupported_contacts: str = "refuse"


@dataclass(frozen=True)
class RunSpec:
    """A whole run: ``steps`` of ``dt`` (None: the scene's timestep) and the groups above."""

    steps: int
    dt: float | None = None
    start: Start = field(default_factory=Start)
    recording: Recording = field(default_factory=Recording)
    storage: Storage = field(default_factory=Storage)
    execution: Execution = field(default_factory=Execution)
    loading: Loading = field(default_factory=Loading)

    @classmethod
    def from_options(cls, **options) -> RunSpec:
        """The spec of ``rollout()``'s keywords (each keyword names one field of one group)."""
        unknown = sorted(set(options) - set(OPTION_GROUP))
        if unknown:
            raise RolloutError(f"unknown run option(s) {unknown}; known: {sorted(OPTION_GROUP)}")
        top = {k: options.pop(k) for k in ("steps", "dt") if k in options}
        if "steps" not in top:
            raise RolloutError("steps is required")
        groups = {}
        for name, cls_ in GROUP_TYPES.items():
            mine = {k: v for k, v in options.items() if OPTION_GROUP[k] == name}
            groups[name] = cls_(**mine)
        return cls(**top, **groups)

    def options(self) -> dict:
        """The flat keywords (``from_options``'s inverse)."""
        out = {"steps": self.steps, "dt": self.dt}
        for name in GROUP_TYPES:
            group = getattr(self, name)
            out.update({f.name: getattr(group, f.name) for f in dataclasses.fields(group)})
        return out

    def replace(self, **options) -> RunSpec:
        """A copy with some keywords changed."""
        return RunSpec.from_options(**{**self.options(), **options})


GROUP_TYPES = {"start": Start, "recording": Recording, "storage": Storage, "execution": Execution,
               "loading": Loading}
OPTION_GROUP = {"steps": None, "dt": None, **{f.name: g for g, t in GROUP_TYPES.items()
                                               for f in dataclasses.fields(t)}}


# -- checks that need no scene ---------------------------------------------------------------------

def check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise RolloutError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def check_finite(name, v, lo=None, *, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or (lo is not None and v < lo):
        bound = f" >= {lo}" if lo is not None else ""
        raise RolloutError(f"{name} must be a finite number{bound}, got {v!r}")
    return float(v)


def _choice(name, v, choices):
    if v not in choices:
        raise RolloutError(f"{name} must be one of {choices}, got {v!r}")
    return v


def check_spec(spec: RunSpec) -> RunSpec:
    """The spec with every scene-independent value checked and normalised (one ``RolloutError`` naming
    the first bad value); nothing is loaded, compiled or written."""
    steps = check_int("steps", spec.steps, 1)
    if spec.dt is not None:
        dt = spec.dt
        if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)) or not (
                math.isfinite(dt) and dt > 0):
            raise RolloutError(f"dt must be a finite number > 0, got {dt!r}")
    s, r, st, ex, ld = spec.start, spec.recording, spec.storage, spec.execution, spec.loading
    record_every = check_int("record_every", r.record_every, 1)
    if record_every > steps:
        raise RolloutError(f"record_every={record_every} > steps={steps}: nothing would be recorded")
    outputs = tuple(r.outputs or ())
    if s.randomize is not None and not isinstance(s.randomize, dict):
        raise RolloutError(f"randomize must be a dict {{KEY: DIST}}, got {type(s.randomize).__name__}")
    for key, text in (s.randomize or {}).items():  # the distributions' syntax, before any scene is loaded
        parse_dist(key, text)
    _choice("on_terminate", s.on_terminate, ON_TERMINATE)
    if s.on_terminate == "reset" and s.terminate is None:
        raise RolloutError('on_terminate="reset" needs a terminate rule (terminate=fn(t, x) -> bool)')
    if not (s.reset_to in ("x0", "draw") or (isinstance(s.reset_to, str) and s.reset_to.startswith("key:"))):
        raise RolloutError(f"reset_to must be 'x0', 'draw' or 'key:NAME', got {s.reset_to!r}")
    start = dataclasses.replace(
        s, terminate=as_termination(s.terminate), randomize=dict(s.randomize) if s.randomize else None,
        seed=check_int("seed", s.seed, 0),
        perturb=check_finite("perturb", s.perturb, 0),
        perturb_qpos=check_finite("perturb_qpos", s.perturb_qpos, 0), t0=check_finite("t0", s.t0),
        batch=None if s.batch is None else check_int("batch", s.batch, 1))
    recording = dataclasses.replace(r, record_every=record_every, outputs=outputs,
                                    output_semantics=_choice("output_semantics", r.output_semantics, SEMANTICS))
    if not recording.keep and st.out is None and st.resume is None:
        raise RolloutError("keep=False needs out= (the trajectory would be kept nowhere)")
    c = st.compression
    if not (c in COMPRESSIONS or (isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c <= 9)):
        raise RolloutError(f"compression must be one of {COMPRESSIONS} or a gzip level 0-9, got {c!r}")
    _choice("backend", ex.backend, BACKEND_NAMES)
    if ex.chunk is not None:
        check_int("chunk", ex.chunk, 1)
    if ex.watchdog_s is not None:
        check_finite("watchdog_s", ex.watchdog_s, 0)
    _choice("mjx", ld.mjx, MJX_MODES)
    _choice("unsupported_contacts", ld.unsupported_contacts, CONTACT_MODES)
    return dataclasses.replace(spec, steps=steps, start=start, recording=recording)
