"""System: several synchronized models, each with its own registry, integrated as one."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.adapters import Coupling, DCMotor, GlobalOffset, LocalOffset, MjScene, OffsetTypeError, RigidBody
from mjharness.adapters.system import System
from mjharness.adapters.system_spec import RigidBodyModel, system_from_spec
from mjharness.adapters.system_types import SystemSpecError
from mjharness.integrators import RK4, DormandPrince, EulerMaruyama, StateError, StateRegistry, StateSpec
from mjharness.integrators.prng import step_key
from mjharness.integrators.stochastic import Increments

MOTOR = DCMotor(inductance=0.05, resistance=2.0, k=0.3, voltage=1.5)


def _arm_motor_system(scene):
    return System({"arm": scene, "motor": MOTOR}, couplings=[
        Coupling(reads=("arm.yaw/qvel",), writes="motor.omega", fn=lambda w: w),
        Coupling(reads=("motor.i",), writes="arm.ctrl:yaw", fn=MOTOR.torque),
    ])


def _one_scene_baseline(sc=None):
    """The same equations as one MjScene with the current as an extra state (MjScene.add_state)."""
    sc = MjScene("arm") if sc is None else sc
    dof = int(sc.model.jnt_dofadr[0])
    sc.add_state("motor", "i", StateSpec((1,)), lambda t, i, d: (MOTOR.voltage - MOTOR.resistance * i
                                                                   - MOTOR.k * d.qvel[dof:dof + 1]) / MOTOR.inductance)

    class WithTorque:  # the motor torque k i drives the yaw actuator, as the coupling does
        layout, second_order = sc.layout, sc.second_order
        carry_spec = sc.carry_spec
        init_carry, x0, project = sc.init_carry, sc.x0, sc.project

        def _u(self, x):
            return jnp.zeros(sc.nu).at[0].set(MOTOR.torque(x[sc.layout["motor/i"].value_slice])[0])

        def dynamics(self, t, x, ctrl=None, *, carry=None):
            return sc.dynamics(t, x, self._u(x), carry=carry)

        def diffusion(self, t, x, ctrl=None):
            return sc.diffusion(t, x, self._u(x))

        def drift_diffusion(self, t, x, ctrl=None, *, carry=None):
            return sc.drift_diffusion(t, x, self._u(x), carry=carry)

    return WithTorque()


@functools.partial(jax.jit, static_argnums=(0, 3))
def _rk4_run(model, x0, carry0, steps, h=0.002):
    def body(state, k):
        x, c = state
        x, c, _ = RK4().integrate(model, k * h, h, x, None, c)
        return (model.project(x), c), x
    return jax.lax.scan(body, (x0, carry0), jnp.arange(steps))[1]


def test_arm_motor_system_equals_one_scene_with_extra_state(scene_cache):
    system = _arm_motor_system(scene_cache("arm"))
    base = _one_scene_baseline()
    x0 = system.x0()
    x0[system.record("arm.shoulder/qpos").global_] = 0.4
    # system layout: [arm states..., motor.i]; baseline: [arm states..., motor/i]: same order
    assert system.layout.size == base.layout.size
    xs_sys = np.asarray(_rk4_run(system, jnp.asarray(x0), system.init_carry(), 1000))
    xs_one = np.asarray(_rk4_run(base, jnp.asarray(x0), base.init_carry(), 1000))
    err = np.max(np.abs(xs_sys - xs_one))
    assert err <= 1e-12, err
    i = xs_sys[:, system.record("motor.i").global_]
    assert np.ptp(i) > 0.1  # the motor does something
    assert set(system.carry_spec) == {"arm/qacc_warmstart"}


def test_offsets_are_typed(scene_cache):
    system = _arm_motor_system(scene_cache("arm"))
    r = system.record("motor.i")
    assert r.local == 0 and r.global_ == system.layout["motor.i"].offset
    assert isinstance(r.local, LocalOffset) and isinstance(r.global_, GlobalOffset)
    x = np.arange(system.layout.size, dtype=float)
    assert system.value_at(x, r.global_)[0] == x[r.global_]
    assert system.to_global("motor", r.local) == r.global_
    assert system.to_local(r.global_) == ("motor", r.local)
    with pytest.raises(OffsetTypeError, match="GlobalOffset"):
        system.value_at(x, r.local)
    with pytest.raises(OffsetTypeError, match="LocalOffset"):
        system.member_value_at(x, r.global_)
    with pytest.raises(OffsetTypeError):
        system.to_global("motor", int(r.local))
    assert system.layout["motor.i"].model == "motor" and system.layout["arm.yaw/qpos"].model == "arm"


def test_errors_change_nothing(scene_cache):
    arm = scene_cache("arm")
    with pytest.raises(SystemSpecError, match="more than once"):
        System([("arm", arm), ("arm", MOTOR)])
    with pytest.raises(SystemSpecError, match="arm.nope/qvel"):
        System({"arm": arm, "motor": MOTOR}, couplings=[Coupling(("arm.nope/qvel",), "motor.omega", lambda w: w)])
    with pytest.raises(SystemSpecError, match="no input"):
        System({"arm": arm, "motor": MOTOR}, couplings=[Coupling(("arm.yaw/qvel",), "motor.volts", lambda w: w)])
    with pytest.raises(SystemSpecError, match="cycle"):
        System({"arm": arm, "motor": MOTOR}, couplings=[
            Coupling(("arm.ctrl:yaw",), "motor.omega", lambda w: w),
            Coupling(("motor.omega",), "arm.ctrl:yaw", lambda w: w)])
    system = _arm_motor_system(arm)
    with pytest.raises(SystemSpecError, match="immutable"):
        system.couplings = ()
    with pytest.raises(Exception, match="finalized"):
        arm.add_state("late", "s", StateSpec((1,)), lambda t, s, d: s)
    assert len(system.couplings) == 2 and "late/s" not in arm.layout


def test_free_body_and_reference_rigid_body_in_one_run_and_file(scene_cache, tmp_path):
    from mjharness.rollout import open_rollout, rollout

    brick = scene_cache("brick")
    x_b = brick.reset(keyframe="tumble")
    system = System({"mj": brick, "ref": RigidBodyModel(RigidBody.from_mujoco(brick.model, "brick"), x0=x_b)})
    x0 = np.concatenate([x_b, x_b])[None]  # both members start from the keyframe's tumble
    res = rollout(system, RK4(), dt=0.005, steps=2000, x0=x0, out=tmp_path / "sys.h5", progress=False)
    f = open_rollout(tmp_path / "sys.h5")
    for s in ("pos", "quat", "vel", "angvel"):
        a, b = f.state(f"mj.brick/{s}"), f.state(f"ref.{s}")
        assert np.max(np.abs(np.asarray(a) - np.asarray(b))) <= 1e-11, s
    assert float(res.time[-1]) == pytest.approx(10.0)
    assert [r.model for r in f.layout.records] == ["mj"] * 4 + ["ref"] * 4  # the /layout model column
    assert json.loads(f.attrs["system"])["order"] == ["mj", "ref"]


def test_system_spec_file(tmp_path):
    spec = {"models": {"arm": {"scene": "arm"}, "motor": {"dc_motor": {"inductance": 0.05, "k": 0.3}}},
            "couplings": [{"reads": ["arm.yaw/qvel"], "writes": "motor.omega"},
                          {"reads": ["motor.i"], "writes": "arm.ctrl:yaw", "gain": 0.3}]}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    (tmp_path / "s.toml").write_text('[models.arm]\nscene = "arm"\n[models.motor]\ndc_motor = { k = 0.3 }\n'
                                     '[[couplings]]\nreads = ["arm.yaw/qvel"]\nwrites = "motor.omega"\n')
    for name in ("s.json", "s.toml"):
        system = system_from_spec(tmp_path / name)
        assert list(system.members) == ["arm", "motor"] and system.layout.names[-1] == "motor.i"
    assert system_from_spec(tmp_path / "s.json").couplings[1].fn(np.array([2.0]))[0] == pytest.approx(0.6)
    bad = dict(spec, couplings=[{"reads": ["arm.nope"], "writes": "motor.omega"}])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(SystemSpecError, match="arm.nope"):
        system_from_spec(tmp_path / "bad.json")


def test_post_step_hooks_in_order_and_old_layout_tables(scene_cache):
    from mjharness.rollout.h5.layout import layout_from_table, layout_table

    calls = []
    system = System({"arm": scene_cache("arm"), "motor": MOTOR}, hooks={
        "motor": {"post_step": lambda x: (calls.append("motor"), jnp.clip(x, -1.0, 1.0))[1]},
        "arm": {"post_step": lambda x: (calls.append("arm"), x)[1]}})
    x = system.x0()
    x[system.record("motor.i").global_] = 5.0
    out = np.asarray(system.project(jnp.asarray(x)))
    assert calls == ["arm", "motor"] and out[system.record("motor.i").global_] == 1.0
    with pytest.raises(SystemSpecError, match="hooks for unknown model"):
        System({"motor": MOTOR}, hooks={"arm": {"post_step": lambda x: x}})
    table = layout_table(system.layout)
    old = table[[f for f in table.dtype.names if f != "model"]]  # a file written before the model column
    assert layout_from_table(old).names == system.layout.names
    assert [r.model for r in layout_from_table(table).records][-1] == "motor"


def _noisy_arm():
    sc = MjScene("arm")
    sc.add_joint_noise("yaw", 0.4)
    sc.add_joint_noise("shoulder", 0.2)
    return sc


def test_stochastic_rollout_of_a_system_equals_one_noisy_scene():
    from mjharness.rollout import rollout

    system = _arm_motor_system(_noisy_arm())
    base = _one_scene_baseline(_noisy_arm())
    assert system.layout.diffusion_size == base.layout.diffusion_size
    assert system.layout.noise_slots == base.layout.noise_slots == 2
    x0 = system.x0()
    x0[system.record("arm.shoulder/qpos").global_] = 0.4
    h, steps, seed = 0.002, 150, 11
    res = rollout(system, EulerMaruyama(), dt=h, steps=steps, x0=x0[None], seed=seed, progress=False)

    @jax.jit
    def one_scene(x, c, seed):
        def body(state, k):
            x, c, _ = EulerMaruyama().integrate(base, k * h, h, state[0], None, state[1], step_key(seed, 0, k))
            return (x, c), x
        return jax.lax.scan(body, (x, c), jnp.arange(steps))[1]

    xs = np.asarray(one_scene(jnp.asarray(x0), base.init_carry(), seed))
    err = np.max(np.abs(np.asarray(res.x)[:, 0] - xs))
    assert err <= 1e-12, err
    other = np.asarray(one_scene(jnp.asarray(x0), base.init_carry(), seed + 1))  # the noise does something
    assert np.max(np.abs(xs - other)) > 1e-4


class _OU:
    """dv = -a v dt + s dW: a toy non-MuJoCo member with one noise source."""

    def __init__(self, a=2.0, s=0.7):
        reg = StateRegistry()
        reg.register("v", StateSpec((1,)), model="ou")
        reg.add_noise("v", 1)
        self.layout, self.a, self.s = reg.finalize(), a, s

    def x0(self):
        return np.array([0.3])

    def dynamics(self, t, x, ctrl=None):
        return -self.a * x

    def diffusion(self, t, x, ctrl=None):
        return jnp.full(1, self.s)


def test_shared_noise_source_drives_two_members():
    pend = MjScene("bench_pendulum")
    pend.add_joint_noise("hinge", 0.5)
    ou = _OU()
    apart = System({"p": pend, "b": ou})
    assert apart.layout.noise_slots == 2 and [r.noise_slots for r in apart.layout.records] == [(), (0,), (1,)]
    shared = System({"p": pend, "b": ou}, shared_noise=[[("p.hinge/qvel", 0), ("b.v", 0)]])
    assert shared.layout.noise_slots == 1 and shared.layout["b.v"].noise_slots == (0,)
    assert shared.describe()["shared_noise"] == [[["p.hinge/qvel", 0], ["b.v", 0]]]
    x0 = jnp.asarray(shared.x0()).at[0].set(0.3)
    h, w = 0.01, 0.05
    step = jax.jit(lambda m, x, dw: EulerMaruyama().integrate(m, 0.0, h, x, key=Increments(dw))[0], static_argnums=0)
    x1 = np.asarray(step(shared, x0, jnp.array([w])))
    p1 = np.asarray(step(pend, x0[:2], jnp.array([w])))  # the pendulum alone, same increment
    assert np.max(np.abs(x1[:2] - p1)) <= 1e-15
    assert x1[2] == pytest.approx(0.3 - ou.a * 0.3 * h + ou.s * w, abs=1e-15)
    x_other = np.asarray(step(shared, x0, jnp.array([-w])))  # flipping the one increment moves both members
    p_quiet = np.asarray(step(pend, x0[:2], jnp.array([0.0])))
    assert np.sign(x1[1] - p_quiet[1]) == -np.sign(x_other[1] - p_quiet[1]) != 0
    assert x1[2] - x_other[2] == pytest.approx(2 * ou.s * w, abs=1e-15)
    with pytest.raises(SystemSpecError, match="b.nope"):
        System({"p": pend, "b": ou}, shared_noise=[[("p.hinge/qvel", 0), ("b.nope", 0)]])
    with pytest.raises(SystemSpecError, match="out of range"):
        System({"p": pend, "b": ou}, shared_noise=[[("p.hinge/qvel", 1), ("b.v", 0)]])


def test_pre_step_hooks_run_in_order_inside_the_compiled_step(scene_cache):
    from mjharness.rollout import rollout

    calls = []
    system = System({"p": scene_cache("bench_pendulum"), "motor": MOTOR}, hooks={
        "motor": {"pre_step": lambda t, x: (calls.append("motor"), jnp.zeros_like(x))[1]},
        "p": {"pre_step": lambda t, x: (calls.append("p"), x)[1]}})
    with pytest.raises(SystemSpecError, match="pre_step"):
        System({"motor": MOTOR}, hooks={"motor": {"before": lambda t, x: x}})
    h = 0.002
    res = rollout(system, RK4(), dt=h, steps=20, progress=False)
    assert calls[:2] == ["p", "motor"]
    # every step restarts the current from 0: RK4 of L di/dt = V - R i from i = 0 over h, every time
    a, b = MOTOR.voltage / MOTOR.inductance, MOTOR.resistance / MOTOR.inductance
    z = b * h
    i1 = a * h * (1 - z / 2 + z ** 2 / 6 - z ** 3 / 24)
    np.testing.assert_allclose(np.asarray(res.state("motor.i"))[:, 0, 0], i1, rtol=0, atol=1e-14)


def test_adaptive_per_model_tolerances_on_a_system():
    fast = DCMotor(inductance=0.01, resistance=1.0, k=0.1, voltage=1.0)
    system = System({"a": fast, "b": fast})
    loose = DormandPrince(rtol=1e-3, atol=1e-3)
    tight_a = DormandPrince(rtol=1e-3, atol=1e-3, scene_rtol={("a", "a.i"): 1e-10}, scene_atol={("a", "a.i"): 1e-12})
    tol = tight_a.resolve_tolerances(system.layout)
    assert tol == {"a.i": (1e-10, 1e-12), "b.i": (1e-3, 1e-3)}
    with pytest.raises(StateError, match="b.i"):
        DormandPrince(scene_rtol={("a", "b.i"): 1e-9}).resolve_tolerances(system.layout)
    t_end = 0.05
    run = jax.jit(lambda integ, x: integ.advance_info(system, 0.0, x, t_end), static_argnums=0)
    exact = fast.voltage / fast.resistance * (1 - np.exp(-fast.resistance * t_end / fast.inductance))
    x_l, st_l, info_l = run(loose, jnp.zeros(2))
    x_t, st_t, info_t = run(tight_a, jnp.zeros(2))
    assert int(st_l) == int(st_t) == 0
    assert int(info_t["accepted"]) > 3 * int(info_l["accepted"])  # model a's tolerance drives the step
    assert abs(float(x_t[0]) - exact) <= 1e-9 < abs(float(x_l[0]) - exact)


def test_member_noise_keeps_its_slots_and_the_file_layout_rebuilds():
    from mjharness.rollout.h5.layout import layout_from_table, layout_table

    pend = MjScene("bench_pendulum")
    pend.add_joint_noise("hinge", 0.5)
    pend.add_state("aaa", "x", StateSpec((1,), noise_count=1), lambda t, x, d: -x,
                   diffusion_fn=lambda t, x, d: jnp.ones((1, 1)))  # sorts before "hinge/..." by name
    system = System({"b": _OU(), "p": pend})
    own = {r.name: r.noise_slots for r in pend.layout.records}
    assert own == {"hinge/qpos": (), "hinge/qvel": (0,), "aaa/x": (1,)}  # MuJoCo states first in the member
    assert {r.state: r_.noise_slots for r in system.records if r.model == "p"
            for r_ in [system.layout[r.name]]} == {k: tuple(s + 1 for s in v) for k, v in own.items()}
    rebuilt = layout_from_table(layout_table(system.layout))
    assert [r.noise_slots for r in rebuilt.records] == [r.noise_slots for r in system.layout.records]
    assert rebuilt.endpoints == system.layout.endpoints
