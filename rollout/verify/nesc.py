"""The NESC 2015 atmospheric check cases (NASA/TM-2015-218675) against every tool's published trajectory.

``run_nesc("nesc_atmos_06")`` simulates a case (``nesc_case``: RK4 at 0.01 s on MuJoCo C, recorded every
0.1 s as the tools published; ``method="dormand_prince"`` steps adaptively to each 0.1 s at rtol = atol = 1e-10;
``backend="mjx"``; ``cases_dir``: a case file of one's own, docs/nesc.md) and compares each compared column
with the tools' columns, in the published
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

from .case_checks import CaseError
from .case_result import CaseResult
from .nesc_case import NESC_CASES, case_file, load_nesc, nesc_integrator, simulate_nesc

__all__ = ["NESC_CASES", "FLOORS", "NESC_COLUMNS", "UNITS", "COMPARED", "published", "compare", "run_nesc",
           "nesc_table"]

_ANGLES = ("lat", "lon", "phi", "theta", "psi")
# Floors in published units: a tolerance below which agreement is rounding, not physics (a few ulps of the
# published values: 1e-9 deg ~ 0.1 mm of latitude at the Earth's surface; 1e-6 ft ~ 0.3 µm).
FLOORS = {"deg": 1e-9, "deg/s": 1e-9, "ft": 1e-6, "ft/s": 1e-6, "nmi/h": 1e-6, "1": 1e-9, "lbf/ft^2": 1e-6}


# NASA's own column names (the published CSVs of NESC_data/Atmospheric_checkcases) -> (ours, unit): a case file
# that names the raw published files needs no column map
NESC_COLUMNS = {
    "time": ("time", "s"), "gePosition_ft_X": ("ecef_x", "ft"), "gePosition_ft_Y": ("ecef_y", "ft"),
    "gePosition_ft_Z": ("ecef_z", "ft"), "eiPosition_ft_X": ("eci_x", "ft"), "eiPosition_ft_Y": ("eci_y", "ft"),
    "eiPosition_ft_Z": ("eci_z", "ft"), "latitude_deg": ("lat", "deg"), "longitude_deg": ("lon", "deg"),
    "altitudeMsl_ft": ("alt", "ft"), "feVelocity_ft_s_X": ("v_north", "ft/s"),
    "feVelocity_ft_s_Y": ("v_east", "ft/s"), "feVelocity_ft_s_Z": ("v_down", "ft/s"),
    "eulerAngle_deg_Roll": ("phi", "deg"), "eulerAngle_deg_Pitch": ("theta", "deg"),
    "eulerAngle_deg_Yaw": ("psi", "deg"), "bodyAngularRateWrtEi_deg_s_Roll": ("p", "deg/s"),
    "bodyAngularRateWrtEi_deg_s_Pitch": ("q", "deg/s"), "bodyAngularRateWrtEi_deg_s_Yaw": ("r", "deg/s"),
    "trueAirspeed_nmi_h": ("airspeed", "nmi/h"), "mach": ("mach", "1"),
    "dynamicPressure_lbf_ft2": ("qbar", "lbf/ft^2"),
}
# published unit -> SI factor (exact: 1 ft = 0.3048 m, 1 kn = 1852/3600 m/s, 1 lbf = 4.4482216152605 N)
UNITS = {"s": 1.0, "ft": 0.3048, "deg": np.pi / 180, "ft/s": 0.3048, "deg/s": np.pi / 180, "nmi/h": 1852 / 3600,
         "1": 1.0, "lbf/ft^2": 4.4482216152605 / 0.3048 ** 2}
# compared when a case file does not list its own
COMPARED = ("lat", "lon", "alt", "v_north", "v_east", "v_down", "phi", "theta", "psi", "p", "q", "r", "airspeed",
            "mach", "qbar", "ecef_x", "ecef_y", "ecef_z", "eci_x", "eci_y", "eci_z")


def _wrap(d):
    """Angle differences [deg] into [−180, 180)."""
    return (np.asarray(d) + 180.0) % 360.0 - 180.0


def _tool_table(case: dict, sim: str) -> tuple[dict, np.ndarray]:
    """({canonical: (column index, unit)}, rows) of one tool's CSV: the case's ``columns[sim]`` map, or NASA's
    own column names (``NESC_COLUMNS``) for a raw published file."""
    rel = case["references"][sim] if "references" in case else case["bundled"]["tools"][sim]["file"]
    path = case_file(case, rel)
    try:
        text = path.read_text().splitlines()
        header = [h.strip() for h in text[0].split(",")]
        rows = np.loadtxt([t for t in text[1:] if t.strip()], delimiter=",", ndmin=2)
    except (OSError, IndexError, ValueError) as e:
        raise CaseError(f"{case.get('_file', case['case'])}: tool {sim}'s CSV {path}: unreadable ({e})") from None
    cmap = case.get("columns", {}).get(sim)
    named = ({c: (m["column"], m["unit"]) for c, m in cmap.items() if isinstance(m, dict)} if cmap else
             {canon: (orig, unit) for orig, (canon, unit) in NESC_COLUMNS.items() if orig in header})
    missing = [orig for orig, _ in named.values() if orig not in header]
    if missing or "time" not in named:
        raise CaseError(f"{case.get('_file', case['case'])}: tool {sim}'s CSV {path}: no column "
                        f"{(missing or ['time'])[0]!r}")
    return {c: (header.index(orig), unit) for c, (orig, unit) in named.items()}, rows


def published(case: dict, time: np.ndarray) -> dict:
    """{column: (unit, {sim: (T,) values at ``time``})} for every compared column, in the published units.

    Each tool is interpolated linearly in its own time column; angles are unwrapped first.
    """
    out: dict = {}
    sims = case["references"] if "references" in case else case["bundled"]["tools"]
    for sim in sims:
        cols, rows = _tool_table(case, sim)
        t = rows[:, cols["time"][0]]
        for col in case.get("compared_columns", COMPARED):
            if col not in cols:
                continue
            y = rows[:, cols[col][0]]
            if col in _ANGLES:      # interpolate across ±180° without a jump
                y = np.unwrap(y, period=360.0)
            out.setdefault(col, (cols[col][1], {}))[1][sim] = np.interp(time, t, y)
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
    units = {**UNITS, **{u: f["to_si_factor"] for u, f in case.get("units", {}).items()}}
    figures = {}
    for col, (unit, tools) in published(case, time).items():
        if unit not in units or unit not in FLOORS:
            raise CaseError(f"{case.get('_file', case['case'])}: column {col!r} in unit {unit!r}; known: "
                            f"{sorted(FLOORS)}")
        ours = np.asarray(flight[col]) / units[unit]      # SI -> published unit
        figures[col] = dict(unit=unit, **_column_figures(ours, tools, col in _ANGLES, FLOORS[unit]))
    return figures


def run_nesc(name: str, method: str = "rk4", duration: float | None = None, dt: float = 0.01,
             backend: str = "mujoco", rtol: float | None = None, atol: float | None = None,
             cases_dir: str | None = None) -> CaseResult:
    """Simulate NESC case ``name`` and compare it with the tools: a ``CaseResult``.

    ``name``: a bundled ``nesc_atmos_NN``, or a case file ``cases_dir/name.json`` (docs/nesc.md, "Case files").
    ``method``: a fixed-step method at ``dt`` (RK4 at the NESC's 0.01 s by default) or an adaptive one at
    ``rtol``/``atol`` (default 1e-10) stepping to every output time. RK4 and the adaptive methods are gated
    (pass/fail); other fixed-step methods are reported, not gated.
    """
    from mjharness.integrators import IntegratorKind

    case = load_nesc(name, cases_dir)
    period = float(_period(case))
    integ = nesc_integrator(method, rtol, atol)
    run = simulate_nesc(case, method, dt=dt, record_every=max(1, int(round(period / dt))), duration=duration,
                        backend=backend, rtol=rtol, atol=atol)
    figures = compare(case, run.time, {k: v[:, 0] for k, v in run.flight.items()})
    metrics = {c: f["deviation"] for c, f in figures.items()}
    tolerance = {c: f["tolerance"] for c, f in figures.items()}
    adaptive = integ.kind == IntegratorKind.ADAPTIVE
    label = f"{method}(rtol={integ.controller.rtol:g})" if adaptive else method
    return CaseResult(case=name, integrator=label, dt=period if adaptive else dt, duration=float(run.time[-1]),
                      metrics=metrics, tolerance=tolerance, expected=None,
                      details=dict(columns=figures, title=case.get("title", case["case"]), backend=backend),
                      seconds=run.wall_s, gated=adaptive or method == "rk4")


def _period(case: dict) -> float:
    """The interval we record at: the bundled decimation, else the published output interval, else 0.1 s."""
    return (case.get("bundled", {}).get("period_s") or case["run"].get("published_output_interval_s") or 0.1)


def nesc_table(results) -> str:
    """Per case, method and column: our deviation from the tools' mean, the tools' spread, the floor, pass/fail."""
    lines = [f"{'case':15s} {'method':27s} {'column':9s} {'unit':9s} {'ours - mean':>12s} {'tool spread':>12s} "
             f"{'floor':>8s} {'nearest tool':>20s}  result"]
    for r in results:
        for i, (c, f) in enumerate(r.details["columns"].items()):
            ok = f["deviation"] <= f["tolerance"]
            first = i == 0
            lines.append(f"{r.case if first else '':15s} {r.integrator if first else '':27s} {c:9s} {f['unit']:9s} "
                         f"{f['deviation']:12.3e} {f['spread']:12.3e} {f['floor']:8.0e} {f['nearest']:>8s} "
                         f"{f['nearest_deviation']:11.3e}  {'pass' if ok else 'FAIL'}")
    return "\n".join(lines)
