"""The NESC 2015 atmospheric check cases (NASA/TM-2015-218675) against every tool's published trajectory.

``run_nesc("nesc_atmos_06")`` simulates a case (``nesc_case``: RK4 at 0.01 s on MuJoCo C, recorded every
0.1 s as the tools published) and compares each compared column with the tools' columns, in the published
units (ft, ft/s, deg, deg/s, kn, lbf/ft²): the tools are interpolated to our times (each tool's own time
column; sim_05's single-precision stamps are up to 7.6e-7 s off the grid), angles unwrapped and compared
modulo 360°. Per column it reports our largest deviation from the tools' mean over the whole case, the tools'
spread (the largest, over time, max − min across tools) and our largest deviation from each tool (the nearest
tool's is the sharper figure: the spread is wide where one tool is an outlier, data/nesc/README.md). A column
passes when our deviation is within the spread, or within the column's floor (``FLOORS``) where the tools
agree to their printed precision (the dragless sphere's latitude: every tool prints 0 to 1e-22 deg). The
result is a ``CaseResult`` of ``mjharness cases``: metrics = our deviations, tolerance = max(spread, floor).
"""

from __future__ import annotations

import numpy as np

from .case_result import CaseResult
from .nesc_case import NESC_CASES, NESC_DIR, load_nesc, simulate_nesc

__all__ = ["NESC_CASES", "FLOORS", "published", "compare", "run_nesc", "nesc_table"]

_ANGLES = ("lat", "lon", "phi", "theta", "psi")
# Floors in published units: a tolerance below which agreement is rounding, not physics (a few ulps of the
# published values: 1e-9 deg ~ 0.1 mm of latitude at the Earth's surface; 1e-6 ft ~ 0.3 µm).
FLOORS = {"deg": 1e-9, "deg/s": 1e-9, "ft": 1e-6, "ft/s": 1e-6, "nmi/h": 1e-6, "1": 1e-9, "lbf/ft^2": 1e-6}


def _wrap(d):
    """Angle differences [deg] into [−180, 180)."""
    return (np.asarray(d) + 180.0) % 360.0 - 180.0


def _tool_table(case: dict, sim: str) -> tuple[list[str], np.ndarray]:
    path = NESC_DIR.joinpath(case["bundled"]["tools"][sim]["file"])
    text = path.read_text().splitlines()
    return text[0].split(","), np.loadtxt(text[1:], delimiter=",", ndmin=2)


def published(case: dict, time: np.ndarray) -> dict:
    """{column: (unit, {sim: (T,) values at ``time``})} for every compared column, in the published units."""
    out: dict = {}
    for sim, cmap in case["columns"].items():
        header, rows = _tool_table(case, sim)
        t = rows[:, header.index(cmap["time"]["column"])]
        for col in case["compared_columns"]:
            if col not in cmap:
                continue
            y = rows[:, header.index(cmap[col]["column"])]
            if col in _ANGLES:      # interpolate across ±180° without a jump
                y = np.unwrap(y, period=360.0)
            out.setdefault(col, (cmap[col]["unit"], {}))[1][sim] = np.interp(time, t, y)
    return out


def _column_figures(ours: np.ndarray, tools: dict, angle: bool, floor: float) -> dict:
    """Our deviation from the tools' mean, the tools' spread and our deviation from each tool, one column."""
    sims = sorted(tools)
    ref = tools[sims[0]]
    # angles: bring every tool (and us) to the first tool's branch before averaging
    align = (lambda y: ref + _wrap(y - ref)) if angle else (lambda y: y)
    stack = np.stack([align(tools[s]) for s in sims])
    mean = stack.mean(axis=0)
    dev = np.abs(align(ours) - mean)
    spread = float(np.max(stack.max(axis=0) - stack.min(axis=0)))
    per_tool = {s: float(np.max(np.abs(align(ours) - stack[i]))) for i, s in enumerate(sims)}
    nearest = min(per_tool, key=per_tool.__getitem__)
    return dict(deviation=float(np.max(dev)), at_time_index=int(np.argmax(dev)), spread=spread, floor=floor,
                tolerance=max(spread, floor), per_tool=per_tool, nearest=nearest,
                nearest_deviation=per_tool[nearest], tools=sims)


def compare(case: dict, time: np.ndarray, flight: dict) -> dict:
    """{column: figures} of our flight quantities (SI, ``(T,)``) against every tool (module docstring)."""
    units = case["units"]
    figures = {}
    for col, (unit, tools) in published(case, time).items():
        ours = np.asarray(flight[col]) / units[unit]["to_si_factor"]      # SI -> published unit
        figures[col] = dict(unit=unit, **_column_figures(ours, tools, col in _ANGLES, FLOORS[unit]))
    return figures


def run_nesc(name: str, method: str = "rk4", duration: float | None = None, dt: float = 0.01,
             backend: str = "mujoco") -> CaseResult:
    """Simulate NESC case ``name`` (``nesc_atmos_NN``) and compare it with the tools: a ``CaseResult``.

    Gated (pass/fail) with RK4; another method is run and reported, not gated.
    """
    case = load_nesc(name)
    period = float(case["bundled"]["period_s"])
    run = simulate_nesc(case, method, dt=dt, record_every=int(round(period / dt)), duration=duration,
                        backend=backend)
    figures = compare(case, run.time, {k: v[:, 0] for k, v in run.flight.items()})
    metrics = {c: f["deviation"] for c, f in figures.items()}
    tolerance = {c: f["tolerance"] for c, f in figures.items()}
    return CaseResult(case=name, integrator=method, dt=dt, duration=float(run.time[-1]), metrics=metrics,
                      tolerance=tolerance, expected=None, details=dict(columns=figures, title=case["title"],
                                                                        backend=backend),
                      seconds=run.wall_s, gated=method == "rk4")


def nesc_table(results) -> str:
    """Per case and column: our deviation from the tools' mean, the tools' spread, the floor, pass/fail."""
    lines = [f"{'case':15s} {'column':9s} {'unit':9s} {'ours - mean':>12s} {'tool spread':>12s} {'floor':>8s} "
             f"{'nearest tool':>20s}  result"]
    for r in results:
        for i, (c, f) in enumerate(r.details["columns"].items()):
            ok = f["deviation"] <= f["tolerance"]
            lines.append(f"{r.case if i == 0 else '':15s} {c:9s} {f['unit']:9s} {f['deviation']:12.3e} "
                         f"{f['spread']:12.3e} {f['floor']:8.0e} {f['nearest']:>8s} {f['nearest_deviation']:11.3e}  "
                         f"{'pass' if ok else 'FAIL'}")
    return "\n".join(lines)
