"""MjScene: joints as named states, qpos/qvel segments equal MuJoCo's, dynamics equal mj_forward."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mujoco import mjx

from mjharness.adapters import MjScene
from mjharness.integrators import StateError, StateSpec
from mjharness.integrators.policies import quat_dot
from mjharness.scenes import list_scenes

JT = mujoco.mjtJoint


def random_state(model, rng):
    """A random valid (qpos, qvel, act) for ``model`` (unit quaternions)."""
    d = mujoco.MjData(model)
    d.qpos[:] = rng.normal(size=model.nq)
    for j in range(model.njnt):
        a = model.jnt_qposadr[j]
        if model.jnt_type[j] == JT.mjJNT_FREE:
            d.qpos[a + 3:a + 7] /= np.linalg.norm(d.qpos[a + 3:a + 7])
        elif model.jnt_type[j] == JT.mjJNT_BALL:
            d.qpos[a:a + 4] /= np.linalg.norm(d.qpos[a:a + 4])
    d.qvel[:] = rng.normal(size=model.nv)
    d.act[:] = rng.normal(size=model.na)
    return d


def expected_names(model):
    pos, vel = [], []
    for j in range(model.njnt):
        n = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
        if model.jnt_type[j] == JT.mjJNT_FREE:
            pos += [f"{n}/pos", f"{n}/quat"]
            vel += [f"{n}/vel", f"{n}/angvel"]
        else:
            pos.append(f"{n}/qpos")
            vel.append(f"{n}/qvel")
    return pos + vel + (["act"] if model.na else [])


def check_mapping(scene: MjScene, rng):
    model = scene.model
    lay = scene.layout
    assert lay.names == tuple(expected_names(model))
    assert lay.size == model.nq + model.nv + model.na
    for js in scene.joints:
        qs, vs = scene.joint_slices(js.name)
        assert (qs.start, vs.start) == (model.jnt_qposadr[js.id], model.jnt_dofadr[js.id])
        assert lay.segment(js.positions) == qs  # position states of a joint sit at its qposadr
        assert lay.segment(js.velocities) == slice(model.nq + vs.start, model.nq + vs.stop)
        upd = {r.update for r in (lay[n] for n in js.positions)}
        assert ("quaternion" in upd) == (js.type in (JT.mjJNT_FREE, JT.mjJNT_BALL))
    d = random_state(model, rng)
    scene.data.qpos[:], scene.data.qvel[:], scene.data.act[:] = d.qpos, d.qvel, d.act
    x = scene.x0()
    np.testing.assert_array_equal(x[scene.qpos_segment], d.qpos)
    np.testing.assert_array_equal(x[scene.qvel_segment], d.qvel)
    np.testing.assert_array_equal(x[scene.act_segment], d.act)
    names = [n for n in lay.names if n != "act"]
    if model.nq:
        assert lay.segment(names[:len(names) // 2]) == scene.qpos_segment
        assert lay.segment(names[len(names) // 2:]) == scene.qvel_segment
    return x


@pytest.mark.parametrize("name", list_scenes())
def test_bundled_scene_maps_exactly(name):
    check_mapping(MjScene(name), np.random.default_rng(0))


def test_free_and_ball_state_names_and_nq_ne_nv(scene_cache):
    s = scene_cache("mixed")
    assert s.nq == 13 and s.nv == 11
    lay = s.layout
    assert lay["root/pos"].spec.shape == (3,) and lay["root/quat"].update == "quaternion"
    assert lay["root/vel"].offset == 13 and lay["root/angvel"].offset == 16
    assert lay["ball/qpos"].spec == StateSpec((4,), update="quaternion")
    assert lay["ball/qvel"].spec.shape == (3,)
    assert s.joint_slices("ball") == (slice(8, 12), slice(7, 10))
    assert s.joint_of("root/angvel") == "root" and s.joint_of("act") is None
    with pytest.raises(KeyError, match="no joint named 'elbow'; joints: root, hinge, ball, slide"):
        s.joint_slices("elbow")
    ho = MjScene("mixed", quaternion_update="quaternion_qdot").layout
    assert ho["root/quat"].deriv_size == 4 and ho.deriv_size == lay.deriv_size + 2
    with pytest.raises(StateError, match="quaternion_update must be one of"):
        MjScene("mixed", quaternion_update="euler")


# Random MJCF trees: every joint type, several joints per body, unnamed joints.
joint_kinds = st.sampled_from(["hinge", "slide", "ball"])


@st.composite
def mjcf_trees(draw):
    bodies, parents = [], []
    n = draw(st.integers(1, 5))
    for i in range(n):
        parent = draw(st.integers(-1, i - 1))
        if parent == -1 and draw(st.booleans()):
            joints = ["free"]
        else:
            joints = draw(st.lists(joint_kinds, min_size=0, max_size=3))
            if "ball" in joints:  # MuJoCo allows one ball per body without other rotations: keep it simple
                joints = ["ball"]
        bodies.append(joints)
        parents.append(parent)
    named = draw(st.lists(st.booleans(), min_size=20, max_size=20))
    return bodies, parents, named


def tree_xml(bodies, parents, named):
    k = iter(range(1000))

    def body(i):
        inner = []
        for kind in bodies[i]:
            j = next(k)
            nm = f' name="j{j}"' if named[j % len(named)] else ""
            inner.append(f'<joint{nm} type="{kind}" axis="{1 + i % 2} 0.5 {i % 3}"/>' if kind in ("hinge", "slide")
                         else (f'<freejoint{nm}/>' if kind == "free" else f'<joint{nm} type="ball"/>'))
        kids = "".join(body(c) for c, p in enumerate(parents) if p == i)
        return (f'<body name="b{i}" pos="0.1 {0.05 * i} 0.2">{"".join(inner)}'
                f'<geom type="box" size=".05 .04 .03" mass="1"/>{kids}</body>')

    roots = "".join(body(i) for i, p in enumerate(parents) if p == -1)
    return f'<mujoco><option><flag contact="disable"/></option><worldbody>{roots}</worldbody></mujoco>'


@settings(max_examples=25, deadline=None)
@given(mjcf_trees(), st.integers(0, 2**31))
def test_random_mjcf_maps_exactly(tree, seed):
    xml = tree_xml(*tree)
    model = mujoco.MjModel.from_xml_string(xml)
    if model.njnt == 0:
        return
    check_mapping(MjScene(model), np.random.default_rng(seed))


# -- dynamics, to_mjx/from_mjx under jit and vmap -------------------------------------------------

def c_derivative(scene, d):
    """Expected derivative buffer from MuJoCo C's mj_forward."""
    m = scene.model
    mujoco.mj_forward(m, d)
    if scene.quaternion_update == "quaternion":
        pos = [d.qvel]
    else:
        pos = []
        for js in scene.joints:
            v = d.qvel[js.dofadr:js.dofadr + js.nv]
            if js.type == JT.mjJNT_FREE:
                pos += [v[:3], np.asarray(quat_dot(jnp.asarray(d.qpos[js.qposadr + 3:js.qposadr + 7]), v[3:]))]
            elif js.type == JT.mjJNT_BALL:
                pos.append(np.asarray(quat_dot(jnp.asarray(d.qpos[js.qposadr:js.qposadr + 4]), v)))
            else:
                pos.append(v)
    return np.concatenate(pos + [d.qacc, d.act_dot])


@pytest.mark.parametrize("name, policy", [("mixed", "quaternion"), ("mixed", "quaternion_qdot"),
                                          ("arm", "quaternion"), ("box_on_plane", "quaternion")])
def test_dynamics_matches_mj_forward_batched(name, policy):
    scene = MjScene(name, quaternion_update=policy)
    m = scene.model
    rng = np.random.default_rng(1)
    states = [random_state(m, rng) for _ in range(3)]
    if name == "box_on_plane":  # resting, penetrating slightly: contacts active
        for d in states:
            d.qpos[:3] = [0, 0, 0.099]
    ctrl = rng.normal(size=(3, m.nu))
    x = np.stack([np.concatenate([d.qpos, d.qvel, d.act]) for d in states])
    dyn = jax.jit(jax.vmap(scene.dynamics, in_axes=(None, 0, 0 if m.nu else None)))
    dx = np.asarray(dyn(0.0, jnp.asarray(x), jnp.asarray(ctrl) if m.nu else None))
    assert dx.shape == (3, scene.layout.deriv_size) and dx.dtype == np.float64
    for i, d in enumerate(states):
        d.ctrl[:] = ctrl[i]
        want = c_derivative(scene, d)
        if d.ncon:  # MJX's box-plane collision makes other contact points than C: compare with MJX itself
            assert name == "box_on_plane"
            ref = jax.jit(mjx.forward)(scene.mjx_model, mjx.put_data(m, d))  # one compile, not op by op
            want[scene.nv:scene.nv * 2] = np.asarray(ref.qacc)
        np.testing.assert_allclose(dx[i], want, rtol=1e-8, atol=1e-9)
    # to_mjx / from_mjx round trip, batched, under jit
    data = jax.vmap(lambda _: scene.to_mjx(jnp.zeros(scene.layout.size)))(jnp.arange(3))
    back = jax.jit(lambda x, d: scene.from_mjx(scene.to_mjx(x, d)))(jnp.asarray(x), data)
    np.testing.assert_array_equal(np.asarray(back), x)


def test_add_state_integrates_with_the_rest_and_refuses_after_finalize():
    scene = MjScene("arm")
    tau = 0.05
    name = scene.add_state("filter", "elbow", StateSpec((1,)),
                           lambda t, v, d: (d.ctrl[2:3] - v) / tau, initial=[0.25])
    assert name == "filter/elbow"
    lay = scene.layout
    assert lay.names[-1] == "filter/elbow" and lay["filter/elbow"].offset == scene.model.nq + scene.model.nv + 1
    x = scene.x0()
    assert x[-1] == 0.25
    ctrl = jnp.array([0.0, 0.0, 1.0, 0.0])
    dx = jax.jit(scene.dynamics)(0.0, jnp.asarray(x), ctrl)
    assert float(dx[-1]) == pytest.approx((1.0 - 0.25) / tau)
    assert scene.from_mjx(scene.to_mjx(jnp.asarray(x))).shape == (lay.size,)
    with pytest.raises(StateError, match="finalized"):
        scene.add_state("filter", "yaw", StateSpec((1,)), lambda t, v, d: -v)
    with pytest.raises(StateError, match=r"initial value has shape \(2,\)"):
        MjScene("arm").add_state("f", "g", StateSpec((1,)), lambda t, v, d: v, initial=[1, 2])
    with pytest.raises(StateError, match="already registered"):
        s2 = MjScene("arm")
        s2.add_state("f", "g", StateSpec((1,)), lambda t, v, d: v)
        s2.add_state("f", "g", StateSpec((1,)), lambda t, v, d: v)


def test_recompile_same_layout_copies_runtime_values():
    scene = MjScene("double_pendulum")
    scene.data.qpos[:] = [0.3, -0.2]
    scene.data.qvel[:] = [1.0, 2.0]
    layout = scene.layout
    spec = mujoco.MjSpec.from_file(__import__("mjharness.scenes", fromlist=["x"]).scene_path("double_pendulum"))
    spec.body("link2").geoms[0].density = 2000.0
    heavier = spec.compile()
    scene.recompile(heavier)
    assert scene.model is heavier and scene.layout is layout
    np.testing.assert_array_equal(scene.x0(), [0.3, -0.2, 1.0, 2.0])
    assert scene.model.body_mass[2] > 1.5 * load_mass("double_pendulum", 2)


@pytest.mark.parametrize("backend,integrator", [("mujoco", "heun"), ("mujoco", "semi_implicit_euler"),
                                                ("mjx", "heun")])
def test_runs_after_recompile_step_the_new_model(backend, integrator):
    """A run after ``recompile`` steps the edited model, as a fresh scene of it does: the engine's per-scene cache of
    compiled chunks is keyed on the scene's ``revision`` (before, the stage path, on MuJoCo C and on MJX, reused the
    chunk traced for the old model and its batches)."""
    from mjharness.rollout import rollout
    from mjharness.scenes import load_scene

    def run(scene):
        x0 = np.repeat(scene.x0()[None], 2, axis=0)
        x0[:, scene.model.nq:] = [[1.0, -0.5], [0.3, 2.0]]
        r = rollout(scene, integrator, dt=0.002, steps=20, x0=x0, record_every=20, outputs=("qacc",), progress=False)
        return np.asarray(r.x[-1]), np.asarray(r.outputs["qacc"][-1])

    heavier = load_scene("double_pendulum")
    heavier.body_mass[2] *= 3.0
    scene = MjScene("double_pendulum", backend=backend)
    before = run(scene)
    revision = scene.revision
    scene.recompile(heavier)
    assert scene.revision == revision + 1
    after, fresh = run(scene), run(MjScene(heavier, backend=backend))
    assert not np.array_equal(after[0], before[0])
    for a, f in zip(after, fresh):
        np.testing.assert_array_equal(a, f)


def test_simulate_after_recompile_steps_the_new_model():
    """``simulate``'s per-scene programs are keyed on the scene's ``revision`` too (before, a recompiled scene's
    simulate reused the program traced with the old model)."""
    from mjharness.rollout import simulate
    from mjharness.scenes import load_scene

    def run(scene):
        x0 = np.repeat(scene.x0()[None], 2, axis=0)
        x0[:, scene.model.nq:] = [[1.0, -0.5], [0.3, 2.0]]
        return np.asarray(simulate(scene, "rk4", dt=0.002, steps=10, x0=x0)[1])

    heavier = load_scene("double_pendulum")
    heavier.body_mass[2] *= 3.0
    scene = MjScene("double_pendulum", backend="mjx")
    before = run(scene)
    scene.recompile(heavier)
    after = run(scene)
    assert not np.array_equal(after, before)
    np.testing.assert_array_equal(after, run(MjScene(heavier, backend="mjx")))


def load_mass(name, body):
    from mjharness.scenes import load_scene
    return load_scene(name).body_mass[body]


def test_recompile_different_layout_refused_scene_unchanged():
    scene = MjScene("double_pendulum")
    before = (scene.model, scene.mjx_model, scene.data, scene.layout)
    extra = ('<mujoco><worldbody><body><joint name="shoulder" type="hinge"/><geom size=".1" mass="1"/>'
             '<body><joint name="elbow" type="ball"/><geom size=".1" mass="1"/></body></body></worldbody></mujoco>')
    with pytest.raises(StateError, match=r"state layout differs \(first difference: 'elbow/qpos'"):
        scene.recompile(extra)
    three = ('<mujoco><worldbody><body><joint name="shoulder" type="hinge"/><geom size=".1" mass="1"/>'
             '<body><joint name="elbow"/><geom size=".1" mass="1"/><body><joint name="wrist"/>'
             '<geom size=".1" mass="1"/></body></body></body></worldbody></mujoco>')
    with pytest.raises(StateError, match="layout differs"):
        scene.recompile(three)
    assert (scene.model, scene.mjx_model, scene.data, scene.layout) == before
