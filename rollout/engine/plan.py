"""A run planned: every input checked and every default resolved before anything is compiled or written.

``make_plan`` is a short chain of small steps, each giving one frozen sub-plan: the physics (scene,
backend, integrator, timestep), the start (initial states), the per-world model fields, the controls,
the carry, the closed loop and the recording; ``Plan`` is composed of them. A resumed run reads its
file once (``h5.read_resume``): the options not given again are the file's, and the file must match
the run (``resume_plan.check_resume``). The file's root attributes are written from the plan by the
h5 package (``h5.file_attrs``).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mjharness.adapters.backends import AUTO, CtrlMode, requested
from mjharness.integrators import ContractError, check_pair
from mjharness.integrators.names import IntegratorKind, OutputSemantics

from .. import h5
from ..errors import RolloutError
from . import memory as _memory
from .episodes import EpisodePlan
from .inputs import (
    backend_model,
    carry_plan,
    check_carry,
    check_ctrl,
    check_devices,
    check_model_params,
    check_out,
    check_outputs,
    check_x0,
    initial_states,
    mujoco_model,
    nu_of,
    numeric_array,
)
from .loop_plan import check_episodes
from .resolve import needs_sensors, resolve_run_scene, resolve_scene, run_needs, scene_integrator, scene_timestep
from .resume_plan import RESUME_EPISODES, check_resume, resume_info, resume_path
from .scene_view import SceneView
from .spec import RESUME_MUST_MATCH, RunSpec, attr_values, check_spec, file_settings
from .world_params import check_resumed_randomize, draw_params

if TYPE_CHECKING:
    from .arguments import IntegratorLike, SceneLike

__all__ = ["Plan", "PhysicsPlan", "StartPlan", "ParamsPlan", "ControlPlan", "CarryPlan", "LoopPlan", "RecordPlan",
           "make_plan", "resolve_scene", "resolve_run_scene", "initial_states", "integrator_config", "run_needs",
           "needs_sensors", "check_model_params", "check_ctrl", "check_x0", "check_carry", "check_out",
           "check_devices", "check_outputs", "backend_model", "mujoco_model", "nu_of", "RESUME_MUST_MATCH",
           "RESUME_EPISODES", "DEFAULT_CHUNK_SAMPLES", "DEFAULT_CHUNK_STEPS"]

integrator_config = h5.integrator_config
DEFAULT_CHUNK_SAMPLES = 100   # samples per chunk when ``chunk`` is not given ...
DEFAULT_CHUNK_STEPS = 1000    # ... but at least this many steps


@dataclass(frozen=True)
class PhysicsPlan:
    """What evaluates and advances the worlds."""

    scene: Any              # the resolved scene (an MjScene on its backend, a System, a user's model)
    integ: Any              # the integrator object
    kind: IntegratorKind    # its kind (integrators.check_pair)
    dt: float
    view: SceneView         # the scene's features the engine reads, read once
    backend_reason: str
    integ_source: str       # "argument" or "scene"


@dataclass(frozen=True)
class StartPlan:
    x0: np.ndarray          # (B, n)
    t0: float
    seed: int
    world_offset: int = 0   # global index of world 0 (a process's shard of a multi-process run)
    start_step: int = 0     # a resumed run's first step


@dataclass(frozen=True)
class ParamsPlan:
    fields: dict            # per-world model fields {field path: (B, *shape)}, explicit and drawn
    randomize: dict | None  # the distributions they were drawn from (the file's on a resume)


@dataclass(frozen=True)
class ControlPlan:
    mode: CtrlMode
    array: np.ndarray | None
    fn: Any


@dataclass(frozen=True)
class CarryPlan:
    spec: tuple             # ((name, shape), ...): the scene's entries, the integrator's, then the closed loop's
    initial: dict           # name -> (B, *shape): cold, given, or the resumed file's


@dataclass(frozen=True)
class LoopPlan:
    episodes: EpisodePlan | None   # a controller with state / a termination rule (episodes.py)
    reset: tuple = ()              # (x (B, n) an episode restarts from, cold carry) when resetting


@dataclass(frozen=True)
class RecordPlan:
    steps: int
    record_every: int
    samples: int            # T
    chunk: int              # steps per chunk (a multiple of record_every)
    outputs: tuple          # adapters.outputs.OutputSpec rows
    semantics: OutputSemantics
    out: str | None


@dataclass(frozen=True)
class Plan:
    """A resolved run: what ``engine.run.execute`` carries out (built by ``make_plan``, never edited)."""

    physics: PhysicsPlan
    start: StartPlan
    params: ParamsPlan
    control: ControlPlan
    carry: CarryPlan
    loop: LoopPlan
    record: RecordPlan
    devices: tuple
    spec: RunSpec                    # the checked spec (a resume's: with the file's settings)
    option_attrs: dict               # the options the file records, encoded (spec.attr_values)
    extra_attrs: dict = field(default_factory=dict)   # a process's share of a multi-process run
    resume: h5.ResumeInfo | None = None                # the file a resumed run continues, read once
    attrs: dict = field(default_factory=dict)          # the file's root attributes (h5.file_attrs)


def chunk_steps(chunk: int | None, steps: int, record_every: int) -> int:
    """Steps per chunk: ``chunk`` (default max(1000 steps, 100 samples)) in whole samples, at most the run."""
    if chunk is None:
        chunk = max(DEFAULT_CHUNK_STEPS, DEFAULT_CHUNK_SAMPLES * record_every)
    chunk = -(-chunk // record_every) * record_every  # whole samples per chunk
    return min(chunk, -(-steps // record_every) * record_every)


def _physics(scene, integrator, spec: RunSpec, info: h5.ResumeInfo | None, label) -> PhysicsPlan:
    """The scene on its backend (a resume continues on the file's), its integrator and timestep."""
    st, rec, ex, ld = spec.start, spec.recording, spec.execution, spec.loading
    backend = requested(((info and info.setting("backend")) or AUTO, f"resume={label!r}"), (ex.backend, "the run"))
    params = st.model_params or (info.model_params if info else {})
    scene, why = resolve_run_scene(
        scene, mjx=ld.mjx, quaternion_update=ld.quaternion_update, backend=backend,
        needs=run_needs(params, rec.outputs, st.randomize), unsupported_contacts=ld.unsupported_contacts,
        need_sensors=needs_sensors(rec.outputs, st.ctrl, st.terminate, st.reward))
    integ = scene_integrator(scene, integrator)
    try:
        kind = check_pair(scene, integ)
    except ContractError as e:
        raise RolloutError(str(e)) from None
    if kind == "stochastic" and getattr(scene.layout, "diffusion_size", None) == 0:
        warnings.warn(f"{type(integ).__name__} is a stochastic integrator, but the scene has no noise source (add "
                      f"one with add_joint_noise / add_body_noise): the run is deterministic", UserWarning,
                      stacklevel=4)
    return PhysicsPlan(scene=scene, integ=integ, kind=kind, dt=scene_timestep(scene, spec.dt),
                       view=SceneView.of(scene), backend_reason=why,
                       integ_source="argument" if integrator is not None else "scene")


def _start(ph: PhysicsPlan, spec: RunSpec, info: h5.ResumeInfo | None, world_offset: int, label) -> StartPlan:
    """The initial states: given, drawn (``batch`` perturbed copies) or the resumed file's."""
    st = spec.start
    x0, batch = st.x0, st.batch
    if info is not None:
        if x0 is not None or st.model_params:
            raise RolloutError("resume takes x0 and model_params from the file; do not pass them")
        if st.carry is not None:
            raise RolloutError("resume takes the carry from the file; do not pass carry")
        if batch is not None and batch != info.batch:
            raise RolloutError(f"resume={label!r}: the file has batch {info.batch}, batch={batch} was asked")
        n = ph.scene.layout.size
        if info.n != n:  # another model: name both scenes (a state-size mismatch is the first thing that shows it)
            raise RolloutError(f"resume={label!r}: the file ran the scene {info.attrs.get('scene', '?')!r} ({info.n} "
                               f"states); this run gives {h5.scene_name(ph.view)!r} ({n} states)")
        x0, batch = info.x0, None
    if x0 is not None:
        x0 = check_x0(x0, batch, ph.scene.layout)
    else:
        x0 = initial_states(ph.scene, 1 if batch is None else batch, st.seed, st.perturb, st.perturb_qpos)
    return StartPlan(x0=x0, t0=st.t0, seed=st.seed, world_offset=world_offset)


def _params(ph: PhysicsPlan, spec: RunSpec, start: StartPlan, info: h5.ResumeInfo | None, label) -> ParamsPlan:
    st, B = spec.start, start.x0.shape[0]
    fields = check_model_params(ph.scene, info.model_params if info else st.model_params, B)
    file_randomize = info.raw_attrs.get("randomize") or None if info else None
    randomize = check_resumed_randomize(st.randomize, file_randomize, label if info else None)
    if st.randomize and info is None:
        fields = check_model_params(ph.scene, draw_params(ph.scene, st.randomize, st.seed, start.world_offset, B,
                                                          fields), B)
    return ParamsPlan(fields=fields, randomize=randomize)


def _memory_check(ph: PhysicsPlan, spec: RunSpec, info, out_specs: tuple, chunk: int, devices: tuple) -> None:
    """Refuse a run that cannot fit in memory, before its initial states are built."""
    x0, rec = spec.start.x0, spec.recording
    batch = info.batch if info else (x0.shape[0] if x0 is not None and np.ndim(x0) == 2 else (spec.start.batch or 1))
    _memory.check(scene=ph.scene, layout_size=ph.scene.layout.size, batch=batch,
                  samples=spec.steps // rec.record_every, chunk_samples=chunk // rec.record_every,
                  outputs=out_specs, keep=rec.keep, devices=devices)


def _disk_check(plan: Plan) -> None:
    """Warn (or refuse, ``require_space``) when the planned file exceeds the free disk space."""
    rec = plan.record
    if rec.out is None:
        return
    warn = _memory.check_space(rec.out, _memory.planned_file_bytes(
        n=plan.physics.scene.layout.size, nc=sum(int(np.prod(sh, dtype=np.int64)) for _, sh in plan.carry.spec),
        batch=plan.start.x0.shape[0], samples=rec.samples - plan.start.start_step // rec.record_every,
        output_width=sum(int(np.prod(o.shape)) for o in rec.outputs)), require=plan.spec.storage.require_space)
    if warn:
        warnings.warn(warn, RuntimeWarning, stacklevel=4)


def _settings(spec: RunSpec, ph: PhysicsPlan, start: StartPlan, params: ParamsPlan, rec: RecordPlan) -> dict:
    """Every option's value as the run resolved it (what the file records)."""
    return {**spec.options(), "dt": ph.dt, "batch": start.x0.shape[0], "chunk": rec.chunk,
            "backend": str(ph.view.backend), "quaternion_update": ph.view.quaternion_update,
            "randomize": params.randomize, "outputs": tuple(o.name for o in rec.outputs)}


def make_plan(scene: SceneLike, integrator: IntegratorLike, spec: RunSpec, *, world_offset: int = 0,
              extra_attrs: dict | None = None) -> Plan:
    """The ``Plan`` of ``spec`` (``engine/spec.py``) on ``scene`` with ``integrator``: every input checked,
    the backend, integrator and timestep resolved, before anything is compiled or written.
    ``world_offset``/``extra_attrs``: a process's share of a multi-process run (``engine.distributed``)."""
    spec = check_spec(spec)
    if spec.start.x0 is not None:  # lists and JAX arrays too; a string or ragged rows refused naming x0
        spec = spec.with_values({"x0": numeric_array("x0", spec.start.x0)})
    st = spec.storage
    label = getattr(st.resume, "path", st.resume)  # a path, or an h5.ResumeInfo the caller already read
    out = resume_path(label, st.out) if label is not None else check_out(st.out, st.overwrite)
    if out is not None:
        h5.check_not_in_use(out)  # a live writer holds it: refused before anything changes
    info = resume_info(st.resume, out, keep=spec.recording.keep)
    if info is not None:
        spec = file_settings(spec, info.raw_attrs)  # the options not given again are the file's
    rec = spec.recording
    ph = _physics(scene, integrator, spec, info, label)
    out_specs = check_outputs(ph.scene, rec.outputs, rec.output_semantics)
    devices = check_devices(spec.execution.devices)
    chunk = chunk_steps(spec.execution.chunk, spec.steps, rec.record_every)
    _memory_check(ph, spec, info, out_specs, chunk, devices)
    start = _start(ph, spec, info, world_offset, label)
    B = start.x0.shape[0]
    control = ControlPlan(*check_ctrl(ph.scene, spec.start.ctrl, B, spec.steps, ph.scene.layout.size))
    params = _params(ph, spec, start, info, label)
    carry_spec, carry0 = carry_plan(ph.scene, ph.integ, ph.dt, B)
    episodes, ep_spec, ep_carry0, reset = check_episodes(ph.scene, spec.start, start.x0, carry_spec, carry0,
                                                         world_offset)
    all_carry = carry_spec + ep_spec
    carry = CarryPlan(spec=all_carry, initial=check_carry(spec.start.carry, all_carry, {**carry0, **ep_carry0},
                                                          defaults=tuple(ep_carry0)))
    record = RecordPlan(steps=spec.steps, record_every=rec.record_every, samples=spec.steps // rec.record_every,
                        chunk=chunk, outputs=out_specs, semantics=OutputSemantics(rec.output_semantics), out=out)
    plan = Plan(physics=ph, start=start, params=params, control=control, carry=carry,
                loop=LoopPlan(episodes=episodes, reset=reset), record=record, devices=devices, spec=spec,
                option_attrs=attr_values(_settings(spec, ph, start, params, record)),
                extra_attrs=dict(extra_attrs or {}),
                resume=info)
    plan = dataclasses.replace(plan, attrs=h5.file_attrs(plan))
    plan = check_resume(plan) if info is not None else plan
    _disk_check(plan)
    return plan
