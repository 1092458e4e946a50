"""Noise topology: canonical global slots, shared endpoints, packed diffusion, MuJoCo noise models."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjharness.adapters import MjScene
from mjharness.adapters.noise import scene_noise, velocity_blocks
from mjharness.integrators import StateError, StateRegistry, StateSpec
from mjharness.integrators.prng import step_key
from mjharness.integrators.sde import Increments
from mjharness.integrators.stochastic import EulerMaruyama

# -- canonical slot assignment (hypothesis) ---------------------------------------------------------

_KINDS = {"e1": ((1,), "euclidean"), "e3": ((3,), "euclidean"), "q": ((4,), "quaternion"),
          "qh": ((4,), "quaternion_qdot")}


@st.composite
def topologies(draw):
    """Models (in integration order) with states, noise counts, and share groups."""
    n_models = draw(st.integers(1, 3))
    names = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=n_models,
                          max_size=12, unique=True))
    models = [f"m{i}" for i in range(n_models)]
    states = {}  # name -> (model, kind, noise_count)
    for i, name in enumerate(names):
        model = models[i] if i < n_models else draw(st.sampled_from(models))
        states[name] = (model, draw(st.sampled_from(sorted(_KINDS))), draw(st.integers(0, 3)))
    endpoints = [(n, j) for n, (_, _, nc) in states.items() for j in range(nc)]
    groups = []
    if endpoints:
        groups = draw(st.lists(st.lists(st.sampled_from(endpoints), min_size=1, max_size=4), max_size=4))
    return models, states, groups


def _register(models, states, groups, data):
    """Register in a random order (each model's first state in model order, then any order),
    noise split between StateSpec.noise_count and add_noise, shares in random endpoint order."""
    heads = [data.draw(st.sampled_from(sorted(n for n, s in states.items() if s[0] == m))) for m in models]
    rest = data.draw(st.permutations(sorted(set(states) - set(heads))))
    reg = StateRegistry()
    for name in heads + list(rest):
        model, kind, nc = states[name]
        in_spec = data.draw(st.integers(0, nc))
        shape, update = _KINDS[kind]
        reg.register(name, StateSpec(shape, noise_count=in_spec, update=update), model=model)
        if nc > in_spec:
            reg.add_noise(name, nc - in_spec)
    for group in data.draw(st.permutations(groups)):
        reg.share_noise(data.draw(st.permutations(group)))
    return reg.finalize()


def _reference_slots(models, states, groups):
    """Independent reference: connected components over share groups, numbered by their first
    endpoint in the canonical traversal (models in order, states by name, local order)."""
    canonical = [(n, j) for m in models for n in sorted(n for n in states if states[n][0] == m)
                 for j in range(states[n][2])]
    adj = {ep: set() for ep in canonical}
    for g in groups:
        for a in g:
            adj[a] |= set(g)
    comp, slots = {}, {}
    for ep in canonical:
        if ep in comp:
            continue
        stack, label = [ep], len(slots)
        slots[label] = ep
        while stack:
            e = stack.pop()
            if e not in comp:
                comp[e] = label
                stack.extend(adj[e] - comp.keys())
    return comp, len(slots)


@settings(max_examples=80, deadline=None)
@given(topologies(), st.data())
def test_slots_independent_of_registration_order(topo, data):
    models, states, groups = topo
    want, n_slots = _reference_slots(models, states, groups)
    layouts = [_register(models, states, groups, data) for _ in range(2)]
    for layout in layouts:
        got = {(r.name, j): s for r in layout for j, s in enumerate(r.noise_slots)}
        assert got == want
        assert layout.noise_slots == n_slots
        # Packed storage: endpoints sorted by slot, contiguous, exactly one tangent per endpoint.
        eps = layout.endpoints
        assert [e.slot for e in eps] == sorted(e.slot for e in eps)
        offs = np.cumsum([0] + [e.tangent_size for e in eps])
        assert [e.diffusion_offset for e in eps] == offs[:-1].tolist()
        need = sum(layout[n].spec.tangent_size * nc for n, (_, _, nc) in states.items())
        assert layout.diffusion_size == need == offs[-1]
        for e in eps:
            assert layout[e.state].diffusion_offsets[e.local] == e.diffusion_offset
            assert e.tangent_size == (3 if states[e.state][1] in ("q", "qh") else layout[e.state].size)
    # Packing is identical too (derivative offsets follow registration order by design).
    packing = [[(e.state, e.local, e.slot, e.diffusion_offset) for e in lay.endpoints] for lay in layouts]
    assert packing[0] == packing[1]


def test_share_noise_errors_change_nothing():
    reg = StateRegistry()
    reg.register("a", StateSpec((2,), noise_count=1))
    reg.register("b", StateSpec((1,)))
    with pytest.raises(StateError, match="'b' has 0 local noise"):
        reg.share_noise([("a", 0), ("b", 0)])
    with pytest.raises(StateError, match="no state named 'c'"):
        reg.share_noise([("a", 0), ("c", 0)])
    with pytest.raises(StateError, match="positive int"):
        reg.add_noise("a", 0)
    layout = reg.finalize()
    assert layout.noise_slots == 1 and layout.diffusion_size == 2
    with pytest.raises(StateError, match="finalized"):
        reg.add_noise("a", 1)


# -- shared endpoints get the identical increment ---------------------------------------------------

class _Toy:
    """Zero drift, constant unit diffusion: a step moves each state by its noise alone."""

    def __init__(self, layout, g):
        self.layout, self._g = layout, jnp.asarray(g)

    def dynamics(self, t, x, ctrl=None):
        return jnp.zeros(self.layout.deriv_size)

    def diffusion(self, t, x, ctrl=None):
        return self._g


def test_shared_endpoints_receive_identical_increment():
    reg = StateRegistry()
    reg.register("a", StateSpec((2,), noise_count=1), model="m")
    reg.register("b", StateSpec((1,), noise_count=2), model="m")
    reg.register("q", StateSpec((4,), update="quaternion", noise_count=1), model="m")
    reg.register("c", StateSpec((1,), noise_count=1), model="other")
    reg.share_noise([("q", 0), ("b", 1), ("a", 0), ("b", 1)])  # any order, repeats allowed
    layout = reg.finalize()
    assert layout.noise_slots == 3  # {a0, b1, q0}, {b0}, {c0}
    g = np.zeros(layout.diffusion_size)
    for r in layout:
        for j, o in enumerate(r.diffusion_offsets):
            if r.name == "q":
                g[o:o + 3] = [0.0, 0.0, 1.0]  # rotation about body z
            elif (r.name, j) != ("b", 0):  # b's own source is switched off
                g[o:o + r.spec.tangent_size] = 1.0
    scene = _Toy(layout, g)
    x0 = jnp.asarray(layout.default_values())
    em = EulerMaruyama()
    # The increments the step drew, from the same compiled function (no jit-vs-eager rounding).
    step = jax.jit(lambda x, key: (em.integrate(scene, 0.0, 0.01, x, key=key)[0], em.increments(key, 0.01, layout).dW))
    shared = layout["a"].noise_slots[0]
    for world in range(3):
        x1, dW = step(x0, step_key(7, world, 5))
        x1 = np.asarray(x1)
        inc = float(dW[shared])
        assert x1[layout["a"].value_slice].tolist() == [inc, inc]
        assert x1[layout["b"].value_slice].tolist() == [inc]
        np.testing.assert_allclose(x1[layout["q"].value_slice], [np.cos(inc / 2), 0, 0, np.sin(inc / 2)],
                                   rtol=0, atol=1e-15)
        assert x1[layout["c"].value_slice].tolist() == [float(dW[layout["c"].noise_slots[0]])]
        assert float(dW[layout["c"].noise_slots[0]]) != inc
    # Prescribed increments drive the same states the same way.
    dW = jnp.arange(1.0, 4.0) * 0.1
    x1 = np.asarray(em.integrate(scene, 0.0, 0.01, x0, key=Increments(dW))[0])
    assert x1[layout["a"].value_slice].tolist() == [float(dW[shared])] * 2


# -- MuJoCo noise models: packed by kinematic tree, checked against MuJoCo C ----------------------

TWO_TREES = """
<mujoco model="two_trees">
  <option gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="base" pos="0 0 1">
      <freejoint name="root"/>
      <geom type="box" size="0.15 0.1 0.05" density="1000"/>
      <body name="a" pos="0.15 0 0">
        <joint name="hinge" type="hinge" axis="0 0 1"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.03" density="1000"/>
        <body name="b" pos="0.2 0 0">
          <joint name="ball" type="ball"/>
          <geom type="box" size="0.06 0.04 0.03" pos="0.05 0 0" density="1000"/>
          <body name="c" pos="0.1 0 0">
            <joint name="slide" type="slide" axis="1 0 0"/>
            <geom type="sphere" size="0.03" density="1000"/>
          </body>
        </body>
      </body>
    </body>
    <body name="p1" pos="1 0 2">
      <joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04" density="1000"/>
      <body name="p2" pos="0 0 -0.5">
        <joint name="elbow" type="hinge" axis="0 1 0" armature="0.1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04" density="1000"/>
      </body>
    </body>
    <body name="fixed" pos="0 1 0"><geom type="sphere" size="0.1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def noisy_scene():
    scene = MjScene(TWO_TREES)
    scene.add_joint_noise("elbow", 0.7)
    scene.add_joint_noise("ball", [0.1, 0.2, 0.3])
    scene.add_body_noise("b", [1.0, 2.0, 3.0], 0.5)
    return scene


def test_mujoco_noise_topology_packs_by_tree(noisy_scene):
    layout = noisy_scene.layout
    # elbow: 1 source over the pendulum's 2 velocities; ball: 3 sources, body b: 6 sources, each over
    # the 11 velocities of the first tree. Positions get nothing.
    assert layout.noise_slots == 1 + 3 + 6
    assert layout.diffusion_size == 1 * 2 + (3 + 6) * 11
    assert layout.diffusion_size < layout.noise_slots * layout.deriv_size  # not dense
    for r in layout:
        if r.name.endswith(("/qpos", "/pos", "/quat")):
            assert r.spec.noise_count == 0
    assert layout["shoulder/qvel"].spec.noise_count == 1 and layout["root/vel"].spec.noise_count == 9
    # Each source's endpoints share one slot.
    for src in scene_noise(noisy_scene).sources:
        assert len({layout[s].noise_slots[j] for s, j in src.endpoints}) == 1


def test_mujoco_diffusion_matches_mujoco_c(noisy_scene):
    scene, layout = noisy_scene, noisy_scene.layout
    m = scene.model
    rng = np.random.default_rng(3)
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0 + 0.3 * rng.standard_normal(m.nq)
    mujoco.mj_normalizeQuat(m, d.qpos)
    d.qvel[:] = rng.standard_normal(m.nv)
    mujoco.mj_forward(m, d)
    x = np.concatenate([d.qpos, d.qvel])
    f, g = jax.jit(scene.drift_diffusion)(0.0, jnp.asarray(x))
    g = np.asarray(g)
    np.testing.assert_allclose(np.asarray(f), np.concatenate([d.qvel, d.qacc]), rtol=1e-9, atol=1e-9)
    blocks = dict(velocity_blocks(scene))
    for src in scene_noise(scene).sources:
        force = np.zeros(m.nv)
        if src.kind == "joint":
            force[m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, src.name)] + src.component] = src.sigma
        else:
            jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
            mujoco.mj_jacBodyCom(m, d, jacp, jacr, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, src.name))
            force = src.sigma * (jacp[src.component] if src.component < 3 else jacr[src.component - 3])
        want = np.zeros((1, m.nv))
        mujoco.mj_solveM(m, d, want, force[None])
        got = np.zeros(m.nv)
        for state, local in src.endpoints:
            o = layout[state].diffusion_offsets[local]
            got[blocks[state]] = g[o:o + blocks[state].size]
        np.testing.assert_allclose(got, want[0], rtol=1e-9, atol=1e-12 * np.abs(want).max())
        assert np.abs(want[0]).max() > 0


def test_mujoco_noise_errors_change_nothing():
    scene = MjScene(TWO_TREES)
    with pytest.raises(KeyError, match="no joint named 'knee'"):
        scene.add_joint_noise("knee", 1.0)
    with pytest.raises(StateError, match=r"sigma must be a scalar or have shape \(3,\)"):
        scene.add_joint_noise("ball", [1.0, 2.0])
    with pytest.raises(StateError, match="non-negative"):
        scene.add_joint_noise("elbow", -1.0)
    with pytest.raises(StateError, match="'fixed' is welded to the world"):
        scene.add_body_noise("fixed", 1.0)
    with pytest.raises(KeyError, match="no body named 'nope'"):
        scene.add_body_noise("nope", 1.0)
    with pytest.raises(StateError, match="noise_count=1 but no diffusion_fn"):
        scene.add_state("ou", "b", StateSpec((1,), noise_count=1), lambda t, v, d: -v)
    with pytest.raises(StateError, match="noise_count=0"):
        scene.add_state("ou", "b", StateSpec((1,)), lambda t, v, d: -v, diffusion_fn=lambda t, v, d: v)
    assert all(scene.registry.spec(n).noise_count == 0 for n in scene.registry.names)
    assert "ou/b" not in scene.registry
    scene.registry.add_noise("slide/qvel", 1)  # raw endpoint without a noise model
    with pytest.raises(StateError, match=r"\('slide/qvel', 0\)"):
        scene.diffusion(0.0, jnp.asarray(scene.x0()))
    with pytest.raises(StateError, match="finalized"):
        scene.add_joint_noise("elbow", 1.0)
