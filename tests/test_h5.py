"""HDF5 rollout files: layout table, header, virtual datasets, streaming writer, partial reads.

Most checks drive the writer directly (no JAX compile); the file written by a real rollout is checked
in test_rollout.py (bit-for-bit against the in-memory result).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from datetime import datetime, timezone

import h5py
import numpy as np
import pytest
from rollout_common import run_a

from mjharness.integrators import StateRegistry, StateSpec
from mjharness.rollout import h5
from mjharness.rollout.h5 import RolloutFileError, open_rollout


@pytest.fixture(scope="session")
def rollout_a():
    return run_a()


def _spec(scene, B=3, T=10, time_chunk=4, compression=None, params=None):
    layout = scene.layout
    x0 = np.arange(B * layout.size, dtype=np.float64).reshape(B, layout.size)
    return h5.FileSpec(attrs=dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION, dt=0.01, record_every=2,
                                  steps=2 * T, batch=B, seed=0, integrator=json.dumps({"name": "test"})),
                       mjcf="<mujoco/>", compat_log=[{"code": "x", "message": "m"}],
                       layout=h5.layout_table(layout, scene.joint_of), x0=x0, model_params=params or {},
                       samples=T, qpos=scene.qpos_segment, qvel=scene.qvel_segment, time_chunk=time_chunk,
                       compression=compression)


def _chunk(rng, j0, n, B, size):
    return (0.02 * (np.arange(j0, j0 + n) + 1), rng.standard_normal((n, B, size)))


@pytest.mark.parametrize("name", ["double_pendulum", "brick", "mixed"])
def test_layout_table_rebuilds_the_layout(scene_cache, name):
    scene = scene_cache(name)
    table = h5.layout_table(scene.layout, scene.joint_of)
    assert h5.layout_from_table(table) == scene.layout
    joints = {r["name"].decode(): r["joint"].decode() for r in table}
    for state, joint in joints.items():
        assert joint == (scene.joint_of(state) or "")


def test_layout_table_keeps_noise_slots_and_shared_noise():
    reg = StateRegistry()
    reg.register("a/pos", StateSpec((3,)), model="a")
    reg.register("a/quat", StateSpec((4,), update="quaternion"), model="a")
    reg.register("b/v", StateSpec((2,), error_control="component"), model="b")
    reg.add_noise("a/pos", 2)
    reg.add_noise("a/quat", 1)
    reg.add_noise("b/v", 1)
    reg.share_noise([("a/pos", 1), ("b/v", 0)])
    layout = reg.finalize()
    rebuilt = h5.layout_from_table(h5.layout_table(layout))
    assert rebuilt == layout
    assert rebuilt.noise_slots == layout.noise_slots == 3
    assert rebuilt["b/v"].noise_slots == layout["b/v"].noise_slots


def test_writer_streams_chunks_readable_while_open(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "r.h5")
    B, T, n = 3, 10, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T))
    rng = np.random.default_rng(0)
    w = h5.RolloutWriter(p)
    t0, x0 = _chunk(rng, 0, 4, B, n)
    w.put(0, t0, x0, np.zeros(B, np.int8), np.full(B, -1))
    # The writer flushes per chunk: wait for it, then read with the writer still open.
    for _ in range(200):
        with h5py.File(p, "r", locking=False) as f:
            if f.attrs["samples"] == 4:
                break
        time.sleep(0.01)
    with open_rollout(p) as f:
        assert f.samples == 4 and not f.complete
        assert np.array_equal(f.x, x0) and np.array_equal(f.time, t0)
        assert np.array_equal(f.qpos, x0[..., scene.qpos_segment])
    t1, x1 = _chunk(rng, 4, 6, B, n)
    st = np.array([0, 1, 0], np.int8)
    w.put(4, t1, x1, st, np.array([-1, 7, -1]))
    w.close(complete=True)
    with open_rollout(p) as f:
        assert f.complete and f.samples == T
        assert np.array_equal(f.x, np.concatenate([x0, x1]))
        assert np.array_equal(f.qvel, np.concatenate([x0, x1])[..., scene.qvel_segment])
        assert np.array_equal(f.status, st) and list(f.status_step) == [-1, 7, -1]
        assert np.array_equal(f.state("elbow/qvel"), np.concatenate([x0, x1])[..., 3:4])
        assert np.array_equal(f.x0, _spec(scene, B, T).x0)
        assert f.compat_log == [{"code": "x", "message": "m"}] and f.mjcf == "<mujoco/>"
        assert f.attrs["integrator"] == {"name": "test"}


def test_virtual_datasets_are_views_of_x_and_survive_a_move(tmp_path, scene_cache):
    scene = scene_cache("brick")  # nq 7 != nv 6
    p = str(tmp_path / "r.h5")
    B, T, n = 2, 5, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T))
    t, x = _chunk(np.random.default_rng(1), 0, T, B, n)
    w = h5.RolloutWriter(p)
    w.put(0, t, x, np.zeros(B, np.int8), np.full(B, -1))
    w.close(complete=True)
    moved = str(tmp_path / "sub")
    os.mkdir(moved)
    q = shutil.move(p, os.path.join(moved, "renamed.h5"))
    with h5py.File(q, "r") as f:
        assert f["qpos"].is_virtual and f["qvel"].is_virtual
        assert f["qpos"].shape == (T, B, 7) and f["qvel"].shape == (T, B, 6)
        assert np.array_equal(f["qpos"][()], x[..., :7]) and np.array_equal(f["qvel"][()], x[..., 7:13])


def test_compression_and_chunking_along_time(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "c.h5")
    B, T, n = 4, 12, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T, time_chunk=3, compression="gzip"))
    t, x = _chunk(np.random.default_rng(2), 0, T, B, n)
    w = h5.RolloutWriter(p)
    for j in range(0, T, 3):
        w.put(j, t[j:j + 3], x[j:j + 3], np.zeros(B, np.int8), np.full(B, -1))
    w.close(complete=True)
    with h5py.File(p, "r") as f:
        assert f["x"].compression == "gzip" and f["x"].chunks == (3, B, n)
        assert f["x"].maxshape == (None, B, n)
    with open_rollout(p) as f:
        assert np.array_equal(f.x, x)


def test_extend_grows_x_and_virtual_datasets(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "e.h5")
    B, T, n = 2, 4, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T))
    t, x = _chunk(np.random.default_rng(3), 0, 7, B, n)
    w = h5.RolloutWriter(p)
    w.put(0, t[:4], x[:4], np.zeros(B, np.int8), np.full(B, -1))
    w.close(complete=True)
    h5.extend_rollout_file(p, 7, {"steps": 14})
    with open_rollout(p) as f:
        assert not f.complete and f.samples == 4 and f.attrs["steps"] == 14
        assert f.h5["qpos"].shape == (7, B, 2)
    w = h5.RolloutWriter(p)
    w.put(4, t[4:], x[4:], np.zeros(B, np.int8), np.full(B, -1))
    w.close(complete=True)
    with open_rollout(p) as f:
        assert f.complete and np.array_equal(f.x, x) and np.array_equal(f.qpos, x[..., :2])


def test_model_params_stored_per_world(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "m.h5")
    g = np.tile([0.0, 0.0, -9.81], (3, 1)) * np.array([[1.0], [0.5], [2.0]])
    h5.create_rollout_file(p, _spec(scene, 3, 2, params={"opt.gravity": g}))
    with open_rollout(p) as f:
        assert list(f.model_params) == ["opt.gravity"] and np.array_equal(f.model_params["opt.gravity"], g)


def test_reader_refuses_missing_and_foreign_files(tmp_path):
    with pytest.raises(RolloutFileError, match="no such file"):
        open_rollout(tmp_path / "nope.h5")
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(RolloutFileError, match="not an mjharness rollout file"):
        open_rollout(p)
    q = tmp_path / "text.h5"
    q.write_text("hello")
    with pytest.raises(RolloutFileError, match="not a readable HDF5 file"):
        open_rollout(q)


def test_header_of_a_real_rollout(rollout_a):
    """The attributes DESIGN.md section 5 lists, with values checked against their sources."""
    r, integ = rollout_a
    with open_rollout(r.path) as f:
        a = f.attrs
        assert a["format"] == "mjharness-rollout" and a["format_version"] == 1
        import jax
        import mujoco

        assert a["mujoco_version"] == mujoco.__version__ and a["jax_version"] == jax.__version__
        assert a["mjx_version"] == importlib.metadata.version("mujoco-mjx")
        assert a["mjharness_version"] == importlib.metadata.version("mjharness")
        assert a["model_sha256"] == hashlib.sha256(f.mjcf.encode()).hexdigest()
        assert "<mujoco" in f.mjcf and 'model="double_pendulum"' in f.mjcf
        assert a["integrator"] == json.loads(json.dumps(integ.config()))
        assert (a["dt"], a["record_every"], a["steps"], a["batch"], a["seed"]) == (0.001, 10, 200, 8, 0)
        created = datetime.fromisoformat(a["created"])
        assert created.tzinfo is not None and created.utcoffset() == timezone.utc.utcoffset(None)
        assert abs((datetime.now(timezone.utc) - created).total_seconds()) < 3600
        assert a["complete"] is True and f.samples == 20
        assert isinstance(f.compat_log, list)
        assert f.layout == r.layout
