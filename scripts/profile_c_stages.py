"""Where a stage's time goes on backend="mujoco" when it runs stage by stage (issue 30, item 2).

Integrators that are not MuJoCo's own scheme (adaptive, stochastic, our RK variants) evaluate each stage
through one batched host call (``host._host_call``: a ``buffer_callback`` on XLA's own buffers) into
``BatchForward`` or ``HostPool.evaluate``. Per stage of the whole batch:

    total      the engine's run_s / stage evaluations (the compiled chunk: XLA arithmetic + callback + host)
    host       time inside the host call (``HostPool.evaluate``, the per-world loop, or ``BatchForward``, the
               whole batch's mj_forward in C; counted by wrapping both)
    mj_forward MuJoCo C's own mj_forward of the batch: the time of the ``Batch.forward`` calls inside the
               stages (``host_batch.BatchForward``), or for stages on the per-world loop, a ``Batch.forward``
               of the final states on the same threads: the floor a stage cannot go below
    overhead   total - mj_forward, as a share of total (the issue's bar: <= 15 %)
    vs_rollout (--vs-rollout) total / the step of ``mujoco.rollout`` with MuJoCo's Euler on the same model,
               batch, states and threads, timed right after each timed rollout (interleaved) - 1

    python scripts/profile_c_stages.py --scene humanoid --batch 1024 --steps 20 --integrator dormand_prince
    python scripts/profile_c_stages.py --scene /tmp/dmc/humanoid.xml --integrator euler_maruyama --steps 200 \
        --joint-noise abdomen_z=0.1 --vs-rollout --repeats 3

Timing is only meaningful on a quiet machine: the 1-minute load average is printed with every figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

import mujoco
import numpy as np
from mujoco.batch import Batch

from mjharness.adapters import MjScene
from mjharness.adapters.backends.host import HostPool
from mjharness.adapters.backends.host_batch import BatchForward
from mjharness.rollout import initial_states, rollout


def _count_host():
    """Count and time every host stage evaluation, ``HostPool.evaluate`` (the per-world loop) and
    ``BatchForward.__call__`` (whole-batch mj_forward), and the ``Batch.forward`` calls inside the latter (MuJoCo
    C's own time of those very stages), wrapped on their classes: {"calls", "s", "forward_calls", "forward_s"}."""
    acc = {"calls": 0, "s": 0.0, "forward_calls": 0, "forward_s": 0.0}
    for cls, name, key in ((HostPool, "evaluate", ""), (BatchForward, "__call__", ""), (Batch, "forward", "forward_")):
        inner = getattr(cls, name)

        def timed(*a, _inner=inner, _key=key, **kw):
            t = time.perf_counter()
            try:
                return _inner(*a, **kw)
            finally:
                acc[_key + "calls"] += 1
                acc[_key + "s"] += time.perf_counter() - t

        timed.__wrapped__ = inner
        setattr(cls, name, timed)
    return acc


def forward_floor(scene, x, ws, threads: int, repeats: int = 5) -> float:
    """Seconds of mj_forward over the batch ``x`` (B, n) with warm starts ``ws`` on ``threads`` threads, no Python
    per world (Batch.forward), median of ``repeats``."""
    m = scene.model
    b = Batch(m, x.shape[0], nthread=threads)
    b.bind("qpos")[:] = x[:, :m.nq]
    b.bind("qvel")[:] = x[:, m.nq:m.nq + m.nv]
    b.bind("act")[:] = x[:, m.nq + m.nv:m.nq + m.nv + m.na]
    b.bind("qacc_warmstart")[:] = ws
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        b.forward()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def rollout_step_s(m: mujoco.MjModel, x0: np.ndarray, steps: int, threads: int) -> float:
    """Seconds per step of ``mujoco.rollout`` (MuJoCo's Euler, every step's state kept) from the states ``x0``."""
    from mujoco import rollout as mjrollout

    m = copy.deepcopy(m)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    d, spec = mujoco.MjData(m), mujoco.mjtState.mjSTATE_FULLPHYSICS
    s0 = np.empty((x0.shape[0], mujoco.mj_stateSize(m, spec)))
    for i, x in enumerate(x0):
        d.qpos[:], d.qvel[:], d.act[:] = x[:m.nq], x[m.nq:m.nq + m.nv], x[m.nq + m.nv:]
        mujoco.mj_getState(m, d, s0[i], spec)
    buf = np.empty((x0.shape[0], steps, s0.shape[1]))
    t = time.perf_counter()
    mjrollout.Rollout(nthread=threads).rollout(m, [mujoco.MjData(m) for _ in range(threads)], s0, nstep=steps,
                                               state=buf)
    return (time.perf_counter() - t) / steps


def profile(scene_name: str, integrator: str, batch: int, steps: int, threads: int, repeats: int = 1,
            min_stages: int = 0, joint_noise: dict | None = None, vs_rollout: bool = False) -> dict:
    """The breakdown of one timed rollout, or with ``repeats`` > 1 of the timed rollout with the median overhead
    (every run's overhead and load in ``runs``). ``min_stages``: more steps (a multiple of ``steps``) when ``steps``
    take fewer stages (an adaptive method), so that the run's fixed costs (the chunk's call, its results) are not
    counted as a stage's. ``joint_noise``: {joint: sigma} added to the scene (``MjScene.add_joint_noise``: a stage
    then also solves M(q)^-1 of the noise forces). ``vs_rollout``: time ``mujoco.rollout``'s step after each run."""
    scene = MjScene(scene_name, backend="mujoco", threads=threads)
    for joint, sigma in (joint_noise or {}).items():
        scene.add_joint_noise(joint, sigma)
    x0 = initial_states(scene, batch, 0, 0.01)
    dt = float(scene.model.opt.timestep)
    acc = _count_host()
    rollout(scene, integrator, dt=dt, steps=steps, x0=x0, progress=False, record_every=steps)  # compile + warm
    if 0 < acc["calls"] < min_stages:
        steps *= -(-min_stages // acc["calls"])
        rollout(scene, integrator, dt=dt, steps=steps, x0=x0, progress=False, record_every=steps)
    rows = []
    for _ in range(repeats):
        for k in acc:
            acc[k] = 0 if k.endswith("calls") else 0.0
        r = rollout(scene, integrator, dt=dt, steps=steps, x0=x0, progress=False, record_every=steps)
        assert r.stats["trace_cache"] != "host", "this integrator ran whole chunks in C: nothing to profile per stage"
        rows.append(_breakdown(scene, r, acc, threads))
        if vs_rollout:  # interleaved: MuJoCo's own step of the same worlds right after
            step_s = rollout_step_s(scene.model, np.asarray(x0), min(steps, 200), threads)
            rows[-1].update(rollout_step_ms=1e3 * step_s, vs_rollout=rows[-1]["stage_ms"] / (1e3 * step_s) - 1)
    for cls, name in ((HostPool, "evaluate"), (BatchForward, "__call__"), (Batch, "forward")):
        setattr(cls, name, getattr(cls, name).__wrapped__)
    row = sorted(rows, key=lambda x: x["vs_rollout" if vs_rollout else "overhead"])[len(rows) // 2]
    runs = [{k: x[k] for k in ("overhead", "vs_rollout", "stage_ms", "rollout_step_ms", "load") if k in x}
            for x in rows]
    return dict(scene=scene_name, integrator=integrator, batch=batch, steps=steps, threads=threads,
                joint_noise=joint_noise or {}, **row, runs=runs, mujoco=mujoco.__version__)


def _breakdown(scene, r, acc, threads: int) -> dict:
    stages = acc["calls"]
    total, host = r.stats["run_s"] / stages, acc["s"] / stages
    if acc["forward_calls"] == stages:  # every stage was a Batch.forward: its own time is mj_forward's, exactly
        fwd, source = acc["forward_s"] / stages, "Batch.forward inside the stages"
    else:  # the per-world loop: mj_forward of the final states on the same threads, no Python per world
        fwd = forward_floor(scene, np.asarray(r.x[-1]), np.asarray(r.carry["qacc_warmstart"]), threads)
        source = "Batch.forward of the final states"
    return dict(stages=stages, stage_ms=1e3 * total, host_ms=1e3 * host, mj_forward_ms=1e3 * fwd,
                host_python_copies_ms=1e3 * (host - fwd), callback_xla_ms=1e3 * (total - host), mj_forward_from=source,
                overhead=(total - fwd) / total, load=round(os.getloadavg()[0], 2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default="humanoid")
    ap.add_argument("--integrator", nargs="+", default=["dormand_prince", "euler_maruyama"])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="timed rollouts per integrator; the median is reported")
    ap.add_argument("--min-stages", type=int, default=0, help="more steps when --steps take fewer stages")
    ap.add_argument("--joint-noise", nargs="*", default=[], metavar="JOINT=SIGMA", help="joint noise on the scene")
    ap.add_argument("--vs-rollout", action="store_true", help="also time mujoco.rollout's Euler step, interleaved")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for integ in a.integrator:
        noise = {j: float(s) for j, s in (item.split("=") for item in a.joint_noise)}
        row = profile(a.scene, integ, a.batch, a.steps, a.threads, a.repeats, a.min_stages, noise, a.vs_rollout)
        rows.append(row)
        print(f"{row['scene']} {integ} batch {row['batch']}: {row['stages']} stages, "
              f"per stage {row['stage_ms']:.2f} ms "
              f"= mj_forward {row['mj_forward_ms']:.2f} + host Python/copies {row['host_python_copies_ms']:.2f} "
              f"+ callback/XLA {row['callback_xla_ms']:.2f}; overhead {row['overhead']:.1%} (load {row['load']})"
              + (f"; mujoco.rollout's step {row['rollout_step_ms']:.2f} ms: {row['vs_rollout']:+.1%}"
                 if "vs_rollout" in row else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
