"""Run the suite as CI does and record where its time goes, to see drift between commits.

    python scripts/record_test_durations.py [--cold] [--jax-events] [--out data/test_durations.json] [-- pytest args]

Writes the wall time of the whole run, the machine's load before it, each test file's summed test time (with
pytest-xdist's ``--dist loadfile`` a file runs on one worker, so the longest file bounds the run) and the 40
slowest tests, from pytest's own JUnit XML report. ``--jax-events`` adds, per file, the seconds JAX spent tracing,
lowering and compiling (cache reads included) and the persistent-cache entries written (``tests/jax_events.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def durations(junit: str) -> list[tuple[str, float]]:
    """(test id, seconds) of every test case in a JUnit XML report."""
    cases = ET.parse(junit).getroot().iter("testcase")
    return [(f"{c.get('classname')}::{c.get('name')}", float(c.get("time", 0.0))) for c in cases]


def summary(cases: list[tuple[str, float]], wall_s: float, load: tuple, returncode: int) -> dict:
    per_file: dict = defaultdict(float)
    for name, s in cases:
        per_file[name.split("::")[0].replace(".", "/") + ".py"] += s
    slowest = sorted(cases, key=lambda c: -c[1])[:40]
    return dict(date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), wall_s=round(wall_s, 1), load_before=load,
                cpus=os.cpu_count(), tests=len(cases), returncode=returncode,
                files=dict(sorted(((f, round(s, 1)) for f, s in per_file.items()), key=lambda kv: -kv[1])),
                slowest=[[n, round(s, 2)] for n, s in slowest])


def jax_events(folder: str) -> dict:
    """{file: {trace, lower, compile, cache_misses, tests}} summed over the workers' ``tests/jax_events.py`` rows,
    longest (trace + lower + compile) first."""
    per: dict = defaultdict(lambda: dict(trace=0.0, lower=0.0, compile=0.0, cache_misses=0, tests=0))
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".jsonl"):
            for line in Path(folder, name).read_text().splitlines():
                row = json.loads(line)
                f = per[row["test"].split("::")[0]]
                for k in ("trace", "lower", "compile", "cache_misses"):
                    f[k] += row[k]
                f["tests"] += 1
    rounded = {f: {k: round(v, 1) if isinstance(v, float) else v for k, v in d.items()} for f, d in per.items()}
    return dict(sorted(rounded.items(), key=lambda kv: -(kv[1]["trace"] + kv[1]["lower"] + kv[1]["compile"])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "data" / "test_durations.json"))
    ap.add_argument("--cold", action="store_true", help="an empty compile cache (MJHARNESS_CACHE_DIR in a temporary "
                    "folder), as on a fresh machine; default: the user's cache, as it is")
    ap.add_argument("--jax-events", action="store_true", help="record per file JAX's trace/lower/compile seconds and "
                    "cache misses (MJHARNESS_JAX_EVENTS, tests/jax_events.py)")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = ap.parse_args(argv)
    load = tuple(round(v, 2) for v in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        env = dict(os.environ, MJHARNESS_CACHE_DIR=os.path.join(tmp, "cache")) if args.cold else None
        events = os.path.join(tmp, "jax_events")
        if args.jax_events:
            env = dict(env or os.environ, MJHARNESS_JAX_EVENTS=events)
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "pytest", f"--junitxml={junit}", *args.pytest_args], cwd=ROOT,
                             env=env)
        wall = time.perf_counter() - t
        report = summary(durations(junit), wall, load, rc)
        report["cache"] = "cold (empty MJHARNESS_CACHE_DIR)" if args.cold else "the user's, as found"
        if args.jax_events:
            report["jax_events"] = jax_events(events)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['tests']} tests in {report['wall_s']} s (load before {load}); slowest file "
          f"{next(iter(report['files'].items()), None)}; written to {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
