"""ImplicitFast against MuJoCo C's ``mj_step`` (integrator implicitfast) and MJX's ``mjx.step``.

Contact-free scenes, 1000 steps, max |difference| in qpos/qvel/act <= 1e-9 (measured: 6e-14 and 2e-15).
``ARTICULATED`` has joint damping, velocity / position-with-kv / affine-bias / affine-gain actuators with
ctrl, a ball joint, and a free body with a welded child (C re-solves its 6x6 block with the gyroscopic
derivative: raw mjx.step is 5e-4 from C there). ``LIMITS`` saturates an actuator forcerange, a joint
and a tendon actuatorfrcrange (C drops those actuators' derivatives), has a muscle, a tendon damping
across two kinematic trees (C drops it from D), a filterexact and an intvelocity activation (raw
mjx.step is 0.66 from C there). On a contact scene, stepping from the same state with the carried warm
start, ours equals mjx.step wherever MJX and C agree (measured 4e-16 after 2 steps) and equals C on
the free box, where mjx.step is 1.6e-4 away.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from mjharness.adapters import MjScene
from mjharness.adapters import implicit as adapter
from mjharness.integrators import ContractError, ImplicitFast, StateRegistry, StateSpec, check_pair, get_integrator
from mjharness.scenes import SceneError

STEPS = 1000
TOL = 1e-9

ARTICULATED = """
<mujoco model="implicit_articulated">
  <option timestep="0.002" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h1" type="hinge" axis="0 1 0" damping="0.5"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="1"/>
      <body pos="0.3 0 0">
        <joint name="h2" type="hinge" axis="0 1 0" damping="0.2"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="0.7"/>
        <body pos="0.3 0 0">
          <joint name="ball" type="ball" damping="0.1"/>
          <geom type="box" size="0.05 0.03 0.02" pos="0.05 0 0" mass="0.3"/>
        </body>
      </body>
    </body>
    <body pos="1 0 1">
      <freejoint name="free"/>
      <geom type="box" size="0.1 0.05 0.03" mass="0.5"/>
      <body pos="0.1 0.05 0"><geom type="sphere" size="0.05" mass="0.2"/></body>
    </body>
  </worldbody>
  <actuator>
    <velocity joint="h1" kv="20"/>
    <position joint="h2" kp="50" kv="8"/>
    <general joint="h2" gainprm="1" biasprm="0 -3 -4" biastype="affine"/>
    <general joint="h1" gaintype="affine" gainprm="1 0 -2" biastype="none"/>
  </actuator>
</mujoco>"""

LIMITS = """
<mujoco model="implicit_limits">
  <option timestep="0.002" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>
    <body pos="0 0 1">
      <joint name="a1" type="hinge" axis="0 1 0" damping="0.3" actuatorfrcrange="-1.5 1.5"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="1"/>
      <body pos="0.3 0 0">
        <joint name="a2" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04" mass="0.7"/>
      </body>
    </body>
    <body pos="1 0 1">
      <joint name="b1" type="slide" axis="0 0 1" damping="0.2"/>
      <geom type="box" size="0.05 0.05 0.05" mass="1"/>
      <body pos="0 0 -0.1">
        <joint name="b2" type="hinge" axis="1 0 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.4"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="cross" damping="2" actuatorfrcrange="-0.4 0.4">
      <joint joint="a2" coef="1"/><joint joint="b2" coef="-1"/>
    </fixed>
  </tendon>
  <actuator>
    <velocity joint="a1" kv="6"/>
    <velocity joint="a2" kv="4" forcerange="-0.8 0.8"/>
    <velocity tendon="cross" kv="3"/>
    <muscle joint="b2" lengthrange="-1.5 1.5"/>
    <general joint="b1" dyntype="filterexact" dynprm="0.05" gainprm="30" biasprm="0 0 -5" biastype="affine"/>
    <intvelocity joint="a2" kp="20" kv="2" actrange="-0.5 0.5"/>
  </actuator>
</mujoco>"""

CONTACT = """
<mujoco model="implicit_contact">
  <option timestep="0.002" integrator="implicitfast" iterations="4" ls_iterations="8"/>
  <worldbody>
    <geom type="plane" size="3 3 0.1"/>
    <body pos="0 0 0.5">
      <joint name="s1" type="hinge" axis="0 1 0" damping="0.4" range="-2 2"/>
      <geom type="capsule" fromto="0 0 0 0.35 0 0" size="0.04" mass="1"/>
      <body pos="0.35 0 0">
        <joint name="s2" type="hinge" axis="0 1 0" damping="0.2"/>
        <geom type="capsule" fromto="0 0 0 0.35 0 -0.2" size="0.04" mass="0.6"/>
      </body>
    </body>
    <body pos="1 0 0.049">
      <freejoint name="box"/>
      <geom type="box" size="0.1 0.07 0.05" mass="0.8"/>
    </body>
  </worldbody>
  <actuator>
    <velocity joint="s1" kv="5"/>
    <position joint="s2" kp="30" kv="3"/>
  </actuator>
</mujoco>"""


def _initial(m: mujoco.MjModel, seed: int, scale: float) -> tuple[mujoco.MjData, np.ndarray]:
    d = mujoco.MjData(m)
    d.qvel[:] = np.random.default_rng(seed).normal(size=m.nv) * scale
    d.ctrl[:] = np.linspace(0.6, -0.5, m.nu)
    if m.na:
        d.act[:] = 0.3
    return d, d.ctrl.copy()


def _state(d) -> np.ndarray:
    return np.concatenate([d.qpos, d.qvel, d.act])


@pytest.fixture(scope="session")
def c_match():
    """Per contact-free scene: (ours, C, model, saturation counts in C) over STEPS steps; one compile each."""
    out = {}
    for name, xml in (("articulated", ARTICULATED), ("limits", LIMITS)):
        m = mujoco.MjModel.from_xml_string(xml)
        d, ctrl = _initial(m, seed=1, scale=2.0)
        x0 = _state(d)
        c = np.empty((STEPS, x0.size))
        sat = np.zeros(3, int)  # steps with an actuator, joint, tendon force at its limit
        for i in range(STEPS):
            mujoco.mj_step(m, d)
            c[i] = _state(d)
            sat += _saturated(m, d)
        ours = _ours(m, x0, ctrl, STEPS)
        out[name] = ours, c, m, sat
    return out


def _ours(m, x0, ctrl, steps) -> np.ndarray:
    """ImplicitFast from x0 with constant ctrl: (steps, qpos+qvel+act), one jit of a scan."""
    scene, integ, h = MjScene(m), ImplicitFast(), m.opt.timestep
    ctrl = jnp.asarray(ctrl)

    @jax.jit
    def run(x0):
        def body(carry, _):
            t, x = carry
            x = integ.integrate(scene, t, h, x, ctrl)[0]
            return (t + h, x), x
        return jax.lax.scan(body, (0.0, x0), None, length=steps)[1]

    return np.asarray(run(jnp.asarray(x0)))[:, :x0.size]


def _outside(value, lohi) -> bool:
    return not lohi[0] < value < lohi[1]


def _saturated(m, d) -> np.ndarray:
    act = [m.actuator_forcelimited[u] and _outside(d.actuator_force[u], m.actuator_forcerange[u]) for u in range(m.nu)]
    jnt = [m.jnt_actfrclimited[j] and _outside(d.qfrc_actuator[m.jnt_dofadr[j]], m.jnt_actfrcrange[j])
           for j in range(m.njnt)]
    ten = []
    for k in np.flatnonzero(m.tendon_actfrclimited):
        on = (m.actuator_trntype == mujoco.mjtTrn.mjTRN_TENDON) & (m.actuator_trnid[:, 0] == k)
        ten.append(abs(d.actuator_force[on].sum()) >= m.tendon_actfrcrange[k, 1] * (1 - 1e-12))
    return np.array([any(act), any(jnt), any(ten)], int)


@pytest.mark.parametrize("name", ["articulated", "limits"])
def test_matches_mujoco_c_implicitfast(c_match, name):
    ours, c, m, _ = c_match[name]
    assert np.all(np.isfinite(ours))
    err = np.abs(ours - c)
    assert err[:, :m.nq].max() <= TOL, f"{name}: qpos max |ours - C| {err[:, :m.nq].max():.3g}"
    assert err[:, m.nq:].max() <= TOL, f"{name}: qvel/act max |ours - C| {err[:, m.nq:].max():.3g}"
    assert np.abs(c[-1] - c[0]).max() > 0.1  # the scene moves: the comparison is not of a resting state


def test_limits_scene_exercises_the_clamped_actuator_rules(c_match):
    _, _, m, sat = c_match["limits"]
    assert np.all(sat > 0), f"steps with a clamped actuator / joint / tendon force: {sat.tolist()}"
    dyn = set(m.actuator_dyntype.tolist())
    assert {mujoco.mjtDyn.mjDYN_FILTEREXACT, mujoco.mjtDyn.mjDYN_INTEGRATOR, mujoco.mjtDyn.mjDYN_MUSCLE} <= dyn


def test_contact_scene_equals_mjx_step_and_c_on_the_free_body():
    m = mujoco.MjModel.from_xml_string(CONTACT)
    d, ctrl = _initial(m, seed=3, scale=1.0)
    mx, dx = mjx.put_model(m), mjx.put_data(m, d)
    scene, h = MjScene(m), m.opt.timestep
    step = jax.jit(lambda x, c: ImplicitFast().integrate(scene, 0.0, h, x, jnp.asarray(ctrl), c)[:2])
    raw = jax.jit(mjx.step)
    x, carry = jnp.asarray(_state(d)), {k: jnp.asarray(v) for k, v in scene.init_carry().items()}
    free = np.zeros(m.nq + m.nv, bool)
    qa, va = scene.joint_slices("box")
    free[qa], free[m.nq + va.start:m.nq + va.stop] = True, True
    for i in range(2):
        mujoco.mj_step(m, d)
        dx = raw(mx, dx)
        x, carry = step(x, carry)
        assert d.ncon > 0
        ours, mjx_x = np.asarray(x), np.concatenate([np.asarray(dx.qpos), np.asarray(dx.qvel)])
        c = np.concatenate([d.qpos, d.qvel])
        assert np.abs(ours - mjx_x)[~free].max() <= 1e-12
        assert np.abs(ours - c)[free].max() <= 1e-12  # C's gyroscopic block solve, which MJX lacks
        assert np.abs(mjx_x - c)[free].max() > 1e-6
        # MuJoCo saves the forward (constraint-solver) qacc as the next warm start, as mjx.step does;
        # after the first step the box states (hence its contact forces) differ between ours and MJX.
        dofs = slice(None) if i == 0 else ~free[m.nq:]
        ws, ws_mjx = np.asarray(carry["qacc_warmstart"]), np.asarray(dx.qacc_warmstart)
        assert np.abs(ws - ws_mjx)[dofs].max() <= 1e-9 * max(1.0, np.abs(ws_mjx).max())


def test_free_rigid_subtrees():
    m = mujoco.MjModel.from_xml_string(ARTICULATED)
    assert adapter.free_rigid_dofadr(m) == (int(m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT,
                                                                                   "free")]),)
    jointed = ARTICULATED.replace('<body pos="0.1 0.05 0"><geom', '<body pos="0.1 0.05 0"><joint axis="1 0 0"/><geom')
    assert adapter.free_rigid_dofadr(mujoco.MjModel.from_xml_string(jointed)) == ()


def test_registry_and_config():
    integ = get_integrator("implicit-fast")
    assert isinstance(integ, ImplicitFast) and integ.order == 1
    assert integ.kind == "fixed"
    assert integ.config()["name"] == "implicit_fast"


class _Oscillator:
    """A model with positions and velocities but no implicit velocity update."""

    second_order = (("q", "v"),)

    def __init__(self):
        reg = StateRegistry()
        reg.register("q", StateSpec((1,)))
        reg.register("v", StateSpec((1,)))
        self.layout = reg.finalize()

    def dynamics(self, t, x, ctrl=None):
        return jnp.array([x[1], -x[0]])


def test_scene_without_implicit_dynamics_is_refused():
    scene = _Oscillator()
    with pytest.raises(ContractError, match=r"_Oscillator\.implicit_dynamics"):
        ImplicitFast().integrate(scene, 0.0, 0.01, jnp.array([1.0, 0.0]))
    with pytest.raises(ContractError, match="implicit_dynamics"):
        check_pair(scene, ImplicitFast())


def test_fluid_drag_is_refused_before_tracing():
    xml = ARTICULATED.replace('integrator="implicitfast"', 'density="1.2"')
    scene = MjScene(mujoco.MjModel.from_xml_string(xml))
    with pytest.raises(SceneError, match="fluid drag"):
        ImplicitFast().integrate(scene, 0.0, 0.002, jnp.asarray(scene.x0()))
