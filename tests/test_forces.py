"""Force providers (``MjScene.add_force``, adapters/forces.py): evaluated at every stage, on MuJoCo C and MJX.

References are hand-written loops in MuJoCo C: at every stage, ``mj_fwdPosition`` / ``mj_fwdVelocity``, the same
provider on that data into ``xfrc_applied`` (or ``qfrc_applied``), then ``mj_forward`` (or ``mj_step``).
"""

from __future__ import annotations

from types import SimpleNamespace

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.adapters.backends import BackendError, choose
from mjharness.adapters.backends.providers import HostForces
from mjharness.adapters.forces import ForceError
from mjharness.integrators import DormandPrince, StateError
from mjharness.rollout import rollout

# A free body whose centre of mass is off its frame (torques about xipos matter) with a hinged arm; no contacts.
XML = """<mujoco><option gravity="0 0 -9.81" timestep="0.01"/><worldbody>
<body name="b" pos="0 0 1"><freejoint/>
<geom type="box" size="0.1 0.2 0.3" mass="2" pos="0.05 -0.02 0.03" contype="0" conaffinity="0"/>
<body name="arm" pos="0.1 0 0.3"><joint name="h" type="hinge" axis="0 1 0" damping="0.05"/>
<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.4" contype="0" conaffinity="0"/></body>
</body></worldbody></mujoco>"""
B, DT, STEPS = 2, 0.01, 40


def wrench(xp):
    """A body-frame push whose size varies with time, and drag on the COM velocity and the spin, on body b;
    a body-frame force on the arm. Leading axes free: one world (MJX) or a batch (MuJoCo C)."""
    def push_and_drag(t, x, data):
        R = data.xmat[..., 1, :, :]
        w_world = xp.einsum("...ij,...j->...i", R, data.qvel[..., 3:6])
        v_com = data.qvel[..., 0:3] + xp.cross(w_world, data.xipos[..., 1, :] - data.xpos[..., 1, :])
        push = xp.einsum("...ij,...j->...i", R, xp.asarray([1.0, 0.5, 0.0])) * (1 + 0.5 * xp.sin(3 * t))[..., None]
        body = xp.concatenate([push - 0.3 * v_com, -0.05 * w_world], axis=-1)
        arm = xp.concatenate([xp.einsum("...ij,...j->...i", data.xmat[..., 2, :, :], xp.asarray([0.0, 0.0, 2.0])),
                              xp.zeros_like(w_world)], axis=-1)
        return xp.stack([xp.zeros_like(body), body, arm], axis=-2)
    return push_and_drag


def generalized(t, x, data):
    """Generalized forces: a damping of every dof and a time-varying torque on the hinge."""
    q = -0.2 * data.qvel
    return {"qfrc": q + np.stack([np.zeros_like(t)] * 6 + [0.3 * np.cos(2 * t)], axis=-1)}


def x0_batch(scene) -> np.ndarray:
    x = scene.reset(batch=B)
    x[:, scene.qvel_segment] = np.random.default_rng(1).normal(size=(B, scene.nv))
    return x


def _view(m, d) -> SimpleNamespace:
    """MjData's fields as the batch view hands them to a provider (leading axis 1; matrices 3x3)."""
    mats = {f: getattr(d, f).reshape(1, -1, 3, 3) for f in ("xmat", "ximat")}
    return SimpleNamespace(**{f: getattr(d, f)[None].copy() for f in ("qpos", "qvel", "xpos", "xipos", "cvel")},
                           time=np.array([d.time]), **mats)


def _provided(m, d, fn, t, qpos, qvel):
    """The provider at (t, qpos, qvel) on MjData's position and velocity stages: (xfrc, qfrc)."""
    d.time, d.qpos[:], d.qvel[:] = t, qpos, qvel
    mujoco.mj_fwdPosition(m, d)
    mujoco.mj_fwdVelocity(m, d)
    out = fn(np.array([t]), np.concatenate([qpos, qvel])[None], _view(m, d))
    out = out if isinstance(out, dict) else {"xfrc": out}
    return out.get("xfrc", np.zeros((1, m.nbody, 6)))[0], out.get("qfrc", np.zeros((1, m.nv)))[0]


def dexpinv(theta, omega):
    """The inverse right Jacobian of SO(3) on omega (Runge-Kutta-Munthe-Kaas stages of a quaternion)."""
    a2 = theta @ theta
    if a2 < 1e-2:
        c = 1 / 12 + a2 / 720 + a2 * a2 / 30240
    else:
        a = np.sqrt(a2)
        c = 1 / a2 - (1 + np.cos(a)) / (2 * a * np.sin(a))
    txw = np.cross(theta, omega)
    return omega + 0.5 * txw + c * np.cross(theta, txw)


def c_rk4(m, fn, x0, h, steps) -> np.ndarray:
    """MuJoCo C's RK4 by hand (stages at mj_integratePos of the combined velocities; the free joint's angular
    velocity of a stage as dexp^-1 of that stage's rotation increment, Runge-Kutta-Munthe-Kaas, as mj_RungeKutta
    4.0 steps), with the provider set before every stage's mj_forward; the state after each step (steps, n)."""
    d = mujoco.MjData(m)
    nq, rot = m.nq, slice(3, 6)  # the free joint's angular dofs
    A, b, c = [[], [0.5], [0.0, 0.5], [0.0, 0.0, 1.0]], [1 / 6, 1 / 3, 1 / 3, 1 / 6], [0.0, 0.5, 0.5, 1.0]

    def stage(t, qpos, qvel, theta):
        d.xfrc_applied[:], d.qfrc_applied[:] = _provided(m, d, fn, t, qpos, qvel)
        mujoco.mj_forward(m, d)
        v = qvel.copy()
        v[rot] = dexpinv(theta, v[rot])
        return v, d.qacc.copy()

    def combine(q0, v0, ks, w, t):
        q = q0.copy()
        mujoco.mj_integratePos(m, q, sum(wi * k[0] for wi, k in zip(w, ks)), h)
        return q, v0 + h * sum(wi * k[1] for wi, k in zip(w, ks))

    q, v, out = x0[:nq].copy(), x0[nq:].copy(), []
    for k in range(steps):
        t, ks = k * h, []
        for i in range(4):
            qi, vi = combine(q, v, ks, A[i], t) if i else (q, v)
            theta = h * sum((wi * kj[0][rot] for wi, kj in zip(A[i], ks)), np.zeros(3))
            ks.append(stage(t + c[i] * h, qi, vi, theta))
        q, v = combine(q, v, ks, b, t)
        out.append(np.concatenate([q, v]))
    return np.array(out)


@pytest.fixture(scope="module")
def c_run():
    scene = MjScene(XML, backend="mujoco")
    scene.add_force(wrench(np), name="push")
    x0 = x0_batch(scene)
    return x0, rollout(scene, "rk4", dt=DT, steps=STEPS, x0=x0, progress=False, outputs=["applied_wrench"])


@pytest.fixture(scope="module")
def mjx_run(c_run):
    scene = MjScene(XML, backend="mjx")
    scene.add_force(wrench(jnp), name="push")
    return rollout(scene, "rk4", dt=DT, steps=STEPS, x0=c_run[0], progress=False, outputs=["applied_wrench"])


def test_wrench_equals_c_reference_and_runs_per_stage(c_run):
    x0, r = c_run
    m = MjScene(XML, backend="mujoco").model
    for w in range(B):
        ref = c_rk4(m, wrench(np), x0[w], DT, STEPS)
        err = np.abs(np.asarray(r.x)[:, w] - ref).max()
        assert err <= 1e-12, err
    # The whole-chunk C path has no per-stage hook: the stage path ran, keyed by nothing on disk (no trace_key).
    assert r.stats["trace_cache"] == "plain"


def test_mjx_equals_mujoco_c(c_run, mjx_run):
    assert np.abs(np.asarray(mjx_run.x) - np.asarray(c_run[1].x)).max() <= 1e-10
    wc, wj = (np.asarray(r.outputs["applied_wrench"]) for r in (c_run[1], mjx_run))
    assert np.abs(wj - wc).max() <= 1e-10


def test_applied_wrench_is_the_providers_wrench_at_the_recorded_states(c_run):
    _, r = c_run
    m = MjScene(XML, backend="mujoco").model
    d = mujoco.MjData(m)
    got = np.asarray(r.outputs["applied_wrench"])
    assert got.shape == (STEPS, B, m.nbody, 6)
    for k in (0, 7, STEPS - 1):
        for w in range(B):
            x = np.asarray(r.x)[k, w]
            want = _provided(m, d, wrench(np), float(r.time[k]), x[:m.nq], x[m.nq:])[0]
            assert np.abs(got[k, w] - want).max() <= 1e-14
    assert np.abs(got[:, :, 1, :3]).max() > 0.5  # the push is there


def test_rk4_keeps_order_four_with_a_provider():
    scene = MjScene(XML, backend="mujoco")
    scene.add_force(wrench(np), name="push")
    x0, T = x0_batch(scene)[:1], 0.8
    final = {h: np.asarray(rollout(scene, "rk4", dt=h, steps=round(T / h), x0=x0, progress=False,
                                   record_every=round(T / h)).x)[-1, 0] for h in (0.04, 0.02, 0.0025)}
    e1, e2 = (np.abs(final[h] - final[0.0025]).max() for h in (0.04, 0.02))
    order = np.log2(e1 / e2)
    assert order >= 3.9, (e1, e2, order)


def test_generalized_forces_equal_qfrc_applied():
    scene = MjScene(XML, backend="mujoco")
    scene.add_force(generalized)
    x0 = x0_batch(scene)
    r = rollout(scene, "rk4", dt=DT, steps=20, x0=x0, progress=False)
    for w in range(B):
        ref = c_rk4(scene.model, generalized, x0[w], DT, 20)
        assert np.abs(np.asarray(r.x)[:, w] - ref).max() <= 1e-12


def test_providers_sum_and_implicit_fast_per_world_path():
    """Two providers sum; ImplicitFast on MuJoCo C (mj_implicit per world) applies them before each mj_forward,
    equal to mj_step (implicitfast) with the providers set from the step's own position and velocity stages."""
    scene = MjScene(XML, backend="mujoco")
    scene.add_force(wrench(np), name="push")
    scene.add_force(generalized, name="damping")
    x0 = x0_batch(scene)
    r = rollout(scene, "implicit_fast", dt=DT, steps=15, x0=x0, progress=False)
    m = scene.model
    m.opt.integrator, m.opt.timestep = mujoco.mjtIntegrator.mjINT_IMPLICITFAST, DT
    d = mujoco.MjData(m)
    for w in range(B):
        q, v = x0[w, :m.nq], x0[w, m.nq:]
        for k in range(15):
            f1, _ = _provided(m, d, wrench(np), k * DT, q, v)
            _, f2 = _provided(m, d, generalized, k * DT, q, v)
            d.xfrc_applied[:], d.qfrc_applied[:] = f1, f2
            mujoco.mj_step(m, d)
            q, v = d.qpos.copy(), d.qvel.copy()
            d.time = (k + 1) * DT
            assert np.abs(np.asarray(r.x)[k, w] - np.concatenate([q, v])).max() <= 1e-12


def test_adaptive_method_sees_the_provider():
    scene = MjScene(XML, backend="mujoco")
    scene.add_force(wrench(np), name="push")
    x0 = x0_batch(scene)
    dp = rollout(scene, DormandPrince(rtol=1e-10, atol=1e-10), dt=0.2, steps=3, x0=x0, progress=False)
    rk = rollout(scene, "rk4", dt=0.0025, steps=240, x0=x0, progress=False, record_every=80)
    assert np.all(np.asarray(dp.status) == 0)
    assert np.abs(np.asarray(dp.x)[-1] - np.asarray(rk.x)[-1]).max() <= 1e-7


def test_bad_providers_and_unsupported_places_are_refused():
    c, j = MjScene(XML, backend="mujoco"), MjScene(XML, backend="mjx")
    for scene, lead in ((c, "(B, nbody, 6) = (1, 3, 6)"), (j, "(nbody, 6) = (3, 6)")):
        with pytest.raises(ForceError, match=r"'short'.*\(3, 3\)|'short'.*\(1, 3, 3\)") as e:
            scene.add_force(lambda t, x, data: data.xpos, name="short")
        assert lead in str(e.value)
        with pytest.raises(ForceError, match="'tau'.*keys"):
            scene.add_force(lambda t, x, data: {"torque": data.qvel}, name="tau")
        assert scene.force_providers == ()  # a refused provider is not kept
    c.add_force(generalized)
    assert c.trace_key() is None and "force_providers" in c.needs()
    with pytest.raises(ForceError, match="already has"):
        c.add_force(generalized, name="generalized")
    c.layout  # noqa: B018 - finalizes, as a compiled run does
    with pytest.raises(StateError, match="add_force.*finalized"):
        c.add_force(wrench(np), name="late")
    with pytest.raises(BackendError, match="force providers.*warp"):
        choose("warp", c.needs())
    with pytest.raises(BackendError, match="generalized.*per-world model fields \\['nonsense'\\]"):
        HostForces(c.backend_state.pool, c.force_providers, (("nonsense", 1),))


def test_host_sums_are_the_providers_arrays_and_a_reset_world_gets_nan():
    """HostForces hands back a provider's own arrays (no copy a stage) and zeros for a kind none gives; a world that
    Batch.forward resets (NaN qpos) gets NaN forces in a copy, the provider's array left as it returned it."""
    c = MjScene(XML, backend="mujoco")
    got = []

    def reads_kinematics(t, x, data):
        w = np.zeros((x.shape[0], c.model.nbody, 6))
        w[:, 1, :3] = data.xipos[:, 1, :]  # a kinematic field: the velocity stage runs, and may reset a world
        got.append(w)
        return w

    c.add_force(reads_kinematics)
    forces = c.backend_impl._forces(c, None)
    x = x0_batch(c)
    n = x.shape[0]
    xfrc, qfrc = forces(np.zeros(n), x, np.zeros((n, c.model.nu)))
    assert xfrc is got[-1] and not qfrc.any() and qfrc.shape == (n, c.model.nv)
    x[1, 0] = np.nan
    xfrc, qfrc = forces(np.zeros(n), x, np.zeros((n, c.model.nu)))
    assert xfrc is not got[-1] and np.isfinite(got[-1]).all()
    assert np.isnan(xfrc[1]).all() and np.isnan(qfrc[1]).all()
    np.testing.assert_array_equal(xfrc[0], got[-1][0])
    assert np.isfinite(qfrc[0]).all() and not qfrc[0].any()


def test_batch_jit_splits_the_batch_bit_identically():
    """batch_jit: the function itself on traced values, one jitted call per slice on NumPy batches, every world the
    bits of one jitted call on the whole batch (the Monte Carlo example's drag: geodesy, US 1976, rotations)."""
    import jax

    from mjharness.adapters.forces import batch_jit
    from mjharness.examples import monte_carlo_spheres as mc

    n = 5003  # slices of unequal lengths
    rng = np.random.default_rng(0)
    r = np.array([1.2e6, -4.6e6, 4.1e6]) * (1 + 1e-3 * rng.normal(size=(n, 1))) + 1e3 * rng.normal(size=(n, 3))
    args = (np.linspace(0.0, 30.0, n), r, 30.0 * rng.normal(size=(n, 3)), rng.uniform(0.4, 0.5, n),
            np.broadcast_to(0.07, (n,)), rng.normal(size=(n, 3)))
    whole = np.asarray(jax.jit(mc._drag_eci)(*args))
    for threads in (1, 2, 3):
        split = batch_jit(mc._drag_eci, threads=threads, min_rows=1000)(*args)
        assert isinstance(split, np.ndarray)
        np.testing.assert_array_equal(split, whole)
    one = jax.jit(lambda *a: batch_jit(mc._drag_eci)(*a))(*(a[7] for a in args))  # traced: the function itself
    np.testing.assert_allclose(np.asarray(one), whole[7], rtol=1e-13)
    with pytest.raises(ValueError, match="leading lengths"):
        batch_jit(mc._drag_eci)(args[0][:3], *args[1:])
