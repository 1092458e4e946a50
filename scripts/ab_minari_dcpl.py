"""A/B of the Minari writer's dataset creation property list: one made per dataset (old) against one reused with its
chunk set per dataset (new, ``minari_writer._Writer``), the default-observation export of
``data/bench/export_run1000.h5`` (``scripts/bench_export.py`` makes it) in a fresh process each, interleaved.

    python scripts/ab_minari_dcpl.py [--rounds 6] [--json data/bench/minari_dcpl_ab_<date>.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import sys, time
import minari, pandas, pyarrow.parquet  # noqa: F401  (imported before the clock, as bench_export.py does)
import numpy as np
from mjharness.rollout.export import export
from mjharness.rollout.export import minari_writer as mw

if sys.argv[3] == "old":
    def dataset(self, gid, name, a):
        h5py = self.h5py
        a = np.ascontiguousarray(a)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(mw.chunk_rows(a.shape, a.dtype.itemsize))
        space = h5py.h5s.create_simple(a.shape, (h5py.h5s.UNLIMITED,) + a.shape[1:])
        tid = self._type(a.dtype)
        h5py.h5d.create(gid, name.encode(), tid, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL, a, mtype=tid)
    mw._Writer.dataset = dataset
t = time.perf_counter()
export(sys.argv[1], sys.argv[2], format="minari", obs="qpos,qvel", progress=False)
print(time.perf_counter() - t)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default="data/bench/export_run1000.h5")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(), "out")
    res: dict = {"old": [], "new": []}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for v in ("old", "new"):
            shutil.rmtree(out, ignore_errors=True)
            run = subprocess.run([sys.executable, "-c", CHILD, args.file, out, v], capture_output=True, text=True,
                                 check=True)
            res[v].append(float(run.stdout.strip().splitlines()[-1]))
    load.append(os.getloadavg())
    mb = sum(os.path.getsize(os.path.join(a, f)) for a, _, fs in os.walk(out) for f in fs) / 1e6
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    report = {"written_mb": round(mb, 1), "seconds": res, "load": load,
              "median_s": {k: statistics.median(v) for k, v in res.items()},
              "median_mb_per_s": {k: mb / statistics.median(v) for k, v in res.items()}}
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
