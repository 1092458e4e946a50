"""Another rollout file as the reference: states matched by name, put onto this file's times."""

from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicSpline

from .recorded import CrossCheckError, Recorded, read_recorded, value_index


def interpolate(t_ref, y_ref, t):
    """(y_ref (Tr, ...) on the times t, how, interpolated count): exact samples where the times coincide
    (to 1e-9 relative), a cubic spline elsewhere."""
    tol = 1e-9 * max(1.0, float(np.max(np.abs(t_ref))))
    idx = np.searchsorted(t_ref, t)
    idx_c = np.clip(idx, 0, len(t_ref) - 1)
    idx_l = np.clip(idx - 1, 0, len(t_ref) - 1)
    near = np.where(np.abs(t_ref[idx_c] - t) <= np.abs(t_ref[idx_l] - t), idx_c, idx_l)
    exact = np.abs(t_ref[near] - t) <= tol
    out = y_ref[near].copy()
    if np.all(exact):
        return out, "none (times coincide)", 0
    out[~exact] = CubicSpline(t_ref, y_ref, axis=0)(t[~exact])
    return out, "cubic spline", int((~exact).sum())


def _sign_aligned(y, quat_slices):
    """y (T, B, n) with each quaternion's sign made continuous along time (so a spline sees no jumps)."""
    y = y.copy()
    for s in quat_slices:
        q = y[..., s]
        flips = np.cumprod(np.where(np.sum(q[1:] * q[:-1], -1) < 0, -1.0, 1.0), axis=0)
        y[1:, :, s] = q[1:] * flips[..., None]
    return y


def reference_from_file(rec: Recorded, ref_path):
    """(reference like rec.x, covered value indices, info) from the rollout file ``ref_path``."""
    other = read_recorded(ref_path)
    if other.x.shape[1] != rec.x.shape[1]:
        raise CrossCheckError(f"{ref_path}: batch {other.x.shape[1]} differs from {rec.path}'s {rec.x.shape[1]}")
    t_ref = np.concatenate([[float(other.attrs.get("t0", 0.0))], other.time])
    span = 1e-9 * max(1.0, abs(t_ref[-1]))
    if rec.time[0] < t_ref[0] - span or rec.time[-1] > t_ref[-1] + span:
        raise CrossCheckError(f"{ref_path}: covers t = {t_ref[0]:g} .. {t_ref[-1]:g}, but {rec.path} runs to "
                              f"{rec.time[-1]:g}; the reference must span the recorded times")
    quats = [r.value_slice for r in other.layout.records if r.update != "euclidean"]
    y_ref = _sign_aligned(np.concatenate([other.x0[None], other.x], axis=0), quats)
    y_on, how, n_interp = interpolate(t_ref, y_ref, rec.time)
    ours = {r.name: r for r in rec.layout.records}
    mapped = [r.name for r in other.layout.records if r.name in ours and ours[r.name].size == r.size]
    if not mapped:
        raise CrossCheckError(f"{ref_path}: no state of {rec.path}'s layout ({rec.layout.names}) is in the reference")
    mine, theirs = value_index(rec.layout, mapped), value_index(other.layout, mapped)
    ref = np.full_like(rec.x, np.nan)
    ref[..., mine] = y_on[..., theirs]
    info = dict(method=f"reference file {ref_path}", reference_integrator=other.attrs.get("integrator"),
                reference_dt=other.attrs.get("dt"), interpolation=how, interpolated_samples=n_interp,
                x0_max_abs_diff=float(np.max(np.abs(other.x0[:, theirs] - rec.x0[:, mine]))), states=mapped)
    return ref, set(mine.tolist()), info
