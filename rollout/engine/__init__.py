"""The batched rollout engine: many worlds, many steps, any of our integrators, streamed to HDF5.

``plan`` checks every input and resolves defaults (nothing compiled or written yet); ``chunk`` holds
the compiled function that advances the batch by one chunk of steps (named pytrees in and out);
``run`` is the host loop around it (device transfers, the HDF5 writer, resume, statistics);
``results`` is what ``rollout`` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mjharness.integrators import lazy

if TYPE_CHECKING:  # loaded on first use (``lazy``): the CLI checks options with ``randomize`` before JAX loads
    from .arguments import IntegratorLike, SceneLike
    from .distributed import DistributedError, distributed_rollout, initialize
    from .episodes import Controller, Reward, Termination
    from .plan import RolloutError, initial_states, integrator_config, make_plan, resolve_scene
    from .results import RolloutResult
    from .run import execute
    from .simulate import simulate
    from .spec import Execution, Loading, Recording, RunSpec, Start, Storage, check_spec

__all__ = ["rollout", "rollout_from_spec", "Controller", "Termination", "Reward", "make_plan", "execute",
           "RunSpec", "Start", "Recording", "Storage", "Execution", "Loading",
           "check_spec",
           "simulate", "initialize", "distributed_rollout", "DistributedError",
           "RolloutResult", "RolloutError", "resolve_scene", "initial_states",
           "integrator_config"]


def rollout(scene: SceneLike, integrator: IntegratorLike = None, **options: Any) -> RolloutResult:
    """Roll ``scene`` out for ``batch`` worlds and ``steps`` steps of ``dt`` with ``integrator``.

    scene: an ``MjScene`` (or any model with ``.layout``/``.dynamics``), an ``MjModel``, a path, an
        XML string or a bundled name (loaded with the ``mjx``, ``quaternion_update`` and
        ``unsupported_contacts`` options).
    integrator: an integrator object, class or registered name; None (default) = the scene's own
        (``<option integrator=...>``: Euler -> semi_implicit_euler, RK4 -> rk4, implicitfast ->
        implicit_fast). Adaptive integrators take ``dt`` as the output interval; stochastic ones
        draw ``step_key(seed, world, step)``.
    options: the run options, keywords only, each one field of ``RunSpec`` (``engine/spec.py``): its type,
        default, unit, combinations, command-line flag and file attribute are in that table and in the
        option reference, docs/options.md (``help(rollout)`` lists them too). An unknown keyword, a value
        of the wrong type or range, or a combination without effect is one ``RolloutError`` naming the
        option, raised before anything is loaded, compiled or written.

    Carried state (``mjharness.integrators.contracts``): a scene's carry (MjScene: the solver warm start
    ``qacc_warmstart``, cold at the start) and an adaptive integrator's next step size go from step to
    step beside ``x``, are saved in the file's ``/carry`` and are in ``result.carry`` after the run; pass
    ``carry=result.carry, x0=result.x[-1], t0=result.time[-1]`` to continue a run in memory.

    A resume (``resume=path``) continues a partial or shorter file to ``steps``: the options the file
    records are taken from it when not given and must match it when given; results equal an uninterrupted
    run, bit for bit.

    Multi-process (after ``jax.distributed.initialize`` / ``initialize()``, ``jax.process_count() > 1``):
    the same call on every process; needs ``out``; each process streams its worlds to
    ``<out>.p<k>-of-<N>.h5`` and process 0 joins them into ``out`` (``engine.distributed``).
    """
    from .spec import RunSpec

    return rollout_from_spec(scene, integrator, RunSpec.from_options(**options))


def rollout_from_spec(scene: SceneLike, integrator: IntegratorLike, spec: RunSpec) -> RolloutResult:
    """A whole run from its specification (``engine/spec.py``); ``rollout`` is this with keywords."""
    import jax

    from mjharness.scenes.settings import configure

    configure()  # float64, the XLA:CPU flag, the caches (idempotent): before the first array
    from .distributed import distributed_rollout
    from .plan import make_plan
    from .run import execute

    if jax.process_count() > 1:  # launched as N processes (jax.distributed.initialize): this one's worlds
        return distributed_rollout(scene, integrator, spec)
    return execute(make_plan(scene, integrator, spec))


def _signature_and_doc() -> None:
    """``rollout``'s signature and option list, from the spec's table (one place for each option)."""
    import inspect

    from .spec import DEFAULTS, OPTIONS, option_line

    P = inspect.Parameter
    params = [P("scene", P.POSITIONAL_OR_KEYWORD), P("integrator", P.POSITIONAL_OR_KEYWORD, default=None)]
    params += [P(name, P.KEYWORD_ONLY, default=P.empty if name == "steps" else DEFAULTS[name]) for name in OPTIONS]
    rollout.__signature__ = inspect.Signature(params, return_annotation="RolloutResult")  # type: ignore[attr-defined]
    rollout.__doc__ = (rollout.__doc__ or "") + "\n    Options:\n\n" + "\n".join(
        "    " + option_line(name) for name in OPTIONS) + "\n"


_signature_and_doc()
__getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)
