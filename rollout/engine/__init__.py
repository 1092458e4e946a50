"""The batched rollout engine: many worlds, many steps, any of our integrators, streamed to HDF5.

``plan`` checks every input and resolves defaults (nothing compiled or written yet); ``chunk`` holds
the compiled function that advances the batch by one chunk of steps (named pytrees in and out);
``run`` is the host loop around it (device transfers, the HDF5 writer, resume, statistics);
``results`` is what ``rollout`` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mjharness.integrators import lazy

if TYPE_CHECKING:  # loaded on first use (``lazy``): the CLI checks options with ``randomize`` before JAX loads
    from .distributed import DistributedError, distributed_rollout, initialize
    from .episodes import Controller, Termination
    from .plan import RolloutError, initial_states, integrator_config, make_plan, resolve_scene
    from .results import RolloutResult
    from .run import execute
    from .simulate import simulate
    from .spec import Execution, Loading, Recording, RunSpec, Start, Storage, check_spec

__all__ = ["rollout", "rollout_from_spec", "Controller", "Termination", "make_plan", "execute",
           "RunSpec", "Start", "Recording", "Storage", "Execution", "Loading",
           "check_spec",
           "simulate", "initialize", "distributed_rollout", "DistributedError",
           "RolloutResult", "RolloutError", "resolve_scene", "initial_states",
           "integrator_config"]


def rollout(scene, integrator=None, *, dt: float | None = None, steps: int, batch: int | None = None, x0=None,
            ctrl=None, seed: int = 0, record_every: int = 1, out=None, progress: bool = True, chunk: int | None = None,
            overwrite: bool = False, resume=None, model_params: dict | None = None, compression=None,
            perturb: float = 0.01, perturb_qpos: float = 0.0, devices=None, watchdog_s: float | None = None,
            keep: bool = True, t0: float = 0.0, mjx: str = "adapt", quaternion_update: str = "quaternion",
            carry: dict | None = None, outputs=None, output_semantics: str = "live", backend: str = "auto",
            unsupported_contacts: str = "refuse", randomize: dict | None = None,
            require_space: bool = False, terminate=None, on_terminate: str = "freeze",
            reset_to: str = "x0") -> RolloutResult:
    """Roll ``scene`` out for ``batch`` worlds and ``steps`` steps of ``dt`` with ``integrator``.

    scene: an ``MjScene`` (or any model with ``.layout``/``.dynamics``), an ``MjModel``, a path, an
        XML string or a bundled name (loaded with ``mjx`` mode and ``quaternion_update``).
    integrator: an integrator object, class or registered name; None (default) = the scene's own
        (``<option integrator=...>``: Euler -> semi_implicit_euler, RK4 -> rk4, implicitfast ->
        implicit_fast). Adaptive integrators take ``dt`` as the output interval; stochastic ones
        draw ``step_key(seed, world, step)``.
    dt: the step; None (default) = the scene's ``opt.timestep``.
    batch / x0: ``batch`` perturbed copies of the default state (velocities moved by ``perturb`` * N(0,1),
        positions by ``perturb_qpos`` * N(0,1), seeded per world by (seed, i)), or explicit initial
        states ``x0`` (B, n) (or (n,) with ``batch``).
    ctrl: None, an array (B, steps, nu) (one control per step), a jit-able ``ctrl(t, x) -> (nu,)``, or a
        ``Controller(init, step, every=1)`` with per-world state (``engine.episodes``): ``init(x0) -> c0``,
        ``step(t, x, c) -> (u, c_next)``, jit-able or plain NumPy; its state travels in the carry and the applied
        controls are recorded (``/ctrl``, (T, B, nu)); docs/episodes.md.
    terminate: ``fn(t, x) -> bool`` per world (or ``Termination(fn, every, sensors)``), evaluated after each step:
        ``on_terminate="freeze"`` stops the world (status ``TERMINATED``), ``"reset"`` starts a new episode
        from ``reset_to`` ("x0", "draw": a fresh initial perturbation keyed by (seed, world, episode), or
        "key:NAME") with the integrator's and the controller's state reset. ``/episode`` (T, B) and
        ``/episodes`` record the episodes; ``open_rollout(path).episodes(world)`` cuts them.
    model_params: per-world model fields, e.g. ``{"opt.gravity": (B, 3), "body_mass": (B, nbody)}`` (MJX field
        paths; on MuJoCo C the MjModel's), set as given (derived constants keep their nominal values).
    randomize: per-world model fields drawn from distributions, ``{KEY: DIST}``: KEY ``field`` or ``field:name``
        (``body_mass:torso``, ``dof_damping:hinge``, ``geom_friction:floor[0]``), DIST ``uniform(a, b)``,
        ``normal(mu, sigma)``, ``loguniform(a, b)`` or ``choice(v1, ...)``, prefixed ``*`` (scale the nominal
        value) or ``+`` (add to it). World i draws from (seed, global i, KEY); explicit ``model_params`` are set
        first and the draws apply on top; each world's derived constants are then recomputed by ``mj_setConst``
        (``engine.randomize``). The drawn and derived fields are ``result.model_params`` and the file's
        ``/model_params/<field>`` (attribute ``randomize``: the distributions); docs/randomize.md.
    record_every: keep every k-th state; T = steps // record_every samples, at t0 + (j+1) k dt.
    chunk: steps per compiled call (rounded up to a multiple of record_every); device memory holds one
        chunk of samples. Default: max(1000 steps, 100 samples).
    out: HDF5 path streamed while the run goes (refuses an existing file unless ``overwrite``).
    resume: path of a partial (or complete) rollout file to continue to ``steps``; the scene,
        integrator, dt, record_every, batch and seed must match the file (x0, model_params and the
        carry come from the file). Results equal an uninterrupted run, bit for bit.
    devices: None (all), a count, or a device list; the batch is sharded over them.
    keep: hold the trajectory in memory (default); ``keep=False`` with ``out`` reads it from the file.
    watchdog_s: per-chunk stall limit (``rollout.diagnostics.watchdog``); None = env/default, 0 = off.
    backend: "auto" (default): the scene's own choice, else MJX on a GPU/TPU and MuJoCo C on CPU unless
        the run needs a capability only MJX has (model_params, add_state extras, body noise); "mjx",
        "mujoco" or "warp" fix it (``adapters.backends``). The choice and why are in ``result.stats``
        (``backend``, ``backend_reason``) and the file's root attributes; a resume keeps the file's.
    unsupported_contacts: "refuse" or "exclude" (MJX loading: drop the geom pairs MJX cannot collide).

    Carried state (``mjharness.integrators.contracts``): a scene's carry (MjScene: the solver warm start
    ``qacc_warmstart``, cold at the start) and an adaptive integrator's next step size go from step to
    step beside ``x``, are saved in the file's ``/carry`` and are in ``result.carry`` after the run.
    ``carry``: the initial carry (e.g. the previous run's ``result.carry``, with ``x0=result.x[-1]`` and
    ``t0=result.time[-1]``, to continue a run in memory); None = cold.
    outputs: recorded MuJoCo quantities (``adapters.outputs``): "sensordata", "sensor:<name>", "xpos",
        "site_xpos", "cfrc_ext", "energy", "contact_force", ...; ``result.outputs[name]`` (T, B, ...),
        in the file ``/outputs/<name>``. ``output_semantics``: "live" (at the recorded state, after the
        step) or "sampled" (at the state before the last step, what ``mj_step`` leaves in mjData).

    Multi-process (after ``jax.distributed.initialize`` / ``initialize()``, ``jax.process_count() > 1``):
    the same call on every process; needs ``out``; each process streams its worlds to
    ``<out>.p<k>-of-<N>.h5`` and process 0 joins them into ``out`` (``engine.distributed``).
    """
    options = {k: v for k, v in locals().items() if k not in ("scene", "integrator")}
    from .spec import RunSpec

    return rollout_from_spec(scene, integrator, RunSpec.from_options(**options))


def rollout_from_spec(scene, integrator, spec: RunSpec) -> RolloutResult:
    """A whole run from its specification (``engine/spec.py``); ``rollout`` is this with keywords."""
    import jax

    from .distributed import distributed_rollout
    from .plan import make_plan
    from .run import execute

    if jax.process_count() > 1:  # launched as N processes (jax.distributed.initialize): this one's worlds
        return distributed_rollout(scene, integrator, spec)
    plan = make_plan(scene, integrator, spec)
    st, ex = spec.storage, spec.execution
    return execute(plan, progress=ex.progress, compression=st.compression, watchdog_s=ex.watchdog_s,
                   keep=spec.recording.keep, resume=st.resume is not None)


__getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)
