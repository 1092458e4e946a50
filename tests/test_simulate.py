"""simulate(): same numbers as rollout(), gradients against central finite differences, clear errors.

Each check is one jitted program (the gradient and the finite-difference evaluations, the latter as extra
worlds of one batch), so a test costs one compile.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import cached_scene  # noqa: E402

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, BogackiShampine, EulerMaruyama, SemiImplicitEuler
from mjharness.rollout import RolloutError, rollout, simulate
from mjharness.rollout.engine.plan import initial_states
from mjharness.scenes import load_scene

jax.config.update("jax_enable_x64", True)

DT, STEPS, EPS = 0.01, 12, 1e-6


@pytest.fixture(scope="module")
def dp():
    scene = cached_scene("double_pendulum")
    return scene, initial_states(scene, 1, 0, 0.3)


def _fd_check(scene, integ, x0, field, p0, ix, tol, dt=DT, steps=STEPS, **kw):
    """Gradient of sum(x_T^2) (one world) w.r.t. the model field and x0[0, ix] vs central differences.

    The 2 * (len(p0) + len(ix)) perturbed evaluations run as the worlds of one forward batch (the loss is
    a sum over independent worlds), inside the same jit as the gradient.
    """
    def final(x, p):
        return simulate(scene, integ, x, dt=dt, steps=steps, model_params={field: p}, **kw)[1][-1]

    dirs = [(np.zeros_like(x0), e) for e in np.eye(len(p0))]
    dirs += [(np.eye(x0.shape[1])[i][None], np.zeros(len(p0))) for i in ix]
    xb = np.concatenate([x0 + s * EPS * dx for dx, _ in dirs for s in (1, -1)])
    pb = np.stack([p0 + s * EPS * dp for _, dp in dirs for s in (1, -1)])

    @jax.jit
    def both(x, p, xb, pb):
        g = jax.grad(lambda x, p: jnp.sum(final(x, p) ** 2), argnums=(0, 1))(x, p)
        f = jnp.sum(final(xb, pb) ** 2, axis=1)
        return g, (f[0::2] - f[1::2]) / (2 * EPS)

    (gx, gp), fd = both(jnp.asarray(x0), jnp.asarray(p0), jnp.asarray(xb), jnp.asarray(pb))
    ad = np.concatenate([np.asarray(gp), np.asarray(gx)[0, list(ix)]])
    err = np.abs(ad - np.asarray(fd)) / np.maximum(np.abs(np.asarray(fd)), 1e-8)
    assert np.max(err) <= tol, (ad, np.asarray(fd), err)
    return err


def test_same_numbers_as_rollout(dp):
    """Bit-equal (np.array_equal) to rollout: eager, under jit, at other chunk boundaries, with ctrl and params."""
    scene, x0 = dp
    r = rollout(scene, RK4(), dt=DT, steps=STEPS, x0=x0, record_every=2, chunk=STEPS, progress=False, backend="mjx")
    t, xs = simulate(scene, RK4(), x0, dt=DT, steps=STEPS, record_every=2, chunk=STEPS)  # eager
    assert np.array_equal(np.asarray(t), r.time)
    assert np.array_equal(np.asarray(xs), r.x)
    both = jax.jit(lambda x: tuple(simulate(scene, RK4(), x, dt=DT, steps=STEPS, record_every=2, chunk=c)[1]
                                   for c in (STEPS, 4)))
    for xs in both(jnp.asarray(x0)):  # chunk=4: three checkpointed chunks
        assert np.array_equal(np.asarray(xs), r.x)


def test_same_numbers_as_rollout_ctrl_params():
    scene = cached_scene("arm")
    B, nu = 2, scene.nu
    x0 = initial_states(scene, B, 0, 0.1)
    u = 0.3 * np.random.default_rng(0).standard_normal((B, STEPS, nu))
    damp = np.tile(scene.model.dof_damping, (B, 1)) * np.array([[1.0], [2.0]])
    kw = dict(dt=DT, steps=STEPS, ctrl=u, model_params={"dof_damping": damp}, record_every=3)
    r = rollout(scene, RK4(), x0=x0, chunk=6, progress=False, backend="mjx", **kw)  # simulate is MJX
    _, xs = simulate(scene, RK4(), x0, chunk=9, **kw)
    assert np.array_equal(np.asarray(xs), r.x)


@pytest.mark.parametrize("integ, kw", [(RK4(), {}), (SemiImplicitEuler(), {}), (EulerMaruyama(), {"seed": 3})],
                         ids=["rk4", "semi_implicit_euler", "euler_maruyama_fixed_increments"])
def test_gradient_matches_finite_differences(dp, integ, kw):
    scene, x0 = dp
    if integ.kind == "stochastic" and not hasattr(scene, "diffusion"):
        pytest.skip("scene has no diffusion")
    # chunk=4: three checkpointed chunks, so the gradient runs through the chunk recomputation.
    _fd_check(scene, integ, x0, "dof_damping", np.array([0.1, 0.2]), (1, 3), 1e-6, chunk=4, **kw)


def test_gradient_through_soft_contact():
    """A box sliding on the plane, in contact the whole time (no onset inside the horizon): smooth.

    MJX's constraint solver iterates in a lax.while_loop, which reverse mode cannot cross; with
    opt.iterations = 1 it takes one (differentiable) Newton step from the warm start instead.
    """
    model = load_scene("box_on_plane")
    model.opt.iterations = 1
    model.geom_solref[:] = (0.1, 1.0)  # a soft contact (time constant 0.1 s): smooth in the penetration
    scene = MjScene(model)
    x0 = np.asarray(initial_states(scene, 1, 0, 0.0))
    nq = scene.model.nq
    x0[0, 2] = 0.0995          # 0.5 mm penetration: in contact from the first step
    x0[0, nq] = 0.3            # sliding along x: friction acts
    box = scene.model.body("box").id
    mass = np.asarray(scene.model.body_mass, np.float64)
    # Checked: box mass, x0 height (2), x and z velocity (nq, nq + 2), all to 1e-4.
    err = _fd_check(scene, SemiImplicitEuler(), x0, "body_mass", mass, (2, nq, nq + 2), 1e-4,
                    dt=0.002, steps=10)
    assert err[box] <= 1e-4, err


def test_adaptive_forward_mode_only(dp):
    scene, x0 = dp
    integ = BogackiShampine()

    def final(x):
        return simulate(scene, integ, x, dt=DT, steps=4)[1][-1]

    x0 = jnp.asarray(x0)
    v = jnp.zeros_like(x0).at[0, 1].set(1.0)

    @jax.jit
    def both(x, v):
        _, jv = jax.jvp(final, (x,), (v,))
        f = final(jnp.concatenate([x + EPS * v, x - EPS * v]))
        return jv, (f[:1] - f[1:]) / (2 * EPS)

    jv, fd = both(x0, v)
    np.testing.assert_allclose(np.asarray(jv), np.asarray(fd), rtol=1e-5, atol=1e-8)
    with pytest.raises(RolloutError, match="BogackiShampine.*forward mode.*jax.jvp"):
        jax.grad(lambda x: jnp.sum(final(x)))(x0)


@pytest.mark.parametrize("params, match", [
    ({"jnt_type": np.zeros(2)}, "not a floating field"),
    ({"no_such_field": np.zeros(2)}, "no field 'no_such_field'"),
    ({"dof_damping": np.zeros(3)}, r"shape \(2,\)"),
    ({"opt.gravity": np.zeros((5, 3))}, r"\(1, 3\)"),
])
def test_bad_model_params_fail_before_compile(dp, params, match):
    scene, x0 = dp
    with pytest.raises(RolloutError, match=match):
        simulate(scene, RK4(), x0, dt=DT, steps=STEPS, model_params=params)


def test_bad_x0_and_ctrl(dp):
    scene, x0 = dp
    with pytest.raises(RolloutError, match="x0 must have shape"):
        simulate(scene, RK4(), x0[:, :3], dt=DT, steps=STEPS)
    with pytest.raises(RolloutError, match="nu=0"):
        simulate(scene, RK4(), x0, dt=DT, steps=STEPS, ctrl=np.zeros((STEPS, 1)))


def test_bench_grad_wiring(capsys, tmp_path):
    """`mjharness bench --grad` at a tiny size: both programs measured, ratios and the bar reported."""
    import json

    from mjharness.rollout.cli.app import main

    out = tmp_path / "grad.json"
    rc = main(["bench", "--grad", "double_pendulum", "--batch", "2", "--steps", "4", "--record-every", "2",
               "--repeats", "1", "--min-time", "0", "--quiet", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "gradient cost: double_pendulum RK4 batch 2, 4 steps" in text and "grad / forward: time" in text
    rep = json.loads(out.read_text())["grad"][0]
    assert rep["forward"]["run_s"] > 0 and rep["grad"]["run_s"] > 0 and rep["time_x"] > 0
    assert rep["forward"]["xla_peak_bytes"] > 0 and rep["memory_x"] > 0
