"""Trace-time MJX check: models ``put_model`` accepts but ``mjx.forward`` cannot trace.

Some models pass every check of ``compat.check_mjx`` (and MJX's own ``put_model``/``make_data``) and
then fail inside the first ``jit`` with a raw JAX traceback, e.g. a ``touch`` sensor on a model with
constraint rows but no possible contact (MJX 3.17 ``sensor_acc`` concatenates an empty list:
``ValueError: Need at least one array to concatenate``). ``check_mjx_trace`` traces ``mjx.forward``
abstractly with ``jax.eval_shape`` (a jaxpr trace: no XLA compile, nothing runs), classifies a failure
by where in MJX it happened, and either adapts (sensor evaluation failed and no sensor output is
needed: switch sensors off with the ``sensor`` disable flag, which changes no dynamics) or refuses with
one ``SceneError`` carrying a stable code. Each verdict is remembered per model (its ``mjb`` bytes)
and MuJoCo/MJX/JAX version, in memory and on disk, so a repeat load costs a hash, not a trace.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import os
import traceback

import mujoco
import numpy as np

from .errors import SceneError
from .mjx_support import _codes, _entry, _enum_name, _name, _refusal_message

__all__ = ["check_mjx_trace", "trace_forward", "verdict"]


_SENSOR_STAGE = {"sensor_pos": mujoco.mjtStage.mjSTAGE_POS, "sensor_vel": mujoco.mjtStage.mjSTAGE_VEL,
                 "sensor_acc": mujoco.mjtStage.mjSTAGE_ACC}
_MJX_SRC_DIR = ("mjx", "_src")  # MJX's source folder, where a failing trace's frames are
_MJX_SRC = os.sep + os.path.join(*_MJX_SRC_DIR) + os.sep
_VERDICTS: dict[str, dict | None] = {}  # verdict key -> trace_forward's result, this process


def _settings():
    # The trace starts JAX's backend (MJX asks jax.default_backend() while building data), so mjharness's
    # process settings (float64, XLA:CPU flags, compile cache; also applied when mjharness.adapters is
    # imported) must be in effect now, or they come too late. Imported at call time: loading a scene
    # without tracing it needs no JAX.
    settings = importlib.import_module("mjharness.scenes.settings")
    settings.configure()
    return settings


def _jax():
    _settings()
    import jax

    return jax


def _constructors():
    """MJX's JAX-backend put_model/make_data (what the public ones call for impl="jax"), so that the
    whole model is built inside the trace and no device array is made; the public API otherwise.

    The one use of MJX's private API outside ``adapters/backends`` (tests/test_private_api.py names it): the
    loader (``load_scene``) runs this trace, and ``scenes`` may not import ``adapters``; the public
    constructors would pick a device and name themselves in a failure's classification instead."""
    from .settings import import_mjx, mjx

    import_mjx()  # quietly, before its private module imports it
    from mujoco.mjx._src import io as mjx_io

    put, make = getattr(mjx_io, "_put_model_jax", None), getattr(mjx_io, "_make_data_jax", None)
    if put is None or make is None:  # another MJX layout
        return mjx.put_model, mjx.make_data
    return put, make


def _frames(exc) -> list:
    """Traceback frames of ``exc`` and of the exceptions it was raised from (JAX re-raises)."""
    out: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out = traceback.extract_tb(exc.__traceback__) + out
        exc = exc.__cause__ or exc.__context__
    return out


def _classify(exc) -> dict:
    """Where in MJX a trace failed: stage ("sensor", "put_model" or "forward"), the MJX function
    ``mjx.forward`` (or put_model/make_data) was in, and the innermost MJX place."""
    # "wrapper": MJX's named_scope decorator, between every stage and its caller
    mjx_frames = [f for f in _frames(exc) if _MJX_SRC in f.filename and f.name != "wrapper"]
    files = [os.path.basename(f.filename) for f in mjx_frames]
    inner = mjx_frames[-1] if mjx_frames else None
    top = next((i for i, f in enumerate(mjx_frames) if f.name == "forward" and files[i] == "forward.py"), None)
    if top is not None and top + 1 < len(mjx_frames):
        stage = "sensor" if files[top + 1] == "sensor.py" else "forward"
        function = mjx_frames[top + 1].name
    elif top is None and inner is not None and "io.py" in files:
        stage, function = "put_model", mjx_frames[files.index("io.py")].name
    else:
        stage, function = "forward", "forward"
    folder = "/".join(_MJX_SRC_DIR)
    where = f"{folder}/{os.path.basename(inner.filename)}:{inner.lineno} in {inner.name}" if inner else None
    text = " ".join(str(exc).split())
    return {"stage": stage, "function": function, "where": where,
            "error": f"{type(exc).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"}


def trace_forward(model: mujoco.MjModel) -> dict | None:
    """Trace ``mjx.forward`` on ``model`` with ``jax.eval_shape``; None when it traces, else ``_classify``'s
    description of the failure. Nothing is compiled or run."""
    jax = _jax()
    from .settings import mjx

    put, make = _constructors()

    def forward():
        mx = put(model)
        return mjx.forward(mx, make(mx))

    try:
        jax.eval_shape(forward)
    except Exception as e:  # any failure is the model's verdict; MJX raises all kinds while tracing
        return _classify(e)
    return None


# ---- verdict cache -----------------------------------------------------------------------------------
def _cache_dir() -> str:
    """``mjx_trace/`` in mjharness's JAX cache directory ("" when that cache is off)."""
    base = _settings().cache_dir()
    return os.path.join(base, "mjx_trace") if base else ""


def _verdict_key(model: mujoco.MjModel) -> str:
    from importlib import metadata

    jax = _jax()
    try:
        mjx_version = metadata.version("mujoco-mjx")
    except metadata.PackageNotFoundError:
        mjx_version = "?"
    buf = np.empty(mujoco.mj_sizeModel(model), np.uint8)
    mujoco.mj_saveModel(model, None, buf)
    # the buffer itself: no copy (numpy's stubs declare ndarray's buffer protocol for Python >= 3.12 only)
    h = hashlib.sha256(buf)  # type: ignore[arg-type]
    h.update(f"mujoco {mujoco.__version__} mjx {mjx_version} jax {jax.__version__} "
             f"x64 {bool(jax.config.jax_enable_x64)}".encode())
    return h.hexdigest()


def verdict(model: mujoco.MjModel, *, cache: bool = True) -> dict | None:
    """``trace_forward(model)``, remembered per model and JAX/MJX version in memory and on disk
    (``cache=False`` traces anew). A verdict is a pure function of the model bytes and the versions."""
    key = _verdict_key(model)
    if cache and key in _VERDICTS:
        return _VERDICTS[key]
    d = _cache_dir()
    path = os.path.join(d, key + ".json") if d else ""
    if cache and path and os.path.isfile(path):
        try:
            with open(path) as f:
                _VERDICTS[key] = json.load(f)["failure"]
            return _VERDICTS[key]
        except (OSError, ValueError, KeyError):
            pass  # unreadable: trace again and overwrite
    failure = _VERDICTS[key] = trace_forward(model)
    if path:
        try:  # an unwritable cache is no reason to fail: the check just runs again next time
            os.makedirs(d, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"failure": failure}, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return failure


# ---- verdicts -----------------------------------------------------------------------------------------
def _stage_sensors(model, function) -> list[str]:
    """Labels of the sensors MJX evaluates in ``function`` (sensor_pos/vel/acc), all sensors otherwise."""
    stage = _SENSOR_STAGE.get(function)
    out = []
    for i in range(model.nsensor):
        if stage is None or int(model.sensor_needstage[i]) == int(stage):
            n = _name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
            out.append(f"{_enum_name(mujoco.mjtSensor, model.sensor_type[i])} sensor "
                       + (repr(n) if n else f"#{i} (unnamed)"))
    return out


def _failure_entry(model, failure: dict, *, adapt: bool, need_sensors: bool, sensors_off: bool) -> dict:
    call = failure["function"] if failure["stage"] == "put_model" else f"mjx.forward -> {failure['function']}"
    where = call + (f", {failure['where']}" if failure["where"] else "")
    if failure["stage"] == "sensor":
        sensors = _stage_sensors(model, failure["function"])
        if need_sensors:
            fix = ("sensor outputs were requested, so the sensors cannot be switched off: remove or change these "
                   "sensors, or do not request sensor outputs")
        else:
            fix = ("load with mjx=\"adapt\", which switches sensors off (<flag sensor=\"disable\"/>: the dynamics do "
                   "not change, sensordata stays zero), or remove these sensors")
        return _entry("error", "MJX_TRACE_SENSOR",
                      f"MJX accepts this model but cannot trace its sensor evaluation ({where}: {failure['error']}); "
                      f"sensors evaluated there: {', '.join(sensors) or 'none'}", fix,
                      element="sensor", sensors=sensors, adapt="none" if (need_sensors or not adapt) else "automatic",
                      **failure)
    what = "building the MJX model/data" if failure["stage"] == "put_model" else "tracing mjx.forward"
    note = " (with sensors switched off)" if sensors_off else ""
    if model.nv == 0:  # MJX's scans need a dof (MJX 3.17: "Scan across Model with zero DoFs unsupported")
        fix = "the model has no degrees of freedom (nv=0), so there is nothing to integrate: add a joint"
    else:
        fix = "MJX cannot run this model as it is: run it with MuJoCo C, or remove the feature the MJX function named"
    return _entry("error", "MJX_TRACE_FAILED",
                  f"MJX accepts this model but fails while {what}{note} ({where}: {failure['error']})", fix,
                  element="model", nv=int(model.nv), adapt="none", **failure)


def check_mjx_trace(model: mujoco.MjModel, source: str = "MjModel", *, need_sensors: bool = False,
                    adapt: bool = True, cache: bool = True) -> tuple[mujoco.MjModel, list[dict]]:
    """Trace ``mjx.forward`` on ``model`` abstractly; returns ``(model for MJX, log entries)`` or raises.

    A model that traces comes back unchanged with no entries. When only sensor evaluation fails,
    ``adapt`` is true and ``need_sensors`` false, the result is a copy with the ``sensor`` disable flag
    (the caller's model is not touched) and one ``MJX_TRACE_SENSOR`` warning. Anything else raises one
    ``SceneError`` naming ``source``, with code ``MJX_TRACE_SENSOR`` or ``MJX_TRACE_FAILED``.
    ``cache=False`` traces even when this model was checked before. Nothing is compiled.
    """
    failure = verdict(model, cache=cache)
    if failure is None:
        return model, []
    sensors_on = model.nsensor > 0 and not model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_SENSOR
    if failure["stage"] == "sensor" and adapt and not need_sensors and sensors_on:
        first = _failure_entry(model, failure, adapt=True, need_sensors=False, sensors_off=False)
        adapted = copy.copy(model)
        adapted.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
        again = verdict(adapted, cache=cache)
        if again is None:
            c = first["context"]
            return adapted, [_entry(
                "warning", "MJX_TRACE_SENSOR",
                f"switched sensors off (<flag sensor=\"disable\"/>): MJX cannot trace their evaluation "
                f"({c['function']}: {c['error']}); the dynamics are unchanged, sensordata stays zero "
                f"(sensors: {', '.join(c['sensors']) or 'none'})",
                "remove or change these sensors to keep sensordata, or pass need_sensors=True to refuse instead",
                element="option/flag", action="flag", flag="sensor", sensors=c["sensors"],
                **{k: c[k] for k in ("stage", "function", "where", "error")})]
        failure, model_msg, sensors_off = again, adapted, True
    else:
        model_msg, sensors_off = model, False
    entry = _failure_entry(model_msg, failure, adapt=adapt, need_sensors=need_sensors, sensors_off=sensors_off)
    raise SceneError(source, _refusal_message([entry], [], False), codes=_codes([entry]))
