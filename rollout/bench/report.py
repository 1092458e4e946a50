"""The bench report: machine and versions, the performance targets, the text table, the JSON file."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from datetime import datetime, timezone

__all__ = ["TARGETS", "machine_info", "load_average", "targets", "format_table", "format_bytes", "write_json"]

# The issues' performance targets: (peer, yardstick peer, limit on peer time / yardstick time per
# world-step, smallest batch it applies to, name, note). A target is checked on every cell that
# measures both peers.
TARGETS = (
    ("semi_implicit_euler", "mjx_step", 1.10, 64, "semi_implicit_euler / mjx_step time", "same work"),
    ("rk4", "mjx_forward", 4.4, 1, "rk4 / mjx_forward time", "4 forward calls + updates vs 1 forward"),
    ("rollout_h5", "rollout", 1.10, 1, "rollout_h5 / rollout wall", "HDF5 export at record_every={record_every}"),
    # The Fletcher-32 chunk checksums of every dataset cost <= 3 % of a run that writes its file;
    # so do the content hashes (measured alone by rollout_h5_nohash, with the checksums by _nocheck).
    ("rollout_h5", "rollout_h5_nocheck", 1.03, 1, "rollout_h5 / rollout_h5_nocheck wall",
     "chunk checksums + content hashes at record_every={record_every}"),
    ("rollout_h5", "rollout_h5_nohash", 1.03, 1, "rollout_h5 / rollout_h5_nohash wall",
     "content hashes at record_every={record_every}"),
    # MuJoCo C backend >= 0.95x (Euler) and >= 0.90x (RK4) mujoco.rollout's world-steps/s.
    ("backend_mujoco", "mujoco_rollout", 1 / 0.95, 1024, "backend_mujoco / mujoco_rollout time", "Euler, C backend"),
    ("backend_mujoco_rk4", "mujoco_rollout_rk4", 1 / 0.90, 1024, "backend_mujoco_rk4 / mujoco_rollout_rk4 time",
     "RK4, C backend"),
)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


def machine_info() -> dict:
    """Machine, device and versions (the header of every bench JSON)."""
    import jax

    from mjharness.scenes.mujoco_timers import timers_on

    dev = jax.devices()
    return dict(
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), host=platform.node(),
        platform=platform.platform(), python=platform.python_version(), cpu=_cpu_model(),
        cpu_count=os.cpu_count(), load_average=load_average(),
        backend=jax.default_backend(), devices=[str(d) for d in dev], device_kind=dev[0].device_kind,
        x64=bool(jax.config.jax_enable_x64),  # type: ignore[attr-defined]  # Config's flags are set at run time
        compile_cache=jax.config.jax_compilation_cache_dir,  # type: ignore[attr-defined]
        mujoco_timers=timers_on(),  # MuJoCo's stage timers, off after configure(): every peer in the process alike
        versions={k: _version(k) for k in ("mjharness", "mujoco", "mujoco-mjx", "jax", "jaxlib", "numpy", "h5py")})


def targets(cells) -> list[dict]:
    """``TARGETS`` checked on every cell that measures them."""
    out = []
    for c in cells:
        by = {r["peer"]: r["world_steps_per_s"] for r in c["results"]}
        for peer, yardstick, limit, min_batch, name, note in TARGETS:
            if peer in by and yardstick in by and c["batch"] >= min_batch:
                value = by[yardstick] / by[peer]
                out.append(dict(scene=c["scene"], batch=c["batch"], target=name, value=value, limit=limit,
                                met=value <= limit, note=note.format(**c)))
    return out


def write_json(report: dict, path: str) -> None:
    """Write ``report`` to ``path`` atomically (a killed bench leaves the last complete report)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)


# -- text -----------------------------------------------------------------------------------------

def _si(v: float) -> str:
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= f:
            return f"{v / f:.3g}{unit}"
    return f"{v:.3g}"


def format_bytes(n) -> str:
    """``n`` bytes as text in B / KiB / MiB / GiB ("-" for None: not measured)."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _ratio(v) -> str:
    return f"{v:.3f}" if v is not None else "-"


def _cell_lines(c) -> list[str]:
    head = (f"  {'peer':30s} {'world-steps/s':>13s} {'x mjx':>7s} {'x native':>8s} {'compile s':>9s} {'cache':>10s} "
            f"{'peak mem':>10s}")
    lines = ["", f"{c['scene']} (nq={c['nq']} nv={c['nv']}), batch {c['batch']}, {c['steps']} steps/call, "
                 f"dt={c['dt']:g}, load {c['load_average']}", head]
    for r in c["results"]:
        bad = "" if r.get("finite", True) else "  NON-FINITE"
        lines.append(f"  {r['peer']:30s} {_si(r['world_steps_per_s']):>13s} {_ratio(r.get('x_mjx')):>7s} "
                     f"{_ratio(r.get('x_native')):>8s} {r['compile_s']:9.2f} {r.get('compile_cache', '-'):>10s} "
                     f"{format_bytes(r['peak_bytes']):>10s}{bad}")
    vs = [f"{r['peer']} {r['vs_mujoco_rollout']:.3f}x" for r in c["results"] if r.get("vs_mujoco_rollout")]
    if vs:
        lines.append(f"  C backend / mujoco.rollout world-steps/s (same scheme, interleaved): {', '.join(vs)}")
    plain = [f"{r['peer']} {r['vs_plain']:.3f}x (wall {r['vs_plain_wall']:.3f}, CPU "
             f"{r.get('vs_plain_cpu', float('nan')):.3f})" for r in c["results"] if r.get("vs_plain")]
    if plain:
        lines.append(f"  randomized or closed loop / the same run without (world-steps/s, worse of wall and CPU): "
                     f"{', '.join(plain)}")
    return lines


def _cache_check_lines(cc) -> list[str]:
    return ["", f"compile cache ({cc['scene']}, {cc['integrator']}): second process "
                f"{cc['second_compile_s']:.2f} s vs first {cc['first_compile_s']:.2f} s = {cc['ratio']:.1%} "
                f"of the first's compile "
                f"({'met' if cc['met'] else 'MISS'} <= 30%; trace {cc['second_trace_cache']}, "
                f"{'same' if cc['same_result'] else 'DIFFERENT'} result)"]


def format_table(report: dict) -> str:
    """The report as text: one table per cell, then the targets and the compile-cache checks."""
    m = report["machine"]
    lines = [f"mjharness bench  {m['date']}  {m['cpu']} x{m['cpu_count']}  {m['backend']} ({m['device_kind']})  "
             f"x64={m['x64']}  mujoco timers {'on' if m.get('mujoco_timers') else 'off'}  load {m['load_average']}",
             "  ".join(f"{k} {v}" for k, v in m["versions"].items())]
    for c in report["cells"]:
        lines += _cell_lines(c)
    for e in report.get("errors", []):
        lines.append(f"\n{e['scene']} batch {e['batch']}: FAILED {e['error']}")
    if report.get("targets"):
        lines += ["", "targets:"]
        for t in report["targets"]:
            lines.append(f"  {'met ' if t['met'] else 'MISS'} {t['target']:36s} {t['value']:.3f} <= {t['limit']} "
                         f"({t['scene']}, batch {t['batch']}; {t['note']})")
    checks = report.get("cache_check") or []
    for cc in [checks] if isinstance(checks, dict) else checks:
        lines += _cache_check_lines(cc)
    return "\n".join(lines)
