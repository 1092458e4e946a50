"""backend='warp' (MJX with impl='warp', the optional extra ``[warp]``) against MuJoCo C ``mj_step``.

Skipped where the extra is not installed (CI). MJWarp computes in float32 only, so our float64 integrators
on warp dynamics agree with C to float32 round-off, not to 1e-14 as backend='mujoco' does. The bound is
grounded in raw MJWarp's own agreement with C on the same worlds (``mjx.step`` with impl='warp' data and
C's integrator, computed here): ours must be within ``FACTOR`` of it plus ``SLACK``. Measured on CPU
(data/backends/warp/warp_measure.out), 100 steps, 4 worlds, ours-vs-C / MJWarp-vs-C: box_on_plane Euler
4.2e-7 / 4.2e-7, RK4 3.7e-7 / 4.1e-7.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("warp")
from backend_common import backend_trajectories, c_trajectories, mjwarp_trajectories, worlds  # noqa: E402
from mujoco import mjx  # noqa: E402

from mjharness.adapters import MjScene  # noqa: E402
from mjharness.adapters.mujoco_backend import BackendError  # noqa: E402

FACTOR, SLACK = 4.0, 2e-6  # float32: eps 1.2e-7 per operation, |x| <= 1 here
STEPS, BATCH = 100, 4


@pytest.fixture(scope="module")
def box():
    return MjScene("box_on_plane", backend="warp")


def test_the_scene_holds_a_warp_model_and_warp_data(box):
    assert box.mjx_model.impl == mjx.Impl.WARP
    assert box._template.impl == mjx.Impl.WARP  # MJX's forward refuses a warp model with JAX data


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_agreement_with_c_is_that_of_mjwarp_itself(box, method):
    m = box.model
    n = m.nq + m.nv + m.na
    x0, ctrl = worlds(m, BATCH)
    ref = c_trajectories(m, method, x0, ctrl, STEPS)
    ours = np.abs(backend_trajectories(box, method, x0, ctrl, STEPS)[..., :n] - ref).max()
    raw = np.abs(mjwarp_trajectories(m, method, x0, ctrl, STEPS, box._template._impl.naconmax) - ref).max()
    assert ours <= FACTOR * raw + SLACK, (ours, raw)
    assert raw < 1e-5, raw  # MJWarp itself is float32-close to C on this scene


def test_float64_is_not_honoured_by_the_dynamics_but_the_state_stays_float64(box):
    assert jax.config.jax_enable_x64
    x = jnp.asarray(box.x0())
    d = box.forward(0.0, x)
    assert x.dtype == jnp.float64 and d.qacc.dtype == jnp.float32  # MJWarp is float32 only
    r = backend_trajectories(box, "euler", *worlds(box.model, 2), steps=5)
    assert r.dtype == np.float64


def test_many_worlds_share_the_contact_arena_without_overflow(box):
    """MJWarp allocates ONE contact buffer (naconmax) for all vmapped worlds: 64 boxes must all rest on
    the plane (with MJX's default naconmax=48 they fell through it: max |dx| 2.26)."""
    m = box.model
    x0, ctrl = worlds(m, 64)
    ref = c_trajectories(m, "euler", x0, ctrl, 50)
    ours = backend_trajectories(box, "euler", x0, ctrl, 50)[..., :m.nq + m.nv]
    assert np.abs(ours - ref).max() < 1e-5


def test_gradients_are_refused(box):
    x = jnp.asarray(box.x0())
    with pytest.raises(BackendError, match="backend=.warp.*differentiate"):
        jax.grad(lambda x: box.forward(0.0, x).qacc.sum())(x)


def test_missing_warp_is_a_clear_error(monkeypatch):
    import mujoco.mjx.warp as mjx_warp
    monkeypatch.setattr(mjx_warp, "WARP_INSTALLED", False)
    with pytest.raises(BackendError, match="warp-lang"):
        MjScene("box_on_plane", backend="warp")


def test_humanoid_one_step_is_mjwarps_own_step():
    """On humanoid MJWarp itself differs from C by 2.5e-3 after ONE step (its contact/solver path, 1 solver
    iteration), and both trajectories diverge chaotically after ~10 steps; ours reproduces MJWarp's step to
    float32 (measured 2.0e-7 Euler, 1.3e-5 RK4 after one step)."""
    scene = MjScene("humanoid", backend="warp")
    m = scene.model
    n = m.nq + m.nv + m.na
    x0, ctrl = worlds(m, BATCH)
    ref = c_trajectories(m, "euler", x0, ctrl, 1)
    ours = backend_trajectories(scene, "euler", x0, ctrl, 1)[..., :n]
    raw = mjwarp_trajectories(m, "euler", x0, ctrl, 1, scene._template._impl.naconmax)
    assert np.abs(ours - raw).max() < 1e-5
    assert np.abs(ours - ref).max() <= FACTOR * np.abs(raw - ref).max() + SLACK


def test_randomized_worlds_run_on_warp_as_on_c(box):
    """randomize on warp (issue 31): the same drawn and derived fields as MuJoCo C (cast to MJWarp's float32), and
    the worlds agree with C's to float32 round-off (resting boxes, 50 steps)."""
    from mjharness.rollout import rollout

    rnd = {"body_mass:box": "*uniform(0.5, 2)", "geom_friction:floor[0]": "uniform(0.3, 1.2)"}
    kw = dict(steps=50, batch=4, randomize=rnd, seed=3, progress=False)
    rw = rollout(box, "semi_implicit_euler", **kw)
    rc = rollout("box_on_plane", "semi_implicit_euler", backend="mujoco", **kw)
    assert rw.stats["backend"] == "warp" and sorted(rw.model_params) == sorted(rc.model_params)
    for k, v in rc.model_params.items():
        assert np.array_equal(rw.model_params[k], v), k
    assert np.abs(rw.x - rc.x).max() < 1e-5


def test_termination_and_reset_on_warp_give_cs_episodes(box):
    """on_terminate='reset' on warp (issue 33): thrown boxes, reset when they stop: the same episode boundaries as
    MuJoCo C (float32 dynamics, so states to float32 round-off)."""
    from mjharness.rollout import rollout

    m = box.model
    x0 = np.tile(np.concatenate([m.qpos0, np.zeros(m.nv)]), (2, 1))
    x0[:, m.nq:m.nq + 3] = [[1.0, 0.0, 1.0], [1.5, 0.3, 1.0]]

    def stopped(t, x):
        return jnp.linalg.norm(x[7:13]) < 0.05

    kw = dict(steps=400, x0=x0, terminate=stopped, on_terminate="reset", progress=False)
    rw = rollout(box, "semi_implicit_euler", **kw)
    rc = rollout("box_on_plane", "semi_implicit_euler", backend="mujoco", **kw)
    for w in range(2):
        assert [(e["start_step"], e["end_step"], e["end"]) for e in rw.episodes(w)] == \
            [(e["start_step"], e["end_step"], e["end"]) for e in rc.episodes(w)]
    assert np.abs(rw.x - rc.x).max() < 1e-4


def test_contacts_output_on_warp_matches_mujoco_c(box):
    """The contacts output on warp (issue 34): MJWarp's shared arena read by world (contact.worldid), forces decoded
    from each contact's constraint rows as mj_contactForce does: the same slots, geoms and counts as MuJoCo C, pos
    and forces to float32 round-off (measured 3.7e-8 m, 1.4e-6 of the largest force)."""
    from mjharness.adapters.contacts import COL, FORCE, FRAME, POS
    from mjharness.rollout import rollout

    kw = dict(steps=30, batch=3, outputs=("contacts",), perturb=0.3, seed=1, progress=False)
    rw = rollout(box, "semi_implicit_euler", **kw)
    rc = rollout("box_on_plane", "semi_implicit_euler", backend="mujoco", **kw)
    cw, cc = rw.outputs["contacts"], rc.outputs["contacts"]
    assert np.array_equal(cw[..., COL["valid"]], cc[..., COL["valid"]]) and cc[..., COL["valid"]].sum() >= 3 * 30
    assert np.array_equal(cw[..., :2], cc[..., :2])
    assert np.abs(cw[..., POS] - cc[..., POS]).max() < 1e-6 and np.abs(cw[..., FRAME] - cc[..., FRAME]).max() < 1e-6
    assert np.abs(cw[..., FORCE] - cc[..., FORCE]).max() <= 1e-5 * np.abs(cc[..., FORCE]).max()
    assert np.array_equal(rw.outputs["contacts_ncon"][..., 0], rc.outputs["contacts_ncon"][..., 0])
    assert not rw.outputs["contacts_ncon"][..., 2].any()  # no overflow: the arena holds every world's contacts


def test_a_full_warp_arena_is_flagged_not_silent():
    """naconmax below the worlds' contacts: MJWarp drops contacts; every row that saw a full arena is flagged
    (overflow bit 8, OVER_ARENA) and the run's stats name the worlds."""
    from mjharness.adapters.contacts import OVER_ARENA
    from mjharness.rollout import rollout

    small = MjScene("box_on_plane", backend="warp", naconmax=4)
    r = rollout(small, "semi_implicit_euler", steps=5, batch=3, outputs=("contacts",), progress=False)
    bits = r.outputs["contacts_ncon"][..., 2].astype(int)
    assert np.all(bits & OVER_ARENA)
    assert sorted(r.stats["flagged"]["contacts_ncon"]) == [0, 1, 2]
