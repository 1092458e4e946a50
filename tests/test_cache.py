"""The disk cache of traced chunk functions (rollout/cache.py): keys, reuse, and a second process."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import SingleDeviceSharding

from mjharness.adapters import MjScene
from mjharness.integrators import RK4, SemiImplicitEuler, StateSpec
from mjharness.rollout import cache, open_rollout, rollout

# The disk cache of traced chunk functions serves the MJX path (MuJoCo C's host calls are not exported).
KW = dict(dt=0.002, steps=40, batch=3, record_every=10, chunk=20, seed=1, progress=False, backend="mjx")


@pytest.fixture
def export_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MJHARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MJHARNESS_EXPORT_CACHE", raising=False)
    monkeypatch.setattr(cache, "_IN_PROCESS", collections.OrderedDict())
    return tmp_path / "exported"


def _as_if_new_process():
    cache._IN_PROCESS.clear()  # what a fresh process starts with: only the disk cache


def test_scene_trace_key_is_stable_and_names_what_the_trace_holds():
    a, b = MjScene("double_pendulum"), MjScene("double_pendulum")
    assert a.trace_key() == b.trace_key() and len(a.trace_key()) == 64
    assert MjScene("double_pendulum", quaternion_update="quaternion_qdot").trace_key() != a.trace_key()
    m = MjScene("double_pendulum").model
    m.opt.gravity[2] = -3.0
    assert MjScene(m).trace_key() != a.trace_key()
    noisy = MjScene("double_pendulum")
    noisy.add_joint_noise(noisy.joints[0].name, 0.1)
    assert noisy.trace_key() not in (None, a.trace_key())
    extra = MjScene("double_pendulum")
    extra.add_state("user", "z", StateSpec(shape=(1,)), lambda t, v, d: -v)
    assert extra.trace_key() is None  # user code takes part: no key, no disk cache


def test_rollout_reuses_the_exported_trace_bitwise(export_cache):
    x0 = MjScene("double_pendulum").x0()[None].repeat(3, 0) + 0.1
    x0_before = x0.copy()
    first = rollout(MjScene("double_pendulum"), RK4(), x0=x0, **dict(KW, batch=None))
    assert first.stats["trace_cache"] == "traced"
    files = list(export_cache.glob("*.jaxexport"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    _as_if_new_process()
    second = rollout(MjScene("double_pendulum"), RK4(), x0=x0, **dict(KW, batch=None))
    assert second.stats["trace_cache"] == "exported"
    assert second.stats["trace_s"] < first.stats["trace_s"]
    np.testing.assert_array_equal(second.x, first.x)
    np.testing.assert_array_equal(x0, x0_before)  # the donated carry never aliases the caller's x0
    np.testing.assert_array_equal(first.x0, x0_before)


def test_key_changes_with_integrator_batch_and_chunk(export_cache):
    sc = MjScene("double_pendulum")
    runs = [rollout(MjScene("double_pendulum"), integ, **dict(KW, **kw))
            for integ, kw in ((RK4(), {}), (SemiImplicitEuler(), {}), (RK4(), dict(batch=4)), (RK4(), dict(chunk=40)))]
    assert [r.stats["trace_cache"] for r in runs] == ["traced"] * 4
    assert len(list(export_cache.glob("*.jaxexport"))) == 4
    _as_if_new_process()
    plain = rollout(sc, RK4(), ctrl=None, **KW)
    assert plain.stats["trace_cache"] == "exported"
    np.testing.assert_array_equal(plain.x, runs[0].x)


def test_a_repeat_in_the_same_process_reuses_the_executable(export_cache, monkeypatch):
    # rollout("name", ...) builds a new MjScene per call: the key, not the object, finds the executable.
    first = rollout("double_pendulum", "rk4", **KW)
    files = sorted(export_cache.glob("*.jaxexport"))
    again = rollout("double_pendulum", "rk4", **KW)
    assert (first.stats["trace_cache"], again.stats["trace_cache"]) == ("traced", "in-process")
    assert again.stats["compile_s"] == 0.0 and sorted(export_cache.glob("*.jaxexport")) == files
    np.testing.assert_array_equal(again.x, first.x)
    monkeypatch.setattr(cache, "_IN_PROCESS_MAX", 1)  # bounded: the oldest executable goes first
    other = rollout("double_pendulum", "rk4", **dict(KW, batch=2))
    assert other.stats["trace_cache"] == "traced" and len(cache._IN_PROCESS) == 1
    assert rollout("double_pendulum", "rk4", **KW).stats["trace_cache"] == "exported"


def test_no_disk_cache_without_a_complete_key(export_cache, monkeypatch):
    sc = MjScene("arm")
    r = rollout(sc, SemiImplicitEuler(), ctrl=lambda t, x: jnp.zeros(sc.nu), **KW)
    assert r.stats["trace_cache"] == "plain"  # a ctrl callable's code is not in the key
    monkeypatch.setenv("MJHARNESS_EXPORT_CACHE", "0")
    r = rollout(MjScene("double_pendulum"), RK4(), **KW)
    assert r.stats["trace_cache"] == "plain"
    assert not list(export_cache.glob("*.jaxexport"))


def _tiny(x):
    return jnp.linalg.cholesky(x @ x.T + jnp.eye(3)), jnp.sin(x)


def test_corrupt_or_unwritable_cache_entries_are_traced_again(export_cache):
    x = jnp.arange(9.0).reshape(3, 3) / 10
    sh = SingleDeviceSharding(jax.devices()[0])
    kw = dict(in_shardings=(sh,), out_shardings=(sh, sh), key="k" * 64)
    _, _, _, src = cache.compile_cached(_tiny, (x,), **kw)
    assert src == "traced"
    path = export_cache / ("k" * 64 + ".jaxexport")
    path.write_bytes(b"not an export")
    _as_if_new_process()
    compiled, _, _, src = cache.compile_cached(_tiny, (x,), **kw)
    assert src == "traced" and path.stat().st_size > 100  # overwritten with a good entry
    _as_if_new_process()
    compiled2, _, _, src = cache.compile_cached(_tiny, (x,), **kw)
    assert src == "exported"
    for a, b in zip(compiled(x), compiled2(x)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    export_cache.rename(export_cache.with_name("moved"))
    export_cache.write_bytes(b"")  # the cache folder is now a file: nothing can be stored there
    _, _, _, src = cache.compile_cached(_tiny, (x,), **dict(kw, key="m" * 64))
    assert src == "traced"  # could not be stored, but the run goes on


def test_second_process_takes_the_trace_from_disk():
    # The one check that needs two processes: a deserialized module calls jaxlib's LAPACK kernels
    # without lowering any linalg op (jax-ml/jax#29610 segfaults there unless cache initialises them).
    from mjharness.rollout.bench import cache_check

    cc = cache_check("double_pendulum", integrator="rk4", steps=20, batch=2, timeout=600)
    assert cc["first"]["trace_cache"] == "traced"
    assert cc["second_trace_cache"] == "exported"
    assert cc["same_result"]
    assert cc["second"]["trace_s"] < cc["first"]["trace_s"]


def test_a_resume_from_the_file_model_reuses_the_trace(export_cache, tmp_path):
    """The file's model (MJB, signature 0) keys like the model that ran: a resume does not trace again."""
    path = tmp_path / "r.h5"
    first = rollout("double_pendulum", "rk4", out=path, **dict(KW, steps=20))
    assert first.stats["trace_cache"] in ("traced", "exported", "in-process")
    with open_rollout(path) as f:
        model = f.model()
    assert MjScene(model, backend="mjx").trace_key() == MjScene("double_pendulum", backend="mjx").trace_key()
    again = rollout(MjScene(model, backend="mjx"), "rk4", resume=path, **dict(KW, steps=40, batch=None))
    assert again.stats["trace_cache"] in ("in-process", "exported")  # the first run's trace, not a new one
