"""The signal bar of issue 40: SIGINT / SIGTERM at random moments of batch 256-1024 runs of two scenes on MuJoCo C
and MJX; every run must exit 130 / 143 with one line and no traceback, and its file (when one was written) must
verify intact and resume to a file bit-identical to an uninterrupted run.

Moments, chosen at random per case (seeded): ``import`` (0.05-0.6 s after start, while Python imports),
``compile`` (when the run prints its compile / native-chunk phase line), ``stepping`` (once the file holds a
random number of samples) and ``writing`` (the moment the file's sample count changes: a chunk is being
flushed). The references are uninterrupted CLI runs with the same options.

    python scripts/signal_bar.py --cases 20 --seed 0 --json data/signal_bar.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

# (scene, backend) -> (batch, extra options): two scenes, two backends, batch 256-1024
COMBOS = {
    ("double_pendulum", "mujoco"): (1024, ["--integrator", "rk4", "--dt", "0.001", "--steps", "3000"]),
    ("double_pendulum", "mjx"): (256, ["--integrator", "rk4", "--dt", "0.001", "--steps", "3000"]),
    ("box_on_plane", "mujoco"): (512, ["--steps", "3000"]),
    ("box_on_plane", "mjx"): (256, ["--steps", "2000"]),
}
MOMENTS = ("import", "compile", "stepping", "writing")
PHASE = ("compiling the chunk function", "runs whole chunks")


def cmd() -> list[str]:
    exe = shutil.which("mjharness")
    return [exe] if exe else [sys.executable, "-m", "mjharness.rollout.cli"]


def samples(path: str) -> int:
    from mjharness.rollout import open_rollout

    try:
        with open_rollout(path) as f:
            return f.samples
    except Exception:  # noqa: BLE001 - not created or not readable yet
        return -1


def argv_of(scene, backend, out) -> list[str]:
    batch, extra = COMBOS[(scene, backend)]
    return ["run", scene, "--backend", backend, "--batch", str(batch), *extra, "--out", out]


def signal_run(argv, cwd, sig, moment, rng, limit_s=900) -> tuple[int, str, str]:
    """Run and signal at ``moment``; (exit status, stderr, what the moment was)."""
    path = os.path.join(cwd, argv[argv.index("--out") + 1])
    proc = subprocess.Popen(cmd() + argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err, where, deadline = [], "", time.monotonic() + limit_s
    try:
        if moment == "import":
            delay = rng.uniform(0.15, 0.6)  # before ~0.1 s the interpreter itself starts: no code of ours runs
            time.sleep(delay)  # a random moment is the point here, not a synchronisation
            where = f"{delay:.2f} s after start"
        elif moment == "compile":
            for line in proc.stderr:
                err.append(line)
                if any(p in line for p in PHASE) or time.monotonic() > deadline:
                    break
            where = "at the compile / native-chunk phase line"
        else:
            goal = rng.randint(1, 40)
            while samples(path) < goal and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            if moment == "writing":
                have = samples(path)
                while samples(path) == have and proc.poll() is None and time.monotonic() < deadline:
                    pass  # the next flush: signal while the writer is at work
            where = f"{moment}, file at {samples(path)} samples"
        alive = proc.poll() is None
        if alive:
            proc.send_signal(sig)
        else:
            where += " (the run had ended before the signal)"
        err.append(proc.stderr.read())
        proc.wait(timeout=limit_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(err), where


def check_exit(rc: int, err: str, where: str, sig) -> tuple[list[str], list[str]]:
    """(problems, interrupt lines) of one signalled run's exit code and stderr."""
    want = 130 if sig == signal.SIGINT else 143
    problems = []
    if rc != want and not (rc == 0 and "ended before" in where):
        problems.append(f"exit {rc}, expected {want}")
    if any(w in err for w in ("Traceback", "Segmentation", "Exception ignored")):
        problems.append("a traceback or crash on stderr")
    lines = [ln for ln in err.splitlines() if "interrupted" in ln or "terminated (SIGTERM)" in ln]
    if rc == want and len(lines) != 1:
        problems.append(f"{len(lines)} interrupt lines")
    return problems, lines


def check_file(work: str, out: str, scene: str, backend: str, refs: dict, problems: list[str]) -> str:
    """Verify and resume the interrupted file, compare it with an uninterrupted run; returns what happened."""
    path = os.path.join(work, out)
    if not os.path.exists(path):
        return "no file written"
    v = subprocess.run(cmd() + ["verify", out], cwd=work, capture_output=True, text=True)
    if v.returncode != 0:
        problems.append(f"verify exit {v.returncode}: {v.stdout[-300:]}")
    r = subprocess.run(cmd() + ["run", "--resume", out, "--no-progress"], cwd=work, capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"resume exit {r.returncode}: {r.stderr[-300:]}")
        return "resume failed"
    key = (scene, backend)
    if key not in refs:
        ref = f"ref_{scene}_{backend}.h5"
        p = subprocess.run(cmd() + argv_of(scene, backend, ref) + ["--no-progress"], cwd=work, capture_output=True,
                           text=True)
        if p.returncode != 0:
            problems.append(f"reference run failed: {p.stderr[-300:]}")
        refs[key] = os.path.join(work, ref)
    from mjharness.rollout import open_rollout

    with open_rollout(path) as f, open_rollout(refs[key]) as g:
        same = f.complete and np.array_equal(f.x, g.x)
    resumed = "resumed bit-identical" if same else "resumed DIFFERENT from the uninterrupted run"
    if not same:
        problems.append(resumed)
    return resumed


def run_case(i: int, rng: random.Random, work: str, refs: dict) -> dict:
    """One signalled run at a random moment, checked: its row of the report."""
    combos = list(COMBOS)
    scene, backend = combos[i % len(combos)]
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    moment = MOMENTS[(i // len(combos)) % len(MOMENTS)] if i < 4 * len(combos) else rng.choice(MOMENTS)
    out = f"case{i}.h5"
    t0 = time.monotonic()
    rc, err, where = signal_run(argv_of(scene, backend, out), work, sig, moment, rng)
    problems, lines = check_exit(rc, err, where, sig)
    resumed = check_file(work, out, scene, backend, refs, problems)
    return dict(case=i, scene=scene, backend=backend, batch=COMBOS[(scene, backend)][0],
                signal=signal.Signals(sig).name, moment=moment, where=where, exit=rc, resumed=resumed,
                seconds=round(time.monotonic() - t0, 1), ok=not problems, problems=problems,
                line=lines[0] if lines else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="signal_bar-")
    load = os.getloadavg()
    refs: dict = {}
    rows = []
    for i in range(a.cases):
        row = run_case(i, rng, work, refs)
        rows.append(row)
        print(f"{i:2d} {row['scene']:16s} {row['backend']:6s} B={row['batch']:<5d} {row['signal']:7s} "
              f"{row['moment']:8s} exit {row['exit']:3d}  "
              f"{'ok' if row['ok'] else 'FAIL: ' + '; '.join(row['problems'])}  [{row['where']}; {row['resumed']}]",
              flush=True)
    summary = dict(cases=len(rows), passed=sum(r["ok"] for r in rows), load_before=load, load_after=os.getloadavg(),
                   rows=rows)
    print(f"{summary['passed']}/{summary['cases']} passed; load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
