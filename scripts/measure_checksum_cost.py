"""Cost of the file's integrity checks: Fletcher-32 chunk checksums (issue 28) and XXH3-128 content hashes
(issue 39), the same runs written with both, with the checksums only, and with neither.

    python scripts/measure_checksum_cost.py [--repeats 5] [--batch 256] [--steps 2000] [--scene double_pendulum]

Two figures, each the median over interleaved repeats (all, no hashes, none, all, ...):
- writer: ``RolloutWriter`` alone streaming (T, B, n) float64 chunks, MB/s in each mode;
- engine: ``rollout(..., out=...)`` wall time of the run phase (``stats["run_s"]``), MuJoCo C backend,
  ``record_every=1`` (the most writing per step), in each mode.
And, less sensitive to load, the time the writer thread spends hashing (``ChunkDigests.record``, timed
inside the "all" runs) as a share of the run phase: an upper bound of the hashes' cost, since the writer
thread works while the next chunk is stepped.
Prints the load average first: figures taken on a loaded machine (load > 1.5) are provisional.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

import numpy as np

from mjharness.rollout import h5, rollout
from mjharness.rollout.h5 import digest as h5digest
from mjharness.rollout.h5 import format as h5format

MODES = ("all", "no hashes", "none")


@contextlib.contextmanager
def integrity(mode: str):
    """Files created inside have checksums and hashes ("all"), checksums only ("no hashes", the bench's
    ``rollout_h5_nohash``) or neither ("none", ``rollout_h5_nocheck``)."""
    with contextlib.ExitStack() as stack:
        if mode != "all":
            stack.enter_context(h5digest.without_hashes())
        if mode == "none":
            stack.enter_context(h5format.without_checksums())
        yield


HASH_S = [0.0]


def _timed_record():
    """``ChunkDigests.record`` timed into ``HASH_S`` (the writer thread's hashing work)."""
    record = h5digest.ChunkDigests.record

    def timed(self, rows, j0, j1):
        t = time.perf_counter()
        record(self, rows, j0, j1)
        HASH_S[0] += time.perf_counter() - t

    h5digest.ChunkDigests.record = timed


def writer_mb_s(path: str, T: int, B: int, n: int, S: int) -> float:
    from mjharness.integrators import StateRegistry, StateSpec

    reg = StateRegistry()
    reg.register("q", StateSpec((n,)))
    layout = reg.finalize()
    spec = h5.FileSpec(attrs=dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION, dt=0.01, record_every=1,
                                  steps=T, batch=B, seed=0, integrator='{"name": "test"}'),
                       compat_log=[], layout=h5.layout_table(layout), x0=np.zeros((B, n)), model_params={},
                       samples=T, qpos=None, qvel=None, time_chunk=S)
    h5.create_rollout_file(path, spec)
    rng = np.random.default_rng(0)
    chunk = rng.standard_normal((S, B, n))
    t = time.perf_counter()
    w = h5.RolloutWriter(path)
    for j0 in range(0, T, S):
        w.put(j0, np.arange(j0, j0 + S, dtype=float), chunk, np.zeros(B, np.int8), np.full(B, -1))
    w.close(complete=True)
    return T * B * n * 8 / (time.perf_counter() - t) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--scene", default="double_pendulum")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (figures provisional above 1.5)")
    with tempfile.TemporaryDirectory() as d:
        mb = {m: [] for m in MODES}
        for i in range(a.repeats):
            for m in MODES[i % 3:] + MODES[:i % 3]:  # rotated: no mode always runs after the same one
                with integrity(m):
                    mb[m].append(writer_mb_s(os.path.join(d, "w.h5"), 4000, 256, 18, 100))
        run = {m: [] for m in MODES}
        kw = dict(steps=a.steps, batch=a.batch, record_every=1, progress=False, backend="mujoco", keep=False,
                  overwrite=True)
        rollout(a.scene, out=os.path.join(d, "warm.h5"), **kw)  # compile once
        _timed_record()
        share = []
        for i in range(a.repeats):
            for m in MODES[i % 3:] + MODES[:i % 3]:
                with integrity(m):
                    HASH_S[0] = 0.0
                    run[m].append(rollout(a.scene, out=os.path.join(d, "r.h5"), **kw).stats["run_s"])
                    if m == "all":
                        share.append(HASH_S[0] / run[m][-1])
    w = {m: statistics.median(v) for m, v in mb.items()}
    r = {m: statistics.median(v) for m, v in run.items()}
    print("writer alone: " + ", ".join(f"{w[m]:.0f} MB/s ({m})" for m in MODES) +
          f"; hashes {100 * (w['no hashes'] / w['all'] - 1):+.1f} % time, checksums + hashes "
          f"{100 * (w['none'] / w['all'] - 1):+.1f} %")
    print(f"engine run ({a.scene}, batch {a.batch}, {a.steps} steps, record_every 1): " +
          ", ".join(f"{r[m]:.3f} s ({m})" for m in MODES) +
          f"; hashes {100 * (r['all'] / r['no hashes'] - 1):+.1f} %, checksums + hashes "
          f"{100 * (r['all'] / r['none'] - 1):+.1f} %")
    print(f"hashing in the writer thread: {100 * statistics.median(share):.2f} % of the run phase (median; an upper "
          f"bound of the hashes' cost)")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
