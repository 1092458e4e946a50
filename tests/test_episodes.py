"""Closed loops (issue 33): controllers with state, termination, resets and episodes, against hand-written
MuJoCo C loops (``mj_step`` with the same controller / rule in NumPy) and raw ``mjx.step``."""

from __future__ import annotations

import copy
import importlib.util
import signal
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import cached_scene
from rollout_common import mjharness_cmd, run_and_kill

from mjharness.integrators import STATUS_TERMINATED
from mjharness.rollout import Controller, RolloutError, Termination, open_rollout, rollout
from mjharness.rollout.engine.episodes import draw_state
from mjharness.rollout.engine.inputs import _perturb_scale
from mjharness.rollout.engine.scene_view import SceneView

ROOT = Path(__file__).resolve().parents[1]
ARM_STEPS, ARM_B = 1000, 8


def _example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ARM = _example("arm_reach")


def _np_init(x0, world):
    return {"integral": np.zeros(4), "target": np.asarray(ARM.TARGET0) * (1.0 - 0.1 * world)}


def _np_step(t, x, c, gains=None):
    kp, kd, ki = gains or (ARM.KP, ARM.KD, ARM.KI)
    q, qdot = x[:4], x[4:8]
    e = c["target"] - q
    integral = c["integral"] + e * ARM.DT
    return kp * e - kd * qdot + ki * integral, {"integral": integral, "target": c["target"]}


# Gains for a control held 5 steps (0.01 s): the example's (tuned for every step) make the held loop unstable,
# and two diverging trajectories cannot be compared to 1e-12.
HELD_GAINS = (2.0, 0.2, 0.5)


def _held_step(t, x, c):
    kp, kd, ki = HELD_GAINS
    q, qdot = x[:4], x[4:8]
    e = c["target"] - q
    integral = c["integral"] + e * ARM.DT
    return kp * e - kd * qdot + ki * integral, {"integral": integral, "target": c["target"]}


def _euler(name):
    """A copy of the scene's MjModel stepping with MuJoCo's Euler (SemiImplicitEuler's scheme)."""
    m = copy.deepcopy(cached_scene(name).model)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    return m


def _set(m, d, x):
    d.qpos[:], d.qvel[:], d.act[:] = x[:m.nq], x[m.nq:m.nq + m.nv], x[m.nq + m.nv:]


def _get(m, d):
    return np.concatenate([d.qpos, d.qvel, d.act])


def _arm_loop(x0, steps, every=1, gains=None):
    """The PD+I controller in NumPy around mj_step, world by world: (xs (T, B, n), us (T, B, nu))."""
    m = _euler("arm")
    d = mujoco.MjData(m)
    B = x0.shape[0]
    xs, us = np.empty((steps, B, x0.shape[1])), np.empty((steps, B, m.nu))
    for w in range(B):
        mujoco.mj_resetData(m, d)
        _set(m, d, x0[w])
        c, u = _np_init(x0[w], w), None
        for k in range(steps):
            if k % every == 0:
                u, c = _np_step(k * m.opt.timestep, _get(m, d), c, gains)
            d.ctrl[:] = u
            mujoco.mj_step(m, d)
            xs[k, w], us[k, w] = _get(m, d), u
    return xs, us


@pytest.fixture(scope="module")
def arm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("arm") / "arm.h5"
    r = rollout(cached_scene("arm"), "semi_implicit_euler", steps=ARM_STEPS, batch=ARM_B, ctrl=ARM.make(),
                backend="mujoco", out=out, progress=False, chunk=250)
    return r, out


def test_pd_integral_controller_on_c_equals_a_hand_written_mj_step_loop(arm_run):
    """The issue's bar: PD+I on the arm, MuJoCo C, SemiImplicitEuler, 1000 steps, 8 worlds with different
    targets: /x and /ctrl equal the NumPy controller around mj_step to <= 1e-12."""
    r, out = arm_run
    assert r.stats["backend"] == "mujoco"
    xs, us = _arm_loop(r.x0, ARM_STEPS)
    with open_rollout(out) as f:
        x_file, ctrl_file = f.x, f.ctrl
        assert f.h5["ctrl"].shape == (ARM_STEPS, ARM_B, 4) and f.h5["ctrl"].is_virtual
        integral = f.carry_entry("controller['integral']")
    assert np.abs(x_file - xs).max() <= 1e-12
    assert np.abs(ctrl_file - us).max() <= 1e-12
    assert np.array_equal(r.ctrl, ctrl_file) and np.array_equal(r.x, x_file)
    # the targets differ per world, so the worlds differ; the integral is the controller state that was recorded
    assert np.abs(xs[-1, 0, :4] - xs[-1, 1, :4]).max() > 1e-3
    np.testing.assert_allclose(integral[-1], r.carry["controller['integral']"], rtol=0, atol=0)


def test_numpy_controller_runs_on_the_host_with_the_same_numbers(arm_run):
    r, _ = arm_run
    rn = rollout(cached_scene("arm"), "semi_implicit_euler", steps=200, batch=3, ctrl=Controller(_np_init, _np_step),
                 backend="mujoco", progress=False)
    assert np.abs(rn.x - r.x[:200, :3]).max() <= 1e-12
    assert np.abs(rn.ctrl - r.ctrl[:200, :3]).max() <= 1e-12


def test_every_k_holds_the_controls_zero_order(tmp_path):
    every = 5
    r = rollout(cached_scene("arm"), "semi_implicit_euler", steps=100, batch=2,
                ctrl=Controller(ARM.init, _held_step, every=every), backend="mujoco", progress=False,
                out=tmp_path / "hold.h5")
    xs, us = _arm_loop(r.x0, 100, every=every, gains=HELD_GAINS)
    assert np.abs(r.x - xs).max() <= 1e-12 and np.abs(r.ctrl - us).max() <= 1e-12
    blocks = r.ctrl.reshape(100 // every, every, 2, 4)
    assert np.array_equal(blocks, np.broadcast_to(blocks[:, :1], blocks.shape))
    with open_rollout(tmp_path / "hold.h5") as f:
        assert "every=5" in f.attrs["controller"] and "jax" in f.attrs["controller"]


def test_resumed_controller_run_is_bit_identical(tmp_path, arm_run):
    """A shorter file resumed to the full length equals the uninterrupted run, controller state included."""
    r, full = arm_run
    part = tmp_path / "part.h5"
    rollout(cached_scene("arm"), "semi_implicit_euler", steps=500, batch=ARM_B, ctrl=ARM.make(), backend="mujoco",
            out=part, progress=False, chunk=250)
    rollout(cached_scene("arm"), "semi_implicit_euler", steps=ARM_STEPS, ctrl=ARM.make(), backend="mujoco",
            resume=part, progress=False, chunk=250)
    with open_rollout(part) as a, open_rollout(full) as b:
        assert a.complete and np.array_equal(a.x, b.x) and np.array_equal(a.carry, b.carry)
        assert np.array_equal(a.ctrl, b.ctrl)


def test_resume_refuses_another_controller_setting(tmp_path):
    p = tmp_path / "c.h5"
    rollout(cached_scene("arm"), "semi_implicit_euler", steps=20, batch=2, ctrl=ARM.make(), backend="mujoco", out=p,
            progress=False)
    with pytest.raises(RolloutError, match="controller: file 'every=1"):
        rollout(cached_scene("arm"), "semi_implicit_euler", steps=40, ctrl=Controller(ARM.init, ARM.step, every=2),
                backend="mujoco", resume=p, progress=False)


@pytest.mark.parametrize("bad, match", [
    (Controller(ARM.init, lambda t, x, c: (jnp.zeros(3), c)), r"u of shape \(4,\) \(nu=4\); u has shape \(3,\)"),
    (Controller(ARM.init, lambda t, x, c: (jnp.zeros(4), {"integral": c["integral"]})), "structure"),
    (Controller(ARM.init, ARM.step, every=0), "Controller.every must be an int >= 1"),
    (Controller(lambda x0: 1 / 0, ARM.step), "Controller.init.*ZeroDivisionError"),
])
def test_a_bad_controller_is_one_clear_error_before_anything_runs(tmp_path, bad, match):
    out = tmp_path / "never.h5"
    with pytest.raises(RolloutError, match=match):
        rollout(cached_scene("arm"), "semi_implicit_euler", steps=10, batch=2, ctrl=bad, backend="mujoco", out=out,
                progress=False)
    assert not out.exists()


def test_termination_options_are_checked():
    with pytest.raises(RolloutError, match="needs a terminate rule"):
        rollout(cached_scene("arm"), steps=10, batch=1, on_terminate="reset", progress=False)
    with pytest.raises(RolloutError, match="on_terminate must be one of"):
        rollout(cached_scene("arm"), steps=10, batch=1, terminate=ARM.reached, on_terminate="restart", progress=False)
    with pytest.raises(RolloutError, match="no keyframe named 'nope'"):
        rollout(cached_scene("arm"), steps=10, batch=1, terminate=ARM.reached, on_terminate="reset",
                reset_to="key:nope", progress=False)
    with pytest.raises(RolloutError, match=r"one bool per world \(shape \(\)\)"):
        rollout(cached_scene("arm"), steps=10, batch=1, terminate=lambda t, x: x[:2] > 0, progress=False)


# -- termination and reset on a contact scene ------------------------------------------------------------------

BOX_STEPS, BOX_B = 900, 4


def _thrown(B):
    m = cached_scene("box_on_plane").model
    d = mujoco.MjData(m)
    mujoco.mj_resetData(m, d)
    x0 = np.zeros((B, m.nq + m.nv + m.na))
    for w in range(B):
        x0[w, :m.nq] = d.qpos
        x0[w, m.nq:m.nq + 3] = [1.0 + 0.5 * w, 0.3 * w, 1.0]
    return x0


def stopped(t, x):
    """The box has (nearly) stopped: its 6 velocities below 0.05."""
    return jnp.linalg.norm(x[7:13]) < 0.05


def _box_loop(x0, steps, *, reset, draw=None):
    """mj_step with the rule: (xs, [(world, episode, start, end, end reason)])."""
    m = _euler("box_on_plane")
    d = mujoco.MjData(m)
    xs, rows = np.empty((steps, x0.shape[0], x0.shape[1])), []
    for w in range(x0.shape[0]):
        def restart(e, w=w):
            mujoco.mj_resetData(m, d)
            _set(m, d, x0[w] if draw is None or e == 0 else draw(w, e))

        restart(0)
        e, start, pending, frozen = 0, 0, False, False
        for k in range(steps):
            if frozen:
                xs[k, w] = xs[k - 1, w]
                continue
            if pending:
                e, start, pending = e + 1, k, False
                restart(e)
            mujoco.mj_step(m, d)
            xs[k, w] = _get(m, d)
            if np.linalg.norm(d.qvel) < 0.05:
                rows.append((w, e, start, k, "terminated"))
                pending, frozen = reset, not reset
        if reset and not pending:  # (pending here: the last step ended the episode)
            rows.append((w, e, start, steps - 1, "truncated"))
    return xs, rows


def _file_rows(path):
    with open_rollout(path) as f:
        table = f.table("episodes")
    return [(int(r["world"]), int(r["episode"]), int(r["start_step"]), int(r["end_step"]), r["end"].decode())
            for r in table]


@pytest.fixture(scope="module")
def box_reset(tmp_path_factory):
    out = tmp_path_factory.mktemp("box") / "box.h5"
    x0 = _thrown(BOX_B)
    r = rollout(cached_scene("box_on_plane"), "semi_implicit_euler", steps=BOX_STEPS, x0=x0, terminate=stopped,
                on_terminate="reset", backend="mujoco", out=out, progress=False, chunk=300)
    return r, out, x0


def test_reset_episodes_equal_a_hand_written_loop(box_reset):
    r, out, x0 = box_reset
    xs, rows = _box_loop(x0, BOX_STEPS, reset=True)
    assert np.abs(r.x - xs).max() <= 1e-12
    assert _file_rows(out) == rows
    assert sum(1 for row in rows if row[4] == "terminated") >= 2 * BOX_B  # several episodes per world
    with open_rollout(out) as f:
        ep = f.episode
        assert ep.shape == (BOX_STEPS, BOX_B) and f.h5["episode"].is_virtual
        eps = f.episodes(1)
    mine = [row for row in rows if row[0] == 1]
    assert [(e["episode"], e["start_step"], e["end_step"], e["end"]) for e in eps] == [row[1:] for row in mine]
    for e in eps:  # the samples of an episode: its steps' states, the terminal state last
        assert np.array_equal(e["x"], r.x[e["start_step"]:e["end_step"] + 1, 1])
        assert np.array_equal(e["time"], r.time[e["start_step"]:e["end_step"] + 1])
        assert np.all(ep[e["start_step"]:e["end_step"] + 1, 1] == e["episode"])
    assert [(e["start_step"], e["end_step"]) for e in r.episodes(1)] == [(e["start_step"], e["end_step"]) for e in eps]


def test_freeze_stops_a_world_at_its_terminal_state(tmp_path):
    x0 = _thrown(2)
    out = tmp_path / "freeze.h5"
    r = rollout(cached_scene("box_on_plane"), "semi_implicit_euler", steps=400, x0=x0,
                terminate=Termination(stopped), backend="mujoco", progress=False, out=out)
    xs, rows = _box_loop(x0, 400, reset=False)
    assert np.all(r.status == STATUS_TERMINATED) and r.stats["worlds_failed"] == 0
    assert r.stats["worlds_terminated"] == 2
    assert [int(s) for s in r.status_step] == [row[3] for row in rows]
    assert np.abs(r.x - xs).max() <= 1e-12  # frozen: every later sample is the terminal state
    with open_rollout(out) as f:
        for w, row in enumerate(rows):  # a frozen world's episode ends at end_step, not at the run's last sample
            end = row[3]
            assert end < 399
            for eps in (f.episodes(w), r.episodes(w)):
                (e,) = eps
                assert (e["start_step"], e["end_step"], e["end"]) == (0, end, "terminated")
                assert e["x"].shape == (end + 1, x0.shape[1])
                assert np.array_equal(e["x"], r.x[:end + 1, w]) and e["time"][-1] == r.time[end]


def test_freeze_episode_ends_with_the_sample_holding_the_terminal_state(tmp_path):
    """record_every > 1: the last sample of a frozen episode is the first one at or after end_step."""
    x0 = _thrown(2)
    r = rollout(cached_scene("box_on_plane"), "semi_implicit_euler", steps=399, x0=x0, record_every=7,
                terminate=Termination(stopped), backend="mujoco", progress=False)
    for w in range(2):
        (e,) = r.episodes(w)
        last = (e["samples"][-1] + 1) * 7 - 1  # the step after which the last sample was recorded
        assert e["end_step"] <= last < e["end_step"] + 7
        assert len(e["samples"]) < len(r.time)


def test_reset_to_draw_uses_a_fresh_perturbation_keyed_by_world_and_episode():
    scene = cached_scene("box_on_plane")
    x0 = _thrown(2)
    r = rollout(scene, "semi_implicit_euler", steps=500, x0=x0, terminate=stopped, on_terminate="reset",
                reset_to="draw", perturb=0.5, backend="mujoco", progress=False)
    view = SceneView.of(scene)
    base = view.x0()
    scale = _perturb_scale(view, base.size, 0.5, 0.0)
    quats = tuple((s.value_slice.start, s.value_slice.stop) for s in scene.layout.special)
    draw = lambda w, e: np.asarray(draw_state(jnp.asarray(base), tuple(scale), quats, 0, w, e))  # noqa: E731
    xs, rows = _box_loop(x0, 500, reset=True, draw=draw)
    assert np.abs(r.x - xs).max() <= 1e-12
    assert [(e["start_step"], e["end_step"]) for e in r.episodes(0)] == [row[2:4] for row in rows if row[0] == 0]
    assert not np.allclose(draw(0, 1), draw(0, 2)) and not np.allclose(draw(0, 1), draw(1, 1))


def test_mjx_gives_the_same_episodes_within_raw_mjx_steps_deviation(box_reset):
    """The bar's MJX part: the same boundaries; states within 10x of raw mjx.step's own deviation from C."""
    from mujoco import mjx

    rc, _, x0 = box_reset
    steps = 400
    rm = rollout(cached_scene("box_on_plane"), "semi_implicit_euler", steps=steps, x0=x0, terminate=stopped,
                 on_terminate="reset", backend="mjx", progress=False)
    for w in range(BOX_B):
        assert [(e["start_step"], e["end_step"], e["end"]) for e in rm.episodes(w)] == \
            [(e["start_step"], e["end_step"], e["end"]) if e["end_step"] < steps else
             (e["start_step"], steps - 1, "truncated") for e in rc.episodes(w) if e["start_step"] < steps]
    # raw mjx.step from the same states for the first episode (no reset yet): its deviation from mj_step
    m = _euler("box_on_plane")
    mx = mjx.put_model(m)
    first_end = min(e["end_step"] for w in range(BOX_B) for e in rc.episodes(w)[:1])

    def raw(x):
        d = mjx.make_data(mx).replace(qpos=x[:m.nq], qvel=x[m.nq:m.nq + m.nv])
        d, xs = jax.lax.scan(lambda d, _: (mjx.step(mx, d), jnp.concatenate([d.qpos, d.qvel])), d, None,
                             length=first_end + 1)
        return jnp.concatenate([xs[1:], jnp.concatenate([d.qpos, d.qvel])[None]])

    xr = np.asarray(jax.jit(jax.vmap(raw, out_axes=1))(jnp.asarray(x0)))
    raw_dev = np.abs(xr - rc.x[:first_end + 1]).max()
    ours = np.abs(rm.x - rc.x[:steps]).max()
    assert ours <= 10 * max(raw_dev, 1e-15), (ours, raw_dev)


# -- the CLI, a kill mid-episode, the bundled examples ------------------------------------------------------------

_cmd = mjharness_cmd


RULES = """import numpy as np

def stopped(t, x):
    return np.linalg.norm(x[7:13]) < 0.05
"""


def test_cli_kill_mid_episode_and_resume_is_bit_identical(tmp_path):
    """--terminate FILE:NAME --on-terminate reset on box_on_plane, killed mid-run (chunks of 250 steps end mid-episode),
    resumed: the file equals an uninterrupted run's, bit for bit (the rule is NumPy: it runs on the host)."""
    rules = tmp_path / "rules.py"
    rules.write_text(RULES)
    steps = 6000
    args = ["run", "box_on_plane", "--integrator", "semi_implicit_euler", "--steps", str(steps), "--batch", "3",
            "--chunk", "250", "--record-every", "5", "--perturb", "1.5", "--terminate", f"{rules}:stopped",
            "--on-terminate", "reset", "--reset-to", "draw", "--backend", "mujoco", "--no-progress"]
    killed, full = tmp_path / "killed.h5", tmp_path / "full.h5"
    rc, _ = run_and_kill(args + ["--out", str(killed)], tmp_path, 50)
    r = subprocess.run(_cmd() + args + ["--out", str(full)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "episodes:" in r.stdout
    if rc == -signal.SIGKILL:
        with open_rollout(killed) as f:
            assert not f.complete and 0 < f.samples < steps // 5
    r = subprocess.run(_cmd() + ["run", "--resume", str(killed), "--terminate", f"{rules}:stopped", "--no-progress"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    with open_rollout(killed) as a, open_rollout(full) as b:
        assert a.complete and np.array_equal(a.x, b.x) and np.array_equal(a.carry, b.carry)
        assert np.array_equal(a.table("episodes"), b.table("episodes"))
        assert a.episode.max() >= 3  # several episodes per world, one of them cut by the kill


def test_cli_runs_the_bundled_examples(tmp_path):
    ex = ROOT / "examples"
    out = tmp_path / "arm.h5"
    r = subprocess.run(_cmd() + ["run", "arm", "--controller", f"{ex / 'arm_reach.py'}:make", "--steps", "300",
                                 "--batch", "2", "--record-every", "1", "--out", str(out), "--no-progress"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    with open_rollout(out) as f:
        assert f.ctrl.shape == (300, 2, 4) and np.all(np.isfinite(f.ctrl))
    out = tmp_path / "hum.h5"
    r = subprocess.run(_cmd() + ["run", "humanoid", "--terminate", f"{ex / 'humanoid_fall.py'}:fallen",
                                 "--on-terminate", "reset", "--steps", "400", "--batch", "2", "--record-every", "1",
                                 "--out", str(out),
                                 "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    with open_rollout(out) as f:
        rows = f.episode_table()
        assert any(row["end"] == "terminated" for row in rows)  # an unactuated humanoid falls within 2 s
        for row in rows:
            if row["end"] == "terminated":  # the torso is below the height in the episode's terminal sample
                assert f.x[row["samples"][-1], row["world"], 2] < 0.8
    r = subprocess.run(_cmd() + ["run", "arm", "--controller", f"{ex / 'arm_reach.py'}:nothing", "--steps", "10"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "has no 'nothing'" in r.stderr


SENSED = """<mujoco><option timestep="0.002"/><worldbody>
  <body name="link"><joint name="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/>
  </body></worldbody>
  <actuator><motor name="m" joint="hinge"/></actuator>
  <sensor><jointpos name="angle" joint="hinge"/><jointvel name="rate" joint="hinge"/></sensor></mujoco>"""


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_controller_and_rule_read_the_sensors(backend):
    """Controller(sensors=True) gets sensordata at (t, x) (here jointpos, jointvel: the state itself); a rule with a
    third parameter gets it too."""
    ctl = Controller(lambda x0: {"seen": jnp.zeros(2)},
                     lambda t, x, c, sd: (-0.5 * sd[:1] - 0.1 * sd[1:2], {"seen": sd}), sensors=True)
    r = rollout(SENSED, "semi_implicit_euler", steps=60, batch=2, ctrl=ctl, perturb=1.0, backend=backend,
                terminate=lambda t, x, sd: sd[0] > 10.0, progress=False)
    seen = r.carry["controller['seen']"]
    assert np.abs(seen - r.x[-2]).max() <= 1e-12  # the sensors of the state the last step started from
    assert np.all(r.episode == 0) and r.stats["worlds_terminated"] == 0


def test_simulate_refuses_a_controller_by_name():
    from mjharness.rollout import simulate

    with pytest.raises(RolloutError, match="a Controller .* runs in rollout"):
        simulate(cached_scene("arm"), "semi_implicit_euler", cached_scene("arm").x0()[None], dt=0.002, steps=5,
                 ctrl=ARM.make())


def test_two_processes_give_the_single_process_episodes(tmp_path):
    """--local-processes 2: each process runs its worlds' closed loop; the joined file's /x, /carry and /episodes
    (every world, global indices) equal one process's run."""
    rules = tmp_path / "rules.py"
    rules.write_text(RULES)
    args = ["run", "box_on_plane", "--integrator", "semi_implicit_euler", "--steps", "400", "--batch", "4",
            "--record-every", "1", "--perturb", "1.5", "--terminate", f"{rules}:stopped", "--on-terminate", "reset",
            "--reset-to", "draw", "--backend", "mujoco", "--no-progress"]
    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    for out, extra in ((one, []), (two, ["--local-processes", "2"])):
        r = subprocess.run(_cmd() + args + extra + ["--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "episodes:" in r.stdout, r.stdout
    with open_rollout(one) as a, open_rollout(two) as b:
        assert np.array_equal(a.x, b.x) and np.array_equal(a.carry, b.carry)
        assert np.array_equal(a.table("episodes"), b.table("episodes"))
        assert sorted(set(b.table("episodes")["world"].tolist())) == [0, 1, 2, 3]
    # A Controller (its init takes the global world index) and a reward: each process runs its own worlds' loop
    ex = ROOT / "examples" / "arm_reach.py"
    args = ["run", "arm", "--controller", f"{ex}:make", "--terminate", f"{ex}:reached", "--on-terminate", "reset",
            "--reward", f"{ex}:distance", "--steps", "600", "--batch", "4", "--record-every", "1", "--backend",
            "mujoco", "--no-progress"]
    one, two = tmp_path / "c1.h5", tmp_path / "c2.h5"
    for out, extra in ((one, []), (two, ["--local-processes", "2"])):
        r = subprocess.run(_cmd() + args + extra + ["--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
    with open_rollout(one) as a, open_rollout(two) as b:
        assert np.array_equal(a.x, b.x) and np.array_equal(a.carry, b.carry) and np.array_equal(a.reward, b.reward)
        assert np.array_equal(a.table("episodes"), b.table("episodes"))


def test_a_ctrl_function_s_controls_are_recorded_too(tmp_path):
    """ctrl(t, x) (stateless closed loop): /ctrl holds u = ctrl(t_k, x_k) applied during step k."""
    def policy(t, x):
        return -0.5 * x[:4] - 0.1 * x[4:8] + jnp.sin(t)

    r = rollout(cached_scene("arm"), "semi_implicit_euler", steps=50, batch=2, ctrl=policy, backend="mujoco",
                out=tmp_path / "p.h5", progress=False)
    before = np.concatenate([r.x0[None], r.x[:-1]])            # the state each step started from
    t = np.arange(50) * 0.002
    want = -0.5 * before[..., :4] - 0.1 * before[..., 4:8] + np.sin(t)[:, None, None]
    assert np.abs(r.ctrl - want).max() <= 1e-12
    with open_rollout(tmp_path / "p.h5") as f:
        assert np.array_equal(f.ctrl, r.ctrl) and "controller" not in f.attrs


def test_show_summarizes_the_episodes(box_reset, capsys):
    from mjharness.rollout.cli.app import main

    _, out, _ = box_reset
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    rows = _file_rows(out)
    done = sum(1 for row in rows if row[4] == "terminated")
    assert f"episodes: {len(rows)} ({done} terminated" in text and "/episodes" in text


def test_generic_readers_see_named_episode_axes(box_reset):
    """xarray (h5netcdf) on the file's root: /episode on (time, world); the /episodes group is the table, one
    variable per column on its named row axis."""
    import xarray as xr

    _, out, _ = box_reset
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds["episode"].dims == ("time", "world")
    with xr.open_dataset(out, engine="h5netcdf", group="episodes") as ds:
        assert ds["end"].dims == ("episode_row",) and ds.sizes["episode_row"] == len(_file_rows(out))
