"""Multi-process rollouts (issue 18): N processes on JAX's distributed runtime, one shard each, one joined file.

Subprocess start-up and compiles dominate, so one test runs everything side by side: the CLI
(``--local-processes 2``, deterministic) and two ``rollout()`` processes (user code unchanged after
``initialize``) with a stochastic integrator on a noisy scene; one of those is killed mid-run, the
other must fail within 60 s, and a resume must finish bit-equal to a single-process run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.cli.launch import free_port
from mjharness.rollout.engine import resolve_scene

STEPS = 1000  # 50 chunks of 20 steps: the kill lands mid-run
RUN = dict(steps=STEPS, batch=4, record_every=10, chunk=20, progress=False)

WORKER = textwrap.dedent(f"""
    import sys
    from mjharness.rollout import rollout
    from mjharness.rollout.engine import initialize, resolve_scene

    initialize()  # from MJHARNESS_* variables
    scene = resolve_scene("box_on_plane", backend="mjx")  # body noise is an MJX capability
    scene.add_body_noise("box", force_sigma=0.5, torque_sigma=0.02)
    kw = dict(steps={STEPS}, record_every=10, chunk=20, progress=False)
    if sys.argv[2] == "resume":
        rollout(scene, "euler_maruyama", resume=sys.argv[1], **kw)
    else:
        rollout(scene, "euler_maruyama", batch=4, out=sys.argv[1], **kw)
""")


def _noisy_scene():
    scene = resolve_scene("box_on_plane", backend="mjx")  # body noise is an MJX capability
    scene.add_body_noise("box", force_sigma=0.5, torque_sigma=0.02)
    return scene


def _workers(script, out, mode):
    port = free_port()
    return [subprocess.Popen([sys.executable, script, out, mode],
                             env=dict(os.environ, MJHARNESS_COORDINATOR=f"127.0.0.1:{port}",
                                      MJHARNESS_NUM_PROCESSES="2", MJHARNESS_PROCESS_ID=str(k), JAX_PLATFORMS="cpu",
                                      XLA_FLAGS="--xla_force_host_platform_device_count=1"))
            for k in range(2)]


def _flushed(path) -> int:
    try:
        with open_rollout(path) as f:
            return f.samples
    except Exception:  # not there yet, or its header is being written
        return 0


@pytest.mark.timeout(600)
def test_local_processes_join_kill_and_resume(tmp_path):
    det = str(tmp_path / "det.h5")
    cli = subprocess.Popen([sys.executable, "-m", "mjharness.rollout.cli", "run", "box_on_plane", "--batch", "4",
                            "--steps", "200", "--record-every", "20", "--chunk", "200", "--no-progress",
                            "--local-processes", "2", "--out", det])
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    sto = str(tmp_path / "sto.h5")
    procs = _workers(str(script), sto, "run")
    shard1 = sto + ".p1-of-2.h5"
    t0 = time.monotonic()
    while _flushed(shard1) < 1 and procs[1].poll() is None and time.monotonic() - t0 < 400:
        time.sleep(0.02)
    procs[1].kill()  # mid-run, after its first flushed chunk
    t_kill = time.monotonic()
    rc = procs[0].wait(90)
    assert rc != 0 and time.monotonic() - t_kill < 60
    with open_rollout(shard1) as s:  # readable up to its last flushed chunk
        assert 1 <= s.samples < STEPS // 10 and not s.complete
    resumed = _workers(str(script), sto, "resume")

    ref_det = rollout("box_on_plane", steps=200, batch=4, record_every=20, chunk=200, progress=False)
    ref_sto = rollout(_noisy_scene(), "euler_maruyama", **RUN)
    assert cli.wait(400) == 0
    with open_rollout(det) as f:
        assert f.complete and f.batch == 4 and list(f.h5["world_index"][()]) == [0, 1, 2, 3]
        assert np.array_equal(f.x, ref_det.x)
        assert np.array_equal(f.qpos, ref_det.qpos) and np.array_equal(f.status, ref_det.status)
    with open_rollout(det + ".p1-of-2.h5") as s:
        assert np.array_equal(s.x, ref_det.x[:, 2:])
    assert [p.wait(400) for p in resumed] == [0, 0]
    with open_rollout(sto) as f:
        assert f.complete and f.samples == STEPS // 10
        assert np.array_equal(f.x, ref_sto.x)  # stochastic, killed and resumed: still bit-equal


@pytest.mark.timeout(600)
def test_resume_restarts_a_shard_whose_worker_died_before_creating_it(tmp_path):
    """Issue 28.6: a worker killed before it created its shard leaves no file; --resume restarts that shard
    from step 0 (its worlds rebuilt from the seed) while the other continues, and the joined result equals
    an uninterrupted run. Issue 29: the resume shows one progress bar for both processes (process 0's, the
    slowest process's step), which a shard missing at the start does not stop."""
    out = str(tmp_path / "m.h5")
    args = ["box_on_plane", "--batch", "4", "--steps", "200", "--record-every", "20", "--chunk", "200",
            "--no-progress", "--local-processes", "2"]
    cmd = [sys.executable, "-m", "mjharness.rollout.cli", "run"]
    assert subprocess.run(cmd + args + ["--out", out], timeout=400).returncode == 0
    os.remove(out + ".p1-of-2.h5")  # as if process 1 had died before creating it
    r = subprocess.run(cmd + ["--resume", out, "--local-processes", "2"], timeout=400,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    frames = r.stderr.replace("\r", "\n").splitlines()  # every redraw of a bar
    bars = [t for t in frames if "%|" in t]
    assert bars and all(t.startswith("rollout (2 processes, slowest):") for t in bars), r.stderr
    assert "200/200" in bars[-1] and "p0 200 p1 200" in bars[-1], r.stderr
    assert "rollout: compiling" in r.stderr or "runs whole chunks" in r.stderr, r.stderr  # process 0's phase lines
    ref = rollout("box_on_plane", steps=200, batch=4, record_every=20, chunk=200, progress=False)
    with open_rollout(out) as f:
        assert f.complete and np.array_equal(f.x, ref.x)
