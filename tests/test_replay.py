"""Replaying one episode of a rollout file (rollout/replay.py): where it starts and its states simulated again.

Closed loops with resets on MuJoCo C (the bundled ``arm`` with examples/arm_reach.py's controller, a thrown box
on a plane) are recorded to files; ``episode_start`` is held to what the file itself observes of an episode's
start (a controller state that keeps the state and time its episode began from), and ``replay`` of random
episodes to the file's states bit for bit.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.examples import arm_reach
from mjharness.rollout import Controller, open_rollout, rollout
from mjharness.rollout.replay import ReplayError

STEPS, B = 400, 8
DT = 0.002  # the arm's timestep


def init(x0, world):
    """arm_reach's controller state, and the state and time (NaN until the first call) the episode began from:
    the file then observes every episode's start in its carry."""
    return {**arm_reach.init(x0, world), "start": x0, "t_start": jnp.full((), jnp.nan, x0.dtype)}


def step(t, x, c):
    u, pid = arm_reach.step(t, x, {"integral": c["integral"], "target": c["target"]})
    t_start = jnp.where(jnp.isnan(c["t_start"]), t, c["t_start"])
    return u, {**pid, "start": c["start"], "t_start": t_start}


def gentle_step(t, x, c):
    """``step`` at a fifth of its gains: stable when its controls are held for 2 steps (the slide is light)."""
    u, c_next = step(t, x, c)
    return 0.2 * u, c_next


def phase_end(t, x, world):
    """Ends an episode every 0.15 s (75 steps), at a phase that differs per world by 8 steps; the phase is half a
    step off the steps, so exactly one step in 75 falls in the window whatever the rounding."""
    return jnp.mod(t + 8 * DT * world + 0.5 * DT, 0.15) < DT


def _arm_run(path, reset_to, **kw):
    x0 = np.zeros((B, 9))
    x0[:, 4:8] = np.random.default_rng(3).normal(0.0, 0.2, (B, 4))  # joint velocities
    rollout("arm", None, x0=x0, steps=STEPS, ctrl=Controller(init, step), terminate=phase_end,
            on_terminate="reset", reset_to=reset_to, perturb=0.2, seed=11, backend="mujoco", out=str(path),
            progress=False, keep=False, **kw)
    return str(path)


@pytest.fixture(scope="module")
def arm_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    return {"x0": _arm_run(d / "x0.h5", "x0"), "draw": _arm_run(d / "draw.h5", "draw")}


@pytest.mark.parametrize("reset_to", ["x0", "draw"])
def test_episode_start_is_what_the_file_observes(arm_files, reset_to):
    """The state and time each episode started from, as its controller state recorded them after its first step
    (``start``, ``t_start``), and the carry after that step where the step leaves it unchanged."""
    with open_rollout(arm_files[reset_to]) as f:
        starts = f.carry_entry("controller['start']")
        t_starts = f.carry_entry("controller['t_start']")
        episodes = f.episode_table()
        assert min(len(f.episodes(w)) for w in range(B)) >= 5  # several resets in every world
        checked = 0
        for r in episodes:
            w, e, k = r["world"], r["episode"], r["start_step"]
            s = f.episode_start(w, e)
            assert s["step"] == k and s["missing"] == {}
            np.testing.assert_array_equal(s["x"], starts[k, w])   # the sample after its first step (record_every=1)
            assert s["t"] == t_starts[k, w]
            assert s["carry"]["controller['start']"].tobytes() == s["x"].tobytes()
            target = f.carry_entry("controller['target']")[k, w]
            np.testing.assert_array_equal(s["carry"]["controller['target']"], target)
            assert (s["carry"]["episode"], s["carry"]["episode_start"], s["carry"]["terminated"]) == (e, k, 0)
            if e == 0:
                np.testing.assert_array_equal(s["x"], f.x0[w])
            elif reset_to == "x0":
                np.testing.assert_array_equal(s["x"], f.x0[w])
                np.testing.assert_array_equal(s["carry"]["qacc_warmstart"], np.zeros(4))
            checked += 1
        assert checked == len(episodes) > 2 * B
        if reset_to == "draw":  # fresh draws: differ from x0 and from each other
            x1, x2 = f.episode_start(0, 1)["x"], f.episode_start(0, 2)["x"]
            assert not np.array_equal(x1, f.x0[0]) and not np.array_equal(x1, x2)


def test_episode_start_refuses_what_the_file_does_not_have(arm_files):
    with open_rollout(arm_files["x0"]) as f:
        n = len(f.episodes(3))
        with pytest.raises(ReplayError, match=f"world 3 has no episode {n}"):
            f.episode_start(3, n)
        with pytest.raises(ReplayError, match=f"world {B} is not one of the file's {B} worlds"):
            f.episode_start(B, 0)
        with pytest.raises(ReplayError, match="episode must be an int"):
            f.episode_start(0, 1.0)


def test_episode_start_without_termination_rule(tmp_path):
    """A run without a termination rule has one episode per world: episode 0, from /x0 and /carry0."""
    p = str(tmp_path / "open.h5")
    rollout("arm", None, batch=2, steps=10, backend="mujoco", out=p, progress=False, keep=False)
    with open_rollout(p) as f:
        s = f.episode_start(1, 0)
        np.testing.assert_array_equal(s["x"], f.x0[1])
        assert s["step"] == 0 and s["t"] == 0.0 and set(s["carry"]) == {"qacc_warmstart"}
        with pytest.raises(ReplayError, match="world 1 has no episode 1 .*no termination rule"):
            f.episode_start(1, 1)


def test_episode_between_two_samples_is_refused(tmp_path):
    """An episode that starts and ends between two samples leaves no start step in the file."""
    p = str(tmp_path / "short.h5")
    rollout("arm", None, batch=1, steps=40, record_every=10, terminate=lambda t, x: jnp.mod(t, 0.008) < 0.001,
            on_terminate="reset", backend="mujoco", out=p, progress=False, keep=False)
    with open_rollout(p) as f:
        hidden = [r for r in f.episode_table() if r["start_step"] < 0]
        assert hidden
        with pytest.raises(ReplayError, match=f"episode {hidden[0]['episode']} of world 0 began and ended between"):
            f.episode_start(0, hidden[0]["episode"])


def _random_episodes(f, n, rng):
    """World 0's episode 0 and ``n - 1`` random reset episodes of the file."""
    rows = [r for r in f.episode_table() if r["episode"] > 0 and r["start_step"] >= 0 and len(r["samples"])]
    picks = [rows[i] for i in rng.choice(len(rows), n - 1, replace=False)]
    return [(0, 0)] + [(r["world"], r["episode"]) for r in picks]


@pytest.mark.parametrize("reset_to", ["x0", "draw"])
def test_replay_of_random_episodes_is_bit_for_bit(arm_files, reset_to):
    """The issue's bar: 10 random episodes (episode 0 and reset ones) replayed on MuJoCo C equal the file's states
    bit for bit, and their controls the file's /ctrl."""
    with open_rollout(arm_files[reset_to]) as f:
        picks = _random_episodes(f, 10, np.random.default_rng(5))
        assert len(set(picks)) == 10
        x, ctrl = f.x, f.ctrl
        for w, e in picks:
            out = f.replay(w, e)          # check=True compares too; compared here independently of it
            j = out["samples"]
            assert out["x"].tobytes() == x[j, w].tobytes()
            assert out["ctrl"].tobytes() == ctrl[j, w].tobytes()
            np.testing.assert_array_equal(out["time"], f.time[j])


def test_replay_with_randomized_models_and_held_controls(tmp_path):
    """Per-world model fields drawn by randomize are the world's in its replay; a controller every 2 steps with
    samples every 2 steps: the held controls are recovered from /ctrl. Samples every 4: refused."""
    def run(name, record_every):
        p = str(tmp_path / name)
        rollout("arm", None, batch=B, steps=240, ctrl=Controller(init, gentle_step, every=2), terminate=phase_end,
                on_terminate="reset", reset_to="draw", perturb=0.05, seed=2, record_every=record_every,
                randomize={"body_mass:fore": "*uniform(0.5, 1.5)", "geom_friction:hand[0]": "uniform(0.5, 1.5)"},
                backend="mujoco", out=p, progress=False, keep=False)
        return p

    with open_rollout(run("rand.h5", 2)) as f:
        masses = f.model_params["body_mass"]
        assert len(np.unique(masses[:, 3])) == B  # the worlds' models differ (body 3: fore)
        assert f.status.tolist() == [0] * B
        for w, e in _random_episodes(f, 4, np.random.default_rng(1)):
            out = f.replay(w, e)
            assert out["x"].tobytes() == f.x[out["samples"], w].tobytes()
    with open_rollout(run("sparse.h5", 4)) as f:
        with pytest.raises(ReplayError, match=r"world 1 episode 0: the controls of step \d+ are not in the file .*"
                                              r"every=2 .*record_every=4"):
            f.replay(1, 0)


def test_replay_with_contacts_and_warm_start(tmp_path):
    """Thrown boxes land, slide and stop (contacts: the warm start carries from step to step); each stopped box
    restarts from a fresh draw. Replayed episodes equal the file bit for bit; a cold warm start would not."""
    def stopped(t, x):
        return (t > 0.1) & (jnp.linalg.norm(x[7:13]) < 0.3)

    x0 = np.zeros((4, 13))
    x0[:, 2], x0[:, 3] = 0.1, 1.0
    x0[:, 7:10] = [1.5, 0.0, 1.0]
    p = str(tmp_path / "box.h5")
    rollout("box_on_plane", None, steps=500, x0=x0, terminate=stopped, on_terminate="reset", reset_to="draw",
            perturb=0.5, backend="mujoco", out=p, progress=False, keep=False)
    with open_rollout(p) as f:
        assert f.episode.max() >= 1
        warm = f.carry_entry("qacc_warmstart")
        assert np.abs(warm).max() > 0
        picks = [(0, 0)] + [(r["world"], r["episode"]) for r in f.episode_table() if r["episode"] > 0][:3]
        for w, e in picks:
            out = f.replay(w, e)
            assert out["x"].tobytes() == f.x[out["samples"], w].tobytes()


def test_tampered_file_fails_the_check_naming_the_sample(arm_files, tmp_path):
    import shutil

    import h5py

    p = str(tmp_path / "tampered.h5")
    shutil.copy(arm_files["x0"], p)
    with open_rollout(p) as f:
        row = f.episodes(4)[2]
        j = int(row["samples"][5])
    with h5py.File(p, "r+") as h:
        h["x"][j, 4, 6] += 1e-12   # the elbow's velocity of one sample
    with open_rollout(p) as f:
        from mjharness.rollout.replay import ReplayMismatchError

        with pytest.raises(ReplayMismatchError, match=f"world 4 episode 2 differs from the file at sample {j} "
                                                      r"\(step \d+, .*\), state '[^']+/qvel' \(x\[6\]\)") as err:
            f.replay(4, 2)
        assert (err.value.world, err.value.episode, err.value.sample) == (4, 2, j)
        out = f.replay(4, 2, check=False)     # the replay itself is the untampered trajectory
        assert out["x"][5, 6] != f.x[j, 4, 6]


def test_cli_replay(arm_files, tmp_path, capsys):
    """``mjharness replay FILE --world W --episode E --check``: 0 when equal, 1 naming the sample when not, 2 for
    an episode the file does not have."""
    import shutil

    import h5py

    from mjharness.rollout.cli.app import main

    assert main(["replay", arm_files["x0"], "--world", "1", "--episode", "1", "--check"]) == 0
    assert "states identical to the file's bit for bit" in capsys.readouterr().out
    p = str(tmp_path / "tampered.h5")
    shutil.copy(arm_files["x0"], p)
    with h5py.File(p, "r+") as h:
        h["x"][3, 1, 0] = 7.0                # world 1, sample 3: in its episode 0
    assert main(["replay", p, "--world", "1", "--episode", "0", "--check"]) == 1
    assert "world 1 episode 0 differs from the file at sample 3" in capsys.readouterr().out
    assert main(["replay", p, "--world", "1", "--episode", "999"]) == 2
    assert "world 1 has no episode 999" in capsys.readouterr().err


def _recorded(name, **options):
    from mjharness.integrators import get_integrator
    from mjharness.rollout.h5.attrs import integrator_config

    return integrator_config(get_integrator(name, **options))


@pytest.mark.parametrize("cfg, why", [
    ({}, "names no registered integrator"),
    ({"name": "no_such_scheme"}, r"'no_such_scheme' cannot be rebuilt \(.*unknown integrator"),
    ({"name": "rk4", "tableau": "mine"}, r"'rk4' cannot be rebuilt \("),
    ({**_recorded("rk4"), "order": 7}, "'rk4' does not rebuild to its recorded configuration"),
])
def test_an_integrator_attribute_that_does_not_rebuild_is_refused_with_the_reason(cfg, why):
    """One rebuild for replay and rerun (``replay.rebuild_integrator``), each caller adding its own advice."""
    from mjharness.rollout.cli.errors import CliError
    from mjharness.rollout.cli.rerun import _integrator
    from mjharness.rollout.replay import IntegratorRebuildError, rebuild_integrator

    with pytest.raises(IntegratorRebuildError, match=why):
        rebuild_integrator(cfg)
    with pytest.raises(CliError, match=f"{why}.*rerun it from Python"):
        _integrator(cfg)


def _every_integrator():
    from mjharness.integrators.registry import integrator_names

    return integrator_names()


@pytest.mark.parametrize("name", _every_integrator())
def test_every_registered_integrator_rebuilds_from_its_recorded_configuration(name):
    """Tableau methods record their tableau as a dict, adaptive ones their controller's options (``**options``):
    both must come back (a file made with rk4 or dormand_prince could not be replayed or rerun)."""
    from mjharness.rollout.replay import rebuild_integrator

    cfg = _recorded(name)
    assert _recorded_of(rebuild_integrator(cfg)) == cfg


def test_an_adaptive_integrators_options_rebuild():
    from mjharness.integrators import DormandPrince
    from mjharness.rollout.replay import rebuild_integrator

    cfg = _recorded("dormand_prince", rtol=1e-7, atol=1e-9, max_steps=77, state_rtol={"arm": 1e-5})
    again = rebuild_integrator(cfg)
    assert type(again) is DormandPrince and _recorded_of(again) == cfg
    assert (again.controller.rtol, again.controller.max_steps) == (1e-7, 77)


def _recorded_of(integ):
    from mjharness.rollout.h5.attrs import integrator_config

    return integrator_config(integ)


@pytest.mark.parametrize("integrator", ["rk4", "dormand_prince"])
def test_a_tableau_run_reruns_and_replays_bit_for_bit(integrator, tmp_path, capsys):
    """``mjharness rerun`` and ``replay`` of a file made with a tableau method (they once failed to rebuild it)."""
    from mjharness.rollout.cli.app import main

    p, again = str(tmp_path / "a.h5"), str(tmp_path / "b.h5")
    rollout("double_pendulum", integrator, dt=0.002, steps=40, batch=2, record_every=4, backend="mujoco", out=p,
            progress=False)
    assert main(["rerun", p, "--out", again, "--no-progress"]) == 0
    assert "identical bit for bit" in capsys.readouterr().out
    with open_rollout(p) as f:
        r = f.replay(1, 0)  # check=True: bit for bit against the file's samples
        assert r["x"].shape[0] == f.samples
