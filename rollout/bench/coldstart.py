"""Cold start of ``mjharness run`` per backend: one fresh process per (scene, backend), empty compile cache.

A user's first run: process start, imports, scene loading, compile (MuJoCo C's whole-chunk path compiles
nothing), the run and the file, timed from process start to exit; the run's own summary line gives the
compile seconds and world-steps/s. The backends of one scene run back to back, so they see the same load
(recorded per row). ``scripts/measure_backend_default.py`` and ``mjharness bench --cold-start`` call this.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

__all__ = ["COLD_BACKENDS", "cold_run", "cold_starts", "format_cold"]

COLD_BACKENDS = ("mujoco", "mjx")
SUMMARY = re.compile(r"wall ([\d.]+) s, compile ([\d.]+) s .*?\(([\d.]+) world-steps/s\)")


def cold_run(scene: str, backend: str, steps: int, batch: int, timeout: float = 900) -> dict:
    """One fresh ``mjharness run SCENE --backend BACKEND`` against an empty compile cache: its row."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, MJHARNESS_CACHE_DIR=os.path.join(d, "cache"))
        argv = [sys.executable, "-m", "mjharness.rollout.cli", "run", scene, "--steps", str(steps), "--batch",
                str(batch), "--backend", backend, "--no-progress", "--out", os.path.join(d, "r.h5")]
        t = time.perf_counter()
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return dict(scene=scene, backend=backend, error=f"timeout {timeout:g} s")
        total = time.perf_counter() - t
    m = SUMMARY.search(p.stdout)
    chosen = re.search(r"backend (\w+) \(", p.stderr)
    if p.returncode or not m:
        return dict(scene=scene, backend=backend, error=(p.stderr or p.stdout)[-300:], total_s=total)
    return dict(scene=scene, backend=backend, ran=chosen.group(1) if chosen else "?", total_s=round(total, 2),
                compile_s=float(m.group(2)), world_steps_per_s=float(m.group(3)))


def cold_starts(scenes, *, steps: int, batch: int, backends=COLD_BACKENDS, log=None) -> list[dict]:
    """``cold_run`` of every scene x backend, with the 1-minute load average at each row's end."""
    rows = []
    for s in scenes:
        for b in backends:
            if log:
                log(f"cold start: mjharness run {s} --backend {b} (fresh process, empty cache) ...")
            r = cold_run(str(s), b, steps, batch)
            r["load"] = round(os.getloadavg()[0], 2)
            rows.append(r)
    return rows


def format_cold(rows, steps: int, batch: int) -> list[str]:
    lines = ["", f"cold start of `mjharness run` ({steps} steps, batch {batch}, fresh process, empty cache):"]
    for r in rows:
        if "error" in r:
            lines.append(f"  {r['scene']:16s} {r['backend']:7s} FAILED {r['error'][-120:]}")
        else:
            lines.append(f"  {r['scene']:16s} {r['backend']:7s} {r['total_s']:7.2f} s to exit, compile "
                         f"{r['compile_s']:.2f} s, {r['world_steps_per_s']:.4g} world-steps/s (load {r['load']})")
    return lines
