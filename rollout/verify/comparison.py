"""Cross-check a rollout file against a reference: the reference rigid-body model, MuJoCo C, or another file.

    report = crosscheck("run.h5")                                  # reference rigid-body model (single free body)
    report = crosscheck("run.h5", reference="mujoco")              # MuJoCo C mj_step, the file's scheme, from x0
    report = crosscheck("run.h5", reference="peer.h5", tol=1e-8)   # another file, interpolated onto our times
    report.passed, report.fields["brick/quat"].max_abs, report.write("run-check")   # JSON + PNG

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
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mjharness.rollout import h5

from .invariants import recorded_invariants
from .mujoco_peer import reference_from_mujoco
from .recorded import CrossCheckError, Recorded, abs_diff, comparable_fields, read_recorded
from .reference_file import reference_from_file
from .reference_model import reference_from_model
from .report import CrossCheckReport, FieldResult

if TYPE_CHECKING:
    import mujoco

# MuJoCo C's scheme for each of our integrators that is the same method (``mujoco_integrator=None``).
C_SCHEME = {"semi_implicit_euler": "Euler", "rk4": "RK4", "implicit_fast": "implicitfast"}
FALLBACK_SCHEME = "RK4"

# Default tolerances (no ``tol``): per field kind, ``atol + rtol * max |reference|`` of the field. Against
# MuJoCo C running the file's own scheme the two agree to ~1e-12 over typical horizons (same method, float64),
# so 1e-6 leaves room for chaotic growth and still fails anything a user would call different; against the
# reference rigid-body model or another file (other discretisations) the bound is looser.
DEFAULT_TOL = {
    "same_scheme": {"position": (1e-6, 1e-6), "quaternion": (1e-6, 0.0), "velocity": (1e-5, 1e-6)},
    "other": {"position": (1e-3, 1e-3), "quaternion": (1e-3, 0.0), "velocity": (1e-2, 1e-3)},
}


def field_kind(name: str, is_quat: bool) -> str:
    """"quaternion", "velocity" or "position" of a compared field (a layout state name, "qpos" or "qvel")."""
    if is_quat:
        return "quaternion"
    return "velocity" if name == "qvel" or name.endswith(("/qvel", "/vel", "/angvel")) else "position"


def default_tolerances(names, segs, ref, kind: str) -> dict[str, float]:
    """``DEFAULT_TOL[kind]`` applied to each field: atol + rtol * max |reference field| (finite values)."""
    out = {}
    for n in names:
        sl, is_quat = segs[n]
        atol, rtol = DEFAULT_TOL[kind][field_kind(n, is_quat)]
        r = ref[..., sl]
        scale = float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0))
        out[n] = atol + rtol * scale
    return out


def reference_scheme(attrs: dict, mujoco_integrator) -> tuple[str, str]:
    """(MuJoCo C integrator, why): the one given, else the file's own scheme, else RK4 (no C counterpart)."""
    if mujoco_integrator is not None:
        return mujoco_integrator, "as asked"
    integ = attrs.get("integrator")
    if isinstance(integ, str):
        try:
            integ = json.loads(integ)
        except ValueError:
            integ = {"name": integ}
    name = integ.get("name") if isinstance(integ, dict) else None
    if name in C_SCHEME:
        return C_SCHEME[name], f"the file's integrator {name}"
    return FALLBACK_SCHEME, f"the file's integrator {name!r} has no MuJoCo C counterpart: {FALLBACK_SCHEME}"


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


def _compare(name, time, rec_x, ref_x, sl, is_quat, status, tol) -> FieldResult:
    d = abs_diff(rec_x[..., sl], ref_x[..., sl], sign_free=is_quat)   # (T, B)
    d = np.where(np.isfinite(d), d, np.inf)
    ok = status == 0
    dd = np.where(ok[None], d, -np.inf) if ok.any() else d   # the worst world among those that did not fail
    w = int(np.argmax(np.max(dd, axis=0)))
    k = int(np.argmax(d[:, w]))
    return FieldResult(name=name, size=sl.stop - sl.start, max_abs=float(d[k, w]), world=w, time=float(time[k]),
                       per_world_max=np.max(d, axis=0), per_world_time=time[np.argmax(d, axis=0)],
                       error_vs_time=np.max(dd, axis=1), tol=tol)


def _reference(rec: Recorded, model, reference, mujoco_integrator, ref_dt):
    """(reference like rec.x, covered value indices, info, label)."""
    if isinstance(reference, str) and reference == "model":
        return (*reference_from_model(rec, model, ref_dt), "reference rigid-body model (RK4)")
    if isinstance(reference, str) and reference == "mujoco":
        if model is None:
            raise CrossCheckError(f"{rec.path}: reference='mujoco' needs the file's /model/mjcf")
        scheme, why = reference_scheme(rec.attrs, mujoco_integrator)
        ref, covered, info = reference_from_mujoco(rec, model, scheme)
        info["scheme_choice"] = why
        return ref, covered, info, f"MuJoCo C ({scheme}: {why})"
    if isinstance(reference, (str, os.PathLike)):
        if not os.path.isfile(os.fspath(reference)):
            raise CrossCheckError(f"reference={reference!r}: not 'model', 'mujoco' or an existing rollout file")
        return (*reference_from_file(rec, reference), os.fspath(reference))
    raise CrossCheckError(f"reference must be 'model', 'mujoco' or a file path, got {reference!r}")


def _field_names(rec: Recorded, segs, covered, fields) -> list[str]:
    available = [n for n, (sl, _) in segs.items() if sl.stop > sl.start and set(range(sl.start, sl.stop)) <= covered]
    if fields is None:
        return [n for n in available if n not in ("qpos", "qvel")]
    names = [fields] if isinstance(fields, str) else list(fields)
    bad = [n for n in names if n not in available]
    if bad:
        raise CrossCheckError(f"field(s) {bad} cannot be compared: {rec.path} with this reference offers {available}")
    return names


def _invariants(rec: Recorded, model, ref, simulated_reference: bool):
    """(energy, momentum, reference energy) of the recorded (and a re-simulated reference) trajectory."""
    energy, momentum = recorded_invariants(model, rec.x0, rec.x, rec.time)
    ref_energy = None
    if simulated_reference:
        ref_full = np.where(np.isnan(ref), rec.x, ref)   # states the reference does not cover: as recorded
        ref_energy, _ = recorded_invariants(model, rec.x0, ref_full, rec.time)
    return energy, momentum, ref_energy


def crosscheck(path: str | os.PathLike[str], reference: str | os.PathLike[str] = "model",
               fields: Sequence[str] | None = None, tol: float | Mapping[str, float] | None = None, *,
               energy_tol: float | None = None, momentum_tol: float | None = None, invariants: bool = True,
               out: str | os.PathLike[str] | None = None, plot: bool = True, mujoco_integrator: str | None = None,
               save_reference: str | os.PathLike[str] | None = None, ref_dt: float | None = 1e-3) -> CrossCheckReport:
    """Cross-check the rollout file ``path`` against ``reference`` and return a ``CrossCheckReport``.

    reference: ``"model"`` (the reference rigid-body model re-simulated with RK4 from the file's x0 at its
        dt, split into substeps of at most ``ref_dt`` (None: the file's dt); the scene must be a single
        free body), ``"mujoco"`` (MuJoCo C ``mj_step`` with
        ``mujoco_integrator`` from x0 at the file's dt; None (default): the file's own scheme
        (semi_implicit_euler -> Euler, rk4 -> RK4, implicit_fast -> implicitfast, else RK4); any scene
        without stored controls), or the path
        of another rollout file (states matched by name, interpolated onto this file's times).
    fields: names to compare (layout states, or "qpos"/"qvel"); default every state the reference covers.
    tol: a float for every field or {field: tol}; None (default): ``DEFAULT_TOL`` per field kind (position,
        quaternion, velocity), tight against MuJoCo C on the same scheme, looser against the model or a
        file; the report's notes say which. ``energy_tol``/``momentum_tol`` bound the absolute drifts.
        ``passed`` is False when one is exceeded, or when a world's rollout failed.
    out: write ``<out>.json`` and (``plot``) ``<out>.png``. save_reference: write the reference trajectory
        as a rollout file (format version 1; e.g. a MuJoCo C peer run to compare later).
    """
    rec = read_recorded(path)
    model = rec.model
    ref, covered, info, label = _reference(rec, model, reference, mujoco_integrator, ref_dt)
    segs = comparable_fields(rec.layout, model if rec.has_qpos else None)
    names = _field_names(rec, segs, covered, fields)
    tols: Mapping[str, float | None]
    if tol is None:  # documented defaults, never "no tolerance": a check cannot pass by accident
        kind = "same_scheme" if reference == "mujoco" else "other"
        tols = default_tolerances(names, segs, ref, kind)
        tol_note = (f"default tolerances ({kind.replace('_', ' ')}: atol + rtol * max|reference| per field kind, "
                    f"{DEFAULT_TOL[kind]}); pass tol= / --tol to choose")
    else:
        tols, tol_note = _tolerances(tol, names), "tolerances as given"
    results = {n: _compare(n, rec.time, rec.x, ref, *segs[n], rec.status, tols[n]) for n in names}
    notes = [tol_note]
    energy = momentum = ref_energy = None
    if invariants and model is not None and rec.has_qpos:
        energy, momentum, ref_energy = _invariants(rec, model, ref, reference in ("model", "mujoco"))
    elif energy_tol is not None or momentum_tol is not None:
        notes.append("energy/momentum not computed (no MuJoCo scene in the file)")
    if not rec.complete:
        notes.append("the file is incomplete (complete=False): only the flushed samples were checked")
    report = CrossCheckReport(path=rec.path, reference=label, reference_info=info, time=rec.time, fields=results,
                              energy=energy, momentum=momentum, reference_energy=ref_energy,
                              failed_worlds=np.flatnonzero(rec.status != 0).tolist(), complete=rec.complete,
                              notes=notes, energy_tol=energy_tol, momentum_tol=momentum_tol)
    if save_reference is not None:
        save_reference_file(rec, model, ref, covered, save_reference, info)
    if out is not None:
        report.write(out, plot=plot)
    return report


def save_reference_file(rec: Recorded, model: mujoco.MjModel | None, ref: np.ndarray, covered: set[int],
                        out: str | os.PathLike[str], info: dict) -> None:
    """The reference trajectory as a rollout file (same model, layout, x0 and times as ``rec``); states it
    does not cover stay NaN and are listed in the ``uncovered_states`` attribute."""
    with h5.open_rollout(rec.path) as f:
        table, has_qpos, has_qvel = f.layout_table, "qpos" in f.h5, "qvel" in f.h5
        saved: dict[str, Any] = dict(mjcf=f.mjcf, mjb=f.mjb, model_signature=f.model_signature, source_xml=f.source_xml,
                     assets=f.assets, compat_log=f.compat_log)
    attrs = dict(rec.attrs)
    attrs.update(integrator=json.dumps(dict(name="reference", **{k: v for k, v in info.items()
                                                                  if isinstance(v, (str, int, float))})),
                 reference_of=os.path.basename(rec.path),
                 uncovered_states=json.dumps(sorted(set(range(rec.x.shape[2])) - covered)))
    for k in ("complete", "samples"):
        attrs.pop(k, None)
    nq, nv = (model.nq, model.nv) if model is not None else (0, 0)
    T, B, _ = rec.x.shape
    h5.create_rollout_file(os.fspath(out), h5.FileSpec(
        attrs=attrs, layout=table, x0=rec.x0, model_params={}, samples=T,
        qpos=slice(0, nq) if has_qpos else None, qvel=slice(nq, nq + nv) if has_qvel else None,
        time_chunk=min(T, 1000), **saved))
    w = h5.RolloutWriter(os.fspath(out))
    w.put(0, rec.time, ref, np.zeros(B, np.int8), np.full(B, -1, np.int64))
    w.close(complete=True)
