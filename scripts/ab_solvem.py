"""A/B of ``host_batch.SolveM``'s last pass (issue 42, item 3): the joint-noise stage of dm_control's humanoid with
the row-by-row pass (``git show 9bf150d:adapters/backends/host_batch.py``) and with the by-depth pass, interleaved in
one process (``scripts/profile_c_stages.py``'s ``profile``, the same arguments as its joint-noise example).

    python scripts/ab_solvem.py --scene /tmp/dmc/humanoid.xml --rounds 3 --json data/bench/solvem_ab_<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


class RowsSolveM:
    """The earlier SolveM: the last pass one row at a time (for the A/B only)."""

    by_depth = None  # host_batch.SolveM as imported, before the A/B replaces it

    def __init__(self, m, force):
        new = RowsSolveM.by_depth(m, force)
        self.force, self.up = new.force, new.up
        rownnz, rowadr, colind = m.M_rownnz, m.M_rowadr, m.M_colind
        self.down = [(i, slice(int(rowadr[i]), int(rowadr[i] + rownnz[i] - 1)),
                      colind[rowadr[i]:rowadr[i] + rownnz[i] - 1]) for i in range(m.nv) if rownnz[i] > 1]

    def __call__(self, qld, diaginv):
        from mjharness.adapters.backends.host_batch import _dot

        n, (k, nv) = qld.shape[0], self.force.shape
        q = np.ascontiguousarray(qld.T)[:, :, None]
        x = np.empty((nv, n, k))
        x[...] = self.force.T[:, None, :]
        for i, sl, cols in self.up:
            xi = x[i]
            x[cols] = np.where(xi != 0, x[cols] - q[sl] * xi, x[cols])
        x *= diaginv.T[:, :, None]
        for i, sl, cols in self.down:
            x[i] -= _dot(q[sl] * x[cols])
        return x.transpose(1, 2, 0).reshape(n, k * nv)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scene", default="humanoid", help="a bundled scene or an MJCF path (dm_control's humanoid.xml "
                    "with its common/ folder for the figures in docs/run.md)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args()
    import profile_c_stages as pcs

    from mjharness.adapters.backends import host_batch

    depth = RowsSolveM.by_depth = host_batch.SolveM
    out: dict = {"rows": [], "depth": []}
    for r in range(a.rounds):
        for name, cls in (("rows", RowsSolveM), ("depth", depth)):
            host_batch.SolveM = cls
            row = pcs.profile(a.scene, "euler_maruyama", 1024, a.steps, 2, 1, 0, {"abdomen_z": 0.1}, True)
            out[name].append({k: row[k] for k in ("stage_ms", "mj_forward_ms", "host_python_copies_ms",
                                                  "callback_xla_ms", "overhead", "rollout_step_ms", "vs_rollout",
                                                  "load")})
            print(r, name, {k: round(v, 4) for k, v in out[name][-1].items()}, flush=True)
    host_batch.SolveM = depth
    for name in out:
        print(name, "median vs_rollout", np.median([x["vs_rollout"] for x in out[name]]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
