"""Decimated closed loops in whole steps of MuJoCo C (adapters/backends/host_closed.py, rollout/engine/host_loop.py).

With MuJoCo's own scheme, a run with a Controller(every=k) and a termination rule advances every live world to
the next due moment in one batched C call and runs the controller and the rule on the host only when due. Held
to hand-written ``mj_step`` loops bit for bit: gymnasium's Hopper-v5 itself (frame_skip 4, its health rule,
resets), and a thrown box with resets to fresh draws; NumPy functions are called exactly once per world and due
step.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.integrators import STATUS_NONFINITE, SemiImplicitEuler
from mjharness.rollout import Controller, Termination, rollout

gym = pytest.importorskip("gymnasium")

FRAME_SKIP = 4
PRE = 2  # calls of a user function before the run: on world 0 (a checked call) and with tracers (JAX or NumPy?)


def _policy_weights(nu: int, n: int) -> np.ndarray:
    return np.random.default_rng(7).uniform(-0.6, 0.6, (nu, n))


class Hopper:
    """A NumPy policy and gymnasium's Hopper-v5 health rule on the state x = [qpos, qvel], counting their calls."""

    def __init__(self, nu: int, n: int):
        self.W, self.calls, self.rule_calls = _policy_weights(nu, n), 0, 0

    def init(self, x0):
        return {"phase": np.zeros(())}

    def step(self, t, x, c):
        self.calls += 1
        x = np.asarray(x)  # NumPy only: a tracer would fail here, so the controller runs on the host
        u = np.tanh(self.W @ x + 0.5 * np.sin(c["phase"]))
        return u, {"phase": c["phase"] + 0.3}

    def healthy(self, x) -> bool:
        """gymnasium's Hopper-v5 ``is_healthy`` on qpos/qvel (state_vector()[2:] within +-100, z, angle)."""
        z, angle = x[1], x[2]
        state = x[2:]
        return bool(np.all((-100.0 < state) & (state < 100.0)) and 0.7 < z < np.inf and -0.2 < angle < 0.2)

    def unhealthy(self, t, x):
        self.rule_calls += 1
        return not self.healthy(np.asarray(x))


def _gym_episodes(x0: np.ndarray, env_steps: int, policy: Hopper):
    """gymnasium's own Hopper-v5 env stepped with the policy, each world from its x0 and back to it at every
    reset: states after every physics step (T, B, n), applied controls (T, B, nu), episode boundaries."""
    env = gym.make("Hopper-v5").unwrapped
    m = env.model
    B = x0.shape[0]
    T = env_steps * FRAME_SKIP
    xs, us, ends = np.empty((T, B, x0.shape[1])), np.empty((T, B, m.nu)), []
    for w in range(B):
        def start(w=w):
            env.reset(seed=0)
            env.set_state(x0[w, :m.nq], x0[w, m.nq:])
            return {"phase": np.zeros(())}

        c, k = start(), 0
        for _ in range(env_steps):
            x = np.concatenate([env.data.qpos, env.data.qvel])
            u, c = policy.step(None, x, c)
            # gym's step is do_simulation (ctrl = action, mj_step x frame_skip); record every physics step here
            for j in range(FRAME_SKIP):
                env.do_simulation(u, 1)
                xs[k + j, w], us[k + j, w] = np.concatenate([env.data.qpos, env.data.qvel]), u
            k += FRAME_SKIP
            if not env.is_healthy:
                ends.append((w, k - 1))
                c = start()
    env.close()
    return xs, us, ends


def _terminated(r, B: int) -> list:
    """(world, last step) of every episode the rule ended."""
    return sorted((w, int(e["end_step"])) for w in range(B) for e in r.episodes(w) if e["end"] == "terminated")


@pytest.fixture(scope="module")
def hopper():
    model = mujoco.MjModel.from_xml_path(gym.make("Hopper-v5").unwrapped.fullpath)
    return MjScene(model, backend="mujoco", threads=2)


def test_gym_hopper_v5_episodes_reproduced_bit_for_bit(hopper):
    m = hopper.model
    B, env_steps = 5, 60
    rng = np.random.default_rng(1)
    x0 = np.tile(np.concatenate([m.qpos0, np.zeros(m.nv)]), (B, 1))
    x0 += rng.uniform(-0.005, 0.005, x0.shape)  # gym's reset noise, drawn once per world
    ours = Hopper(m.nu, x0.shape[1])
    r = rollout(hopper, None, steps=env_steps * FRAME_SKIP, x0=x0, ctrl=Controller(ours.init, ours.step,
                every=FRAME_SKIP), terminate=Termination(ours.unhealthy, every=FRAME_SKIP), on_terminate="reset",
                reset_to="x0", progress=False, chunk=48)
    assert r.stats["trace_cache"] == "host" and r.integrator.name == "rk4"  # hopper.xml's RK4, whole steps in C
    theirs = Hopper(m.nu, x0.shape[1])
    xs, us, ends = _gym_episodes(x0, env_steps, theirs)
    np.testing.assert_array_equal(r.x, xs)
    np.testing.assert_array_equal(r.ctrl, us)
    assert _terminated(r, B) == sorted(ends) and len(ends) >= B  # every world fell at least once and was reset
    # exactly one call per world and due step: the controller every 4 steps, the rule after every 4th step (besides
    # the PRE calls the plan makes before the run: the check on world 0 and the probe for JAX code)
    assert ours.calls - PRE == theirs.calls == B * env_steps
    assert ours.rule_calls - PRE == B * env_steps


def test_episodes_table_and_counts_follow_every(hopper):
    """Controller and rule with different periods: each still runs only when due (no masked evaluation)."""
    m = hopper.model
    x0 = np.tile(np.concatenate([m.qpos0, np.zeros(m.nv)]), (3, 1))
    pol = Hopper(m.nu, x0.shape[1])
    steps = 96
    rollout(hopper, None, steps=steps, x0=x0, ctrl=Controller(pol.init, pol.step, every=8),
            terminate=Termination(pol.unhealthy, every=3), on_terminate="freeze", progress=False)
    # freeze: a terminated world stops calling anything; bounds hold whatever the episode lengths
    assert pol.calls - PRE <= 3 * steps // 8 and pol.rule_calls - PRE <= 3 * steps // 3
    assert pol.calls - PRE >= 3  # each world's first call


BOX = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body name="box" pos="0 0 .3"><freejoint name="box"/><geom type="box" size=".1 .1 .1" mass="1"/></body>
  </worldbody>
  <actuator><motor joint="box" gear="0 0 0 0 0 1"/></actuator>
</mujoco>"""


class _Staged(SemiImplicitEuler):
    """SemiImplicitEuler under another type: not MuJoCo's scheme to host_chunk, so it runs the compiled chunk."""


def test_reset_to_draw_equals_the_compiled_chunk():
    """A thrown box spun by a NumPy controller every 5 steps, reset to a fresh draw when it comes to rest (rule
    every 5 steps): the same episodes, draws and controls as the compiled chunk (episodes.begin/end per world),
    states within the stage path's arithmetic bound."""
    scene = MjScene(mujoco.MjModel.from_xml_string(BOX), backend="mujoco", threads=2)
    B, steps, every = 4, 300, 5
    x0 = np.tile(scene.x0(), (B, 1))
    x0[:, 7:10] = np.random.default_rng(2).uniform(-2, 2, (B, 3))  # thrown

    calls = {"init": 0, "step": 0, "rest": 0}

    def init(x0):
        calls["init"] += 1
        return {"n": np.zeros(())}

    def step(t, x, c):
        calls["step"] += 1
        x = np.asarray(x)
        return np.array([0.2 * np.sin(3.0 * t) - 0.05 * x[12]]), {"n": c["n"] + 1}

    def rest(t, x):
        calls["rest"] += 1
        return bool(np.abs(np.asarray(x)[7:]).max() < 0.05)

    kw = dict(steps=steps, x0=x0, ctrl=Controller(init, step, every=every), terminate=Termination(rest, every=every),
              on_terminate="reset", reset_to="draw", seed=11, perturb=0.3, progress=False, chunk=60, record_every=5)
    counts, runs = [], []
    for integ in (SemiImplicitEuler(), _Staged()):
        calls.update(init=0, step=0, rest=0)
        runs.append(rollout(scene, integ, **kw))
        counts.append(dict(calls))
    fast, staged = runs
    assert fast.stats["trace_cache"] == "host" and staged.stats["trace_cache"] != "host"
    ends = _terminated(fast, B)
    # Called only when due, on both paths: the controller and the rule once per world every 5 steps (the steps
    # are 300: 60 each), init once per world and reset (besides the plan's checked and probing calls)
    for c in counts:
        assert c["step"] - PRE == c["rest"] - PRE == B * steps // every
        # init: its checked call before the run (step is NumPy, so init is not probed), then per world and reset
        assert c["init"] - 1 == B + sum(e < steps - 1 for _, e in ends)
    assert len(ends) >= 2 and ends == _terminated(staged, B)  # boxes came to rest and were thrown again
    np.testing.assert_array_equal(fast.episode, staged.episode)
    assert np.abs(fast.x - staged.x).max() <= 1e-9 * max(1.0, np.abs(staged.x).max())
    assert np.abs(fast.ctrl - staged.ctrl).max() <= 1e-9
    np.testing.assert_array_equal(fast.carry["controller['n']"], staged.carry["controller['n']"])


def test_a_failing_world_in_a_closed_loop_freezes_as_in_the_stage_path():
    """A controller driving one world to overflow: that world freezes at its last good state with status 1 at
    the failing step; the others run on; the same as the stage path (SemiImplicitEuler under another type)."""
    spin = mujoco.MjModel.from_xml_string("""
<mujoco><option timestep="0.01" gravity="0 0 0"/><worldbody><body><joint type="hinge" axis="0 1 0"/>
<geom type="capsule" fromto="0 0 0 .3 0 0" size=".01" mass=".01"/></body></worldbody>
<actuator><motor joint="0" gear="1e298"/></actuator></mujoco>""".replace('joint="0"', 'joint="j"').replace(
        '<joint type', '<joint name="j" type'))
    scene = MjScene(spin, backend="mujoco", threads=2)
    x0 = np.tile(scene.x0(), (3, 1))

    def init(x0, world):
        return {"world": np.asarray(float(world))}

    def step(t, x, c):  # world 2's motor overflows qacc from t = 0.08 on; the others turn gently
        big = float(np.asarray(c["world"])) == 2.0 and t > 0.075
        return np.array([1e10 if big else 1e-298]), c

    kw = dict(steps=20, x0=x0, ctrl=Controller(init, step, every=2), terminate=lambda t, x: False,
              progress=False, chunk=10)
    fast = rollout(scene, SemiImplicitEuler(), **kw)
    staged = rollout(scene, _Staged(), **kw)
    assert fast.stats["trace_cache"] == "host" and staged.stats["trace_cache"] != "host"
    assert list(fast.status) == [0, 0, STATUS_NONFINITE]
    np.testing.assert_array_equal(fast.status_step, staged.status_step)
    assert np.abs(fast.x - staged.x).max() <= 1e-12 * max(1.0, np.abs(staged.x).max())
    np.testing.assert_array_equal(fast.ctrl, staged.ctrl)


def test_functions_may_take_the_world_index():
    """``ctrl(t, x, world)``, ``step(t, x, c, world)`` and ``terminate(t, x, world)`` get the global world index,
    NumPy or JAX, on the whole-segment path and in the compiled chunk."""
    import jax.numpy as jnp

    scene = MjScene(mujoco.MjModel.from_xml_string(BOX), backend="mujoco", threads=2)
    B, steps = 3, 20
    x0 = np.tile(scene.x0(), (B, 1))

    def init(x0):
        return {"n": np.zeros(())}

    def np_step(t, x, c, world):
        return np.array([0.1 * world]), {"n": c["n"] + 1}

    def jax_step(t, x, c, world):
        return jnp.array([0.1 * world]), {"n": c["n"] + 1}

    def np_rule(t, x, world):  # only world 1, after 8 steps
        return bool(world == 1 and t > 0.039)

    def jax_rule(t, x, world):
        return (world == 1) & (t > 0.039)

    for integ in (SemiImplicitEuler(), _Staged()):
        for step, rule in ((np_step, np_rule), (jax_step, jax_rule)):
            r = rollout(scene, integ, steps=steps, x0=x0, ctrl=Controller(init, step, every=2),
                        terminate=Termination(rule, every=2), on_terminate="freeze", progress=False)
            assert (r.stats["trace_cache"] == "host") == (type(integ) is SemiImplicitEuler)
            np.testing.assert_array_equal(r.ctrl[0, :, 0], [0.0, 0.1, 0.2])
            assert list(r.status) == [0, 4, 0] and r.status_step[1] == 7  # rule due after steps 2, 4, 6, 8: t 0.04
    r = rollout(scene, _Staged(), steps=4, x0=x0, ctrl=lambda t, x, world: jnp.array([0.5 * world]),
                progress=False)
    np.testing.assert_array_equal(r.ctrl[-1, :, 0], [0.0, 0.5, 1.0])
