"""The rollout engine: file == memory, MuJoCo C as reference, chunk/device/resume invariance, statuses,
controls, domain randomization, counter-based noise, bad input, flat host memory.

Compile budget: configuration A (double pendulum, batch 8, chunk 60, record_every 10) is compiled once
and shared (rollout_common); the other MJX compiles are "unchunked" and the
actuated arm. The 4-device and memory checks run in subprocesses (the device count is fixed at JAX
start-up; peak RSS needs a fresh process).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import jax
import mujoco
import numpy as np
import pytest
from rollout_common import (
    INTEG,
    A,
    ExplicitEulerDouble,
    NoiseDouble,
    Oscillator,
    UnderflowDouble,
    cached_scene,
    run_a,
    tmpdir,
)

from mjharness.integrators.prng import step_key
from mjharness.rollout import RolloutError, engine, open_rollout, rollout
from mjharness.rollout.engine import run as run_module

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def rollout_a():
    return run_a()


def mujoco_qpos(model, x0, steps, record_every, ctrl=None, configure=None):
    """MuJoCo C's own mj_step (Euler) from each world's initial state: (T, B, nq)."""
    B = x0.shape[0]
    out = np.empty((steps // record_every, B, model.nq))
    for i in range(B):
        m = model if configure is None else configure(i)
        d = mujoco.MjData(m)
        d.qpos[:] = x0[i, :m.nq]
        d.qvel[:] = x0[i, m.nq:m.nq + m.nv]
        d.act[:] = x0[i, m.nq + m.nv:m.nq + m.nv + m.na]
        for k in range(steps):
            if ctrl is not None:
                d.ctrl[:] = ctrl[i, k]
            mujoco.mj_step(m, d)
            if (k + 1) % record_every == 0:
                out[(k + 1) // record_every - 1, i] = d.qpos
    return out


def euler_model(name):
    m = cached_scene(name).model
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    return m


# -- the reference configuration ---------------------------------------------------------------------

def test_file_equals_memory_bit_for_bit(rollout_a):
    r, _ = rollout_a
    T = A["steps"] // A["record_every"]
    assert r.x.shape == (T, A["batch"], 4) and r.time.shape == (T,)
    with open_rollout(r.path) as f:
        assert f.complete and f.samples == T
        assert np.array_equal(f.x, r.x) and np.array_equal(f.time, r.time)
        assert np.array_equal(f.qpos, r.qpos) and np.array_equal(f.qvel, r.qvel)
        assert np.array_equal(f.x0, r.x0) and np.array_equal(f.status, r.status)
        assert np.array_equal(f.state("elbow/qvel")[..., 0], r.x[..., 3])
    # post-step sample times: t0 + (j + 1) * record_every * dt
    np.testing.assert_allclose(r.time, (np.arange(T) + 1) * 10 * 0.001, rtol=0, atol=1e-15)


def test_qpos_matches_mujoco_mj_step(rollout_a):
    r, _ = rollout_a
    ref = mujoco_qpos(euler_model("double_pendulum"), r.x0, A["steps"], A["record_every"])
    with open_rollout(r.path) as f:
        err = np.max(np.abs(f.qpos - ref))
    assert err <= 1e-9, err
    # the worlds really differ (seeded perturbation of the velocities), and they moved
    assert np.ptp(r.x0[:, 2]) > 1e-3 and np.max(np.abs(r.qpos[-1] - r.x0[:, :2])) > 1e-3


def test_initial_states_are_per_world_seeded(rollout_a):
    r, _ = rollout_a
    sc = cached_scene("double_pendulum")
    x4 = engine.initial_states(sc, 4, seed=0, perturb=0.01)
    assert np.array_equal(x4, r.x0[:4])  # world i does not depend on the batch size
    assert not np.array_equal(engine.initial_states(sc, 4, seed=1, perturb=0.01), x4)
    assert np.array_equal(engine.initial_states(sc, 2, perturb=0.0), np.tile(sc.x0(), (2, 1)))
    brick = cached_scene("brick")
    q = engine.initial_states(brick, 3, seed=0, perturb=0.1)[:, brick.layout["brick/quat"].value_slice]
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-15)


def test_chunked_equals_unchunked(rollout_a):
    r, _ = rollout_a  # 3 chunks of 60 steps + one masked partial chunk
    one = rollout(cached_scene("double_pendulum"), INTEG, progress=False, **dict(A, chunk=A["steps"]))
    assert one.stats["chunk"] == 200
    assert np.array_equal(one.x, r.x) and np.array_equal(one.x0, r.x0)


def test_resume_of_a_complete_shorter_file_equals_uninterrupted(rollout_a):
    r, _ = rollout_a
    p = os.path.join(tmpdir(), "resume.h5")
    short = rollout(cached_scene("double_pendulum"), INTEG, out=p, progress=False, **dict(A, steps=120))
    assert np.array_equal(short.x, r.x[:12])
    res = rollout(cached_scene("double_pendulum"), INTEG, resume=p, progress=False, **A)
    assert np.array_equal(res.x, r.x) and np.array_equal(res.time, r.time)
    with open_rollout(p) as f:
        assert f.complete and f.attrs["steps"] == 200 and np.array_equal(f.x, r.x)
        assert np.array_equal(f.qpos, r.qpos)
    # a file of another run is refused, naming the difference
    with pytest.raises(RolloutError, match="dt"):
        rollout(cached_scene("double_pendulum"), INTEG, resume=p, progress=False, **dict(A, dt=0.002))


def test_failed_world_is_frozen_at_its_last_good_state(rollout_a):
    r, _ = rollout_a
    x0 = r.x0.copy()
    x0[3, 2:] = 1e200  # velocity^2 terms overflow: the first step is non-finite
    bad = rollout(cached_scene("double_pendulum"), INTEG, x0=x0, progress=False,
                  **{k: v for k, v in A.items() if k != "batch"})
    assert list(bad.status) == [0, 0, 0, 1, 0, 0, 0, 0]
    assert list(bad.status_step) == [-1, -1, -1, 0, -1, -1, -1, -1]
    assert np.all(np.isfinite(bad.x))
    assert np.array_equal(bad.x[:, 3], np.broadcast_to(x0[3], bad.x[:, 3].shape))
    others = [0, 1, 2, 4, 5, 6, 7]
    assert np.array_equal(bad.x[:, others], r.x[:, others])  # worlds are independent


def test_ctrl_array_and_domain_randomization_match_mujoco():
    """Arm (nu=4, na=1): per-step controls and per-world gravity and masses, against MuJoCo C per world."""
    sc = cached_scene("arm")
    m = euler_model("arm")
    B, steps = 3, 60
    rng = np.random.default_rng(3)
    ctrl = rng.uniform(-1, 1, (B, steps, m.nu))
    g = np.zeros((B, 3))
    g[:, 2] = -9.81 * rng.uniform(0.5, 1.5, B)
    mass = np.tile(m.body_mass, (B, 1)) * rng.uniform(0.7, 1.3, (B, m.nbody))
    x0 = engine.initial_states(sc, B, seed=2, perturb=0.05)
    p = os.path.join(tmpdir(), "arm.h5")
    r = rollout(sc, INTEG, dt=m.opt.timestep, steps=steps, x0=x0, ctrl=ctrl, record_every=5, chunk=20,
                model_params={"opt.gravity": g, "body_mass": mass}, out=p, progress=False)

    def configure(i):
        mi = copy.deepcopy(m)
        mi.opt.gravity[:] = g[i]
        mi.body_mass[:] = mass[i]
        return mi

    ref = mujoco_qpos(m, x0, steps, 5, ctrl=ctrl, configure=configure)
    err = np.max(np.abs(r.qpos - ref))
    assert err <= 1e-9, err
    plain = mujoco_qpos(m, x0, steps, 5, ctrl=ctrl)
    assert np.max(np.abs(plain - ref)) > 1e-4  # the parameters mattered
    with open_rollout(p) as f:
        assert np.array_equal(f.model_params["opt.gravity"], g) and np.array_equal(f.model_params["body_mass"], mass)
        assert f.attrs["ctrl"].startswith("array sha256:")
        assert np.array_equal(f.qpos, r.qpos)


# -- cheap model: controls, noise, statuses --------------------------------------------------------------

def _euler_replay(osc, x0, dt, steps, record_every, ctrl_of):
    x = x0.copy()
    out = []
    for k in range(steps):
        t = k * dt
        u = np.stack([ctrl_of(t, x[i], i, k) for i in range(len(x))])
        q, v = x[:, :osc.k], x[:, osc.k:]
        x = x + dt * np.concatenate([v, -osc.omega ** 2 * q + u], axis=1)
        if (k + 1) % record_every == 0:
            out.append(x)
    return np.stack(out)


def test_callable_ctrl_on_a_plain_model():
    osc = Oscillator(k=2)
    x0 = engine.initial_states(osc, 3, seed=0, perturb=0.1)

    def ctrl(t, x):
        return jax.numpy.sin(3.0 * t) - 0.5 * x[2:]

    r = rollout(osc, ExplicitEulerDouble(), dt=0.01, steps=50, x0=x0, ctrl=ctrl, record_every=5, chunk=20,
                progress=False)
    ref = _euler_replay(osc, x0, 0.01, 50, 5, lambda t, x, i, k: np.sin(3.0 * t) - 0.5 * x[2:])
    np.testing.assert_allclose(r.x, ref, rtol=0, atol=1e-13)
    assert r.qpos_segment is None and r.path is None


def test_noise_keys_are_global_and_chunking_independent():
    osc = Oscillator(k=2)
    integ = NoiseDouble()
    kw = dict(dt=0.01, steps=12, record_every=3, seed=5, perturb=0.0, progress=False)
    a = rollout(osc, integ, batch=4, chunk=3, **kw)
    b = rollout(osc, integ, batch=6, chunk=12, **kw)
    assert np.array_equal(a.x, b.x[:, :4])  # world i, step k: same key whatever the batch and chunk
    # replay with prng.step_key(seed, world, step)
    x = a.x0.copy()
    for k in range(12):
        for i in range(4):
            x[i] = x[i] + np.sqrt(0.01) * np.asarray(jax.random.normal(step_key(5, i, k), (4,)))
    np.testing.assert_allclose(a.x[-1], x, rtol=0, atol=1e-13)


def test_adaptive_status_underflow_freezes_the_world():
    osc = Oscillator(k=1, omega=1.0)
    x0 = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 3.0]])
    dt, steps, limit = 0.01, 40, 1.05
    r = rollout(osc, UnderflowDouble(limit=limit), dt=dt, steps=steps, x0=x0, record_every=1, progress=False)
    # numpy replay: explicit Euler until the first step whose result has q > limit
    for i in range(3):
        x, fail = x0[i].copy(), -1
        for k in range(steps):
            xn = x + dt * np.array([x[1], -x[0]])
            if xn[0] > limit:
                fail = k
                break
            x = xn
        assert r.status[i] == (2 if fail >= 0 else 0) and r.status_step[i] == fail
        if fail >= 0:
            assert np.array_equal(r.x[fail:, i], np.broadcast_to(x, r.x[fail:, i].shape))
    assert list(r.status) == [0, 2, 2] and r.status_step[2] < r.status_step[1]


def test_adaptive_integrator_takes_dt_as_the_output_interval():
    from mjharness.integrators import DormandPrince

    osc = Oscillator(k=1, omega=2.0)
    x0 = np.array([[1.0, 0.0], [0.5, 0.0]])
    r = rollout(osc, DormandPrince(), dt=0.05, steps=40, x0=x0, record_every=2, progress=False)
    np.testing.assert_allclose(r.time, 0.1 * (np.arange(20) + 1), rtol=0, atol=1e-14)
    exact = np.cos(2.0 * r.time)[:, None] * x0[:, 0]  # q(t) = q0 cos(omega t)
    assert list(r.status) == [0, 0]
    assert np.max(np.abs(r.x[..., 0] - exact)) < 1e-7


# -- bad input: clear errors before any compile, nothing written ---------------------------------------

@pytest.fixture
def no_compile(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("compiled despite bad input")

    monkeypatch.setattr(run_module, "compiled_chunk", boom)


@pytest.mark.parametrize("kwargs, match", [
    (dict(integrator="no_such_method"), "unknown integrator 'no_such_method'"),
    (dict(dt=0.0), "dt must be > 0, got 0.0"),
    (dict(dt=-1e-3), "dt must be > 0, got -0.001"),
    (dict(dt=float("nan")), "dt must be finite and > 0, got nan"),
    (dict(steps=0), "steps must be >= 1, got 0"),
    (dict(record_every=0), "record_every must be >= 1, got 0"),
    (dict(batch=None, x0=np.zeros((3, 5))), r"x0 must have shape \(batch, n\) with n=4.*\(3, 5\)"),
    (dict(batch=2, x0=np.zeros((3, 4))), r"batch=2 but x0 has 3 rows"),
    (dict(ctrl=np.zeros((2, 10, 1))), r"scene has no actuators \(nu=0\)"),
    (dict(model_params={"opt.gravity": np.zeros((3, 3))}), r"model_params\['opt.gravity'\] must have shape \(2, 3\)"),
    (dict(model_params={"body_mas": np.zeros((2, 3))}), "no field 'body_mas'"),
    (dict(out="/nonexistent-dir/x.h5"), "does not exist"),
])
def test_bad_input_is_refused_before_compile(no_compile, tmp_path, kwargs, match):
    kw = dict(integrator=INTEG, dt=1e-3, steps=10, batch=2, progress=False)
    kw.update(kwargs)
    integ = kw.pop("integrator")
    with pytest.raises(RolloutError, match=match):
        rollout(cached_scene("double_pendulum"), integ, **kw)
    assert os.listdir(tmp_path) == []


def test_mismatched_ctrl_shape_and_unwritable_paths(no_compile, tmp_path):
    osc = Oscillator(k=2)
    with pytest.raises(RolloutError, match=r"ctrl array must have shape \(batch, steps, nu\) = \(2, 10, 2\)"):
        rollout(osc, ExplicitEulerDouble(), dt=0.1, steps=10, batch=2, ctrl=np.zeros((2, 9, 2)), progress=False)
    with pytest.raises(RolloutError, match=r"must return shape \(2,\)"):
        rollout(osc, ExplicitEulerDouble(), dt=0.1, steps=10, batch=2, ctrl=lambda t, x: x, progress=False)
    existing = tmp_path / "there.h5"
    existing.write_bytes(b"keep me")
    with pytest.raises(RolloutError, match="exists; pass overwrite=True"):
        rollout(osc, ExplicitEulerDouble(), dt=0.1, steps=10, batch=2, out=existing, progress=False)
    assert existing.read_bytes() == b"keep me"
    a_file = tmp_path / "file"
    a_file.write_bytes(b"")
    with pytest.raises(RolloutError, match="is not a directory"):
        rollout(osc, ExplicitEulerDouble(), dt=0.1, steps=10, batch=2, out=a_file / "x.h5", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["file", "there.h5"]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):  # as root, directory permissions do not bind: nothing to check
            with pytest.raises(RolloutError, match="not writable"):
                rollout(osc, ExplicitEulerDouble(), dt=0.1, steps=10, batch=2, out=ro / "x.h5", progress=False)
            assert os.listdir(ro) == []
    finally:
        ro.chmod(0o700)


# -- subprocesses: 4 host devices, peak memory ---------------------------------------------------------

def _run_py(code: str, env_extra=None, timeout=600) -> str:
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=HERE, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-4000:]
    return p.stdout


def test_four_host_devices_equal_one(rollout_a):
    r, _ = rollout_a
    out = os.path.join(tmpdir(), "dev4.npz")
    _run_py(f"""
        import jax, numpy as np
        from rollout_common import A, INTEG, cached_scene, Oscillator, ExplicitEulerDouble
        from mjharness.rollout import rollout
        assert len(jax.devices()) == 4, jax.devices()
        r4 = rollout(cached_scene("double_pendulum"), INTEG, devices=4, progress=False, **A)
        # 6 worlds over 4 devices: padded to 8, pad worlds dropped
        osc, e = Oscillator(k=3), ExplicitEulerDouble()
        kw = dict(dt=0.01, steps=30, batch=6, record_every=3, chunk=9, progress=False)
        o4, o1 = rollout(osc, e, devices=4, **kw), rollout(osc, e, devices=1, **kw)
        np.savez({out!r}, x=r4.x, devices=r4.stats["devices"], o4=o4.x, o1=o1.x)
    """, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    d = np.load(out)
    assert int(d["devices"]) == 4
    assert np.array_equal(d["x"], r.x)
    assert d["o4"].shape == (10, 6, 6) and np.array_equal(d["o4"], d["o1"])


_MEM = """
    import sys
    from rollout_common import Oscillator, ExplicitEulerDouble
    from mjharness.rollout import rollout, open_rollout
    steps, out = int(sys.argv[1]), sys.argv[2]
    r = rollout(Oscillator(k=16, omega=1.0), ExplicitEulerDouble(), dt=1e-3, steps=steps, batch=128,
                record_every=1, chunk=250, out=out, keep=False, progress=False)
    with open_rollout(out) as f:
        assert f.complete and f.samples == steps
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec, so a child of a big pytest
    # process would report its parent's peak.
    with open("/proc/self/status") as st:
        print(next(int(line.split()[1]) for line in st if line.startswith("VmHWM:")))
"""


def test_peak_host_memory_is_flat_in_steps():
    # Each length's peak is the smaller of two runs: on a loaded machine one run's peak RSS varied by ~80 MB
    # (1.23x in a fresh clone's CI, 1.09-1.12x alone) with no leak, while a leak of the 10x run's trajectory
    # (~320 MB) shows in every run.
    peaks = {}
    for steps in (1000, 10000):
        out = os.path.join(tmpdir(), f"mem{steps}.h5")
        env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        runs = []
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", textwrap.dedent(_MEM), str(steps), out], env=env, cwd=HERE,
                               capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, p.stderr[-4000:]
            runs.append(int(p.stdout.split()[-1]))  # KiB
            size = os.path.getsize(out)
            os.remove(out)
        peaks[steps] = min(runs)
    trajectory_kib = 10000 * 128 * 32 * 8 / 1024  # what a leak of the 10x run would add
    assert size > 0.9 * trajectory_kib * 1024
    assert trajectory_kib > 0.4 * peaks[1000]  # a leak would show clearly against the baseline
    print("peak RSS KiB", peaks)
    assert peaks[10000] <= 1.2 * peaks[1000], peaks
