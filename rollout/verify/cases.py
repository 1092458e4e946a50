"""Check-case suite: small MuJoCo scenes with analytic (or independent) answers, one feature per case.

Each case lives in ``data/cases/<name>.json``: its scene (bundled name or inline MJCF), initial
states, integrator, step, horizon, tolerance per metric and the committed expected errors of the
methods measured so far. A case runs through ``mjharness.rollout.rollout`` like any user's rollout,
and its check (``case_checks``) compares the trajectory with the independent answer. A case passes
when every metric is within its tolerance and no world failed.

In Python: ``run_case(load_case("dzhanibekov"))`` returns a ``CaseResult`` (metrics, details);
``run_suite(all_integrators=True)`` also runs every other registered fixed-step (or stochastic)
method, documented but not gated. CLI: ``mjharness cases`` (``rollout/cli/cases.py``). The NESC 2015
atmospheric cases (``nesc_atmos_01`` ...) run by name through the same ``run_suite`` (``nesc.py``), with RK4 and
an adaptive method: the bundled ones are not in the default list; a NESC case file placed in ``cases_dir``
(one with ``initial_conditions``, docs/nesc.md "Case files") is, and runs by its file name.

How the committed figures read: a case's tolerances are ten times the measured error of its gated
integrator (RK4; SRA1 for the OU case), rounded up to a power of ten (floor 1e-12). Free-body
position and velocity errors at 1e-12..1e-16 are rounding (uniform motion is exact for every
method). MuJoCo's velocity-form semi-implicit Euler is not symplectic when the mass matrix depends
on q, so it conserves the double pendulum's energy no better than explicit Euler. The OU errors are
sampling errors of 4000 worlds (all methods see the same Brownian path; their own bias at 5 ms is far
below). ``ball_chain_vs_hinge`` uses moderate amplitudes on purpose: at large ones the chain is
chaotic and two correct integrations part ways within seconds.
"""

from __future__ import annotations

import json
import math
import os
from importlib import resources

import numpy as np

from mjharness.adapters.analytic import AnalyticError

from .case_checks import CHECKS, CaseError
from .case_result import CaseResult

__all__ = ["CASES_DIR", "list_cases", "load_case", "run_case", "run_suite", "simulate_case", "CaseResult",
           "CaseError", "format_table", "fixed_methods", "stochastic_methods", "methods_for"]

# data/cases ships as package data of mjharness.data (editable and wheel installs alike).
CASES_DIR = os.environ.get("MJHARNESS_CASES_DIR") or str(resources.files("mjharness.data").joinpath("cases"))
_REQUIRED = ("name", "feature", "scene", "check", "integrator", "dt", "duration", "tolerance", "expected")


# -- methods: from the integrator registry ---------------------------------------------------------------

def _registered(stochastic: bool) -> tuple[str, ...]:
    from mjharness.integrators import INTEGRATORS, IntegratorKind

    kind = IntegratorKind.STOCHASTIC if stochastic else IntegratorKind.FIXED
    return tuple(n for n, cls in INTEGRATORS.items() if cls.kind == kind)


def fixed_methods() -> tuple[str, ...]:
    """Registered deterministic fixed-step integrators (registry order)."""
    return _registered(False)


def stochastic_methods() -> tuple[str, ...]:
    """Registered stochastic (fixed-step) integrators (registry order)."""
    return _registered(True)


def methods_for(case, all_integrators: bool = False) -> list[str]:
    """The case's documented integrator, or (``all_integrators``) every registered method of its kind."""
    own = case["integrator"].lower()
    if not all_integrators:
        return [own]
    return list(stochastic_methods() if own in stochastic_methods() else fixed_methods())


# -- case files ------------------------------------------------------------------------------------------

def list_cases(cases_dir: str | None = None) -> list[str]:
    """The case files of ``cases_dir`` (default the packaged data/cases): check cases in their ``order``, then
    NESC case files by name."""
    from .nesc_case import nesc_path

    d = cases_dir or CASES_DIR
    if not os.path.isdir(d):
        raise CaseError(f"no case directory {d!r} (set MJHARNESS_CASES_DIR or give --cases-dir)")
    names = sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json"))
    nesc = [n for n in names if nesc_path(n, d) is not None and n not in _bundled_nesc()]
    rest = [n for n in names if n not in nesc]
    return sorted(rest, key=lambda n: (load_case(n, d).get("order", 99), n)) + nesc


def _bundled_nesc() -> dict:
    from .nesc_case import NESC_CASES

    return NESC_CASES


def load_case(name: str, cases_dir: str | None = None) -> dict:
    d = cases_dir or CASES_DIR
    path = name if name.endswith(".json") else os.path.join(d, f"{name}.json")
    if not os.path.isfile(path):
        known = ", ".join(n[:-5] for n in sorted(os.listdir(d)) if n.endswith(".json")) if os.path.isdir(d) else ""
        raise CaseError(f"no case {name!r} (looked for {path}); known: {known}")
    with open(path) as fh:
        try:
            case = json.load(fh)
        except ValueError as e:
            raise CaseError(f"{path}: not valid JSON ({e})") from None
    missing = [k for k in _REQUIRED if k not in case]
    if missing:
        raise CaseError(f"{path}: missing keys {missing}")
    if case["check"] not in CHECKS:
        raise CaseError(f"{path}: unknown check {case['check']!r}; known: {sorted(CHECKS)}")
    return case


# -- running a case ------------------------------------------------------------------------------------------

_SCENES: dict = {}   # one scene object per configuration, so the engine's compiled chunks are reused


def _scene(case):
    from mjharness.adapters import MjScene
    from mjharness.scenes import load_scene

    src = case["scene"] if isinstance(case["scene"], str) else case["scene"]["xml"]
    noise = tuple((n["joint"], float(n["sigma"])) for n in case.get("noise", ()))
    key = (src, case.get("quaternion_update", "quaternion"), noise)
    if key not in _SCENES:
        sc = MjScene(load_scene(src), quaternion_update=key[1], backend="mjx")  # committed errors: MJX
        for joint, sigma in noise:
            sc.add_joint_noise(joint, sigma)
        _SCENES[key] = sc
    return _SCENES[key]


def _initial_states(case, scene) -> np.ndarray:
    def base():
        key = case.get("keyframe")
        return scene.reset(keyframe=key) if key is not None else scene.x0()

    worlds_x = []
    for w in case.get("worlds") or [{}]:
        x = base()
        if "qpos" in w:
            x[scene.qpos_segment] = w["qpos"]
        if "qvel" in w:
            x[scene.qvel_segment] = w["qvel"]
        worlds_x.append(x)
    x0 = np.stack(worlds_x)
    for r in scene.layout.special:  # authored quaternions normalised, as MuJoCo does on load
        x0[:, r.value_slice] /= np.linalg.norm(x0[:, r.value_slice], axis=1, keepdims=True)
    B = int(case.get("batch", 1))
    if B > 1 and len(x0) == 1:
        x0 = np.repeat(x0, B, axis=0)
    return x0


def simulate_case(case, method: str, duration: float | None = None):
    """``rollout`` of the case with ``method``: (scene, RolloutResult); ``time`` starts one sample in."""
    from mjharness.integrators import get_integrator
    from mjharness.rollout import rollout

    try:
        integ = get_integrator(method)
    except (KeyError, TypeError) as e:
        raise CaseError(f"case {case['name']!r}: {e}") from None
    scene = _scene(case)
    x0 = _initial_states(case, scene)
    dt = float(case["dt"])
    R = int(case.get("record_every", 1))
    dur = float(duration if duration is not None else case["duration"])
    samples = int(round(dur / dt)) // R
    if samples < 1:
        raise CaseError(f"case {case['name']!r}: duration {dur} is shorter than one sample ({R} x {dt})")
    steps = samples * R
    ctrl = case.get("ctrl")
    if ctrl is not None:  # a constant control: one row per step, as rollout takes it
        ctrl = np.broadcast_to(np.asarray(ctrl, float), (x0.shape[0], steps, len(ctrl)))
    res = rollout(scene, integ, dt=dt, steps=steps, x0=x0, ctrl=ctrl, seed=int(case.get("seed", 0)),
                  record_every=R, progress=False)
    return scene, res


def _tolerance(case, method: str, metrics) -> dict:
    """The case's tolerance for its documented integrator; other methods are documented, not gated: ten
    times their committed error (no bound where none is committed)."""
    if method == case["integrator"].lower():
        return {k: float(case["tolerance"][k]) for k in metrics}
    exp = case["expected"].get(method) or {}
    return {k: 10 * float(exp[k]) if k in exp else math.inf for k in metrics}


def run_case(case, method: str | None = None, duration: float | None = None) -> CaseResult:
    """Run ``case`` (a name or a loaded dict) with ``method`` (default: its documented integrator)."""
    if isinstance(case, str):
        case = load_case(case)
    method = (method or case["integrator"]).lower()
    scene, res = simulate_case(case, method, duration)
    try:
        metrics, details = CHECKS[case["check"]](case, scene, res.time, res.x, res.x0)
    except AnalyticError as e:
        raise CaseError(f"case {case['name']!r}: {e}") from None
    return CaseResult(case=case["name"], integrator=method, dt=float(case["dt"]),
                      duration=float(duration if duration is not None else case["duration"]), metrics=metrics,
                      tolerance=_tolerance(case, method, metrics), expected=case["expected"].get(method),
                      details=details, seconds=float(res.stats["wall_s"]), gated=method == case["integrator"].lower(),
                      failed_worlds=np.flatnonzero(res.status).tolist())


NESC_METHODS = ("rk4", "dormand_prince")   # RK4 at the NESC's 0.01 s; Dormand-Prince at rtol = atol = 1e-10


def run_suite(names=None, all_integrators: bool = False, duration: float | None = None, progress=None,
              cases_dir: str | None = None, backend: str = "mujoco") -> list[CaseResult]:
    """Run check cases (default: every case file of ``cases_dir``) and NESC cases by name: a ``CaseResult`` each.

    A NESC case (a bundled ``nesc_atmos_NN`` or a NESC case file in ``cases_dir``) runs with ``NESC_METHODS``
    (``all_integrators``: every fixed-step method too, not gated) on ``backend`` ("mujoco" or "mjx").
    """
    from .nesc import run_nesc
    from .nesc_case import nesc_path

    names = names or list_cases(cases_dir)
    out = []
    for n in names:
        if nesc_path(n, cases_dir) is not None:   # NASA's published trajectories (rollout/verify/nesc.py)
            methods = dict.fromkeys((*fixed_methods(), *NESC_METHODS) if all_integrators else NESC_METHODS)
            for meth in methods:
                out.append(run_nesc(n, meth, duration, backend=backend, cases_dir=cases_dir))
                if progress:
                    progress(out[-1])
            continue
        case = load_case(n, cases_dir)
        for meth in methods_for(case, all_integrators):
            r = run_case(case, meth, duration)
            out.append(r)
            if progress:
                progress(r)
    return out


def format_table(results) -> str:
    lines = [f"{'case':26s} {'metric':13s} {'integrator':20s} {'dt':>7s} {'max error':>10s} {'tolerance':>10s}  result"]
    for r in results:
        for i, (k, v) in enumerate(r.metrics.items()):
            ok = v <= r.tolerance[k] and not r.failed_worlds
            res = ("pass" if ok else "FAIL") if r.gated else ("(doc)" if ok else "(doc, worse)")
            lines.append(f"{r.case if i == 0 else '':26s} {k:13s} {r.integrator:20s} {r.dt:7.0e} {v:10.2e} "
                         f"{r.tolerance[k]:10.1e}  {res}")
        if r.failed_worlds:
            lines.append(f"{'':26s} worlds {r.failed_worlds[:10]} failed (status != 0)")
    return "\n".join(lines)
