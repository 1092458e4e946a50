"""A resumed run against its file: the file must match the run (scene, integrator, settings, carry), and the
run starts after the file's last flushed sample.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from mjharness.scenes import scene_info

from .. import h5
from ..errors import RolloutError
from . import episodes as _ep
from .inputs import mujoco_model
from .spec import RESUME_MUST_MATCH


def resume_path(resume, out) -> str:
    if out is not None and os.path.abspath(os.fspath(out)) != os.path.abspath(os.fspath(resume)):
        raise RolloutError(f"resume={resume!r} continues that file; out={out!r} must be None or the same path")
    path = os.path.abspath(os.fspath(resume))
    if not os.path.isfile(path):
        raise RolloutError(f"resume={resume!r}: no such file")
    if not os.access(path, os.W_OK):
        raise RolloutError(f"resume={resume!r}: file is not writable")
    return path


def resume_info(resume, out, *, keep: bool) -> h5.ResumeInfo | None:
    """The resumed file read once (None for a fresh run); ``resume`` may already be one (the CLI read it)."""
    if resume is None:
        return None
    if isinstance(resume, h5.ResumeInfo):
        if keep and resume.prefix is None:
            return h5.read_resume(resume.path, prefix=True)
        return resume
    return h5.read_resume(out, prefix=keep)


def _config_subset(file_cfg, now_cfg) -> bool:
    """A file written when the integrator attribute held fewer keys (format-v1 files: just the name) matches
    when every key it has is equal now (the format-v1 fixture, data/rollout_format_v1.h5, resumes)."""
    try:
        old, new = json.loads(file_cfg), json.loads(now_cfg)
    except (TypeError, ValueError):
        return False
    return isinstance(old, dict) and isinstance(new, dict) and all(new.get(k) == v for k, v in old.items())


# A closed loop's settings: present in files of runs with a controller / termination rule ("" when absent).
RESUME_EPISODES = ("controller", "terminate", "on_terminate", "reset_to", "reward")


def _integrator_difference(file_cfg, now_cfg) -> str:
    """The integrators of a file and of a run by name (and, for the same name, the settings that differ), not
    as two JSON documents with their Butcher tableaux."""
    def parse(v):
        try:
            return json.loads(v) if isinstance(v, str) else dict(v)
        except (ValueError, TypeError):
            return {"name": str(v)}

    f, n = parse(file_cfg), parse(now_cfg)
    if f.get("name") != n.get("name"):
        return f"integrator: file {f.get('name')!r}, now {n.get('name')!r}"
    keys = sorted(k for k in set(f) | set(n) if f.get(k) != n.get(k))
    return f"integrator {f.get('name')!r}: " + "; ".join(f"{k}: file {f.get(k)!r}, now {n.get(k)!r}" for k in keys)


def check_resume(plan):
    """``plan`` (``engine.plan.Plan``) continuing its file: the file must match it; the plan starts after the file's
    last flushed sample."""
    info = plan.resume
    a = info.raw_attrs
    want = dict(plan.attrs)
    model = mujoco_model(plan.physics.scene)
    if not info.has_mjb and model is not None:  # written before files kept the binary model: hashed the XML
        want["model_sha256"] = h5.model_sha256(scene_info(model).xml)
    bad = [_difference(k, a, want) for k in RESUME_MUST_MATCH if k in a and a[k] != want[k]]
    bad += [f"{k}: file {str(a.get(k, ''))!r}, now {str(want.get(k, ''))!r}" for k in RESUME_EPISODES
            if not _ep.same_function_config(a.get(k, ""), want.get(k, ""))]
    bad += [f"{k}: file {str(a.get(k, ''))!r}, now {str(want.get(k, ''))!r}" for k in ("outputs", "output_semantics")
            if str(a.get(k, "")) != str(want.get(k, ""))]  # absent when nothing is recorded: "" on both sides then
    n = plan.physics.scene.layout.size
    if info.n != n:
        bad.append(f"state size: file {info.n}, now {n}")
    carry_file = [(name, size) for name, size in info.carry_layout]
    carry_now = [(name, int(np.prod(shape, dtype=np.int64))) for name, shape in plan.carry.spec]
    if carry_file != carry_now and not (carry_file == [] and not info.has_carry):
        bad.append(f"carry: file {carry_file}, now {carry_now}")  # (a file from before /carry resumes cold)
    bad = [b for b in bad if b]
    if bad:
        raise RolloutError(f"resume={plan.record.out!r} does not match this run: " + "; ".join(bad))
    planned = int(a["steps"])
    if plan.record.steps < planned:  # the file would stay short of its plan and never be complete
        raise RolloutError(f"resume={plan.record.out!r} was planned for steps={planned} ({info.samples} samples "
                           f"held); steps={plan.record.steps} would leave it incomplete: resume with steps >= "
                           f"{planned}")
    attrs = dict(plan.attrs, created=a.get("created", plan.attrs["created"]), steps=max(plan.record.steps, planned))
    start = dataclasses.replace(plan.start, start_step=info.samples * plan.record.record_every)
    return dataclasses.replace(plan, start=start, attrs=attrs)


def _difference(k: str, a: dict, want: dict) -> str:
    if k == "ctrl" and str(want["ctrl"]).startswith("callable") and str(a.get(k, "")).startswith("callable"):
        return ""  # a callable cannot be compared; the caller is trusted to pass the same one
    if k == "integrator":
        return "" if _config_subset(a[k], want[k]) else _integrator_difference(a[k], want[k])
    if k == "model_sha256":  # another model: name both scenes, not only two hashes
        return (f"the scene: the file ran {a.get('scene', '?')!r} (model_sha256 {str(a[k])[:12]}...), this run "
                f"gives {want.get('scene', '?')!r} ({str(want[k])[:12]}...)")
    return f"{k}: file {a[k]!r}, now {want[k]!r}"
