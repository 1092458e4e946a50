"""A rollout file as the cross-check reads it: trajectory, layout, model, and the time grid of its samples."""

from __future__ import annotations

import os
from dataclasses import dataclass

import mujoco
import numpy as np

from mjharness.integrators import StateLayout
from mjharness.integrators.errors import UserError
from mjharness.rollout.h5 import RolloutFileError, open_rollout


class CrossCheckError(UserError, ValueError):
    """The file cannot be cross-checked as asked (names the file and the reason)."""


@dataclass
class Recorded:
    path: str
    time: np.ndarray        # (T,)
    x: np.ndarray           # (T, B, n)
    x0: np.ndarray          # (B, n)
    layout: StateLayout
    attrs: dict
    mjcf: str
    status: np.ndarray
    complete: bool
    model_params: dict
    has_qpos: bool
    model: mujoco.MjModel | None   # the model that ran (the file's binary model, else its XML); None: not MuJoCo


def read_recorded(path) -> Recorded:
    path = os.fspath(path)
    with open_rollout(path) as f:
        if f.samples == 0:
            raise CrossCheckError(f"{path}: no samples flushed yet; nothing to check")
        try:
            model = f.model() if (f.mjcf or f.mjb is not None) else None
        except RolloutFileError as e:
            raise CrossCheckError(str(e)) from None
        return Recorded(path=path, time=f.time, x=f.x, x0=f.x0, layout=f.layout, attrs=f.attrs, mjcf=f.mjcf,
                        status=f.status, complete=f.complete, model_params=f.model_params,
                        has_qpos="qpos" in f.h5, model=model)


def sample_grid(rec: Recorded) -> tuple[float, int, float]:
    """(t0, steps per sample, dt) such that sample j is at t0 + (j + 1) * steps * dt."""
    a = rec.attrs
    dt, R, t0 = float(a["dt"]), int(a["record_every"]), float(a.get("t0", 0.0))
    want = t0 + (np.arange(len(rec.time)) + 1) * R * dt
    if not np.allclose(rec.time, want, rtol=0, atol=1e-9 * max(1.0, abs(want[-1]))):
        raise CrossCheckError(f"{rec.path}: recorded times are not t0 + (j+1) * record_every * dt "
                              f"(t0={t0}, dt={dt}, record_every={R}); cannot re-simulate onto them")
    return t0, R, dt


def comparable_fields(layout, mjmodel) -> dict[str, tuple[slice, bool]]:
    """Comparable fields: every layout state (slice, is_quaternion) plus qpos / qvel."""
    out = {r.name: (r.value_slice, r.update != "euclidean") for r in layout.records}
    if mjmodel is not None:
        out["qpos"] = (slice(0, mjmodel.nq), False)
        out["qvel"] = (slice(mjmodel.nq, mjmodel.nq + mjmodel.nv), False)
    return out


def value_index(layout, names) -> np.ndarray:
    """Indices into x of the named states, in the order given."""
    return np.concatenate([np.arange(layout[n].offset, layout[n].offset + layout[n].size) for n in names])


def abs_diff(a, b, sign_free: bool = False) -> np.ndarray:
    """max |a - b| over the trailing axis; ``sign_free``: quaternions, where q and -q are one rotation."""
    d = np.max(np.abs(a - b), -1)
    return np.minimum(d, np.max(np.abs(a + b), -1)) if sign_free else d


def no_model_params(rec: Recorded, who: str) -> None:
    if rec.model_params:
        raise CrossCheckError(f"{rec.path}: per-world model parameters {sorted(rec.model_params)} were randomized; "
                              f"{who} runs the file's nominal model only (compare against a reference file)")


def partial_reference(rec: Recorded, idx, values) -> np.ndarray:
    """A reference shaped like ``rec.x``: ``values`` (T, B, len(idx)) at ``idx``, NaN elsewhere."""
    ref = np.full_like(rec.x, np.nan)
    ref[..., idx] = values
    return ref
