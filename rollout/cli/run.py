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

import sys

from . import launch
from .common import DEFAULT_SCENE, import_mujoco, scene_label
from .errors import CliError
from .loaders import load_controller, load_ctrl, load_reward, load_terminate, param_arrays, parse_params
from .options import (
    DEFAULT_OUT,
    DEFAULTS,
    add_run_options,
    check_args,
    cli_spelling,
    fresh_settings,
    resume_settings,
    rollout_kwargs,
    setting,
)
from .summary import episode_lines, flagged_lines

__all__ = ["add_parser", "command", "DEFAULT_OUT", "DEFAULTS"]


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="roll a scene out for many worlds and write HDF5",
                       description="Roll SCENE out for --batch worlds and --steps steps; stream to --out.")
    add_run_options(p)  # rollout/cli/options.py: the one table of run options
    p.set_defaults(func=command, subject=subject)


def subject(args) -> str:
    if args.resume and not args.scene:
        return f"the scene of {args.resume}"
    return f"scene {scene_label(args.scene or DEFAULT_SCENE)!r}"


def _header(s: dict, kw: dict, scene, why: str, process) -> str:
    from mjharness.integrators import resolve_integrator

    dt, batch = setting(kw, s, "dt"), setting(kw, s, "batch")
    name = resolve_integrator(s["integrator"]).name if s["integrator"] else f"{scene.default_integrator} (the scene's)"
    dt = f"{dt:g}" if dt is not None else f"{scene.model.opt.timestep:g} (the scene's)"
    procs = f", {process[1]} processes" if process else ""
    return (f"mjharness run: {scene_label(s['label'])}, {name}, dt={dt}, {setting(kw, s, 'steps')} steps, batch "
            f"{batch if batch is not None else '(the file' + chr(39) + 's)'}, record every "
            f"{setting(kw, s, 'record_every')}{procs}, backend {scene.backend} ({why})")


def command(args) -> int:
    if args.list_integrators:
        from mjharness.integrators import integrator_names

        print("\n".join(integrator_names()))
        return 0
    check_args(args)  # every option, file and spec, before JAX, MJX or the scene load (a second or more)
    import_mujoco(args)
    from mjharness.adapters import configure
    from mjharness.rollout.engine import RolloutError, rollout

    if args.local_processes:
        return launch.launch_local(args)
    configure()  # float64, the XLA:CPU flag, the caches, the log filter: before any array (--dtype may change it)
    process = launch.initialize() if args.distributed else None  # (k, n): this process is one of n
    s, kw, info, params = _call(args, process)
    if kw.get("progress", True) and (process is None or process[0] == 0):  # loading can take seconds (MJX check)
        print(f"mjharness run: loading {scene_label(s['label'])}...", file=sys.stderr, flush=True)
    scene, why = _scene(args, s, kw, params)
    _loaded_inputs(args, s, kw, scene, params, info)
    if process is None or process[0] == 0:
        print(_header(s, kw, scene, why, process), file=sys.stderr)
    try:
        r = rollout(scene, s["integrator"], **kw)
    except RolloutError as e:  # the run specification's words are Python's: say them as the command line does
        raise CliError(cli_spelling(str(e))) from None
    if process is None:
        _summary(r)
    else:
        launch.process_summary(r, process)
    return 0


def _call(args, process):
    """(settings, rollout() keywords, the resumed file as read or None, the --param sweep): a resume reads its file
    once, here."""
    info = None
    if args.resume:
        from mjharness.rollout.h5 import read_resume

        info = read_resume(launch.resume_source(args.resume, process), model=args.scene is None)  # the one read
        s = resume_settings(args, info)
    else:
        s = fresh_settings(args, number_out=process is None)
    if s["dtype"]:  # before anything is loaded or traced: MJX models and every array follow it
        import jax

        jax.config.update("jax_enable_x64", s["dtype"] == "float64")
    params, n_param = parse_params(args.param)
    kw = rollout_kwargs(args, s)
    if params:
        if args.resume:
            raise CliError("--param with --resume: a resume takes the per-world parameters from the file")
        if args.batch is not None and args.batch != n_param:
            raise CliError(f"--param gives {n_param} worlds (one per value) but --batch is {args.batch}")
        kw["batch"] = n_param
    if info is not None and process is None:
        kw["resume"] = info  # the engine takes the file as read here (one open)
    return s, kw, info, params


def _scene(args, s: dict, kw: dict, params):
    """(the scene on its backend, why that backend): resolved here, so that the header and --ctrl see its model."""
    from mjharness.adapters.backends import AUTO, requested
    from mjharness.rollout.engine.plan import needs_sensors, resolve_run_scene, run_needs

    outputs = setting(kw, s, "outputs")
    outputs = tuple(o for o in outputs.split(",") if o) if isinstance(outputs, str) else outputs
    backend = requested((s["file"].get("backend") or AUTO, f"--resume {args.resume}"), (kw.get("backend", AUTO),
                                                                                       "--backend"))
    scene, why = resolve_run_scene(s["scene"], mjx=setting(kw, s, "mjx"),
                                   quaternion_update=setting(kw, s, "quaternion_update"), backend=backend,
                                   needs=run_needs(dict(params), outputs, kw.get("randomize")),
                                   unsupported_contacts=setting(kw, s, "unsupported_contacts"),
                                   need_sensors=needs_sensors(outputs) or bool(
                                       args.controller or args.terminate or args.reward))
    why = s.get("backend_reason") or why
    if hasattr(scene, "backend_note"):  # the file records why, not "asked for" (the CLI resolved the scene itself)
        scene.backend_note = why
    return scene, why


def _loaded_inputs(args, s: dict, kw: dict, scene, params, info) -> None:
    """The keywords the flags' files give once the scene is known: --param arrays, --ctrl, --controller,
    --terminate."""
    if params:
        kw["model_params"] = param_arrays(params, scene)
    if args.ctrl and args.controller:
        raise CliError("--ctrl and --controller both give the controls: pass one")
    if args.ctrl:
        batch = kw.get("batch") or info.batch
        kw["ctrl"] = load_ctrl(args.ctrl, scene.model, batch, setting(kw, s, "steps"))
    if args.controller:
        kw["ctrl"] = load_controller(args.controller, scene.model)
    if args.terminate:
        kw["terminate"] = load_terminate(args.terminate)
    if args.reward:
        kw["reward"] = load_reward(args.reward)


def _summary(r) -> None:
    import numpy as np

    from mjharness.integrators.status import failed, status_name
    from mjharness.rollout.bench.report import format_bytes

    st, B = r.stats, len(r.status)
    which = ""
    if st["worlds_failed"]:
        bad = [int(i) for i in np.flatnonzero(failed(np.asarray(r.status)))]
        which = " (" + "; ".join(f"world {i}: {status_name(r.status[i])} at step {int(r.status_step[i])}"
                                 for i in bad[:5]) + (", ..." if len(bad) > 5 else "") + ")"
    print(f"  worlds: {st['worlds_ok']}/{B} ok, {st['worlds_failed']} failed{which}")
    for line in episode_lines(r.path if r._loop_info is not None else None):  # no file read without a loop
        print(line)
    for line in flagged_lines(st.get("flagged", {})):
        print(line)
    print(f"  wall {st['wall_s']:.2f} s, compile {st['compile_s']:.2f} s (trace {st['trace_s']:.2f} s, "
          f"{st['trace_cache']}), run {st['run_s']:.2f} s, "
          f"{st['steps_per_s']:.0f} steps/s ({st['world_steps_per_s']:.0f} world-steps/s) on {st['devices']} device(s)")
    print(f"  file {r.path} ({format_bytes(st['file_bytes'])}, {len(r.time)} samples x {B} worlds x {r.layout.size} "
          f"states, complete)")
