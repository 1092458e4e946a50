"""Reference rigid-body model: validation, Newton–Euler against MuJoCo C, invariants, orders, vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjharness.adapters.reference import (
    AsymmetricInertiaError,
    FreeJointState,
    IndefiniteInertiaError,
    InertiaError,
    MassError,
    NonFiniteInertiaError,
    RigidBody,
    SpatialInertia,
    StateShapeError,
    principal_axes,
)
from mjharness.integrators import rotations as rt
from mjharness.integrators.rotations import quat_to_mat
from mjharness.scenes import load_scene

# A free body whose COM is off the body origin and whose inertial frame is rotated, under a
# gravity vector that is not axis-aligned: every term of the Newton–Euler equations is exercised.
OFFSET_XML = """
<mujoco model="offset_brick">
  <option timestep="0.001" gravity="0.3 -0.2 -9.81" integrator="RK4"><flag contact="disable"/></option>
  <worldbody>
    <body name="b" pos="0 0 1">
      <freejoint name="b"/>
      <inertial pos="0.05 -0.02 0.03" quat="0.9 0.1 0.3 -0.2" mass="2.5" diaginertia="0.02 0.05 0.07"/>
      <geom type="box" size=".2 .1 .05"/>
    </body>
  </worldbody>
</mujoco>
"""


def _random_state(rng, scale_v=1.0, scale_w=3.0):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return np.concatenate([rng.normal(size=3), q, scale_v * rng.normal(size=3), scale_w * rng.normal(size=3)])


@pytest.fixture(scope="module")
def offset():
    m = load_scene(OFFSET_XML)
    return m, RigidBody(SpatialInertia.from_mujoco(m, "b"), m.opt.gravity)


@pytest.fixture(scope="module")
def brick():
    m = load_scene("brick")
    return m, RigidBody(SpatialInertia.from_mujoco(m, "brick"), m.opt.gravity)


# ---------------------------------------------------------------------------------------------- inertia

def test_spatial_inertia_validation_errors_are_distinct():
    ok = np.diag([1.0, 2.0, 2.5])
    with pytest.raises(MassError, match="mass"):
        SpatialInertia(0.0, np.zeros(3), ok)
    with pytest.raises(MassError, match="mass"):
        SpatialInertia(-1.0, np.zeros(3), ok)
    with pytest.raises(MassError, match="mass"):
        SpatialInertia(np.inf, np.zeros(3), ok)
    with pytest.raises(NonFiniteInertiaError, match="com"):
        SpatialInertia(1.0, [0.0, np.nan, 0.0], ok)
    with pytest.raises(NonFiniteInertiaError, match="inertia"):
        SpatialInertia(1.0, np.zeros(3), np.diag([1.0, np.inf, 1.0]))
    asym = ok.copy()
    asym[0, 1] = 0.1
    with pytest.raises(AsymmetricInertiaError, match="symmetric"):
        SpatialInertia(1.0, np.zeros(3), asym)
    with pytest.raises(IndefiniteInertiaError, match="positive-definite"):
        SpatialInertia(1.0, np.zeros(3), np.diag([1.0, 0.0, 1.0]))
    with pytest.raises(IndefiniteInertiaError):
        SpatialInertia(1.0, np.zeros(3), [[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1.0]])
    with pytest.raises(InertiaError, match="shape"):
        SpatialInertia(1.0, np.zeros(3), np.ones(4))
    # all are ValueErrors, and distinct classes
    classes = {MassError, NonFiniteInertiaError, AsymmetricInertiaError, IndefiniteInertiaError}
    assert len(classes) == 4 and all(issubclass(c, ValueError) for c in classes)


def test_spatial_inertia_forms_agree():
    full = [1.0, 2.0, 2.5, 0.1, -0.2, 0.05]   # MuJoCo fullinertia order: xx yy zz xy xz yz
    t = np.array([[1.0, 0.1, -0.2], [0.1, 2.0, 0.05], [-0.2, 0.05, 2.5]])
    np.testing.assert_array_equal(SpatialInertia(1.0, np.zeros(3), full).inertia, t)
    np.testing.assert_array_equal(SpatialInertia(1.0, np.zeros(3), [1.0, 2.0, 3.0]).inertia, np.diag([1, 2, 3.0]))
    # symmetric to rounding is accepted and stored exactly symmetric
    t2 = t.copy()
    t2[0, 1] += 1e-15
    si = SpatialInertia(1.0, np.zeros(3), t2)
    np.testing.assert_array_equal(si.inertia, np.asarray(si.inertia).T)


def test_inertia_about_matches_point_cloud():
    """Parallel-axis shift against a direct sum over point masses (independent of the formula)."""
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(50, 3)) * [0.3, 0.2, 0.1] + [0.1, -0.2, 0.3]
    ms = rng.uniform(0.1, 1.0, size=50)

    def about(p):
        d = pts - p
        return sum(mi * (di @ di * np.eye(3) - np.outer(di, di)) for mi, di in zip(ms, d))

    m = ms.sum()
    com = (ms[:, None] * pts).sum(0) / m
    si = SpatialInertia(m, com, about(com))
    for p in ([0.0, 0.0, 0.0], [1.0, -2.0, 0.5]):
        np.testing.assert_allclose(si.inertia_about(jnp.asarray(p)), about(np.asarray(p)), rtol=1e-12, atol=1e-14)


def test_principal_axes_are_a_rotation_and_from_mujoco_matches_the_compiled_body(offset):
    m, body = offset
    w, R = principal_axes(body.inertia.inertia)
    assert np.linalg.det(np.asarray(R)) == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(np.asarray(w), np.sort(m.body_inertia[1]), rtol=1e-13)
    np.testing.assert_allclose(R @ np.diag(w) @ R.T, body.inertia.inertia, atol=1e-15)
    # gravity compensation scales the reference body's gravity; a disabled gravity is zero
    gc = load_scene(OFFSET_XML.replace('<body name="b" pos="0 0 1">', '<body name="b" pos="0 0 1" gravcomp="0.25">'))
    np.testing.assert_allclose(RigidBody.from_mujoco(gc, "b").gravity, 0.75 * gc.opt.gravity, rtol=1e-15)
    off = load_scene(OFFSET_XML.replace('<flag contact="disable"/>', '<flag contact="disable" gravity="disable"/>'))
    np.testing.assert_array_equal(RigidBody.from_mujoco(off, 1).gravity, np.zeros(3))
    with pytest.raises(ValueError, match="no body 'nope'"):
        RigidBody.from_mujoco(m, "nope")


# ---------------------------------------------------------------------------------------------- rotations

def test_rotations_match_mujoco_c():
    """quat_to_mat, mat_to_quat, quat_integrate, quat_mul against mju_quat2Mat / mju_mat2Quat /
    mju_quatIntegrate / mju_mulQuat, batched, near the identity and near 180 degrees."""
    rng = np.random.default_rng(7)
    q = rng.normal(size=(64, 4))
    q[:4] = [[1, 1e-9, 0, 0], [1e-9, 1, 0, 0], [0, 1e-9, 1, 0], [1e-12, 0, 0, -1]]  # each Shepperd pivot
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w = rng.normal(size=(64, 3))
    R = np.asarray(rt.quat_to_mat(q))
    back = np.asarray(rt.mat_to_quat(R))
    assert np.all(back[:, 0] >= 0)
    for i in range(len(q)):
        Rc, qc, qi, qm = np.zeros(9), np.zeros(4), q[i].copy(), np.zeros(4)
        mujoco.mju_quat2Mat(Rc, q[i])
        np.testing.assert_allclose(R[i].ravel(), Rc, atol=1e-15)
        mujoco.mju_mat2Quat(qc, Rc)
        np.testing.assert_allclose(back[i], qc * np.sign(qc[0] or 1.0), atol=1e-15)
        mujoco.mju_quatIntegrate(qi, w[i], 0.01)
        np.testing.assert_allclose(np.asarray(rt.quat_integrate(q[i], 0.01 * w[i])), qi, atol=1e-15)
        mujoco.mju_mulQuat(qm, q[i], q[(i + 1) % len(q)])
        np.testing.assert_allclose(np.asarray(rt.quat_mul(q[i], q[(i + 1) % len(q)])), qm, atol=1e-15)
    # rot(axis, angle) is the exponential of the skew matrix: the same rotation as the quaternion exp
    axis, angles = np.array([0.6, -0.8, 0.0]), np.linspace(-3, 3, 7)
    np.testing.assert_allclose(rt.rot(axis, angles), rt.quat_to_mat(rt.quat_exp(angles[:, None] * axis)),
                               atol=1e-15)
    np.testing.assert_allclose(rt.hat(w[0]) @ w[1], np.cross(w[0], w[1]), atol=1e-15)


# ---------------------------------------------------------------------------------------------- state

def test_free_joint_state_layout_and_shapes():
    x = np.arange(13.0)
    s = FreeJointState.from_vector(x)
    np.testing.assert_array_equal(s.pos, x[0:3])
    np.testing.assert_array_equal(s.quat, x[3:7])
    np.testing.assert_array_equal(s.vel, x[7:10])
    np.testing.assert_array_equal(s.angvel, x[10:13])
    np.testing.assert_array_equal(s.to_vector(), x)
    with pytest.raises(StateShapeError, match="qpos"):
        FreeJointState(np.zeros(6), np.zeros(6))
    with pytest.raises(StateShapeError, match="13"):
        FreeJointState.from_vector(np.zeros(12))
    body = RigidBody(SpatialInertia(1.0, np.zeros(3), np.eye(3)))
    with pytest.raises(StateShapeError, match="wrench"):
        body.accelerations(x, np.zeros(3))
    with pytest.raises(StateShapeError, match="gravity"):
        RigidBody(SpatialInertia(1.0, np.zeros(3), np.eye(3)), gravity=[0.0, 1.0])


# ---------------------------------------------------------------------------------------------- dynamics

def test_accelerations_match_mujoco_qacc(offset):
    """Newton–Euler with COM offset, rotated inertial frame, gravity and a wrench vs mj_forward."""
    m, body = offset
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = _random_state(rng)
        w = rng.normal(size=6)
        d.qpos[:], d.qvel[:] = x[:7], x[7:]
        d.xfrc_applied[1] = w
        mujoco.mj_forward(m, d)
        acc = np.asarray(body.accelerations(FreeJointState.from_vector(x), w))
        np.testing.assert_allclose(acc, d.qacc, rtol=0, atol=1e-12 * max(1.0, np.abs(d.qacc).max()))
        # the energy/COM helpers agree with MuJoCo's own kinematics
        np.testing.assert_allclose(body.com_position(x), d.xipos[1], atol=1e-14)


def test_wrench_at_matches_mj_applyFT(offset):
    """A body-frame force at a body point and a body-frame torque, converted by wrench_at, vs mj_applyFT."""
    m, body = offset
    d = mujoco.MjData(m)
    rng = np.random.default_rng(2)
    x = _random_state(rng)
    d.qpos[:], d.qvel[:] = x[:7], x[7:]
    mujoco.mj_forward(m, d)
    f_b, t_b, p_b = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)
    R = np.asarray(quat_to_mat(jnp.asarray(x[3:7])))
    qfrc = np.zeros(m.nv)
    mujoco.mj_applyFT(m, d, R @ f_b, R @ t_b, d.xpos[1] + R @ p_b, 1, qfrc)
    d.qfrc_applied[:] = qfrc
    mujoco.mj_forward(m, d)
    w = body.wrench_at(x, f_b, t_b, point=p_b, frame="body")
    np.testing.assert_allclose(body.accelerations(x, w), d.qacc, atol=1e-12)


def _mujoco_trajectory(m, x0, steps, wrench=None):
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = x0[:7], x0[7:]
    if wrench is not None:
        d.xfrc_applied[1] = wrench
    out = np.empty((steps + 1, 13))
    out[0] = x0
    for k in range(steps):
        mujoco.mj_step(m, d)
        out[k + 1, :7], out[k + 1, 7:] = d.qpos, d.qvel
    return out


@pytest.mark.parametrize("case", ["brick", "offset", "offset_wrench"])
def test_rk4_matches_mujoco_c_rk4_over_10s(case, brick, offset):
    """10 s at 1 ms: our RK4 of state_derivative vs MuJoCo C mj_step with integrator=RK4."""
    m, body = brick if case == "brick" else offset
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4 and m.opt.timestep == 1e-3
    if case == "brick":
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        x0 = np.concatenate([d.qpos, d.qvel])
    else:
        x0 = np.array([0.1, 0.2, 1.0, 0.8, 0.2, -0.3, 0.4, 0.3, -0.1, 0.5, 1.0, 3.0, -2.0])
        x0[3:7] /= np.linalg.norm(x0[3:7])
    wrench = np.array([0.5, -0.3, 2.0, 0.02, -0.01, 0.03]) if case == "offset_wrench" else None
    ref = _mujoco_trajectory(m, x0, 10_000, wrench)
    ours = np.asarray(body.simulate(x0, 1e-3, 10_000, wrench=wrench, method="rk4"))
    err = np.abs(ours - ref).max()
    assert err <= 1e-8, err
    assert np.abs(np.diff(ref[:, 3:7], axis=0)).max() > 1e-4  # it really tumbles


def test_torque_free_invariants(offset):
    """No gravity, no wrench, offset COM: energy and world angular momentum are conserved."""
    m, body0 = offset
    body = RigidBody(body0.inertia, gravity=np.zeros(3))
    x0 = np.array([0.1, 0.2, 1.0, 0.8, 0.2, -0.3, 0.4, 0.3, -0.1, 0.5, 1.0, 3.0, -2.0])
    x0[3:7] /= np.linalg.norm(x0[3:7])
    e0, l0, p0 = body.energy(x0), body.angular_momentum(x0), body.linear_momentum(x0)
    xs = body.simulate(x0, 1e-3, 5000, method="rk4")
    e, L, P = jax.vmap(body.energy)(xs), jax.vmap(body.angular_momentum)(xs), jax.vmap(body.linear_momentum)(xs)
    assert np.abs(np.asarray(e) - e0).max() <= 1e-10 * abs(e0)
    assert np.abs(np.asarray(L) - l0).max() <= 1e-10 * np.linalg.norm(l0)
    assert np.abs(np.asarray(P) - p0).max() <= 1e-10 * np.linalg.norm(p0)
    # the second-order midpoint step drifts, but only at O(h^2)
    xm = body.simulate(x0, 1e-3, 5000, method="midpoint")
    em = np.asarray(jax.vmap(body.energy)(xm))
    assert 0 < np.abs(em - e0).max() <= 1e-5 * abs(e0)


def test_gravity_free_fall_is_exact_for_midpoint():
    """Quadratic trajectory and constant principal-axis spin are reproduced exactly by `stepped`."""
    body = RigidBody(SpatialInertia(2.0, np.zeros(3), np.diag([0.1, 0.2, 0.3])), gravity=[0.0, 0.0, -9.81])
    x0 = np.array([0, 0, 1.0, 1, 0, 0, 0, 0.5, -0.2, 3.0, 0, 0, 2.0])
    xs = np.asarray(body.simulate(x0, 0.01, 200, method="midpoint"))
    t = 0.01 * np.arange(201)[:, None]
    pos = x0[:3] + x0[7:10] * t + 0.5 * np.array([0, 0, -9.81]) * t ** 2
    np.testing.assert_allclose(xs[:, :3], pos, atol=1e-12)
    ang = 2.0 * t[:, 0]
    np.testing.assert_allclose(xs[:, 3:7], np.stack([np.cos(ang / 2), 0 * ang, 0 * ang, np.sin(ang / 2)], 1),
                               atol=1e-12)


def test_stepped_unit_quaternion_and_second_order(offset):
    _, body = offset
    x0 = jnp.asarray([0.1, 0.2, 1.0, 0.8, 0.2, -0.3, 0.4, 0.3, -0.1, 0.5, 1.0, 3.0, -2.0])
    x0 = x0.at[3:7].set(x0[3:7] / jnp.linalg.norm(x0[3:7]))
    wrench = jnp.asarray([0.5, -0.3, 2.0, 0.02, -0.01, 0.03])
    xs = np.asarray(body.simulate(x0, 1e-3, 10_000, wrench=wrench, method="midpoint"))
    assert np.abs(np.linalg.norm(xs[:, 3:7], axis=1) - 1).max() <= 1e-13
    # step halving to a fixed time T = 1: error ratios of 4 (order 2), against an RK4 solution;
    # one compiled loop with a traced step count serves every refinement
    run = jax.jit(lambda h, n, rk4: jax.lax.fori_loop(
        0, n, lambda i, y: jax.lax.cond(rk4, body.stepped_rk4, body.stepped, y, wrench, h), x0))
    T = 1.0
    ref = np.asarray(run(T / 4000, 4000, True))
    errs = [np.abs(np.asarray(run(T / n, n, False)) - ref).max() for n in (50, 100, 200, 400)]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all((orders > 1.9) & (orders < 2.1)), (errs, orders)


def test_vmap_over_states_and_bodies(offset):
    _, body = offset
    rng = np.random.default_rng(3)
    xs = jnp.asarray(np.stack([_random_state(rng) for _ in range(4)]))
    ws = jnp.asarray(rng.normal(size=(4, 6)))
    batched = jax.jit(jax.vmap(lambda x, w: body.stepped(x, w, 1e-3)))(xs, ws)
    for i in range(4):
        np.testing.assert_allclose(batched[i], body.stepped(xs[i], ws[i], 1e-3), rtol=1e-14, atol=1e-15)
    # a FreeJointState pytree batches as well
    st = jax.vmap(lambda x: body.stepped(FreeJointState.from_vector(x), None, 1e-3))(xs)
    assert isinstance(st, FreeJointState) and st.qpos.shape == (4, 7) and st.qvel.shape == (4, 6)
    # a batch of bodies (different masses) through the same function
    bodies = jax.tree.map(lambda *a: jnp.stack(a), *[
        RigidBody(SpatialInertia(mi, body.inertia.com, body.inertia.inertia), body.gravity) for mi in (1.0, 2.0)])
    acc = jax.vmap(lambda b, x: b.accelerations(x, jnp.ones(6)))(bodies, xs[:2])
    for i, mi in enumerate((1.0, 2.0)):
        one = RigidBody(SpatialInertia(mi, body.inertia.com, body.inertia.inertia), body.gravity)
        np.testing.assert_allclose(acc[i], one.accelerations(xs[i], jnp.ones(6)), rtol=1e-14, atol=1e-14)
