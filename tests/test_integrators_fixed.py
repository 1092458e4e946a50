"""Fixed-step integrators: tableaux, registry, measured convergence orders, the torque-free brick
against the analytic (Jacobi elliptic) solution, conservation, and MJX's / MuJoCo C's RK4 side by side.

Compile cost: one jitted program per scene runs every tableau with <= 4 stages (padded with
zero-weight stages, which gives the same numbers) over traced (a, b, c) arrays, vmapped over four
lanes (step sizes, or initial conditions).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from integrators_common import ToyRigidBody, torque_free_omega, world_angular_momentum

from mjharness.adapters import MjScene
from mjharness.integrators import (
    INTEGRATORS,
    RK4,
    RK38,
    TABLEAUX,
    CrouchGrossman3,
    Euler,
    Heun,
    Midpoint,
    SemiImplicitEuler,
    StateError,
    get_integrator,
    register_integrator,
)
from mjharness.integrators import tableaux as tb
from mjharness.integrators.lie import dexpinv, rkmk_transform
from mjharness.integrators.rk import rk_step_carry
from mjharness.scenes import load_scene

N_REC = 100  # records per run (scan length, static)
FIXED = [tb.EULER, tb.HEUN, tb.MIDPOINT, tb.RK4, tb.RK38]


# -- tableaux and registry ------------------------------------------------------------------------

def _order_conditions(a, b, c, p):
    """Residuals of the classical order conditions up to order min(p, 5) (exact where fractions)."""
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    res = [b.sum() - 1]
    if p >= 2:
        res.append(b @ c - 1 / 2)
    if p >= 3:
        res += [b @ c**2 - 1 / 3, b @ a @ c - 1 / 6]
    if p >= 4:
        res += [b @ c**3 - 1 / 4, b @ (c * (a @ c)) - 1 / 8, b @ a @ c**2 - 1 / 12, b @ a @ a @ c - 1 / 24]
    if p >= 5:
        res += [b @ c**4 - 1 / 5, b @ (c**2 * (a @ c)) - 1 / 10, b @ ((a @ c) ** 2) - 1 / 20,
                b @ (c * (a @ c**2)) - 1 / 15, b @ a @ c**3 - 1 / 20, b @ (c * (a @ a @ c)) - 1 / 30,
                b @ a @ (c * (a @ c)) - 1 / 40, b @ a @ a @ c**2 - 1 / 60, b @ a @ a @ a @ c - 1 / 120]
    return np.abs(res)


@pytest.mark.parametrize("name", sorted(TABLEAUX))
def test_tableau_order_conditions(name):
    t = TABLEAUX[name]
    np.testing.assert_allclose(np.sum(t.a, axis=1), t.c, atol=1e-15)  # row-sum convention
    assert _order_conditions(t.a, t.b, t.c, t.order).max() < 1e-14
    if t.order < 5:  # the next order fails: the stated order is the true one (conditions here stop at 5)
        assert _order_conditions(t.a, t.b, t.c, t.order + 1).max() > 1e-6
    if t.embedded:
        assert _order_conditions(t.a, t.b_low, t.c, t.order_low).max() < 1e-14
        assert _order_conditions(t.a, t.b_low, t.c, t.order_low + 1).max() > 1e-6
    assert json.loads(json.dumps(t.to_dict()))["order"] == t.order
    a, b, c = t.padded(8)
    assert b[:t.stages] == t.b and b[t.stages:] == (0.0,) * (8 - t.stages) and len(a) == len(c) == 8
    assert all(row[:t.stages] == t.a[i] for i, row in enumerate(a[:t.stages]))


def test_tableau_rejects_implicit_and_bad_shapes():
    with pytest.raises(ValueError, match="strictly lower triangular"):
        tb.Tableau("bad", ((0.0, 1.0), (0.0, 0.0)), (0.5, 0.5), (0.0, 1.0), 1)
    with pytest.raises(ValueError, match="c has 1 entries"):
        tb.Tableau("bad", ((), (1.0,)), (0.5, 0.5), (0.0,), 1)


def test_registry_names_classes_and_config():
    expected = {"euler": Euler, "semi_implicit_euler": SemiImplicitEuler, "heun": Heun, "midpoint": Midpoint,
                "rk4": RK4, "rk38": RK38, "bogacki_shampine": None, "rkf45": None, "dormand_prince": None,
                "crouch_grossman3": CrouchGrossman3}
    for name, cls in expected.items():
        assert name in INTEGRATORS
        if cls is not None:
            assert INTEGRATORS[name] is cls
        integ = get_integrator(name.upper())
        assert integ.name == name
        assert (integ.kind == "adaptive") == (name in ("bogacki_shampine", "rkf45", "dormand_prince"))
        cfg = json.loads(json.dumps(integ.config()))
        assert cfg["name"] == name
    assert get_integrator("dormand_prince", rtol=1e-9).controller.rtol == 1e-9
    assert RK4() == RK4() and hash(RK4()) == hash(RK4())  # valid jit static arguments
    with pytest.raises(KeyError, match="unknown integrator 'rk5'"):
        get_integrator("rk5")
    with pytest.raises(TypeError, match="rk4"):
        get_integrator("rk4", rtol=1e-3)
    with pytest.raises(ValueError, match="quaternion_stages"):
        RK4(quaternion_stages="slerp")
    with pytest.raises(ValueError, match="already taken"):
        register_integrator(Heun, "rk4")


def test_semi_implicit_euler_needs_position_velocity_pairs():
    scene = ToyRigidBody()
    scene.second_order = None  # and no MuJoCo joints to fall back on
    with pytest.raises(StateError, match="second_order"):
        SemiImplicitEuler().integrate(scene, 0.0, 1e-3, scene.x0())
    bad = ToyRigidBody()
    bad.second_order = (("body/omega", "body/quat"),)
    with pytest.raises(StateError, match="cannot drive position state 'body/omega'"):
        SemiImplicitEuler().integrate(bad, 0.0, 1e-3, bad.x0())


def test_semi_implicit_euler_generic_scene_under_vmap():
    """A non-MuJoCo scene: omega first, then the attitude with the new omega (exp map), batched."""
    scene = ToyRigidBody()
    x0 = np.stack([scene.x0((0.2, 3.0, 0.1)), scene.x0((1.0, -0.5, 0.3))])
    h = 1e-2
    out = np.asarray(jax.jit(jax.vmap(lambda x: SemiImplicitEuler().integrate(scene, 0.0, h, x)[0]))(x0))
    for i in range(2):
        w = x0[i, 4:]
        inertia = scene.inertia
        w_new = w + h * np.cross(inertia * w, w) / inertia
        np.testing.assert_allclose(out[i, 4:], w_new, rtol=0, atol=1e-15)
        ang = np.linalg.norm(w_new) * h
        q_expect = np.concatenate([[np.cos(ang / 2)], np.sin(ang / 2) * w_new / np.linalg.norm(w_new)])
        np.testing.assert_allclose(out[i, :4], q_expect, rtol=0, atol=1e-15)


def test_dexpinv_against_finite_differences():
    """theta' = dexp^-1_theta(omega) makes q0 * exp(theta) move with body rate omega."""
    from mjharness.integrators.policies import quat_exp, quat_mul

    rng = np.random.default_rng(0)
    for scale in (1e-3, 0.05, 0.7, 2.5):  # both branches of the series / closed form
        theta = rng.normal(size=3) * scale
        omega = rng.normal(size=3)
        thdot = np.asarray(dexpinv(jnp.asarray(theta), jnp.asarray(omega)))
        eps = 1e-6
        qp = np.asarray(quat_exp(jnp.asarray(theta + eps * thdot)))
        qm = np.asarray(quat_exp(jnp.asarray(theta - eps * thdot)))
        q = np.asarray(quat_exp(jnp.asarray(theta)))
        qdot = (qp - qm) / (2 * eps)
        conj = q * np.array([1, -1, -1, -1])
        body = 2 * np.asarray(quat_mul(jnp.asarray(conj), jnp.asarray(qdot)))  # 2 q^-1 q' = [0, omega]
        np.testing.assert_allclose(body[1:], omega, atol=1e-8)


# -- MuJoCo scenes: one compiled runner per scene ---------------------------------------------------

def _runner(scene):
    """jit(vmap(run)): (a, b, c, rkmk flag) shared; (x0, h, steps per record) per lane."""
    from mjharness.integrators.lie import has_exp_map_states

    exp_map = has_exp_map_states(scene.layout)

    def run(a, b, c, lie, x0, h, n_inner):
        def transform(layout, inc, k):
            return jnp.where(lie, rkmk_transform(layout, inc, k), k)

        tr = transform if exp_map else None

        def inner(i, x):
            return rk_step_carry(scene, (a, b, c), 0.0, x, h, transform=tr)[0]

        def outer(x, _):
            x = jax.lax.fori_loop(0, n_inner, inner, x)
            return x, x

        return jax.lax.scan(outer, x0, None, length=N_REC)[1]

    return jax.jit(jax.vmap(run, in_axes=(None, None, None, None, 0, 0, 0)))


@pytest.fixture(scope="module")
def brick_hi():
    scene = MjScene("brick", quaternion_update="quaternion_qdot")
    return scene, _runner(scene)


@pytest.fixture(scope="module")
def brick_exp():
    scene = MjScene("brick", quaternion_update="quaternion")
    return scene, _runner(scene)


@pytest.fixture(scope="module")
def pendulum():
    scene = MjScene("double_pendulum")
    return scene, _runner(scene)


def _orders(scene, run, tab, n_totals, T, lie=True):
    """Observed orders log2(|x_h - x_h/2| / |x_h/2 - x_h/4|) from four step sizes."""
    x0 = scene.reset(keyframe=0)
    n_totals = np.asarray(n_totals)
    lanes = len(n_totals)
    a, b, c = tab.padded(4)
    out = np.asarray(run(a, b, c, lie, np.broadcast_to(x0, (lanes, x0.size)), T / n_totals, n_totals // N_REC))
    final = out[:, -1]
    d = [np.abs(final[i] - final[i + 1]).max() for i in range(lanes - 1)]
    return np.log2(np.array(d[:-1]) / np.array(d[1:])), d


@pytest.mark.parametrize("tab", FIXED, ids=lambda t: t.name)
def test_convergence_order_double_pendulum(pendulum, tab):
    scene, run = pendulum
    ns = np.array([400, 800, 1600, 3200]) * (8 if tab.order == 1 else 1)
    p, d = _orders(scene, run, tab, ns, 1.0)
    print(f"double_pendulum {tab.name}: orders {np.round(p, 3)}, diffs {d}")
    assert np.all(np.abs(p - tab.order) <= 0.2), (tab.name, p, d)


@pytest.mark.parametrize("policy", ["quaternion_qdot", "quaternion"])
@pytest.mark.parametrize("tab", FIXED, ids=lambda t: t.name)
def test_convergence_order_brick(brick_hi, brick_exp, policy, tab):
    scene, run = brick_hi if policy == "quaternion_qdot" else brick_exp
    ns = np.array([100, 200, 400, 800]) * (8 if tab.order == 1 else 1)
    p, d = _orders(scene, run, tab, ns, 1.0)
    print(f"brick/{policy} {tab.name}: orders {np.round(p, 3)}, diffs {d}")
    assert np.all(np.abs(p - tab.order) <= 0.2), (tab.name, p, d)


def test_plain_exp_map_stages_are_second_order(brick_exp):
    """MJX's rungekutta4 scheme (stage quaternions = q0 exp(h sum a_ij omega_j)) caps RK4 at order 2;
    the RKMK stages (our default) restore 4."""
    scene, run = brick_exp
    p, d = _orders(scene, run, tb.RK4, np.array([100, 200, 400, 800]), 1.0, lie=False)
    print(f"brick exp-map RK4 without dexp^-1: orders {np.round(p, 3)}")
    assert np.all(np.abs(p - 2) <= 0.2), p


def test_padded_tableau_equals_class_step(brick_exp):
    """The traced, zero-padded tableau used above gives exactly what RK4().step / Euler().step give."""
    scene, run = brick_exp
    x0 = scene.reset(keyframe=0)
    h = 1e-3
    for integ in (RK4(), Euler()):
        a, b, c = integ.tableau.padded(4)
        ours = np.asarray(run(a, b, c, True, np.broadcast_to(x0, (4, x0.size)), np.full(4, h),
                              np.ones(4, int)))[0, 0]
        ref = np.asarray(jax.jit(lambda x, integ=integ: integ.integrate(scene, 0.0, h, x)[0])(x0))
        assert np.abs(ours - ref).max() <= 1e-15, integ.name


# -- the torque-free brick: analytic solution and conservation --------------------------------------

OMEGAS = np.array([[0.2, 3.0, 0.1], [-0.2, 3.0, -0.1], [0.3, -1.0, 2.0], [-2.0, 0.5, 0.4]])


@pytest.fixture(scope="module")
def brick_runs(brick_hi, brick_exp):
    """RK4, h = 1 ms, 10 s, four initial body rates (both tumbling regimes), both policies."""
    out = {}
    for key, (scene, run) in (("quaternion_qdot", brick_hi), ("quaternion", brick_exp)):
        x0 = np.stack([scene.reset({"brick/angvel": w}, keyframe=0) for w in OMEGAS])
        a, b, c = tb.RK4.padded(4)
        xs = np.asarray(run(a, b, c, True, x0, np.full(4, 1e-3), np.full(4, 10_000 // N_REC)))
        out[key] = (scene, x0, xs)
    return out


@pytest.mark.parametrize("policy", ["quaternion_qdot", "quaternion"])
def test_brick_rk4_vs_analytic_and_conservation(brick_runs, policy):
    scene, x0, xs = brick_runs[policy]
    m = scene.model
    assert np.allclose(m.body_iquat[1], [1, 0, 0, 0])  # body frame = principal frame
    inertia = m.body_inertia[1]
    t = np.arange(1, N_REC + 1) * 0.1
    q_sl, v_sl = scene.layout["brick/quat"].value_slice, scene.layout["brick/angvel"].value_slice
    for i, w0 in enumerate(OMEGAS):
        q, w = xs[i, :, q_sl], xs[i, :, v_sl]
        err = np.abs(w - torque_free_omega(inertia, w0, t)).max()
        ke = 0.5 * np.sum(inertia * w**2, axis=-1)
        ke0 = 0.5 * np.sum(inertia * w0**2)
        L = world_angular_momentum(q, w, inertia)
        L0 = inertia * w0  # q0 = identity
        dL = np.abs(L - L0).max() / np.linalg.norm(L0)
        dn = np.abs(np.linalg.norm(q, axis=-1) - 1).max()
        print(f"brick/{policy} w0={w0}: |w - analytic| {err:.2e}, KE rel {np.abs(ke / ke0 - 1).max():.2e}, "
              f"L rel {dL:.2e}, | |q| - 1 | {dn:.1e}")
        assert err <= 1e-8
        assert np.abs(ke / ke0 - 1).max() <= 1e-9
        assert dL <= 1e-9
        assert dn <= 1e-12


def test_angular_momentum_drift_ours_mjx_and_c(brick_runs, record_property):
    """World angular momentum drift over 10 s, h = 1 ms: our RK4 (both policies), MJX's rungekutta4
    and MuJoCo C's RK4, side by side; and how far MJX's and our trajectories are from C's."""
    from mujoco import mjx

    steps, every = 10_000, 10_000 // N_REC
    m = load_scene("brick")
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    inertia = m.body_inertia[1]
    # MuJoCo C
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    c_traj = []
    for i in range(steps):
        mujoco.mj_step(m, d)
        if (i + 1) % every == 0:
            c_traj.append(np.concatenate([d.qpos, d.qvel]))
    c_traj = np.array(c_traj)
    # MJX's own RK4 (carry only qpos/qvel: see DESIGN §7 on scan carries of MJX data)
    mm = mjx.put_model(m)
    d0 = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d0, 0)
    template = mjx.put_data(m, d0)

    @jax.jit
    def mjx_run(qpos, qvel):
        def inner(_, s):
            dd = mjx.step(mm, template.replace(qpos=s[0], qvel=s[1]))
            return dd.qpos, dd.qvel

        def outer(s, _):
            s = jax.lax.fori_loop(0, every, inner, s)
            return s, jnp.concatenate(s)

        return jax.lax.scan(outer, (qpos, qvel), None, length=N_REC)[1]

    mjx_traj = np.asarray(mjx_run(jnp.asarray(d0.qpos), jnp.asarray(d0.qvel)))

    def drift(traj):
        q, w = traj[:, 3:7], traj[:, 10:13]
        L = world_angular_momentum(q, w, inertia)
        L0 = inertia * m.key_qvel[0][3:]
        return np.abs(L - L0).max()

    row = {"mujoco_c_rk4": drift(c_traj), "mjx_rungekutta4": drift(mjx_traj)}
    gap = {"mjx_rungekutta4": np.abs(mjx_traj[:, :7] - c_traj[:, :7])[:N_REC // 2].max()}
    for policy in ("quaternion", "quaternion_qdot"):
        xs = brick_runs[policy][2][0]  # world 0 starts at the keyframe
        row[f"ours_rk4_{policy}"] = drift(xs)
        gap[f"ours_rk4_{policy}"] = np.abs(xs[:N_REC // 2, :7] - c_traj[:N_REC // 2, :7]).max()
    print("world angular momentum drift over 10 s:", {k: f"{v:.2e}" for k, v in row.items()})
    print("max |qpos - MuJoCo C| over 5 s:", {k: f"{v:.2e}" for k, v in gap.items()})
    for k, v in row.items():
        record_property(f"L_drift_{k}", float(v))
    for k, v in gap.items():
        record_property(f"qpos_gap_5s_{k}", float(v))
    # Ours holds MuJoCo C's accuracy on MJX data (C: ~1e-12 here).
    for policy in ("quaternion", "quaternion_qdot"):
        assert row[f"ours_rk4_{policy}"] <= max(10 * row["mujoco_c_rk4"], 1e-11)
    assert gap["ours_rk4_quaternion"] <= 1e-9  # RKMK stages: C's RK4 itself


# -- the Crouch–Grossman Lie-group method -----------------------------------------------------------

@pytest.mark.parametrize("policy", ["quaternion", "quaternion_qdot"])
def test_crouch_grossman3_order_and_unit_quaternion(policy):
    scene = ToyRigidBody(update=policy)
    w0 = np.array([0.4, 2.0, -1.0])
    x0 = jnp.asarray(scene.x0(w0))
    integ = get_integrator("crouch_grossman3")
    assert isinstance(integ, CrouchGrossman3) and integ.order == 3 and integ.kind == "fixed"

    def run(h, n):
        return jax.lax.fori_loop(0, n, lambda i, x: integ.integrate(scene, 0.0, h, x)[0], x0)

    ns = np.array([50, 100, 200, 400])
    out = np.asarray(jax.jit(jax.vmap(run))(1.0 / ns, ns))
    d = [np.abs(out[i] - out[i + 1]).max() for i in range(3)]
    p = np.log2(np.array(d[:-1]) / np.array(d[1:]))
    print(f"crouch_grossman3/{policy}: orders {np.round(p, 3)}")
    assert np.all(np.abs(p - 3) <= 0.2), p
    assert np.abs(out[-1, 4:] - torque_free_omega(scene.inertia, w0, 1.0)).max() < 1e-7
    assert np.abs(np.linalg.norm(out[:, :4], axis=-1) - 1).max() < 1e-14
