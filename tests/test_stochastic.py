"""Stochastic integrators: strong and weak orders against exact solutions on the same Brownian
path, diffrax cross-check, counter-based keys, quaternion noise, and noise on a MuJoCo scene."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mjharness.adapters import MjScene
from mjharness.integrators import StateError, StateRegistry, StateSpec
from mjharness.integrators.prng import step_key
from mjharness.integrators.sde import Increments, coarsen, from_levy_area, levy_area, sample_increments
from mjharness.integrators.stochastic import SRA1, EulerMaruyama, StochasticHeun

EM, HEUN, SRA = EulerMaruyama(), StochasticHeun(), SRA1()


class Toy:
    """One Euclidean state of shape (n,) driven by ``slots`` independent sources.

    ``g(t, x)`` returns the (n, slots) diffusion matrix; it is packed one column per slot.
    """

    def __init__(self, n, slots, f, g):
        reg = StateRegistry()
        reg.register("x", StateSpec((n,), noise_count=slots))
        self.layout = reg.finalize()
        assert self.layout["x"].diffusion_offsets == tuple(range(0, n * slots, n))
        self.f, self.g = f, g

    def dynamics(self, t, x, ctrl=None):
        return self.f(t, x)

    def diffusion(self, t, x, ctrl=None):
        return jnp.asarray(self.g(t, x)).T.reshape(-1)


MU, SIG = 0.5, 0.6
GBM = Toy(1, 1, lambda t, x: MU * x, lambda t, x: SIG * x[:, None])
THETA, S_OU = 1.5, 1.0
OU = Toy(1, 1, lambda t, x: -THETA * x, lambda t, x: jnp.full((1, 1), S_OU))
SIN = Toy(1, 1, lambda t, x: -jnp.sin(x), lambda t, x: jnp.full((1, 1), 2.0))


@functools.cache
def runner(integ, scene):
    """One compiled function per (method, scene): ``n`` steps of ``h`` over padded increments."""
    vstep = jax.vmap(lambda x, t, h, w, z: integ.integrate(scene, t, h, x, key=Increments(w, z))[0],
                     in_axes=(0, None, None, 0, 0))

    @jax.jit
    def run(x0, h, dW, dZ, n):
        return jax.lax.fori_loop(0, n, lambda k, x: vstep(x, k * h, h, dW[k], dZ[k]), x0)

    return run


def solve(integ, scene, x0, T, n, dW, dZ, h_fine):
    """Integrate with ``n`` steps on the path given by the fine increments (steps, paths, slots)."""
    inc = coarsen(dW, dZ, h_fine, dW.shape[0] // n, axis=0)
    pad = lambda a: np.concatenate([a, np.zeros((dW.shape[0] - n,) + a.shape[1:])])
    return np.asarray(runner(integ, scene)(x0, T / n, pad(inc.dW), pad(inc.dZ), n))


def brownian(rng, steps, paths, h):
    """Exact fine (dW, dZ) pairs: Var dW = h, Var dZ = h³/3, Cov = h²/2."""
    u1, u2 = rng.standard_normal((2, steps, paths, 1))
    return np.sqrt(h) * u1, 0.5 * h ** 1.5 * (u1 + u2 / np.sqrt(3.0))


def slope(hs, errs):
    return float(np.polyfit(np.log(hs), np.log(errs), 1)[0])


# -- strong orders -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gbm_path():
    T, nf, paths = 1.0, 256, 4000
    dW, dZ = brownian(np.random.default_rng(0), nf, paths, T / nf)
    return T, nf, dW, dZ, dW.sum(axis=0)


@pytest.mark.parametrize("integ, exact_exponent, order", [
    (EM, lambda T, W: (MU - SIG ** 2 / 2) * T + SIG * W, 0.5),  # Itô GBM
    (HEUN, lambda T, W: MU * T + SIG * W, 1.0),  # Stratonovich GBM (commutative noise)
])
def test_strong_order_gbm(gbm_path, integ, exact_exponent, order):
    T, nf, dW, dZ, WT = gbm_path
    exact = np.exp(exact_exponent(T, WT))
    ns = (16, 32, 64, 128, 256)
    errs = [np.mean(np.abs(solve(integ, GBM, jnp.ones((WT.shape[0], 1)), T, n, dW, dZ, T / nf) - exact))
            for n in ns]
    p = slope([T / n for n in ns], errs)
    print(f"{integ.name}: strong errors {errs}, order {p:.3f}")
    assert abs(p - order) <= 0.15


def _ou_exact_path(rng, T, nf, paths, x0):
    """Fine (dW, dZ, Y) jointly Gaussian with Y = ∫ e^{-θ(h-s)} dW_s: the OU solution is exact."""
    h, th = T / nf, THETA
    e = np.exp(-th * h)
    cov = np.array([
        [h, h ** 2 / 2, (1 - e) / th],
        [h ** 2 / 2, h ** 3 / 3, (1 - e * (1 + th * h)) / th ** 2],
        [(1 - e) / th, (1 - e * (1 + th * h)) / th ** 2, (1 - e ** 2) / (2 * th)]])
    z = rng.standard_normal((nf, paths, 3)) @ np.linalg.cholesky(cov).T
    decay = np.exp(-th * (T - h * np.arange(1, nf + 1)))[:, None, None]
    exact = np.exp(-th * T) * x0 + S_OU * np.sum(decay * z[..., 2:], axis=0)
    return z[..., :1], z[..., 1:2], exact


def test_strong_order_sra1_ou_exact():
    """Linear OU against its exact solution on the same path. SRA1 is a strong order 1.5 method;
    on *linear* drift the order-2 remainder ½ f'' g² I_(1,1,0) vanishes and it converges at 2."""
    T, nf, paths, x0 = 1.0, 64, 4000, 0.5
    dW, dZ, exact = _ou_exact_path(np.random.default_rng(1), T, nf, paths, x0)
    ns = (4, 8, 16, 32, 64)
    errs = {integ.name: [np.mean(np.abs(solve(integ, OU, jnp.full((paths, 1), x0), T, n, dW, dZ, T / nf) - exact))
                         for n in ns] for integ in (SRA, EM)}
    p_sra, p_em = slope([T / n for n in ns], errs["sra1"]), slope([T / n for n in ns], errs["euler_maruyama"])
    print(f"OU exact: SRA1 errors {errs['sra1']} order {p_sra:.3f}; EM order {p_em:.3f}")
    assert p_sra >= 1.5 - 0.15
    assert abs(p_em - 1.0) <= 0.15  # EM is strong order 1 on additive noise
    assert errs["sra1"][-1] < 0.05 * errs["euler_maruyama"][-1]


def test_strong_order_sra1_nonlinear_additive():
    """dX = -sin X dt + 2 dW (f'' ≠ 0): order 1.5 against SRA1 itself at 512 steps on the same path."""
    T, nf, paths = 1.0, 512, 2000
    dW, dZ = brownian(np.random.default_rng(2), nf, paths, T / nf)
    x0 = jnp.full((paths, 1), 0.3)
    ref = solve(SRA, SIN, x0, T, nf, dW, dZ, T / nf)
    ns = (4, 8, 16, 32)
    errs = [np.mean(np.abs(solve(SRA, SIN, x0, T, n, dW, dZ, T / nf) - ref)) for n in ns]
    p = slope([T / n for n in ns], errs)
    print(f"SRA1 nonlinear additive: errors {errs}, order {p:.3f}")
    assert abs(p - 1.5) <= 0.15


# -- weak order ---------------------------------------------------------------------------------------

def test_weak_order_euler_maruyama_gbm():
    """E[X] and E[X²] of Itô GBM: weak order 1. The error E[X_N - X(T)] is estimated against the
    exact solution on the same (antithetic) paths, whose mean e^{μT} and second moment
    e^{(2μ+σ²)T} are known; EM's own moments (1+μh)^N and ((1+μh)²+σ²h)^N check the estimator."""
    T, nf, paths = 1.0, 32, 100_000
    dW, dZ = brownian(np.random.default_rng(4), nf, paths // 2, T / nf)
    dW, dZ = np.concatenate([dW, -dW], axis=1), np.concatenate([dZ, -dZ], axis=1)
    exact = np.exp((MU - SIG ** 2 / 2) * T + SIG * dW.sum(axis=0))
    ns = (4, 8, 16, 32)
    mean_err, second_err = [], []
    for n in ns:
        x = solve(EM, GBM, jnp.ones((paths, 1)), T, n, dW, dZ, T / nf)
        h = T / n
        for est, analytic, errs in (
                (x - exact, (1 + MU * h) ** n - np.exp(MU * T), mean_err),
                (x ** 2 - exact ** 2, ((1 + MU * h) ** 2 + SIG ** 2 * h) ** n - np.exp((2 * MU + SIG ** 2) * T),
                 second_err)):
            pairs = 0.5 * (est[:paths // 2] + est[paths // 2:])  # antithetic pairs are independent
            se = pairs.std() / np.sqrt(pairs.size)
            assert abs(est.mean() - analytic) < 4 * se, (n, est.mean(), analytic, se)
            errs.append(abs(est.mean()))
    hs = [T / n for n in ns]
    p_mean, p_second = slope(hs, mean_err), slope(hs, second_err)
    print(f"EM weak: mean errors {mean_err} order {p_mean:.3f}; second-moment errors {second_err} "
          f"order {p_second:.3f}")
    assert abs(p_mean - 1.0) <= 0.15 and abs(p_second - 1.0) <= 0.15


# -- diffrax cross-check -------------------------------------------------------------------------------

def _drift(t, x):
    return jnp.stack([-x[0] + jnp.sin(x[1]) + t, -0.5 * x[1] + jnp.cos(x[0])])


def _mult(t, x):  # state-dependent, non-commutative
    return jnp.array([[0.3 * x[0], 0.1 * jnp.sin(x[1])], [0.2, 0.4 * jnp.cos(x[0])]])


def _additive(t, x):  # time-dependent additive
    return jnp.array([[0.3 + 0.1 * t, 0.1], [0.0, 0.4 * jnp.cos(t)]])


@pytest.mark.parametrize("name", ["euler_maruyama", "stochastic_heun", "sra1"])
def test_matches_diffrax_on_same_increments(name):
    diffrax = pytest.importorskip("diffrax")
    import equinox as eqx

    class Given(diffrax.AbstractBrownianPath):
        """One step's prescribed (W, H)."""

        t0: float
        t1: float
        W: jax.Array
        H: jax.Array
        levy_area: type = eqx.field(static=True, default=diffrax.SpaceTimeLevyArea)

        def evaluate(self, t0, t1=None, left=True, use_levy=False):
            if use_levy:
                return diffrax.SpaceTimeLevyArea(dt=t1 - t0, W=self.W, H=self.H)
            return self.W

    ours, theirs, g = {"euler_maruyama": (EM, diffrax.Euler(), _mult),
                       "stochastic_heun": (HEUN, diffrax.Heun(), _mult),
                       "sra1": (SRA, diffrax.SRA1(), _additive)}[name]
    scene = Toy(2, 2, _drift, g)
    h, steps = 0.05, 20
    dW, dZ = brownian(np.random.default_rng(5), steps, 2, h)
    dW, dZ = dW[..., 0], dZ[..., 0]

    @jax.jit
    def their_step(t, y, W, H):
        terms = diffrax.MultiTerm(diffrax.ODETerm(lambda t, y, a: _drift(t, y)),
                                  diffrax.ControlTerm(lambda t, y, a: g(t, y), Given(t, t + h, W, H)))
        state = theirs.init(terms, t, t + h, y, None)
        return theirs.step(terms, t, t + h, y, None, state, False)[0]

    our_step = jax.jit(lambda t, x, w, z: ours.integrate(scene, t, h, x, key=Increments(w, z))[0])
    x = y = jnp.array([0.4, -0.2])
    for k in range(steps):
        inc = Increments(jnp.asarray(dW[k]), jnp.asarray(dZ[k]))
        x = our_step(k * h, x, inc.dW, inc.dZ)
        y = their_step(k * h, y, inc.dW, levy_area(inc, h))
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-10)
    assert float(jnp.abs(x - jnp.array([0.4, -0.2])).max()) > 0.1  # it moved


# -- randomness ----------------------------------------------------------------------------------------

def test_sampled_increments_statistics_and_sharing():
    h, n = 0.1, 200_000
    inc = jax.vmap(lambda k: sample_increments(k, h, 1, auxiliary=True))(jax.random.split(jax.random.PRNGKey(3), n))
    w, z = np.asarray(inc.dW[:, 0]), np.asarray(inc.dZ[:, 0])
    cov = np.cov(w, z)
    np.testing.assert_allclose([cov[0, 0], cov[0, 1], cov[1, 1]], [h, h ** 2 / 2, h ** 3 / 3], rtol=0.02)
    # The same key gives the same dW whether or not dZ is drawn (one path through EM and SRA1).
    key = step_key(1, 2, 3)
    layout = GBM.layout
    assert EM.increments(key, h, layout).dZ is None
    np.testing.assert_array_equal(EM.increments(key, h, layout).dW, SRA.increments(key, h, layout).dW)
    back = from_levy_area(inc.dW[:5], levy_area(Increments(inc.dW[:5], inc.dZ[:5]), h), h)
    np.testing.assert_allclose(back.dZ, inc.dZ[:5], rtol=1e-12)


def test_prescribed_increments_errors():
    x = jnp.ones(1)
    with pytest.raises(StateError, match=r"dW must have shape \(1,\)"):
        EM.integrate(GBM, 0.0, 0.1, x, key=Increments(jnp.ones(2)))
    with pytest.raises(StateError, match="SRA1 needs the auxiliary increment dZ"):
        SRA.integrate(OU, 0.0, 0.1, x, key={"dW": jnp.ones(1)})
    with pytest.raises(StateError, match="keys 'dW'"):
        EM.integrate(GBM, 0.0, 0.1, x, key={"dw": jnp.ones(1)})
    with pytest.raises(TypeError, match="needs a scene with .diffusion"):
        EM.integrate(object(), 0.0, 0.1, x, key=jax.random.PRNGKey(0))
    cfg = SRA.config()
    assert cfg["name"] == "sra1" and cfg["needs_dZ"] and EM.kind == "stochastic"


def _quat_toy():
    reg = StateRegistry()
    reg.register("p", StateSpec((2,), noise_count=1), model="m")
    reg.register("q", StateSpec((4,), update="quaternion", noise_count=2), model="m")
    reg.register("r", StateSpec((4,), update="quaternion_qdot", noise_count=2), model="m")
    reg.share_noise([("q", 1), ("p", 0)])
    layout = reg.finalize()
    a, b = np.array([0.3, -0.2, 0.5]), np.array([-0.1, 0.4, 0.2])
    omega = np.array([0.2, 0.1, -0.3])

    class Scene:
        def __init__(self):
            self.layout = layout

        def dynamics(self, t, x, ctrl=None):
            dx = jnp.zeros(layout.deriv_size)
            dx = dx.at[layout["q"].deriv_slice].set(omega)
            q = x[layout["r"].value_slice]
            qdot = 0.5 * jnp.array([-q[1:] @ omega, *(q[0] * omega + jnp.cross(q[1:], omega))])
            return dx.at[layout["r"].deriv_slice].set(qdot)

        def diffusion(self, t, x, ctrl=None):
            g = jnp.zeros(layout.diffusion_size)
            for name in ("q", "r"):
                o0, o1 = layout[name].diffusion_offsets
                g = g.at[o0:o0 + 3].set(a).at[o1:o1 + 3].set(b)
            o = layout["p"].diffusion_offsets[0]
            return g.at[o:o + 2].set(1.0)

    return Scene(), a, b, omega


def test_quaternion_noise_through_policy():
    scene, a, b, omega = _quat_toy()
    layout, h = scene.layout, 0.01
    x0 = layout.reset({"q": Rotation.from_euler("xyz", [0.3, -0.2, 0.9]).as_quat(scalar_first=True),
                       "r": Rotation.from_euler("xyz", [-0.5, 0.1, 0.4]).as_quat(scalar_first=True)})
    dW = jnp.array([0.11, -0.07, 0.05, 0.09])  # slots: {p0, q1}, q0, r0, r1
    x1 = np.asarray(jax.jit(lambda x: EM.integrate(scene, 0.0, h, x, key=Increments(dW))[0])(jnp.asarray(x0)))
    wq = [float(dW[s]) for s in layout["q"].noise_slots]
    # quaternion: drift then each local source in state-local order, rotations in the body frame.
    rq = (Rotation.from_quat(x0[layout["q"].value_slice], scalar_first=True) * Rotation.from_rotvec(h * omega)
          * Rotation.from_rotvec(a * wq[0]) * Rotation.from_rotvec(b * wq[1]))
    np.testing.assert_allclose(x1[layout["q"].value_slice], rq.as_quat(scalar_first=True, canonical=False),
                               atol=1e-14)
    # The order matters: swapping the two sources gives another rotation.
    swapped = (Rotation.from_quat(x0[layout["q"].value_slice], scalar_first=True) * Rotation.from_rotvec(h * omega)
               * Rotation.from_rotvec(b * wq[1]) * Rotation.from_rotvec(a * wq[0]))
    assert np.abs(swapped.as_quat(scalar_first=True) - x1[layout["q"].value_slice]).max() > 1e-5
    # shared slot: p moved by the very increment q's second source used
    assert x1[layout["p"].value_slice].tolist() == [wq[1], wq[1]]
    # quaternion_qdot: q + h q̇ + ½ q ⊗ [0, δ], normalised; agrees with the exp map to O(|δ|²).
    q0 = x0[layout["r"].value_slice]
    wr = [float(dW[s]) for s in layout["r"].noise_slots]
    tangent = h * omega + a * wr[0] + b * wr[1]
    w, v = q0[0], q0[1:]
    lin = q0 + 0.5 * np.concatenate([[-v @ tangent], w * tangent + np.cross(v, tangent)])
    np.testing.assert_allclose(x1[layout["r"].value_slice], lin / np.linalg.norm(lin), atol=1e-15)
    exact = Rotation.from_quat(q0, scalar_first=True) * Rotation.from_rotvec(tangent)
    assert np.abs(exact.as_quat(scalar_first=True) - x1[layout["r"].value_slice]).max() < np.sum(tangent ** 2)


def test_same_seed_bitwise_identical_across_batch_chunks():
    """Keys are (seed, global world, step): 64 worlds as one chunk equal 4 chunks of 16, bitwise."""
    scene, *_ = _quat_toy()
    layout, h, steps, seed = scene.layout, 0.01, 25, 11
    rng = np.random.default_rng(6)
    x0 = np.stack([layout.reset({"p": rng.standard_normal(2)}) for _ in range(64)])

    def world(x, wid):
        def body(x, k):
            x = HEUN.integrate(scene, k * h, h, x, key=step_key(seed, wid, k))[0]
            return x, x
        return jax.lax.scan(body, x, jnp.arange(steps))[1]

    run = jax.jit(jax.vmap(world))
    whole = np.asarray(run(jnp.asarray(x0), jnp.arange(64)))
    parts = np.concatenate([np.asarray(run(jnp.asarray(x0[c:c + 16]), jnp.arange(c, c + 16)))
                            for c in range(0, 64, 16)])
    assert whole.shape == (64, steps, layout.size)
    assert np.array_equal(whole, parts)
    assert not np.array_equal(whole[0], whole[1])  # worlds do differ


# -- MuJoCo scene: extra OU state and joint noise, stationary variances ------------------------------

ROTOR = """
<mujoco model="rotor">
  <option gravity="0 0 0"><flag contact="disable"/></option>
  <worldbody>
    <body name="rotor">
      <joint name="spin" type="hinge" axis="0 0 1" damping="1.0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_mujoco_stationary_variances_rollout():
    """An Ornstein–Uhlenbeck extra state (τ = 1, σ = 0.8) and a damped rotor with joint noise
    (I = 1, c = 1, σ = 0.5: velocity OU) over 4096 worlds: stationary variances σ²τ/2 and σ²/(2cI)."""
    from mjharness.rollout import rollout

    tau, s_ou, s_j = 1.0, 0.8, 0.5
    scene = MjScene(ROTOR)
    scene.add_joint_noise("spin", s_j)
    scene.add_state("actuator", "bias", StateSpec((1,), noise_count=1), lambda t, b, d: -b / tau,
                    diffusion_fn=lambda t, b, d: jnp.full((1, 1), s_ou))
    layout = scene.layout
    worlds, dt, steps = 4096, 0.02, 200  # 4 τ: 1 - e^{-8} of the stationary variance
    res = rollout(scene, EM, dt=dt, steps=steps, x0=np.zeros((worlds, layout.size)), seed=5,
                  record_every=50, progress=False)
    x = np.asarray(res.x[-1])
    bias, vel = x[:, layout["actuator/bias"].value_slice][:, 0], x[:, layout["spin/qvel"].value_slice][:, 0]
    var_b, var_v = bias.var(), vel.var()
    print(f"OU bias variance {var_b:.4f} (σ²τ/2 = {s_ou ** 2 * tau / 2}), rotor velocity variance {var_v:.4f} "
          f"(σ²/2cI = {s_j ** 2 / 2})")
    assert abs(var_b / (s_ou ** 2 * tau / 2) - 1) < 0.05
    assert abs(var_v / (s_j ** 2 / 2) - 1) < 0.05
    assert abs(bias.mean()) < 4 * np.sqrt(var_b / worlds) and abs(vel.mean()) < 4 * np.sqrt(var_v / worlds)
    assert abs(np.corrcoef(bias, vel)[0, 1]) < 0.05  # independent sources
