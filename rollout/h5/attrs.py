"""The root attributes of a rollout file, written from a run's plan (``file_attrs``).

The plan hands over what it resolved: the options the file records (already encoded by the run spec,
``plan.option_attrs``), the scene's view, the integrator, the controls' and the closed loop's description.
Here they become the attributes that say which model, which code and which settings made the file (and
that a resume must match).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from datetime import datetime, timezone
from typing import Any

import numpy as np

from .format import FORMAT, FORMAT_VERSION
from .model import model_sha256


@functools.cache  # a distribution's metadata is parsed once per process, not once per run
def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def integrator_config(integ: Any) -> dict:
    """An integrator's settings as JSON-able data (its ``config()``, or its class name and repr)."""
    cfg = getattr(integ, "config", None)
    if callable(cfg):
        out = cfg()
        if isinstance(out, dict):
            return json.loads(json.dumps(out, default=str))
    return {"name": type(integ).__name__, "repr": repr(integ)}


def ctrl_attr(mode: str, arr: np.ndarray | None, fn: Any) -> str:
    """What drove the worlds (``mode``: a ``CtrlMode``): an array (by its digest), a function (by name), a
    controller, or none."""
    from mjharness.adapters.backends.base import CtrlMode  # on use: importing h5 must load neither JAX nor MuJoCo

    if mode == CtrlMode.ARRAY:
        return "array sha256:" + hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
    if mode == CtrlMode.CALLABLE:
        return f"callable {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return "controller" if mode == CtrlMode.CONTROLLER else "none"


def _versions() -> dict:
    import jax
    import mujoco

    x64 = bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]  # jax's Config sets its flags at run time
    return dict(mujoco_version=mujoco.__version__, mjx_version=version("mujoco-mjx"), jax_version=jax.__version__,
                mjharness_version=version("mjharness"), x64=x64)


def scene_name(view: Any) -> str:
    """The scene as the file's ``scene`` attribute names it (its source: a bundled name, a path, or XML)."""
    from mjharness.scenes import scene_info

    return scene_info(view.model).source if view.model is not None else view.name


def _scene_attrs(view: Any) -> dict:
    model = view.model
    out = dict(model_sha256=model_sha256(model) if model is not None else "", scene=scene_name(view))
    if view.describe is not None:  # a System records its members, order and couplings; /model is its first MjScene's
        out.update(system=json.dumps(view.describe()), model_note="/model is the first MjScene member of the system")
    return out


def file_attrs(plan: Any) -> dict:
    """The root attributes of the file ``plan`` (``engine.plan.Plan``) writes."""
    sp, ctl, loop = plan.physics, plan.control, plan.loop
    attrs: dict[str, Any] = dict(format=FORMAT, format_version=FORMAT_VERSION, **_versions(),
                                 integrator=json.dumps(integrator_config(sp.integ)), integrator_source=sp.integ_source,
                                 created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 ctrl=ctrl_attr(ctl.mode, ctl.array, ctl.fn), **_scene_attrs(sp.view))
    attrs.update(plan.option_attrs)
    attrs["backend_reason"] = sp.backend_reason
    if loop.episodes is not None:
        attrs.update(loop.episodes.describe())
    if plan.record.outputs:
        attrs["output_semantics"] = str(plan.record.semantics)  # the plain string
    attrs.update(plan.extra_attrs)
    return attrs
