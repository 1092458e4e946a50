"""Rewards as a recorded quantity (issue 44.1): ``rollout(reward=fn)`` -> ``/reward``, ``episode_return`` and the
``return`` column of ``/episodes``, evaluated on the state after each control period (the Controller's ``every``),
held to the recorded states (the reward recomputed from them), the same on MuJoCo C's whole-step closed loop and
the compiled (MJX) chunk, NumPy functions called exactly once per world and period."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import cached_scene

from mjharness.adapters import MjScene
from mjharness.examples import arm_reach as ARM  # the bundled example (examples/arm_reach.py)
from mjharness.rollout import Controller, Reward, RolloutError, Termination, open_rollout, rollout
from mjharness.rollout.cli.app import main
from mjharness.rollout.engine.checks import RolloutTypeError

STEPS, B, EVERY = 480, 4, 4


TARGET = np.asarray(ARM.TARGET0)


class Counting:
    """A NumPy PD controller (every=EVERY) and a NumPy reward that count their calls per world."""

    def __init__(self):
        self.steps, self.rewards = {}, {}

    def init(self, x0, world):
        return {"target": np.asarray(TARGET * (1.0 - 0.1 * world)), "world": np.asarray(float(world))}

    def step(self, t, x, c):
        w = int(c["world"])
        self.steps[w] = self.steps.get(w, 0) + 1
        e = c["target"] - np.asarray(x)[:4]
        return 4.0 * e - 0.5 * np.asarray(x)[4:8], c

    def reward(self, t, x, world):
        self.rewards[world] = self.rewards.get(world, 0) + 1
        return -float(np.linalg.norm(np.asarray(x)[:4] - TARGET * (1.0 - 0.1 * world)))


def far(t, x):
    """Ends the first episode at 0.25 s; from then on every step ends one (one-step episodes: resets each step)."""
    return t > 0.25


def _run(backend, tmp_path, name, **kw):
    out = tmp_path / f"{name}.h5"
    r = rollout(MjScene(cached_scene("arm").model, backend=backend), "semi_implicit_euler", batch=B, steps=STEPS,
                out=out, progress=False, **kw)
    return r, out


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory):
    c = Counting()
    r, out = _run("mujoco", tmp_path_factory.mktemp("rew"), "np", record_every=EVERY,
                  ctrl=Controller(c.init, c.step, every=EVERY), reward=c.reward)
    return c, r, out


def test_reward_is_the_function_of_each_recorded_period_end_state(numpy_run):
    c, r, out = numpy_run
    with open_rollout(out) as f:
        rew, x, t = f.reward, f.x, f.time
        assert rew.shape == (STEPS // EVERY, B)
        assert f._f["reward"].attrs["units"] == "1"
        ret = f.carry_entry("episode_return")
    # record_every == every: each sample is a period end, its reward the function of that sample's state
    want = np.array([[-np.linalg.norm(x[j, w, :4] - TARGET * (1.0 - 0.1 * w)) for w in range(B)]
                     for j in range(len(t))])
    np.testing.assert_array_equal(rew, want)
    np.testing.assert_allclose(ret, np.cumsum(want, axis=0), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(r.reward, rew)


def test_numpy_functions_are_called_once_per_world_and_period(numpy_run):
    c, _, _ = numpy_run
    periods = STEPS // EVERY
    for w in range(B):  # (+ the checked calls on world 0 before the run)
        assert c.rewards[w] - (1 if w == 0 else 0) == periods
        assert c.steps[w] - (1 if w == 0 else 0) == periods


def test_record_every_step_holds_the_reward_between_period_ends(tmp_path):
    jax_step = lambda t, x, c: (4.0 * (TARGET - x[:4]) - 0.5 * x[4:8], c)  # noqa: E731
    rew_fn = lambda t, x: -jnp.sum((x[:4] - TARGET) ** 2)  # noqa: E731
    r, out = _run("mujoco", tmp_path, "held", record_every=1,
                  ctrl=Controller(lambda x0: {"k": jnp.zeros(())}, jax_step, every=EVERY), reward=rew_fn)
    want = np.array([[-np.sum((r.x[j, w, :4] - TARGET) ** 2) for w in range(B)] for j in range(STEPS)])
    k = np.arange(STEPS)
    ends = (k + 1) % EVERY == 0
    np.testing.assert_allclose(r.reward[ends], want[ends], rtol=1e-14, atol=1e-15)
    held = np.repeat(np.concatenate([np.zeros((1, B)), want[ends]])[:-1], EVERY, axis=0)
    np.testing.assert_allclose(r.reward, np.where(ends[:, None], want, held), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_an_episode_ended_inside_a_period_has_its_reward_on_the_terminal_state(tmp_path, backend):
    c = Counting()
    cut = lambda t, x: x[4] > 0.05  # noqa: E731 - the yaw joint speeds past 0.05 rad/s: at any step of a period
    r, out = _run(backend, tmp_path, "cut", record_every=1, ctrl=Controller(c.init, c.step, every=EVERY),
                  terminate=Termination(cut, every=1), on_terminate="reset", reward=c.reward)
    with open_rollout(out) as f:
        rows, rew, ret, x = f.episode_table(), f.reward, f.carry_entry("episode_return"), f.x
    mid = [row for row in rows if row["end"] == "terminated" and (row["end_step"] + 1 - row["start_step"]) % EVERY]
    assert mid, "no episode ended inside a control period"
    for row in mid:
        j, w = row["samples"][-1], row["world"]
        want = -np.linalg.norm(x[j, w, :4] - TARGET * (1.0 - 0.1 * w))
        assert rew[j, w] == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert row["return"] == ret[j, w]
    if backend == "mujoco":  # NumPy: once per world and period end, and once per episode cut inside a period
        for w in range(B):
            calls = 0
            for row in (q for q in rows if q["world"] == w):
                end = row["end_step"] if row["end"] != "truncated" else STEPS - 1
                n = end + 1 - row["start_step"]
                calls += n // EVERY + (row["end"] == "terminated" and n % EVERY != 0)
            assert c.rewards[w] - (1 if w == 0 else 0) == calls, w


@pytest.fixture(scope="module")
def reset_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("resets")
    kw = dict(record_every=1, ctrl=Controller(ARM.init, ARM.step, every=1), terminate=Termination(far, every=1),
              on_terminate="reset", reward=ARM.distance)
    return {b: _run(b, d, b, **kw) for b in ("mujoco", "mjx")}


def test_episode_returns_sum_the_episode_s_rewards_and_restart_at_resets(reset_runs):
    _, out = reset_runs["mujoco"]
    with open_rollout(out) as f:
        rew, table, ep = f.reward, f.table("episodes"), f.episode
        assert "return" in table.dtype.names
        rows = f.episode_table()
        assert f._f["episodes"]["return"].attrs["units"] == "1"
    assert len(rows) > B  # every world reset at least once
    for row, trow in zip(rows, table):
        w, js = row["world"], row["samples"]
        assert np.all(ep[js, w] == row["episode"])
        np.testing.assert_allclose(row["return"], rew[js, w].sum(), rtol=1e-12)
        assert trow["return"] == row["return"]


def test_rewards_are_the_same_on_c_and_in_the_compiled_chunk(reset_runs):
    (rc, _), (rj, _) = reset_runs["mujoco"], reset_runs["mjx"]
    np.testing.assert_array_equal(rc.episode, rj.episode)
    # MJX's own step differs from mj_step by rounding; the reward follows the states
    np.testing.assert_allclose(rj.reward, rc.reward, rtol=1e-9, atol=1e-9)
    for w in range(B):
        for a, b in zip(rc.episodes(w), rj.episodes(w)):
            np.testing.assert_allclose(a["return"], b["return"], rtol=1e-9)


@pytest.mark.parametrize("bad, err, match", [
    (lambda t, x: t > 0, RolloutTypeError, "must return a real number"),
    (lambda t, x: x[:2], RolloutError, r"one number per world \(shape \(\)\)"),
    (lambda t, x: 1 / 0, RolloutError, "reward\\(t, x\\) failed on world 0: ZeroDivisionError"),
    ("nope", RolloutError, "reward must be a callable"),
    (Reward(lambda t, x: 0.0, every=0), RolloutError, "Reward.every must be an int >= 1"),
])
def test_a_bad_reward_is_one_clear_error_before_anything_is_written(tmp_path, bad, err, match):
    out = tmp_path / "bad.h5"
    with pytest.raises(err, match=match):
        rollout(cached_scene("arm"), batch=1, steps=10, reward=bad, out=out, progress=False)
    assert not out.exists()


def test_resume_refuses_another_reward_setting(tmp_path):
    out = tmp_path / "r.h5"
    rew = lambda t, x: -jnp.sum(x[:4] ** 2)  # noqa: E731
    rollout(cached_scene("arm"), batch=1, steps=20, reward=rew, out=out, progress=False)
    with pytest.raises(RolloutError, match="reward"):
        rollout(cached_scene("arm"), resume=out, steps=40, reward=Reward(rew, every=2), progress=False)


def test_cli_records_a_reward_with_units(tmp_path):
    src = tmp_path / "rew.py"
    src.write_text("import jax.numpy as jnp\nfrom mjharness.rollout import Reward\n"
                   "energy = Reward(lambda t, x: -jnp.sum(x[4:8] ** 2), units='rad2 s-2')\n")
    out = tmp_path / "cli.h5"
    assert main(["run", "arm", "--reward", f"{src}:energy", "--steps", "40", "--batch", "2", "--record-every",
                 "1", "--out", str(out), "--no-progress"]) == 0
    with open_rollout(out) as f:
        x = f.x
        np.testing.assert_allclose(f.reward, -np.sum(x[:, :, 4:8] ** 2, axis=2), rtol=1e-13, atol=1e-300)
        assert f._f["reward"].attrs["units"] == "rad2 s-2"
        assert f.attrs["reward_units"] == "rad2 s-2"
