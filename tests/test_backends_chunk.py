"""Issue 30: on backend="mujoco", MuJoCo's own scheme runs whole chunks in C (adapters/backends/host_chunk.py).

The whole-chunk path is ``mj_step`` itself, so its states and warm starts equal MuJoCo C's bit for bit;
against the stage-by-stage path (our update arithmetic in XLA) it agrees to the backend's bound (1e-12).
Chunking, record_every, groups of records and resuming change nothing; worlds that ``mj_step`` would
reset (bad qpos/qvel/qacc) follow the engine's rule exactly as the stage path does.
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import pytest
from backend_common import C_INTEGRATOR, OURS, worlds

from mjharness.adapters import MjScene
from mjharness.adapters.backends import ChunkRun, ChunkStatic, host_chunk
from mjharness.integrators import RK4, RK38, STATUS_NONFINITE, SemiImplicitEuler
from mjharness.rollout import initial_states, open_rollout, rollout
from mjharness.scenes import load_scene

TOL = 1e-12
_SCENES: dict[str, MjScene] = {}


def _scene(name: str) -> MjScene:
    if name not in _SCENES:
        model = load_scene(name, mjx="strict")
        if name == "arm":
            model.dof_damping[:] = [0.3, 0.2, 0.1, 0.5]  # mj_Euler's implicit damping
        _SCENES[name] = MjScene(model, backend="mujoco", threads=2)
    return _SCENES[name]


def _ctrl(m, ctrl, steps):
    """(B, steps, nu) controls varying per step (the per-step ctrl path), or None when the model has none."""
    if not m.nu:
        return None
    ramp = 1.0 + 0.5 * np.sin(np.arange(steps) / 7.0)
    return ctrl[:, None, :] * ramp[None, :, None]


def _mj_step(m, method, x0, u, steps):
    """(states (T, B, n), warm starts (T, B, nv)) of MuJoCo C's own mj_step."""
    old = m.opt.integrator
    m.opt.integrator = C_INTEGRATOR[method]
    try:
        xs, ws = np.empty((steps,) + x0.shape), np.empty((steps, x0.shape[0], m.nv))
        for b in range(x0.shape[0]):
            d = mujoco.MjData(m)
            d.qpos[:], d.qvel[:], d.act[:] = x0[b, :m.nq], x0[b, m.nq:m.nq + m.nv], x0[b, m.nq + m.nv:]
            for k in range(steps):
                if u is not None:
                    d.ctrl[:] = u[b, k]
                mujoco.mj_step(m, d)
                xs[k, b], ws[k, b] = np.concatenate([d.qpos, d.qvel, d.act]), d.qacc_warmstart
    finally:
        m.opt.integrator = old
    return xs, ws


class _Staged(SemiImplicitEuler):
    """SemiImplicitEuler under another type: not MuJoCo's scheme to host_chunk, so it runs stage by stage."""


class _StagedRK4(RK4):
    pass


class _StagedImplicit(OURS["implicit_fast"]):
    pass


STAGED = {"euler": _Staged, "rk4": _StagedRK4, "implicit_fast": _StagedImplicit}


def _run(scene, integ, x0, u, steps, **kw):
    m = scene.model
    return rollout(scene, integ, dt=m.opt.timestep, steps=steps, x0=x0, ctrl=u, progress=False, **kw)


CASES = [("box_on_plane", "euler"), ("box_on_plane", "rk4"), ("box_on_plane", "implicit_fast"), ("arm", "euler"),
         ("arm", "rk4"), ("arm", "implicit_fast"), ("mixed", "rk4"), ("humanoid", "euler"), ("humanoid", "rk4")]


@pytest.mark.parametrize("name,method", CASES)
def test_whole_chunks_are_mj_step_bit_for_bit(name, method):
    scene = _scene(name)
    m = scene.model
    steps = 12 if name == "humanoid" else 60
    x0, ctrl = worlds(m, 4)
    u = _ctrl(m, ctrl, steps)
    r = _run(scene, OURS[method](), x0, u, steps, chunk=25)
    assert r.stats["trace_cache"] == "host"  # the whole-chunk path ran
    xs, ws = _mj_step(m, method, x0, u, steps)
    np.testing.assert_array_equal(r.x, xs)
    np.testing.assert_array_equal(r.carry["qacc_warmstart"], ws[-1])
    staged = _run(scene, STAGED[method](), x0, u, steps, chunk=25)
    assert staged.stats["trace_cache"] != "host"
    # The stage path's update is XLA arithmetic: ulps apart per step, amplified by contacts (humanoid: 2.4e-12
    # at |x| ~ 15 after 12 steps), so the bound is relative there as in test_backends' C spread.
    assert np.abs(staged.x - r.x).max() <= TOL * max(1.0, np.abs(xs).max())
    assert np.abs(staged.carry["qacc_warmstart"] - r.carry["qacc_warmstart"]).max() <= 1e-9 * max(
        1.0, np.abs(ws[-1]).max())


def test_chunking_record_every_groups_and_resume_change_nothing(tmp_path, monkeypatch):
    scene = _scene("arm")
    m = scene.model
    steps, R = 48, 3  # 16 samples: one chunk of 48, or chunks of 9 (the last one short)
    x0, ctrl = worlds(m, 5)
    u = _ctrl(m, ctrl, steps)
    ref = _run(scene, SemiImplicitEuler(), x0, u, steps, record_every=R, chunk=48)
    xs, ws = _mj_step(m, "euler", x0, u, steps)
    np.testing.assert_array_equal(ref.x, xs[R - 1::R][:steps // R])
    np.testing.assert_array_equal(ref.carry["qacc_warmstart"], ws[-1])
    monkeypatch.setattr(host_chunk, "SPLIT_BYTES", 0)  # records copied into the trajectory on the pool's threads
    split = _run(scene, SemiImplicitEuler(), x0, u, steps, record_every=R, chunk=48)
    np.testing.assert_array_equal(split.x, ref.x)
    monkeypatch.setattr(host_chunk, "RECORD_BYTES", 1)  # one sample per Batch.rollout call
    small = _run(scene, SemiImplicitEuler(), x0, u, steps, record_every=R, chunk=9)
    np.testing.assert_array_equal(small.x, ref.x)
    np.testing.assert_array_equal(small.carry["qacc_warmstart"], ref.carry["qacc_warmstart"])
    # A resumed file (the controls are the scene's own: a resume must be given the file's ctrl array) continues
    # from the stored state and warm start as if it had never stopped.
    whole = _run(scene, SemiImplicitEuler(), x0, None, steps, record_every=R, chunk=9)
    path = tmp_path / "r.h5"
    _run(scene, SemiImplicitEuler(), x0, None, 30, record_every=R, out=path)
    resumed = rollout(scene, SemiImplicitEuler(), dt=m.opt.timestep, steps=steps, record_every=R, resume=path,
                      progress=False)
    assert resumed.stats["trace_cache"] == "host"
    np.testing.assert_array_equal(resumed.x, whole.x)
    np.testing.assert_array_equal(open_rollout(path).x, whole.x)


# A free-spinning hinge (no gravity: qacc = 0 unless driven, so both paths do the same additions). qvel 1e11:
# mj_step warns (|qvel| > 1e10) and resets the world; the engine runs on, finite. A motor of gear 1e298 at
# ctrl 1e10 (the largest ctrl MuJoCo takes) overflows qacc at that step: the engine freezes the world there.
SPIN = """
<mujoco>
  <option timestep="0.01" gravity="0 0 0"/>
  <worldbody>
    <body name="rod">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.01" mass="0.01"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" gear="1e298"/></actuator>
</mujoco>"""


def test_worlds_mj_step_would_reset_follow_the_engine_rule():
    scene = MjScene(mujoco.MjModel.from_xml_string(SPIN), backend="mujoco", threads=2)
    steps = 20
    x0 = np.tile(scene.x0(), (3, 1))
    x0[:, 1] = [0.1, 1e11, 0.2]
    u = np.zeros((3, steps, 1))
    u[2, 6:] = 1e10
    fast = _run(scene, SemiImplicitEuler(), x0, u, steps, chunk=4)
    staged = _run(scene, _Staged(), x0, u, steps, chunk=4)
    assert fast.stats["trace_cache"] == "host" and staged.stats["trace_cache"] != "host"
    np.testing.assert_array_equal(fast.status, staged.status)
    np.testing.assert_array_equal(fast.status_step, staged.status_step)
    assert list(fast.status) == [0, 0, STATUS_NONFINITE] and fast.status_step[2] == 6  # in the second chunk
    assert np.abs(fast.x[:, 1]).max() > 1e10 and np.isfinite(fast.x).all()  # ran on past mj_step's limit
    np.testing.assert_array_equal(fast.x, staged.x)
    k = int(fast.status_step[2])  # frozen at the state before the failing step, k > 0 so after row k - 1
    np.testing.assert_array_equal(fast.x[k:, 2], np.broadcast_to(fast.x[k - 1, 2], fast.x[k:, 2].shape))


@pytest.mark.parametrize("semantics", ["live", "sampled"])
def test_outputs_of_whole_chunks_equal_the_stage_path(semantics):
    scene = _scene("arm")
    m = scene.model
    steps = 32
    x0, ctrl = worlds(m, 3)
    u = _ctrl(m, ctrl, steps)
    outs = ("xpos", "cfrc_ext", "qacc", "actuator_force")
    kw = dict(record_every=4, chunk=12, outputs=outs, output_semantics=semantics)
    fast, staged = _run(scene, SemiImplicitEuler(), x0, u, steps, **kw), _run(scene, _Staged(), x0, u, steps, **kw)
    assert fast.stats["trace_cache"] == "host"
    for k in outs:
        assert np.abs(fast.outputs[k] - staged.outputs[k]).max() <= 1e-9 * max(1.0, np.abs(staged.outputs[k]).max()), k
    if semantics == "sampled":  # what mj_step leaves in mjData: the forward pass before the step, bit for bit
        mm = copy.deepcopy(m)
        mm.opt.integrator = C_INTEGRATOR["euler"]
        d = mujoco.MjData(mm)
        d.qpos[:], d.qvel[:] = x0[1, :m.nq], x0[1, m.nq:m.nq + m.nv]
        for k in range(steps):
            d.ctrl[:] = u[1, k]
            mujoco.mj_step(mm, d)
            if (k + 1) % 4 == 0:
                np.testing.assert_array_equal(fast.outputs["xpos"][(k + 1) // 4 - 1, 1], d.xpos)


def _request(integ, params=(), **kw):
    """(ChunkStatic, ChunkRun) of a 10-step run; ``params``: ((field, (B, ...) values), ...); ``kw``: static fields."""
    base = dict(integ=integ, kind="fixed", ctrl_mode="none", ctrl_fn=None, carry=(("qacc_warmstart", (6,)),),
                samples=10, record_every=1, batch=2, n=13, nu=0, devices=(),
                params=tuple((name, np.shape(v)[1:]) for name, v in params))
    return ChunkStatic(**{**base, **kw}), ChunkRun(dt=0.002, t0=0.0, steps=10, values=tuple(params))


def test_what_keeps_the_stage_path():
    scene = _scene("box_on_plane")
    assert host_chunk.why_not(scene, *_request(SemiImplicitEuler())) == ""
    assert "not one of MuJoCo's own schemes" in host_chunk.why_not(scene, *_request(RK38()))
    assert "not one of MuJoCo's own schemes" in host_chunk.why_not(scene, *_request(_Staged()))
    assert "ctrl function" in host_chunk.why_not(scene, *_request(RK4(), ctrl_mode="callable"))
    mass = np.ones((2, scene.model.nbody))
    assert host_chunk.why_not(scene, *_request(RK4(), params=(("body_mass", mass),))) == ""  # per-simulation fields
    step = (("opt.timestep", np.full((2, 1), 0.01)),)
    assert "opt.timestep" in host_chunk.why_not(scene, *_request(RK4(), params=step))  # would not be the run's dt
    qdot = MjScene(scene.model, backend="mujoco", quaternion_update="quaternion_qdot", threads=1)
    assert "quaternion_qdot" in host_chunk.why_not(qdot, *_request(RK4()))
    clock = MjScene(mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body><freejoint/><geom size=".1"/></body></worldbody>'
        '<sensor><clock/></sensor></mujoco>'), backend="mujoco", threads=1)
    assert "time" in host_chunk.why_not(clock, *_request(SemiImplicitEuler()))
    r = rollout(scene, "rk4", steps=3, batch=2, progress=False, ctrl=None)
    assert r.stats["trace_cache"] == "host"
    r = rollout(scene, "rk38", steps=3, batch=2, progress=False)
    assert r.stats["trace_cache"] != "host"


@pytest.mark.parametrize("name", ["arm", "humanoid"])
def test_batched_forward_stage_equals_the_per_world_loop(name):
    """host_batch.BatchForward (whole batch in C) gives HostPool.evaluate's bits, warm start and controls used."""
    from mjharness.adapters.backends.host_batch import BatchForward, batched

    scene = _scene(name)
    pool, m = scene.backend_state.pool, scene.model
    x0, ctrl = worlds(m, 5)
    rng = np.random.default_rng(3)
    ws = rng.standard_normal((5, m.nv))
    t, h = np.linspace(0.0, 0.1, 5), np.full(5, m.opt.timestep)
    ref = pool.evaluate("forward", t, x0, ctrl, ws, h)
    np.testing.assert_array_equal(BatchForward(pool)(t, x0, ctrl, ws, h), ref)
    one = BatchForward(pool)(t[1], x0[1], ctrl[1], ws[1], h[1])  # no batch axis: one world
    np.testing.assert_array_equal(one, ref[1])
    assert batched(pool, "forward", None) and batched(pool, "forward", np.eye(m.nv))  # M^-1 f: SolveM
    assert not batched(pool, "euler", np.eye(m.nv))
    assert not batched(pool, "implicit", None) and batched(pool, "euler", None) == (not pool._damped)


@pytest.mark.parametrize("name", ["arm", "humanoid"])
def test_batched_minv_f_equals_mj_solveM(name):
    """Joint noise's M(q)^-1 f columns from the whole batch (host_batch.SolveM on the Batch's qLD) have the bits of
    the per-world loop's mj_solveM: one dof's force (the joint-noise case), every dof at once, dense random forces."""
    from mjharness.adapters.backends.host_batch import BatchForward

    scene = _scene(name)
    pool, m = scene.backend_state.pool, scene.model
    B = 7
    x0, ctrl = worlds(m, B)
    rng = np.random.default_rng(5)
    ws = rng.standard_normal((B, m.nv))
    t, h = np.linspace(0.0, 0.1, B), np.full(B, m.opt.timestep)
    for force in (0.3 * np.eye(m.nv)[[m.nv - 1]], np.eye(m.nv), rng.standard_normal((3, m.nv))):
        ref = pool.evaluate("forward", t, x0, ctrl, ws, h, force=force)
        got = BatchForward(pool, None, force)(t, x0, ctrl, ws, h)
        np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))  # signed zeros too
        assert np.abs(ref[:, pool.width:]).max() > 0


def test_batched_minv_f_with_per_world_fields_and_a_reset_world():
    """Randomized worlds with joint noise: each world's M^-1 f on its own masses, bit for bit; a world the batch's
    checks would reset is evaluated by the per-world loop with its force columns."""
    from mjharness.adapters.backends.host_batch import BatchForward

    scene = _scene("arm")
    pool, m = scene.backend_state.pool, scene.model
    B = 5
    x0, ctrl = worlds(m, B)
    x0[2, m.nq] = 2e10
    rng = np.random.default_rng(6)
    layout = (("body_mass", m.nbody),)
    p = m.body_mass * rng.uniform(0.5, 1.5, (B, m.nbody))
    ws = rng.standard_normal((B, m.nv))
    t, h = np.linspace(0.0, 0.1, B), np.full(B, m.opt.timestep)
    force = 0.2 * np.eye(m.nv)[[1, 3]]
    ref = pool.evaluate("forward", t, x0, ctrl, ws, h, force=force, fields=(layout, p))
    np.testing.assert_array_equal(BatchForward(pool, layout, force)(t, x0, ctrl, ws, h, p), ref)
    assert not np.array_equal(ref, pool.evaluate("forward", t, x0, ctrl, ws, h, force=force))


def test_batched_forward_with_per_world_fields_equals_the_per_world_loop():
    """Randomized worlds' stages: Batch.forward with per-simulation fields gives the per-world loop's bits (each
    world's fields written into a model copy), including a world the batch's checks would reset."""
    from mjharness.adapters.backends.host_batch import BatchForward, batched

    scene = _scene("arm")
    pool, m = scene.backend_state.pool, scene.model
    B = 5
    x0, ctrl = worlds(m, B)
    x0[3, m.nq] = 2e10  # |qvel| beyond 1e10: Batch.forward would reset it; the stage takes it as given
    rng = np.random.default_rng(4)
    mass = m.body_mass * rng.uniform(0.5, 1.5, (B, m.nbody))
    damping = rng.uniform(0.0, 0.5, (B, m.nv))
    layout = (("body_mass", m.nbody), ("dof_damping", m.nv))
    p = np.concatenate([mass, damping], axis=1)
    ws = rng.standard_normal((B, m.nv))
    t, h = np.linspace(0.0, 0.1, B), np.full(B, m.opt.timestep)
    ref = pool.evaluate("forward", t, x0, ctrl, ws, h, fields=(layout, p))
    np.testing.assert_array_equal(BatchForward(pool, layout)(t, x0, ctrl, ws, h, p), ref)
    assert not np.array_equal(ref, pool.evaluate("forward", t, x0, ctrl, ws, h))  # the fields mattered
    assert batched(pool, "forward", None, layout) and not batched(pool, "euler", None, layout)
    assert batched(pool, "forward", np.eye(m.nv), layout)
    assert not batched(pool, "forward", None, (("opt.nonexistent", 1),))


def test_batched_forward_takes_bad_states_as_given():
    """Batch.forward would reset a world with |qvel| > 1e10 (mj_step's checks); the stage sees the state as given."""
    from mjharness.adapters.backends.host_batch import BatchForward

    scene = MjScene(mujoco.MjModel.from_xml_string(SPIN), backend="mujoco", threads=2)
    pool = scene.backend_state.pool
    x = np.array([[0.3, 0.1], [1e9 + 7.0, 1e11], [0.002, 0.2]])
    args = (np.zeros(3), x, np.array([[0.0], [1e-290], [0.0]]), np.zeros((3, 1)), np.full(3, 0.01))
    ref = pool.evaluate("forward", *args)
    np.testing.assert_array_equal(BatchForward(pool)(*args), ref)
    assert ref[1, 0] == 1e11 and ref[1, 1] != 0  # qvel and the motor's qacc as given, not the reset's zeros


@pytest.mark.parametrize("method", ["dormand_prince", "rk38"])
def test_stage_path_speedups_change_no_bit(method, monkeypatch):
    """The stage path's two speed-ups (issue 30) give the same bits as what they replace: XLA's buffers handed
    straight to the host (buffer_callback, ``host._zero_copy``) instead of pure_callback's copies, and stages
    traced one by one (``MjScene.unroll_stages``) instead of the stage loop. box_on_plane (contacts, a free joint:
    the RKMK transform) thrown, float64; DormandPrince's accept/reject decisions follow every bit."""
    from mjharness.adapters.backends import host
    from mjharness.adapters.backends.mujoco_c import MujocoBackend

    def run():
        scene = MjScene(load_scene("box_on_plane", mjx="strict"), backend="mujoco", threads=2)  # its own chunk cache
        x0 = initial_states(scene, 3, seed=1, perturb=0.5)
        r = rollout(scene, method, dt=0.01, steps=12, x0=x0, record_every=3, progress=False)
        return r.x, r.carry["qacc_warmstart"], scene

    fast, ws, scene = run()
    assert scene.unroll_stages and host._zero_copy()
    assert np.abs(fast[-1] - fast[0]).max() > 0.05  # it moved
    monkeypatch.setattr(host, "_zero_copy", lambda: False)
    copied, ws_c, _ = run()
    monkeypatch.setattr(MujocoBackend, "unroll_stages", False)
    looped, ws_l, _ = run()
    np.testing.assert_array_equal(copied, fast)
    np.testing.assert_array_equal(ws_c, ws)
    np.testing.assert_array_equal(looped, fast)
    np.testing.assert_array_equal(ws_l, ws)


def test_bench_reports_the_c_backend_against_mujoco_rollout_per_scheme():
    from mjharness.rollout import bench

    scene = MjScene("bench_pendulum", backend="mjx")
    peers = ("mujoco_rollout", "backend_mujoco", "mujoco_rollout_rk4", "backend_mujoco_rk4")
    c = bench.bench_cell(scene, batch=3, steps=20, peers=peers, repeats=1, min_time=0.0, perturb=0.3, nthread=2)
    by = {r["peer"]: r for r in c["results"]}
    for peer, native, scheme in (("backend_mujoco", "mujoco_rollout", "semi_implicit_euler"),
                                 ("backend_mujoco_rk4", "mujoco_rollout_rk4", "rk4")):
        row = by[peer]
        assert row["scheme"] == scheme and row["agrees_with"] == native
        assert row["max_dqpos"] == 0.0 and row["max_dqvel"] == 0.0  # whole chunks in C: mj_step's own bits
        assert row["vs_mujoco_rollout"] == pytest.approx(row["world_steps_per_s"] / by[native]["world_steps_per_s"])
    text = bench.format_table({"machine": bench.machine_info(), "cells": [c]})
    assert "C backend / mujoco.rollout world-steps/s" in text and "backend_mujoco_rk4" in text


RANDOMIZE = {"body_mass": "*uniform(0.7, 1.3)", "geom_friction": "*uniform(0.5, 1.5)",
             "dof_damping": "uniform(0.1, 0.6)"}


def _per_world_mj_step(m, method, params, x0, u, steps):
    """MuJoCo C's mj_step on one model per world: the nominal model with that world's drawn fields."""
    xs, ws = np.empty((steps,) + x0.shape), np.empty((steps, x0.shape[0], m.nv))
    for b in range(x0.shape[0]):
        mb = copy.deepcopy(m)
        for name, v in params.items():
            np.copyto(getattr(mb, name), v[b].reshape(getattr(mb, name).shape))
        xb, wb = _mj_step(mb, method, x0[b:b + 1], None if u is None else u[b:b + 1], steps)
        xs[:, b], ws[:, b] = xb[:, 0], wb[:, 0]
    return xs, ws


@pytest.mark.parametrize("name,method", [("arm", "euler"), ("arm", "rk4"), ("box_on_plane", "rk4"),
                                         ("box_on_plane", "implicit_fast")])
def test_randomized_worlds_run_whole_chunks_on_each_worlds_model(name, method):
    """Per-world fields (randomize: masses, friction, damping, and the derived constants mj_setConst gives them)
    are the Batch's per-simulation fields: each world equals mj_step on its own model bit for bit, outputs are
    read off that model, and the stage path (each world's fields written into a model copy) agrees to its bound."""
    scene = _scene(name)
    m = scene.model
    steps = 40
    x0, ctrl = worlds(m, 4)
    u = _ctrl(m, ctrl, steps)
    kw = dict(chunk=16, record_every=2, randomize=RANDOMIZE, seed=5, outputs=("xpos", "cfrc_ext"))
    fast = _run(scene, OURS[method](), x0, u, steps, **kw)
    assert fast.stats["trace_cache"] == "host"
    params = fast.model_params
    assert np.ptp(params["body_mass"][:, -1]) > 0 and np.ptp(params["dof_damping"][:, 0]) > 0  # drawn per world
    xs, ws = _per_world_mj_step(m, method, params, x0, u, steps)
    np.testing.assert_array_equal(fast.x, xs[1::2])
    np.testing.assert_array_equal(fast.carry["qacc_warmstart"], ws[-1])
    staged = _run(scene, STAGED[method](), x0, u, steps, **kw)
    assert staged.stats["trace_cache"] != "host"
    for k in params:
        np.testing.assert_array_equal(staged.model_params[k], params[k])
    assert np.abs(staged.x - fast.x).max() <= TOL * max(1.0, np.abs(xs).max())
    for k in ("xpos", "cfrc_ext"):
        scale = max(1.0, np.abs(staged.outputs[k]).max())
        assert np.abs(fast.outputs[k] - staged.outputs[k]).max() <= 1e-9 * scale, k
    # Outputs are each world's own: world 1's bodies' positions after the last sample, from mj_forward on its model.
    mb = copy.deepcopy(m)
    for k, v in params.items():
        np.copyto(getattr(mb, k), v[1].reshape(getattr(mb, k).shape))
    d = mujoco.MjData(mb)
    d.qpos[:], d.qvel[:], d.act[:] = xs[-1, 1, :m.nq], xs[-1, 1, m.nq:m.nq + m.nv], xs[-1, 1, m.nq + m.nv:]
    d.qacc_warmstart[:] = ws[-1, 1]
    if u is not None:
        d.ctrl[:] = u[1, -1]
    mujoco.mj_forward(mb, d)
    mujoco.mj_rnePostConstraint(mb, d)
    np.testing.assert_array_equal(fast.outputs["xpos"][-1, 1], d.xpos)
    np.testing.assert_array_equal(fast.outputs["cfrc_ext"][-1, 1], d.cfrc_ext)


def test_a_randomized_world_mj_step_would_reset_reruns_on_its_own_model():
    """The step-by-step fallback (a world mj_step warned about) steps that world's own model, not the nominal."""
    scene = MjScene(mujoco.MjModel.from_xml_string(SPIN), backend="mujoco", threads=2)
    m, steps = scene.model, 12
    x0 = np.tile(scene.x0(), (3, 1))
    x0[:, 1] = [0.1, 1e11, 0.2]
    u = np.full((3, steps, 1), 1e-297)  # a torque of 10: the motion depends on each world's mass
    kw = dict(chunk=4, randomize={"body_mass": "*uniform(0.5, 2.0)"}, seed=3)
    fast = _run(scene, SemiImplicitEuler(), x0, u, steps, **kw)
    staged = _run(scene, _Staged(), x0, u, steps, **kw)
    assert fast.stats["trace_cache"] == "host"
    np.testing.assert_array_equal(fast.status, staged.status)
    assert np.abs(fast.x - staged.x).max() <= TOL * np.abs(fast.x).max()

    def by_hand(params):  # the engine's rule for world 1: mj_forward + mj_Euler past mj_step's limit, no reset
        mb = copy.deepcopy(m)
        for k, v in params.items():
            np.copyto(getattr(mb, k), v[1].reshape(getattr(mb, k).shape))
        d = mujoco.MjData(mb)
        d.qpos[:], d.qvel[:], d.ctrl[:] = x0[1, :1], x0[1, 1:], u[1, 0]
        rows = []
        for _ in range(steps):
            mujoco.mj_forward(mb, d)
            mujoco.mj_Euler(mb, d)
            rows.append(np.concatenate([d.qpos, d.qvel]))
        return np.array(rows)

    np.testing.assert_array_equal(fast.x[:, 1], by_hand(fast.model_params))
    assert not np.array_equal(fast.x[:, 1], by_hand({}))


def test_randomized_stage_path_keeps_its_bits(monkeypatch):
    """RK38 (stage by stage) on randomized worlds: the same bits with Batch.forward's per-simulation fields as with
    the per-world loop it replaces."""
    from mjharness.adapters.backends import host_batch

    scene = _scene("box_on_plane")
    x0 = initial_states(scene, 3, seed=1, perturb=0.5)
    kw = dict(dt=0.01, steps=8, x0=x0, record_every=2, progress=False, randomize=RANDOMIZE, seed=2)
    fast = rollout(scene, RK38(), **kw)
    monkeypatch.setattr(host_batch, "batched", lambda *a, **k: False)
    scene2 = MjScene(load_scene("box_on_plane", mjx="strict"), backend="mujoco", threads=2)  # its own host fns
    looped = rollout(scene2, RK38(), **kw)
    np.testing.assert_array_equal(fast.x, looped.x)
    np.testing.assert_array_equal(fast.carry["qacc_warmstart"], looped.carry["qacc_warmstart"])


def test_bench_reports_randomized_worlds_against_the_same_run_without():
    from mjharness.rollout import bench

    scene = MjScene("bench_pendulum", backend="mjx")
    peers = ("backend_mujoco", "backend_mujoco_randomized", "backend_mujoco_closed_loop")
    c = bench.bench_cell(scene, batch=3, steps=20, peers=peers, repeats=1, min_time=0.0, perturb=0.3, nthread=2)
    by = {r["peer"]: r for r in c["results"]}
    row = by["backend_mujoco_randomized"]
    assert row["trace_cache"] == "host" and row["randomize"] and row["finite"]  # whole chunks in C, per-world models
    assert row["agrees_with"] is None  # other physics: not held to mujoco.rollout's final states
    loop = by["backend_mujoco_closed_loop"]
    assert loop["trace_cache"] == "host" and loop["finite"] and loop["agrees_with"] is None
    assert loop["vs_plain"] == min(loop["vs_plain_wall"], loop["vs_plain_cpu"])
    plain = by["backend_mujoco"]["world_steps_per_s"]
    assert row["vs_plain_wall"] == pytest.approx(row["world_steps_per_s"] / plain)
    assert row["vs_plain"] == min(row["vs_plain_wall"], row["vs_plain_cpu"])
    assert len(row["cpu_call_s"]) == row["calls"]
    assert "randomized or closed loop / the same run without" in bench.format_table(
        {"machine": bench.machine_info(), "cells": [c]})


SENSED = """<mujoco><option timestep="0.004"/>
  <worldbody><geom name="floor" type="plane" size="2 2 .1"/><site name="eye" pos="0.02 0 1.2" zaxis="0 0 -1"/>
    <body name="box" pos="0 0 .052"><freejoint/><geom type="box" size=".1 .08 .05" mass="1"/>
      <site name="s" size=".2"/>
      <body name="arm" pos=".1 0 0"><joint name="hinge" type="hinge" axis="0 1 0" damping=".05"/>
        <geom type="capsule" fromto="0 0 0 .2 0 0" size=".02" mass=".2"/><site name="a"/></body></body>
  </worldbody>
  <actuator><motor name="m" joint="hinge" gear="1"/></actuator>
  <sensor><accelerometer name="acc" site="s"/><gyro site="s"/><velocimeter site="s"/><touch site="s"/><force site="a"/>
    <torque site="a"/><rangefinder site="eye"/><framepos objtype="body" objname="box"/><jointpos joint="hinge"/>
    <subtreecom body="box"/><actuatorfrc actuator="m"/></sensor></mujoco>"""


@pytest.mark.parametrize("method", ["semi_implicit_euler", "rk4", "euler_maruyama"])
def test_batches_skip_sensors_nobody_reads_and_change_no_bit(method, monkeypatch):
    """Whole chunks (MuJoCo's Euler, RK4) and batched stages (Euler–Maruyama with joint noise: SolveM) run their
    ``Batch`` with ``mjDSBL_SENSOR`` (``host_batch.without_sensors``); states, warm starts and the recorded sensordata
    (read by ``HostOutputs`` with the scene's own model) are the bits of the same runs computing every sensor, on
    a box in contact with the floor whose accelerometer, touch, force and rangefinder all move."""
    from mjharness.adapters.backends import host_batch

    def run():
        scene = MjScene(mujoco.MjModel.from_xml_string(SENSED), backend="mujoco", threads=2)  # its own Batches
        if method == "euler_maruyama":
            scene.add_joint_noise("hinge", 0.3)
        m = scene.model
        x0 = np.repeat(scene.x0()[None], 3, axis=0)
        x0[:, m.nq + 2] = [-0.5, 0.0, 0.4]  # falling onto / lifting off the floor
        x0[:, m.nq + 4] = [0.0, 2.0, -3.0]
        u = np.broadcast_to(np.array([0.3, -0.2, 0.1])[:, None, None], (3, 40, 1)).copy()
        r = rollout(scene, method, dt=m.opt.timestep, steps=40, x0=x0, ctrl=u, outputs=("sensordata",), seed=2,
                    progress=False)
        return r, scene

    fast, scene = run()
    assert (fast.stats["trace_cache"] == "host") == (method != "euler_maruyama")  # whole chunks / the stage path
    assert not scene.model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_SENSOR)  # the scene's model untouched
    assert host_batch.without_sensors(scene.model).opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
    sd = np.asarray(fast.outputs["sensordata"])
    m = scene.model
    adr, dim = m.sensor_adr, m.sensor_dim
    moving = {mujoco.mjtSensor(m.sensor_type[i]).name: np.ptp(sd[..., adr[i]:adr[i] + dim[i]])
              for i in range(m.nsensor)}
    assert min(moving.values()) > 0, moving  # every sensor, touch and rangefinder included, was computed and moved
    for mod in (host_batch, host_chunk):
        monkeypatch.setattr(mod, "without_sensors", lambda m, copied=False: m)
    sensed, _ = run()
    np.testing.assert_array_equal(fast.x, sensed.x)
    np.testing.assert_array_equal(fast.carry["qacc_warmstart"], sensed.carry["qacc_warmstart"])
    np.testing.assert_array_equal(sd, np.asarray(sensed.outputs["sensordata"]))


def test_sensors_stay_on_where_something_may_ride_on_them():
    from mjharness.adapters.backends.host_batch import sensing, without_sensors

    m = mujoco.MjModel.from_xml_string(SENSED)
    assert not sensing(m) and without_sensors(m) is not m
    bare = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><freejoint/><geom size='.1'/></body>"
                                          "</worldbody></mujoco>")
    assert without_sensors(bare) is bare  # nothing to skip: no copy
    try:
        mujoco.set_mjcb_sensor(lambda m, d, stage: None)  # a user's sensor callback may do more than sensors
        assert sensing(m) and without_sensors(m) is m
    finally:
        mujoco.set_mjcb_sensor(None)


def test_batched_outputs_equal_the_per_world_loop_bit_for_bit():
    """Recorded outputs on MuJoCo C that are MjData fields after mj_forward (sensors, bodies, sites, qacc) come from
    ``Batch.forward`` in blocks of ``OUTPUT_BLOCK`` worlds (``host._batch_reads``): the per-world loop's bits, with
    per-world model fields, force providers' sums (applied_wrench) and a world whose NaN state the Batch's checks
    would reset (it goes through the loop, which takes it as given); outputs needing more than mj_forward
    (cfrc_ext: mj_rnePostConstraint; energy; contacts) keep the loop."""
    from mjharness.adapters.backends import host
    from mjharness.adapters.backends.providers import forces_caller
    from mjharness.adapters.outputs import parse_outputs

    scene = MjScene(mujoco.MjModel.from_xml_string(SENSED), backend="mujoco", threads=2)
    scene.add_force(lambda t, x, data: np.broadcast_to([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], (x.shape[0], 3, 6))
                    + np.asarray(data.qvel)[:, None, 0:1] * [0, 0, -2.0, 0.1, 0, 0], name="push")
    pool, m = scene.backend_state.pool, scene.model
    forces = forces_caller(pool, scene.force_providers)
    n = 11
    rng = np.random.default_rng(5)
    x = np.repeat(scene.x0()[None], n, axis=0)
    x[:, 2] += rng.uniform(-0.02, 0.05, n)  # some boxes in the floor, some above it
    x[:, m.nq:m.nq + 6] = rng.standard_normal((n, 6))
    x[:, m.nq + 6] = rng.standard_normal(n)
    x[4, 0] = np.nan  # Batch.forward would reset this world
    t, ctrl, ws = rng.uniform(0, 1, n), rng.uniform(-1, 1, (n, m.nu)), rng.standard_normal((n, m.nv))
    layout = (("body_mass", m.nbody), ("dof_damping", m.nv))
    p = np.concatenate([m.body_mass * rng.uniform(0.8, 1.2, (n, m.nbody)),
                        m.dof_damping + rng.uniform(0, 0.1, (n, m.nv))], axis=1)
    specs = parse_outputs(m, ["sensordata", "sensor:acc", "xpos", "site_xpos", "site_xmat", "qacc", "actuator_force",
                              "applied_wrench"])
    for lay, params in ((None, None), (layout, p)):
        fast = host.HostOutputs(pool, specs, False, lay, forces)
        assert fast.reads is not None and len(fast.reads) == len(specs) - 1
        loop = host.HostOutputs(pool, specs, False, lay, forces)
        loop.reads = None
        args = (t, x, ctrl, ws) + (() if params is None else (params,))
        got, want = fast.evaluate(*args), loop.evaluate(*args)
        np.testing.assert_array_equal(got, want)
        assert np.isnan(got[4]).any() and np.isfinite(np.delete(got, 4, axis=0)).all()
        assert np.ptp(np.delete(got, 4, axis=0), axis=0).max() > 0  # the worlds differ
    for needs_more in (["cfrc_ext"], ["xpos", "contact_force"]):
        assert host._batch_reads(m, parse_outputs(m, needs_more), "cfrc_ext" in needs_more, None) is None
