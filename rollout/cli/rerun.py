"""``mjharness rerun FILE --out NEW.h5``: run again what a rollout file recorded, from the file alone.

    mjharness rerun run.h5 --out again.h5

The model is the file's binary model (``/model/mjb``, the model that ran, bit for bit), the initial
states its ``/x0``, the settings its root attributes (integrator with its configuration, dt, steps,
record_every, seed, t0, chunk, backend, quaternion policy, float width, outputs, randomize,
termination; explicit per-world ``model_params`` when the run did not randomize), array
controls its ``/inputs/ctrl``, and the functions it called (controller, ``ctrl(t, x)``, termination
rule, output functions) are imported again from where ``/code`` says they came from; one whose source
changed since the run (its SHA-256 differs) is refused. On the same backend the new file's ``/x``
equals the old one bit for bit; the command compares them and says so.
"""

from __future__ import annotations

import json
import os
import re

from mjharness.integrators.names import BackendName, OutputSemantics

from .errors import CliError


def add_parser(sub) -> None:
    p = sub.add_parser("rerun", help="run again what a rollout file recorded (model, settings, functions)",
                       description="Rebuild the run FILE recorded (its binary model, x0, settings, controls and "
                                   "the functions /code names) and run it into --out; then compare /x.")
    p.add_argument("file")
    p.add_argument("--out", required=True, help="the new file (refused if it exists, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=command, subject=lambda args: f"file {args.file}")


def _flags(text: str | None) -> dict:
    """``every=2 sensors=True ...`` of a controller/terminate attribute as {"every": 2, "sensors": True}."""
    m = dict(re.findall(r"(every|sensors)=(\w+)", text or ""))
    return dict(every=int(m.get("every", 1)), sensors=m.get("sensors") == "True")


def _integrator(cfg: dict):
    """The integrator a file's ``integrator`` attribute describes (``replay.rebuild_integrator``)."""
    from mjharness.rollout.replay import IntegratorRebuildError, rebuild_integrator

    try:
        return rebuild_integrator(cfg)
    except IntegratorRebuildError as e:
        raise CliError(f"{e}; rerun it from Python with the same integrator object") from None


def _outputs(f, a: dict) -> tuple | None:
    """The outputs asked for (not the ``<contacts>_ncon`` counts a contacts output adds), functions resolved."""
    from mjharness.rollout.h5.provenance import resolve

    names = [o for o in str(a.get("outputs") or "").split(",") if o]
    names = [o for o in names if not (o.endswith("_ncon") and o[:-5] in names)]
    code = f.code
    out = [(o, resolve(f.path, f"output.{o}", code[f"output.{o}"])) if f"output.{o}" in code else o for o in names]
    return tuple(out) or None


def _ctrl(f, a: dict):
    """``rollout``'s ``ctrl`` as the file recorded it: none, the stored array, a function or a Controller."""
    from mjharness.rollout import Controller
    from mjharness.rollout.h5.provenance import resolve

    kind = str(a.get("ctrl") or "none")
    code = f.code
    if kind.startswith("array"):
        if "inputs/ctrl" not in f.h5:
            raise CliError(f"{f.path}: the run's controls were an array that this file does not hold "
                           f"(written before /inputs/ctrl); rerun it from Python with the same array")
        return f.read("inputs/ctrl")
    if kind.startswith("callable"):
        return resolve(f.path, "ctrl", _need(f, code, "ctrl"))
    if kind == "controller":
        init, step = (resolve(f.path, r, _need(f, code, r)) for r in ("controller.init", "controller.step"))
        return Controller(init=init, step=step, **_flags(a.get("controller")))
    return None


def _need(f, code: dict, role: str) -> dict:
    if role not in code:
        raise CliError(f"{f.path}: the run called a {role} function that the file does not record (no /code/{role}: "
                       f"written before /code); rerun it from Python with the same function")
    return code[role]


def _compression(ds):
    """``rollout``'s ``compression`` of a dataset: a gzip level, "lzf" or None."""
    return int(ds.compression_opts) if ds.compression == "gzip" else ds.compression


def rerun_call(path: str) -> tuple:
    """(scene, integrator, rollout keywords) that run again what the rollout file ``path`` recorded."""
    from mjharness.rollout import Termination
    from mjharness.rollout.h5 import open_rollout
    from mjharness.rollout.h5.provenance import resolve

    with open_rollout(path) as f:
        a = f.attrs
        if a.get("system"):
            raise CliError(f"{path}: a System run (several models); rerun it from Python")
        if not f.complete:
            raise CliError(f"{path}: the run did not complete ({f.samples} samples); `mjharness run --resume {path}` "
                           f"continues it")
        model = f.model("mjb")
        kw = dict(x0=f.x0, dt=float(a["dt"]), steps=int(a["steps"]), record_every=int(a["record_every"]),
                  seed=int(a["seed"]), t0=float(a.get("t0", 0.0)), chunk=int(a["chunk"]) if a.get("chunk") else None,
                  backend=a.get("backend") or BackendName.AUTO.value,
                  quaternion_update=a.get("quaternion_update") or "quaternion", outputs=_outputs(f, a),
                  output_semantics=a.get("output_semantics") or OutputSemantics.LIVE.value, ctrl=_ctrl(f, a),
                  compression=_compression(f.h5["x"]))
        if a.get("randomize"):
            kw["randomize"] = json.loads(a["randomize"])
        elif f.model_params:
            kw["model_params"] = f.model_params
        if a.get("terminate"):
            rule = resolve(f.path, "terminate", _need(f, f.code, "terminate"))
            kw.update(terminate=Termination(rule, **_flags(a["terminate"])), on_terminate=a.get("on_terminate") or
                      "freeze", reset_to=a.get("reset_to") or "x0")
        integ = _integrator(a.get("integrator") or {})
    return model, integ, kw


def rerun_lines(f) -> list[str]:
    """How to run the file ``f`` (a ``RolloutFile``) again, for ``mjharness show``: the command and where each
    recorded function comes from (or why it cannot be rerun from the file)."""
    a = f.attrs
    head = f"rerun: mjharness rerun {f.path} --out NEW.h5"
    if a.get("system"):
        return ["rerun: a System run: from Python (the file holds the first model only)"]
    lines = [head + ("" if f.complete else f"  (after `mjharness run --resume {f.path}` completes it)")]
    for role, rec in f.code.items():
        where = f" from {rec['file']}" if rec.get("file") else ""
        ok = "" if rec.get("importable") else "  NOT importable (lambda or nested): rerun from Python"
        lines.append(f"  {role:18s} {rec['module']}.{rec['qualname']}{where} (sha256 {str(rec['sha256'])[:12]}){ok}")
    if str(a.get("ctrl") or "").startswith("array") and "inputs/ctrl" not in f.h5:
        lines.append("  ctrl: an array this file does not hold: rerun from Python with the same array")
    return lines


def command(args) -> int:
    import numpy as np

    from mjharness.rollout import rollout
    from mjharness.rollout.h5 import open_rollout

    if os.path.abspath(args.out) == os.path.abspath(args.file):
        raise CliError("--out must be a new file, not FILE itself")
    scene, integ, kw = rerun_call(args.file)
    with open_rollout(args.file) as f:
        x64 = f.attrs.get("x64")
    if x64 is not None:  # the run's float width, before anything is traced (as `run --dtype` sets it)
        import jax

        jax.config.update("jax_enable_x64", bool(x64))
    rollout(scene, integ, out=args.out, overwrite=args.overwrite, progress=not args.no_progress, keep=False, **kw)
    with open_rollout(args.file) as old, open_rollout(args.out) as new:
        same = old.x.shape == new.x.shape and np.array_equal(old.x.view(np.uint8), new.x.view(np.uint8))
        status = np.array_equal(old.status, new.status)
    print(f"{args.out}: rerun of {args.file}: /x {'identical bit for bit' if same else 'DIFFERS'}, "
          f"/status {'identical' if status else 'DIFFERS'}")
    return 0 if same and status else 1
