"""Cross-check a rollout file against a reference: the reference rigid-body model, MuJoCo C, or another file.

    report = crosscheck("run.h5")                                  # reference rigid-body model (single free body)
    report = crosscheck("run.h5", reference="mujoco")              # MuJoCo C mj_step (RK4) from the file's x0
    report = crosscheck("run.h5", reference="peer.h5", tol=1e-8)   # another file, interpolated onto our times
    report.passed, report.fields["brick/quat"].max_abs, report.write("run-check")   # JSON + PNG

    mjharness check run.h5 [--reference model|mujoco|REF.h5] [--fields ...] [--tol 1e-8 | --tol FIELD=1e-8 ...]
                           [--energy-tol X] [--momentum-tol X] [--out PREFIX] [--no-plot] [--save-reference PEER.h5]

The reference trajectory is put onto the recorded times (the model and MuJoCo C are stepped from the
file's ``/x0`` at the file's dt, so their samples fall exactly on the recorded times; a reference file
is taken sample for sample where its times coincide with ours and interpolated by a cubic spline
otherwise). For every compared field (a named state of the layout, or ``qpos``/``qvel``) and every
world the report gives the maximum absolute difference and the time it occurred; quaternions are
compared up to sign (q and -q are one rotation). Energy and angular-momentum drift (max |E(t) - E(0)|,
max |L(t) - L(0)| with L the total angular momentum about the centre of mass of the system, world axes,
both from MuJoCo C's ``mj_energyPos/Vel`` and ``subtree_angmom``) are reported for the recorded
trajectory. A world whose rollout failed (status != 0) fails the check.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators import _config  # noqa: F401  (float64)

from .h5 import RolloutFileError, open_rollout

__all__ = ["crosscheck", "CrossCheckReport", "FieldResult", "CrossCheckError", "reference_model_trajectory",
           "mujoco_peer_trajectory", "recorded_invariants", "add_parser", "main_check"]

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
MAX_INVARIANT_EVALS = 400_000   # mj_forward calls for energy/momentum; beyond this the time axis is strided


class CrossCheckError(ValueError):
    """The file cannot be cross-checked as asked (names the file and the reason)."""


# -- results ------------------------------------------------------------------------------------------

@dataclass
class FieldResult:
    """Max |recorded - reference| of one field: overall (world, time) and per world."""

    name: str
    size: int
    max_abs: float
    world: int
    time: float
    per_world_max: np.ndarray    # (B,)
    per_world_time: np.ndarray   # (B,)
    error_vs_time: np.ndarray    # (T,) max over worlds and components
    tol: float | None = None

    @property
    def passed(self) -> bool:
        return self.tol is None or (math.isfinite(self.max_abs) and self.max_abs <= self.tol)

    def to_dict(self) -> dict:
        return dict(name=self.name, size=self.size, max_abs=self.max_abs, world=self.world, time=self.time,
                    tol=self.tol, passed=self.passed, per_world_max=self.per_world_max.tolist(),
                    per_world_time=self.per_world_time.tolist())


@dataclass
class CrossCheckReport:
    """Outcome of ``crosscheck``; ``passed`` is False when a given tolerance is exceeded or a world failed."""

    path: str
    reference: str
    reference_info: dict
    time: np.ndarray
    fields: dict[str, FieldResult]
    energy: dict | None = None        # max_abs_drift, rel_drift, world, time, per_world, drift_vs_time
    momentum: dict | None = None      # same for |L(t) - L(0)|
    reference_energy: dict | None = None
    failed_worlds: list = field(default_factory=list)
    complete: bool = True
    notes: list = field(default_factory=list)
    energy_tol: float | None = None
    momentum_tol: float | None = None

    @property
    def passed(self) -> bool:
        ok = all(f.passed for f in self.fields.values()) and not self.failed_worlds
        if self.energy_tol is not None and self.energy is not None:
            ok &= self.energy["max_abs_drift"] <= self.energy_tol
        if self.momentum_tol is not None and self.momentum is not None:
            ok &= self.momentum["max_abs_drift"] <= self.momentum_tol
        return bool(ok)

    @property
    def max_abs(self) -> float:
        return max((f.max_abs for f in self.fields.values()), default=0.0)

    def to_dict(self) -> dict:
        def inv(d):
            return None if d is None else {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()
                                           if k != "drift_vs_time"}
        return dict(file=self.path, reference=self.reference, reference_info=self.reference_info,
                    passed=self.passed, complete=self.complete, samples=int(len(self.time)),
                    t_first=float(self.time[0]) if len(self.time) else None,
                    t_last=float(self.time[-1]) if len(self.time) else None, max_abs=self.max_abs,
                    fields={k: f.to_dict() for k, f in self.fields.items()}, energy=inv(self.energy),
                    momentum=inv(self.momentum), reference_energy=inv(self.reference_energy),
                    energy_tol=self.energy_tol, momentum_tol=self.momentum_tol, failed_worlds=self.failed_worlds,
                    notes=self.notes)

    def summary(self) -> str:
        lines = [f"{self.path}  vs  {self.reference}" + ("" if self.complete else "  (file INCOMPLETE)"),
                 f"  {len(self.time)} samples, t = {self.time[0]:g} .. {self.time[-1]:g} s" if len(self.time) else
                 "  no samples",
                 f"  {'field':28s} {'max |diff|':>11s} {'world':>6s} {'at t [s]':>10s} {'tol':>9s}  result"]
        for f in self.fields.values():
            tol = "-" if f.tol is None else f"{f.tol:.1e}"
            res = "" if f.tol is None else ("pass" if f.passed else "FAIL")
            lines.append(f"  {f.name:28s} {f.max_abs:11.3e} {f.world:6d} {f.time:10.4g} {tol:>9s}  {res}")
        for label, d, tol in (("energy drift", self.energy, self.energy_tol),
                              ("ang. momentum drift", self.momentum, self.momentum_tol)):
            if d is not None:
                res = "" if tol is None else ("pass" if d["max_abs_drift"] <= tol else "FAIL")
                tol_s = "-" if tol is None else f"{tol:.1e}"
                lines.append(f"  {label:28s} {d['max_abs_drift']:11.3e} {d['world']:6d} {d['time']:10.4g} "
                             f"{tol_s:>9s}  {res}   (relative {d['rel_drift']:.2e})")
        if self.reference_energy is not None:
            lines.append(f"  {'(reference energy drift)':28s} {self.reference_energy['max_abs_drift']:11.3e}")
        if self.failed_worlds:
            lines.append(f"  FAILED worlds (status != 0): {self.failed_worlds[:10]}"
                         + (" ..." if len(self.failed_worlds) > 10 else ""))
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append(f"  => {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)

    def write(self, prefix, plot: bool = True) -> tuple[str, str | None]:
        """Write ``<prefix>.json`` and (``plot``) ``<prefix>.png`` (error vs time); returns both paths."""
        prefix = os.fspath(prefix)
        if prefix.endswith(".json"):
            prefix = prefix[:-5]
        js = prefix + ".json"
        with open(js, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, default=_json_default)
        png = None
        if plot:
            png = prefix + ".png"
            self._plot(png)
        return js, png

    def _plot(self, png):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        inv = [(k, d) for k, d in (("energy drift |E(t) - E(0)|", self.energy),
                                    ("angular momentum drift |L(t) - L(0)|", self.momentum)) if d is not None]
        n = 1 + len(inv)
        fig, axes = plt.subplots(n, 1, figsize=(8, 3 * n), sharex=True, squeeze=False)
        ax = axes[0, 0]
        floor = 1e-18
        for f in self.fields.values():
            ax.semilogy(self.time, np.maximum(f.error_vs_time, floor), lw=0.9, label=f.name)
            if f.tol is not None:
                ax.axhline(f.tol, ls="--", lw=0.7, color="k")
        ax.set_ylabel("max over worlds |diff|")
        ax.set_title(f"{os.path.basename(self.path)} vs {self.reference}", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        for a, (label, d) in zip(axes[1:, 0], inv):
            a.semilogy(d["time_axis"], np.maximum(d["drift_vs_time"], floor), lw=0.9)
            a.set_ylabel(label, fontsize=8)
        axes[-1, 0].set_xlabel("time [s]")
        fig.tight_layout()
        fig.savefig(png, dpi=100)
        plt.close(fig)


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


# -- reading the file ---------------------------------------------------------------------------------

@dataclass
class _Recorded:
    path: str
    time: np.ndarray        # (T,)
    x: np.ndarray           # (T, B, n)
    x0: np.ndarray          # (B, n)
    layout: object
    attrs: dict
    mjcf: str
    status: np.ndarray
    complete: bool
    model_params: dict
    has_qpos: bool


def _read(path) -> _Recorded:
    path = os.fspath(path)
    with open_rollout(path) as f:
        if f.samples == 0:
            raise CrossCheckError(f"{path}: no samples flushed yet; nothing to check")
        return _Recorded(path=path, time=f.time, x=f.x, x0=f.x0, layout=f.layout, attrs=f.attrs, mjcf=f.mjcf,
                         status=f.status, complete=f.complete, model_params=f.model_params,
                         has_qpos="qpos" in f.h5)


def _model(rec: _Recorded) -> mujoco.MjModel:
    if not rec.mjcf:
        raise CrossCheckError(f"{rec.path}: the file holds no /model/mjcf (not a MuJoCo scene)")
    try:
        return mujoco.MjModel.from_xml_string(rec.mjcf)
    except Exception as e:  # noqa: BLE001 - MuJoCo raises plain ValueError/Exception
        raise CrossCheckError(f"{rec.path}: its /model/mjcf does not compile: {e}") from None


def _grid(rec: _Recorded) -> tuple[float, int, float]:
    """(t0, steps per sample, dt) such that sample j is at t0 + (j + 1) * steps * dt."""
    a = rec.attrs
    dt, R, t0 = float(a["dt"]), int(a["record_every"]), float(a.get("t0", 0.0))
    want = t0 + (np.arange(len(rec.time)) + 1) * R * dt
    if not np.allclose(rec.time, want, rtol=0, atol=1e-9 * max(1.0, abs(want[-1]))):
        raise CrossCheckError(f"{rec.path}: recorded times are not t0 + (j+1) * record_every * dt "
                              f"(t0={t0}, dt={dt}, record_every={R}); cannot re-simulate onto them")
    return t0, R, dt


def _segments(layout, mjmodel) -> dict[str, tuple[slice, bool]]:
    """Comparable fields: every layout state (slice, is_quaternion) plus qpos / qvel."""
    out = {r.name: (r.value_slice, r.update != "euclidean") for r in layout.records}
    if mjmodel is not None:
        out["qpos"] = (slice(0, mjmodel.nq), False)
        out["qvel"] = (slice(mjmodel.nq, mjmodel.nq + mjmodel.nv), False)
    return out


def _quat_slices(layout) -> list[slice]:
    return [r.value_slice for r in layout.records if r.update != "euclidean"]


# -- the reference rigid-body model -------------------------------------------------------------------

def _single_free_body(model: mujoco.MjModel, path: str) -> tuple[int, str]:
    """(body id, body name) of the scene's only free body; refuses anything the reference does not model."""
    why = []
    if model.njnt != 1 or model.jnt_type[0] != _FREE:
        kinds = [mujoco.mjtJoint(int(t)).name for t in model.jnt_type]
        why.append(f"it must have exactly one joint, a free joint (it has {model.njnt}: {kinds})")
    else:
        b = int(model.jnt_bodyid[0])
        extra = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}" for i in range(1, model.nbody)
                 if i != b and model.body_mass[i] > 0]
        if extra:
            why.append(f"bodies other than the free body carry mass: {extra}")
        if model.body_weldid[b] != b or any(model.body_parentid[i] == b for i in range(model.nbody) if i != b):
            why.append("the free body has welded child bodies")
        d = int(model.jnt_dofadr[0])
        for f, label in (("dof_damping", "joint damping"), ("dof_armature", "armature"),
                         ("dof_frictionloss", "friction loss")):
            if np.any(getattr(model, f)[d:d + 6] != 0):
                why.append(f"the free joint has {label}")
    if model.nu:
        why.append(f"it has {model.nu} actuator(s)")
    if model.neq or model.ntendon:
        why.append("it has equality constraints or tendons")
    if model.opt.density != 0 or model.opt.viscosity != 0:
        why.append("it has fluid forces (option density/viscosity)")
    contact_on = not (model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT))
    if contact_on and model.njnt == 1:
        b = int(model.jnt_bodyid[0])
        others = [g for g in range(model.ngeom) if model.geom_bodyid[g] != b
                  and (model.geom_contype[g] or model.geom_conaffinity[g])]
        mine = [g for g in range(model.ngeom) if model.geom_bodyid[g] == b
                and (model.geom_contype[g] or model.geom_conaffinity[g])]
        if others and mine:
            why.append("contacts are possible (other collidable geoms; disable contact to cross-check)")
    if why:
        raise CrossCheckError(f"{path}: the reference rigid-body model covers a single free body only, and this "
                              "scene is not one: " + "; ".join(why) + ". Give reference='mujoco' or a reference "
                              "HDF5 file instead.")
    b = int(model.jnt_bodyid[0])
    return b, mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or ""


def _rigid_body(rec: _Recorded, model: mujoco.MjModel):
    from mjharness.adapters.reference import RigidBody, SpatialInertia

    bid, name = _single_free_body(model, rec.path)
    info = {}
    body = None
    if name:
        from mjharness.adapters import rigid_body_from_mjcf

        try:
            body = rigid_body_from_mjcf(rec.mjcf, name)
            info["inertia"] = "MJCF (rigid_body_from_mjcf)"
        except (ValueError, NotImplementedError) as e:
            info["inertia"] = f"MuJoCo compiled (MJCF reader refused: {e})"
    else:
        info["inertia"] = "MuJoCo compiled (the free body has no name)"
    if body is None:
        g = np.zeros(3) if model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY) else model.opt.gravity
        body = RigidBody(SpatialInertia.from_mujoco(model, bid), np.asarray(g) * (1.0 - model.body_gravcomp[bid]))
    info.update(body=name or f"body{bid}", mass=float(body.inertia.mass), com=np.asarray(body.inertia.com).tolist(),
                gravity=np.asarray(body.gravity).tolist())
    return body, info


@partial(jax.jit, static_argnames=("n_sub", "samples"))
def _ref_samples(body, x, h, n_sub, samples):
    """``samples`` samples (each after ``n_sub`` RK4 steps of ``h``) for a batch of 13-vectors x (B, 13)."""
    step = jax.vmap(lambda y: body.stepped_rk4(y, None, h))

    def outer(y, _):
        y = jax.lax.fori_loop(0, n_sub, lambda i, z: step(z), y)
        return y, y

    return jax.lax.scan(outer, x, None, length=samples)


def reference_model_trajectory(body, x0, samples: int, steps_per_sample: int, dt: float,
                               chunk: int = 1000) -> np.ndarray:
    """RK4 trajectory of the reference ``body`` from x0 (B, 13): (samples, B, 13), sample j after
    (j + 1) * steps_per_sample steps of ``dt`` (one compiled scan reused for every chunk)."""
    x = jnp.asarray(np.asarray(x0, np.float64))
    out = np.empty((samples,) + x.shape)
    chunk = max(1, min(chunk, samples))
    j = 0
    while j < samples:
        x, ys = _ref_samples(body, x, jnp.float64(dt), steps_per_sample, chunk)
        k = min(chunk, samples - j)
        out[j:j + k] = np.asarray(ys)[:k]
        j += k
    return out


def _free_slices(rec: _Recorded, model):
    """The 13 value indices [qpos(7); qvel(6)] of the free body in the file's x, plus name mapping."""
    j = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, 0) or "joint0"
    names = [f"{j}/pos", f"{j}/quat", f"{j}/vel", f"{j}/angvel"]
    lay = rec.layout
    missing = [n for n in names if n not in lay.names]
    if missing:
        raise CrossCheckError(f"{rec.path}: the layout has no free-joint states {missing}")
    idx = np.concatenate([np.arange(lay[n].offset, lay[n].offset + lay[n].size) for n in names])
    return names, idx


def _reference_from_model(rec: _Recorded, model, ref_dt=1e-3):
    if rec.model_params:
        raise CrossCheckError(f"{rec.path}: per-world model parameters {sorted(rec.model_params)} were randomized; "
                              f"the reference model cannot follow them (use reference='mujoco' is not possible "
                              f"either; compare against a reference file)")
    body, info = _rigid_body(rec, model)
    t0, R, dt = _grid(rec)
    _, idx = _free_slices(rec, model)
    # Reference step: the file's dt, split into equal substeps no longer than ref_dt (so a file rolled
    # at a coarse step, or an adaptive run's output interval, is compared with an accurate reference).
    n_sub = max(1, math.ceil(dt / ref_dt - 1e-9)) if ref_dt else 1
    ref13 = reference_model_trajectory(body, rec.x0[:, idx], len(rec.time), R * n_sub, dt / n_sub)
    ref = np.full_like(rec.x, np.nan)
    ref[..., idx] = ref13
    info.update(method="reference RigidBody.stepped_rk4 (MuJoCo C's RK4 treatment of the quaternion)",
                dt=dt / n_sub, steps_per_sample=R * n_sub)
    covered = set(idx.tolist())
    return ref, covered, info, body


# -- MuJoCo C peer --------------------------------------------------------------------------------------

def mujoco_peer_trajectory(model: mujoco.MjModel, x0, samples: int, steps_per_sample: int, dt: float,
                           integrator: str = "RK4", t0: float = 0.0) -> np.ndarray:
    """MuJoCo C ``mj_step`` from each world's x0 = [qpos; qvel; act; ...] (B, >= nq+nv+na):
    (samples, B, nq + nv + na), sample j after (j + 1) * steps_per_sample steps of ``dt``."""
    m = _copy_model(model)
    m.opt.timestep = dt
    m.opt.integrator = int(getattr(mujoco.mjtIntegrator, f"mjINT_{integrator.upper()}"))
    nq, nv, na = m.nq, m.nv, m.na
    x0 = np.asarray(x0, np.float64)
    out = np.empty((samples, x0.shape[0], nq + nv + na))
    d = mujoco.MjData(m)
    for i in range(x0.shape[0]):
        mujoco.mj_resetData(m, d)
        d.time = t0
        d.qpos[:] = x0[i, :nq]
        d.qvel[:] = x0[i, nq:nq + nv]
        d.act[:] = x0[i, nq + nv:nq + nv + na]
        for j in range(samples):
            for _ in range(steps_per_sample):
                mujoco.mj_step(m, d)
            out[j, i, :nq], out[j, i, nq:nq + nv], out[j, i, nq + nv:] = d.qpos, d.qvel, d.act
    return out


def _copy_model(model):
    import copy

    return copy.deepcopy(model)


def _reference_from_mujoco(rec: _Recorded, model, integrator="RK4"):
    if rec.model_params:
        raise CrossCheckError(f"{rec.path}: per-world model parameters {sorted(rec.model_params)} were randomized; "
                              f"the MuJoCo C peer runs the file's nominal model only")
    ctrl = str(rec.attrs.get("ctrl", "none"))
    if ctrl != "none" and model.nu:
        raise CrossCheckError(f"{rec.path}: the rollout was driven by controls ({ctrl}); the file does not store "
                              f"them, so MuJoCo C cannot replay it")
    t0, R, dt = _grid(rec)
    n = model.nq + model.nv + model.na
    peer = mujoco_peer_trajectory(model, rec.x0, len(rec.time), R, dt, integrator, t0)
    ref = np.full_like(rec.x, np.nan)
    ref[..., :n] = peer
    info = dict(method=f"MuJoCo C {mujoco.__version__} mj_step, integrator {integrator}", dt=dt, steps_per_sample=R)
    return ref, set(range(n)), info


# -- a reference file -------------------------------------------------------------------------------------

def _interp(t_ref, y_ref, t):
    """y_ref (Tr, ...) onto times t: exact samples where the times coincide, else a cubic spline."""
    tol = 1e-9 * max(1.0, float(np.max(np.abs(t_ref))))
    idx = np.searchsorted(t_ref, t)
    idx_c = np.clip(idx, 0, len(t_ref) - 1)
    idx_l = np.clip(idx - 1, 0, len(t_ref) - 1)
    near = np.where(np.abs(t_ref[idx_c] - t) <= np.abs(t_ref[idx_l] - t), idx_c, idx_l)
    exact = np.abs(t_ref[near] - t) <= tol
    out = y_ref[near].copy()
    if not np.all(exact):
        try:
            from scipy.interpolate import CubicSpline

            spline = CubicSpline(t_ref, y_ref, axis=0)
            out[~exact] = spline(t[~exact])
            how = "cubic spline"
        except ImportError:  # pragma: no cover - scipy is installed with the project's dev extras
            flat = y_ref.reshape(len(t_ref), -1)
            out[~exact] = np.stack([np.interp(t[~exact], t_ref, flat[:, c]) for c in range(flat.shape[1])],
                                   -1).reshape((-1,) + y_ref.shape[1:])
            how = "linear (scipy missing)"
    else:
        how = "none (times coincide)"
    return out, how, int((~exact).sum())


def _reference_from_file(rec: _Recorded, ref_path):
    other = _read(ref_path)
    if other.x.shape[1] != rec.x.shape[1]:
        raise CrossCheckError(f"{ref_path}: batch {other.x.shape[1]} differs from {rec.path}'s {rec.x.shape[1]}")
    t_ref = np.concatenate([[float(other.attrs.get("t0", 0.0))], other.time])
    lo, hi = t_ref[0], t_ref[-1]
    span = 1e-9 * max(1.0, abs(hi))
    if rec.time[0] < lo - span or rec.time[-1] > hi + span:
        raise CrossCheckError(f"{ref_path}: covers t = {lo:g} .. {hi:g}, but {rec.path} runs to {rec.time[-1]:g}; "
                              f"the reference must span the recorded times")
    ours = {r.name: r for r in rec.layout.records}
    covered = set()
    ref = np.full_like(rec.x, np.nan)
    y_ref = np.concatenate([other.x0[None], other.x], axis=0)
    # Quaternions are aligned in sign along the reference's own time axis before interpolating.
    for s in _quat_slices(other.layout):
        q = y_ref[..., s]
        flips = np.cumprod(np.where(np.sum(q[1:] * q[:-1], -1) < 0, -1.0, 1.0), axis=0)
        y_ref[1:, :, s] = q[1:] * flips[..., None]
    y_on, how, n_interp = _interp(t_ref, y_ref, rec.time)
    mapped = []
    for r in other.layout.records:
        mine = ours.get(r.name)
        if mine is None or mine.size != r.size:
            continue
        ref[..., mine.value_slice] = y_on[..., r.value_slice]
        covered.update(range(mine.offset, mine.offset + mine.size))
        mapped.append(r.name)
    if not mapped:
        raise CrossCheckError(f"{ref_path}: no state of {rec.path}'s layout ({rec.layout.names}) is in the reference")
    x0_diff = float(np.max(np.abs(other.x0[:, sorted(_x_index(other, mapped))] - rec.x0[:, sorted(
        _x_index(rec, mapped))]))) if mapped else 0.0
    info = dict(method=f"reference file {ref_path}", reference_integrator=other.attrs.get("integrator"),
                reference_dt=other.attrs.get("dt"), interpolation=how, interpolated_samples=n_interp,
                x0_max_abs_diff=x0_diff, states=mapped)
    return ref, covered, info, other


def _x_index(rec, names):
    return np.concatenate([np.arange(rec.layout[n].offset, rec.layout[n].offset + rec.layout[n].size) for n in names])


# -- energy and angular momentum of a trajectory (MuJoCo C) --------------------------------------------------

def recorded_invariants(model: mujoco.MjModel, x0, x, time, max_evals: int = MAX_INVARIANT_EVALS):
    """(energy, momentum) dicts for the trajectory x (T, B, n) ([qpos; qvel; ...] first): total energy
    (mj_energyPos + mj_energyVel) and total angular momentum about the system's centre of mass, world axes
    (subtree_angmom of the world body), each as max |value(t) - value(0)| over the samples."""
    m = _copy_model(model)
    m.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    d = mujoco.MjData(m)
    T, B = x.shape[:2]
    stride = max(1, math.ceil(T * B / max_evals))
    tsel = np.arange(stride - 1, T, stride)
    if len(tsel) == 0 or tsel[-1] != T - 1:
        tsel = np.append(tsel, T - 1)
    nq, nv = m.nq, m.nv
    E = np.empty((len(tsel) + 1, B))
    L = np.empty((len(tsel) + 1, B, 3))

    def ev(q, v):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_forward(m, d)
        mujoco.mj_subtreeVel(m, d)
        return d.energy.sum(), d.subtree_angmom[0].copy()

    for b in range(B):
        E[0, b], L[0, b] = ev(x0[b, :nq], x0[b, nq:nq + nv])
        for k, j in enumerate(tsel):
            E[k + 1, b], L[k + 1, b] = ev(x[j, b, :nq], x[j, b, nq:nq + nv])
    dE = np.abs(E[1:] - E[:1])
    dL = np.linalg.norm(L[1:] - L[:1], axis=-1)
    t_axis = np.asarray(time)[tsel]

    def pack(drift, scale):
        w = int(np.argmax(np.max(drift, axis=0)))
        k = int(np.argmax(drift[:, w]))
        mx = float(drift[k, w])
        return dict(max_abs_drift=mx, rel_drift=mx / scale if scale > 0 else float("inf"), world=w,
                    time=float(t_axis[k]), per_world=np.max(drift, axis=0), initial=None,
                    drift_vs_time=np.max(drift, axis=1), time_axis=t_axis, stride=stride)

    e = pack(dE, float(np.max(np.abs(E[0]))))
    e["initial"] = E[0].tolist()
    mom = pack(dL, float(np.max(np.linalg.norm(L[0], axis=-1))))
    mom["initial"] = L[0].tolist()
    return e, mom


# -- the comparison ---------------------------------------------------------------------------------------

def _tolerances(tol, names) -> dict[str, float | None]:
    if tol is None:
        return {n: None for n in names}
    if isinstance(tol, dict):
        unknown = sorted(set(tol) - set(names))
        if unknown:
            raise CrossCheckError(f"tolerance given for unknown field(s) {unknown}; compared fields: {names}")
        return {n: (None if tol.get(n) is None else float(tol[n])) for n in names}
    t = float(tol)
    if not t >= 0:
        raise CrossCheckError(f"tol must be >= 0, got {tol!r}")
    return {n: t for n in names}


def _compare(time, rec_x, ref_x, sl, is_quat, status) -> FieldResult:
    a, b = rec_x[..., sl], ref_x[..., sl]
    if is_quat:
        d = np.minimum(np.max(np.abs(a - b), -1), np.max(np.abs(a + b), -1))
    else:
        d = np.max(np.abs(a - b), -1)           # (T, B)
    d = np.where(np.isfinite(d), d, np.inf)
    ok = status == 0
    per_world = np.max(d, axis=0)
    per_world_t = time[np.argmax(d, axis=0)]
    dd = np.where(ok[None], d, -np.inf) if ok.any() else d
    w = int(np.argmax(np.max(dd, axis=0)))
    k = int(np.argmax(d[:, w]))
    return FieldResult(name="", size=a.shape[-1], max_abs=float(d[k, w]), world=w, time=float(time[k]),
                       per_world_max=per_world, per_world_time=per_world_t, error_vs_time=np.max(dd, axis=1))


def crosscheck(path, reference="model", fields=None, tol=None, *, energy_tol=None, momentum_tol=None,
               invariants: bool = True, out=None, plot: bool = True, mujoco_integrator: str = "RK4",
               save_reference=None, ref_dt: float | None = 1e-3) -> CrossCheckReport:
    """Cross-check the rollout file ``path`` against ``reference`` and return a ``CrossCheckReport``.

    reference: ``"model"`` (the reference rigid-body model re-simulated with RK4 from the file's x0 at its
        dt, split into substeps of at most ``ref_dt`` (None: the file's dt); the scene must be a single
        free body), ``"mujoco"`` (MuJoCo C ``mj_step`` with
        ``mujoco_integrator`` from x0 at the file's dt; any scene without stored controls), or the path
        of another rollout file (states matched by name, interpolated onto this file's times).
    fields: names to compare (layout states, or "qpos"/"qvel"); default every state the reference covers.
    tol: a float for every field or {field: tol}; ``energy_tol``/``momentum_tol`` bound the absolute
        drifts. ``passed`` is False when one is exceeded, or when a world's rollout failed.
    out: write ``<out>.json`` and (``plot``) ``<out>.png``. save_reference: write the reference trajectory
        as a rollout file (format version 1; e.g. a MuJoCo C peer run to compare later).
    """
    rec = _read(path)
    model = _model(rec) if rec.mjcf else None
    notes = []
    ref_energy = None
    if isinstance(reference, str) and reference == "model":
        ref, covered, info, body = _reference_from_model(rec, model, ref_dt)
        label = "reference rigid-body model (RK4)"
    elif isinstance(reference, str) and reference == "mujoco":
        if model is None:
            raise CrossCheckError(f"{rec.path}: reference='mujoco' needs the file's /model/mjcf")
        ref, covered, info = _reference_from_mujoco(rec, model, mujoco_integrator)
        label = f"MuJoCo C ({mujoco_integrator})"
    elif isinstance(reference, (str, os.PathLike)):
        if not os.path.isfile(os.fspath(reference)):
            raise CrossCheckError(f"reference={reference!r}: not 'model', 'mujoco' or an existing rollout file")
        ref, covered, info, _ = _reference_from_file(rec, reference)
        label = os.fspath(reference)
    else:
        raise CrossCheckError(f"reference must be 'model', 'mujoco' or a file path, got {reference!r}")

    segs = _segments(rec.layout, model if rec.has_qpos else None)
    available = [n for n, (sl, _) in segs.items() if set(range(sl.start, sl.stop)) <= covered and sl.stop > sl.start]
    if fields is None:
        names = [n for n in available if n not in ("qpos", "qvel")]
    else:
        names = [fields] if isinstance(fields, str) else list(fields)
        bad = [n for n in names if n not in available]
        if bad:
            raise CrossCheckError(f"field(s) {bad} cannot be compared: {rec.path} with this reference offers "
                                  f"{available}")
    tols = _tolerances(tol, names)
    results = {}
    for n in names:
        sl, is_q = segs[n]
        r = _compare(rec.time, rec.x, ref, sl, is_q, rec.status)
        r.name, r.tol = n, tols[n]
        results[n] = r
    energy = momentum = None
    if invariants and model is not None and rec.has_qpos:
        energy, momentum = recorded_invariants(model, rec.x0, rec.x, rec.time)
        if isinstance(reference, str) and reference in ("model", "mujoco"):
            ref_full = ref.copy()
            ref_full[np.isnan(ref_full)] = rec.x[np.isnan(ref_full)]
            ref_energy, _ = recorded_invariants(model, rec.x0, ref_full, rec.time)
    elif energy_tol is not None or momentum_tol is not None:
        notes.append("energy/momentum not computed (no MuJoCo scene in the file)")
    if not rec.complete:
        notes.append("the file is incomplete (complete=False): only the flushed samples were checked")
    failed = np.flatnonzero(rec.status != 0).tolist()
    report = CrossCheckReport(path=rec.path, reference=label, reference_info=info, time=rec.time, fields=results,
                              energy=energy, momentum=momentum, reference_energy=ref_energy, failed_worlds=failed,
                              complete=rec.complete, notes=notes, energy_tol=energy_tol, momentum_tol=momentum_tol)
    if save_reference is not None:
        _save_reference(rec, ref, covered, save_reference, info)
    if out is not None:
        report.write(out, plot=plot)
    return report


def _save_reference(rec: _Recorded, ref, covered, out, info):
    """The reference trajectory as a rollout file (same layout, x0 and times as ``rec``)."""
    from . import h5

    with open_rollout(rec.path) as f:
        table = f.layout_table
        has = ("qpos" in f.h5, "qvel" in f.h5)
    x = ref  # states the reference does not cover stay NaN (listed in the uncovered_states attribute)
    missing = sorted(set(range(rec.x.shape[2])) - covered)
    attrs = dict(rec.attrs)
    attrs.update(integrator=json.dumps(dict(name="reference", **{k: v for k, v in info.items()
                                                                  if isinstance(v, (str, int, float))})),
                 reference_of=os.path.basename(rec.path), uncovered_states=json.dumps(missing))
    for k in ("complete", "samples"):
        attrs.pop(k, None)
    model = _model(rec) if rec.mjcf else None
    nq = model.nq if model is not None else 0
    nv = model.nv if model is not None else 0
    T, B, n = rec.x.shape
    h5.create_rollout_file(os.fspath(out), h5.FileSpec(
        attrs=attrs, mjcf=rec.mjcf, compat_log=[], layout=table, x0=rec.x0, model_params={}, samples=T,
        qpos=slice(0, nq) if has[0] else None, qvel=slice(nq, nq + nv) if has[1] else None,
        time_chunk=min(T, 1000)))
    w = h5.RolloutWriter(os.fspath(out))
    w.put(0, rec.time, x, np.zeros(B, np.int8), np.full(B, -1, np.int64))
    w.close(complete=True)


# -- CLI ---------------------------------------------------------------------------------------------------

def _parse_tol(values):
    if not values:
        return None
    out, scalar = {}, None
    for v in values:
        if "=" in v:
            k, _, t = v.rpartition("=")
            out[k] = float(t)
        else:
            scalar = float(v)
    if out and scalar is not None:
        raise CrossCheckError("give either one --tol for every field or FIELD=TOL pairs, not both")
    return out or scalar


def add_parser(sub):
    """``mjharness check FILE.h5``: the cross-check subcommand (CLI registry protocol)."""
    p = sub.add_parser("check", help="cross-check a rollout file against the reference model, MuJoCo C or a file",
                       description="Re-simulate FILE's initial states with the reference rigid-body model "
                                   "(single free body), MuJoCo C, or read a reference file; report the max "
                                   "difference per field and world, energy and angular-momentum drift; exit 1 "
                                   "when a tolerance is exceeded.")
    p.add_argument("file")
    p.add_argument("--reference", default="model", help="'model' (default), 'mujoco' or a reference rollout file")
    p.add_argument("--fields", nargs="+", help="states to compare (layout names, qpos, qvel); default all")
    p.add_argument("--tol", nargs="+", metavar="TOL|FIELD=TOL", help="max allowed |diff| (one value or per field)")
    p.add_argument("--energy-tol", type=float, help="max allowed |E(t) - E(0)|")
    p.add_argument("--momentum-tol", type=float, help="max allowed |L(t) - L(0)| (about the centre of mass)")
    p.add_argument("--mujoco-integrator", default="RK4", choices=("RK4", "Euler", "implicit", "implicitfast"),
                   help="integrator of the MuJoCo C peer (--reference mujoco)")
    p.add_argument("--ref-dt", type=float, default=1e-3,
                   help="longest step of the reference model (the file's dt is split into equal substeps; 1e-3)")
    p.add_argument("--no-invariants", action="store_true", help="skip energy/momentum")
    p.add_argument("--out", help="report prefix: writes PREFIX.json and PREFIX.png (default FILE-check)")
    p.add_argument("--no-plot", action="store_true", help="JSON only")
    p.add_argument("--save-reference", metavar="REF.h5", help="also write the reference trajectory as a rollout file")
    p.set_defaults(func=main_check)


def main_check(args) -> int:
    out = args.out or os.path.splitext(args.file)[0] + "-check"
    try:
        rep = crosscheck(args.file, reference=args.reference, fields=args.fields, tol=_parse_tol(args.tol),
                         energy_tol=args.energy_tol, momentum_tol=args.momentum_tol,
                         invariants=not args.no_invariants, out=out, plot=not args.no_plot,
                         mujoco_integrator=args.mujoco_integrator, save_reference=args.save_reference,
                         ref_dt=args.ref_dt if args.ref_dt and args.ref_dt > 0 else None)
    except (CrossCheckError, RolloutFileError) as e:
        print(f"mjharness check: error: {e}", file=sys.stderr)
        return 2
    print(rep.summary())
    print(f"report: {out}.json" + ("" if args.no_plot else f", {out}.png"))
    return 0 if rep.passed else 1
