"""HDF5 rollout files: layout table, header, virtual datasets, streaming writer, partial reads, the
carry, the lossless model, and files written by the first format version.

Most checks drive the writer directly (no JAX compile); the file written by a real rollout is checked
in test_rollout.py (bit-for-bit against the in-memory result).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

import h5py
import mujoco
import numpy as np
import pytest
from rollout_common import run_a

from mjharness.integrators import StateError, StateRegistry, StateSpec
from mjharness.rollout import h5
from mjharness.rollout.h5 import RolloutFileError, open_rollout
from mjharness.scenes import scene_path

# Written by the first format's writer (rollout/h5.py as of commit 2c45493): double_pendulum, batch 2,
# 3 samples of which 2 flushed, x0 = arange(8).reshape(2, 4) / 10, x[j] = x0 + 0.5 (j + 1), no
# /model/mjb, no /carry.
V1_FILE = Path(__file__).resolve().parents[1] / "data" / "rollout_format_v1.h5"


@pytest.fixture(scope="session")
def rollout_a():
    return run_a()


def _spec(scene, B=3, T=10, time_chunk=4, compression=None, params=None, **extra):
    layout = scene.layout
    x0 = np.arange(B * layout.size, dtype=np.float64).reshape(B, layout.size)
    spec = h5.FileSpec(attrs=dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION, dt=0.01, record_every=2,
                                  steps=2 * T, batch=B, seed=0, integrator=json.dumps({"name": "test"})),
                       mjcf="<mujoco/>", compat_log=[{"code": "x", "message": "m"}],
                       layout=h5.layout_table(layout, scene.joint_of), x0=x0, model_params=params or {},
                       samples=T, qpos=scene.qpos_segment, qvel=scene.qvel_segment, time_chunk=time_chunk,
                       compression=compression)
    return dataclasses.replace(spec, **extra)


def _chunk(rng, j0, n, B, size):
    return (0.02 * (np.arange(j0, j0 + n) + 1), rng.standard_normal((n, B, size)))


def _ok(B):
    return np.zeros(B, np.int8), np.full(B, -1)


def _wait_samples(path, k):
    # The writer flushes per chunk in its thread: wait for it (the writer still open).
    for _ in range(500):
        with open_rollout(path) as f:  # /progress, published last under SWMR
            if f.samples == k:
                return
        time.sleep(0.01)
    raise AssertionError(f"{path}: samples never reached {k}")


# -- the layout table ---------------------------------------------------------------------------

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


CARRY = (("qacc_warmstart", (2,)), ("integrator/h", ()), ("block", (2, 3)))  # nc = 2 + 1 + 6
CARRY_SIZES = (("qacc_warmstart", 2), ("integrator/h", 1), ("block", 6))  # as the file reads it back


def test_layout_table_carry_rows_are_not_states(scene_cache):
    scene = scene_cache("double_pendulum")
    table = h5.layout_table(scene.layout, scene.joint_of, CARRY)
    assert len(table) == len(scene.layout) + 3
    rows = {r["name"].decode(): r for r in table if r["update"] == b"carry"}
    assert list(rows) == ["qacc_warmstart", "integrator/h", "block"]
    assert [(int(r["offset"]), int(r["size"])) for r in rows.values()] == [(0, 2), (2, 1), (3, 6)]
    for r in rows.values():
        assert (r["deriv_size"], r["diffusion_size"], r["noise_count"], r["noise_slots"]) == (0, 0, 0, b"")
    assert h5.layout_from_table(table) == scene.layout
    assert h5.carry_layout_from_table(table) == CARRY_SIZES
    assert rows["block"]["shape"] == b"2,3" and rows["integrator/h"]["shape"] == b""  # the declared shapes
    assert np.array_equal(table, h5.layout_table(scene.layout, scene.joint_of, dict(CARRY)))
    assert h5.carry_layout_from_table(h5.layout_table(scene.layout)) == ()
    assert h5.carry_size(CARRY) == 9


def test_carry_vector_and_dict_round_trip():
    rng = np.random.default_rng(5)
    c = {"qacc_warmstart": rng.standard_normal((4, 2)), "integrator/h": rng.random(4),
         "block": rng.standard_normal((4, 2, 3))}
    flat = h5.carry_vector(CARRY, c)
    assert flat.shape == (4, 9) and np.array_equal(flat[:, 2], c["integrator/h"])
    back = h5.carry_dict(CARRY, flat)
    assert list(back) == list(dict(CARRY)) and all(np.array_equal(back[k], c[k]) for k in c)
    over_time = h5.carry_dict(CARRY, np.stack([flat, 2 * flat]))  # (T, B, nc) -> (T, B, *shape)
    assert over_time["block"].shape == (2, 4, 2, 3) and np.array_equal(over_time["block"][1], 2 * c["block"])
    by_size = h5.carry_dict(CARRY_SIZES, flat)  # (name, size) pairs: flat entries
    assert by_size["block"].shape == (4, 6) and by_size["integrator/h"].shape == (4, 1)
    assert np.array_equal(h5.carry_vector(CARRY_SIZES, c), flat)  # shaped entries flatten into a size
    assert np.array_equal(h5.carry_vector(CARRY_SIZES, by_size), flat)
    with pytest.raises(StateError, match="carry layout names"):
        h5.carry_vector(CARRY, {"qacc_warmstart": c["qacc_warmstart"]})
    with pytest.raises(StateError, match="'block' must have shape"):
        h5.carry_vector(CARRY, dict(c, block=np.zeros((4, 6))))
    with pytest.raises(StateError, match="appears twice"):
        h5.carry_size((("a", 1), ("a", 2)))
    with pytest.raises(StateError, match="non-negative ints"):
        h5.carry_size((("a", (-1,)),))
    assert h5.carry_size({"a": 3, "b": (2, 2)}) == 7  # a mapping (scene.carry_spec) works as well


# -- streaming, reading, extending ----------------------------------------------------------------

def test_writer_streams_chunks_readable_while_open(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "r.h5")
    B, T, n = 3, 10, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T))
    rng = np.random.default_rng(0)
    w = h5.RolloutWriter(p)
    t0, x0 = _chunk(rng, 0, 4, B, n)
    w.put(0, t0, x0, *_ok(B))
    _wait_samples(p, 4)
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
        # No carry layout: no /carry, and the carry reads as empty.
        assert "carry" not in f.h5 and "carry0" not in f.h5
        assert f.carry_layout == () and f.carry.shape == (T, B, 0) and f.carry_at(3) == {}


def test_virtual_datasets_are_views_of_x_and_survive_a_move(tmp_path, scene_cache):
    scene = scene_cache("brick")  # nq 7 != nv 6
    p = str(tmp_path / "r.h5")
    B, T, n = 2, 5, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T))
    t, x = _chunk(np.random.default_rng(1), 0, T, B, n)
    w = h5.RolloutWriter(p)
    w.put(0, t, x, *_ok(B))
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
    c0 = np.zeros((B, 9))
    h5.create_rollout_file(p, _spec(scene, B, T, time_chunk=3, compression="gzip", carry_layout=CARRY, carry0=c0))
    rng = np.random.default_rng(2)
    t, x = _chunk(rng, 0, T, B, n)
    c = rng.standard_normal((T, B, 9))
    w = h5.RolloutWriter(p)
    for j in range(0, T, 3):
        w.put(j, t[j:j + 3], x[j:j + 3], *_ok(B), carry=c[j:j + 3])
    w.close(complete=True)
    with h5py.File(p, "r") as f:
        assert f["x"].compression == "gzip" and f["x"].chunks == (3, B, n)
        assert f["x"].maxshape == (None, B, n)
        # /carry is chunked like /x: the same time and world extents.
        assert f["carry"].compression == "gzip" and f["carry"].chunks == (3, B, 9)
        assert f["carry"].maxshape == (None, B, 9) and f["carry"].dtype == np.float64
    with open_rollout(p) as f:
        assert np.array_equal(f.x, x) and np.array_equal(f.carry, c)


def test_carry_round_trip(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "carry.h5")
    B, T, n = 3, 6, scene.layout.size
    rng = np.random.default_rng(4)
    carry0 = {"qacc_warmstart": rng.standard_normal((B, 2)), "integrator/h": np.full(B, 1e-3),
              "block": rng.standard_normal((B, 2, 3))}
    h5.create_rollout_file(p, _spec(scene, B, T, time_chunk=3, carry_layout=CARRY, carry0=carry0))
    t, x = _chunk(rng, 0, T, B, n)
    c = rng.standard_normal((T, B, 9))
    w = h5.RolloutWriter(p)
    w.put(0, t[:3], x[:3], *_ok(B), carry=c[:3])
    w.put(3, t[3:], x[3:], *_ok(B), carry=c[3:])
    w.close(complete=True)
    with open_rollout(p) as f:
        assert f.layout == scene.layout  # the states only
        assert f.carry_layout == CARRY_SIZES
        assert np.array_equal(f.layout_table, h5.layout_table(scene.layout, scene.joint_of, CARRY))
        assert np.array_equal(f.carry0, h5.carry_vector(CARRY, carry0))
        assert np.array_equal(f.carry, c) and np.array_equal(f.x, x)
        at = f.carry_at(4)
        assert list(at) == ["qacc_warmstart", "integrator/h", "block"]
        assert np.array_equal(at["qacc_warmstart"], c[4, :, :2]) and np.array_equal(at["integrator/h"], c[4, :, 2:3])
        assert np.array_equal(at["block"], c[4, :, 3:])
        with pytest.raises(IndexError, match="not among the 6 flushed samples"):
            f.carry_at(6)
        assert "nc=9" in repr(f)
        table = f.layout_table
    # A copy of this file's table without a carry layout (a reference file) keeps the state rows only.
    q = str(tmp_path / "copy.h5")
    h5.create_rollout_file(q, _spec(scene, B, T, layout=table))
    with open_rollout(q) as f:
        assert f.carry_layout == () and "carry" not in f.h5 and f.layout == scene.layout
        assert len(f.layout_table) == len(scene.layout)


def test_writer_refuses_a_chunk_without_its_carry(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    B, n = 2, scene.layout.size
    t, x = _chunk(np.random.default_rng(6), 0, 2, B, n)
    with_carry, without = str(tmp_path / "with.h5"), str(tmp_path / "without.h5")
    h5.create_rollout_file(with_carry, _spec(scene, B, 4, carry_layout=CARRY, carry0=np.zeros((B, 9))))
    h5.create_rollout_file(without, _spec(scene, B, 4))
    w = h5.RolloutWriter(with_carry)
    with pytest.raises(RolloutFileError, match="every chunk needs its carry rows"):
        w.put(0, t, x, *_ok(B))
    with pytest.raises(RolloutFileError, match=r"carry of shape \(2, 2, 9\), got \(2, 2, 8\)"):
        w.put(0, t, x, *_ok(B), carry=np.zeros((2, B, 8)))
    w.close(complete=False)
    w = h5.RolloutWriter(without)
    with pytest.raises(RolloutFileError, match="has no /carry"):
        w.put(0, t, x, *_ok(B), carry=np.zeros((2, B, 9)))
    w.close(complete=False)
    for path in (with_carry, without):
        with open_rollout(path) as f:
            assert f.samples == 0


def test_create_refuses_a_bad_carry_before_touching_the_file(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = tmp_path / "bad.h5"
    bad = [(dict(carry_layout=CARRY), "carry0 is None"),
           (dict(carry_layout=CARRY, carry0=np.zeros((3, 8))), r"shape \(batch, nc\) = \(3, 9\)"),
           (dict(carry0=np.zeros((3, 2))), "carry_layout is empty"),
           (dict(carry_layout=(("a", 1), ("a", 1)), carry0=np.zeros((3, 2))), "appears twice"),
           (dict(carry_layout=CARRY, carry0={"qacc_warmstart": np.zeros((3, 2))}), "carry layout names"),
           (dict(model_signature=5), "beside mjb"),
           (dict(model=scene.model, mjb=b"mjb"), "not both"),
           (dict(model="double_pendulum"), "must be an mujoco.MjModel"),
           (dict(assets={"a.obj": "text"}), "names to bytes")]
    for extra, match in bad:
        with pytest.raises(RolloutFileError, match=match):
            h5.create_rollout_file(str(p), _spec(scene, 3, 4, **extra))
        assert not p.exists()


def test_partial_file_keeps_every_sample_with_its_carry(tmp_path, scene_cache, monkeypatch):
    """A chunk whose carry cannot be written leaves samples at the previous chunk: a reader or a resume
    never sees a state without its carry (the sample count is written last)."""
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "partial.h5")
    B, T, n = 2, 8, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T, carry_layout=CARRY, carry0=np.zeros((B, 9))))
    writes = []

    class CarryFailsOnSecondWrite:
        def __init__(self, ds):
            self._ds = ds
            self.shape = ds.shape

        def __setitem__(self, key, value):
            writes.append(key)
            if len(writes) > 1:
                raise OSError("no space left on device (test)")
            self._ds[key] = value

        def flush(self):
            self._ds.flush()

    class File(h5py.File):
        def __getitem__(self, name):
            obj = super().__getitem__(name)
            return CarryFailsOnSecondWrite(obj) if name == "carry" else obj

    with monkeypatch.context() as m:
        m.setattr(h5py, "File", File)
        w = h5.RolloutWriter(p)
    rng = np.random.default_rng(7)
    t, x = _chunk(rng, 0, T, B, n)
    c = rng.standard_normal((T, B, 9))
    w.put(0, t[:4], x[:4], *_ok(B), carry=c[:4])
    _wait_samples(p, 4)
    with open_rollout(p) as f:  # readable while the writer is open, carry and all
        assert f.samples == 4 and np.array_equal(f.carry, c[:4]) and np.array_equal(f.x, x[:4])
    w.put(4, t[4:], x[4:], *_ok(B), carry=c[4:])
    with pytest.raises(h5.RolloutWriteError, match="writing /carry failed: no space left"):
        w.close(complete=True)
    with open_rollout(p) as f:
        assert f.samples == 4 and not f.complete
        assert np.array_equal(f.x, x[:4]) and np.array_equal(f.carry, c[:4]) and np.array_equal(f.time, t[:4])
        assert np.array_equal(f.carry_at(3)["qacc_warmstart"], c[3, :, :2])
        assert np.isnan(f.h5["carry"][4:]).all()  # the failed chunk's carry never landed


def test_extend_grows_x_carry_and_virtual_datasets(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "e.h5")
    B, T, n = 2, 4, scene.layout.size
    h5.create_rollout_file(p, _spec(scene, B, T, carry_layout=CARRY, carry0=np.zeros((B, 9))))
    rng = np.random.default_rng(3)
    t, x = _chunk(rng, 0, 7, B, n)
    c = rng.standard_normal((7, B, 9))
    w = h5.RolloutWriter(p)
    w.put(0, t[:4], x[:4], *_ok(B), carry=c[:4])
    w.close(complete=True)
    h5.extend_rollout_file(p, 7, {"steps": 14})
    with open_rollout(p) as f:
        assert not f.complete and f.samples == 4 and f.attrs["steps"] == 14
        assert f.h5["qpos"].shape == (7, B, 2) and f.h5["carry"].shape == (7, B, 9)
        resume_from = f.carry_at(f.samples - 1)  # what a resume restarts with
        assert np.array_equal(h5.carry_vector(CARRY_SIZES, resume_from), c[3])
    w = h5.RolloutWriter(p)
    w.put(4, t[4:], x[4:], *_ok(B), carry=c[4:])
    w.close(complete=True)
    with open_rollout(p) as f:
        assert f.complete and np.array_equal(f.x, x) and np.array_equal(f.qpos, x[..., :2])
        assert np.array_equal(f.carry, c)


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


# -- files of the first format version --------------------------------------------------------------

def test_a_first_version_file_opens_and_resumes(tmp_path):
    p = str(tmp_path / "v1.h5")
    shutil.copy(V1_FILE, p)
    x0 = np.arange(8, dtype=np.float64).reshape(2, 4) / 10
    xs = x0[None] + 0.5 * np.arange(1, 4)[:, None, None]
    with open_rollout(p) as f:
        assert "mjb" not in f.h5["model"] and "carry" not in f.h5  # really a file of the old writer
        assert f.attrs["format_version"] == 1 and f.samples == 2 and not f.complete
        assert f.layout.names == ("shoulder/qpos", "elbow/qpos", "shoulder/qvel", "elbow/qvel")
        assert np.array_equal(f.x0, x0) and np.array_equal(f.x, xs[:2]) and np.array_equal(f.qvel, xs[:2, :, 2:])
        assert f.carry_layout == () and f.carry.shape == (2, 2, 0) and f.carry0.shape == (2, 0)
        assert f.carry_at(1) == {}
        assert (f.mjb, f.model_signature, f.source_xml, f.assets) == (None, None, None, {})
        assert f.attrs["model_sha256"] == h5.model_sha256(f.mjcf)  # the old digest: over the saved XML
        model = f.model()  # compiled from the saved XML
        assert (model.nq, model.nv, model.njnt) == (2, 2, 2)
        with pytest.raises(RolloutFileError, match="no /model/mjb"):
            f.model(source="mjb")
    h5.extend_rollout_file(p, 3, {})
    w = h5.RolloutWriter(p)
    w.put(2, [0.03], xs[2:], *_ok(2))
    w.close(complete=True)
    with open_rollout(p) as f:
        assert f.complete and f.samples == 3 and np.array_equal(f.x, xs)


# -- the model, lossless --------------------------------------------------------------------------

def _png(w, h, rgb: bytes) -> bytes:
    """A minimal 8-bit RGB PNG (a texture asset that exists only in memory)."""
    raw = b"".join(b"\x00" + rgb[r * w * 3:(r + 1) * w * 3] for r in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


ASSETS = {"meshes/tet.obj": b"v 0 0 0\nv 0.1 0 0\nv 0 0.12 0\nv 0 0 0.09\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n",
          "textures/grid.png": _png(4, 3, bytes(range(36))),
          "ground.bin": struct.pack("<ii", 3, 4) + np.linspace(0, 1, 12, dtype=np.float32).tobytes()}
ASSET_XML = """<mujoco model="assets">
  <asset>
    <mesh name="tet" file="meshes/tet.obj" scale="1.1 0.9 1.3"/>
    <texture name="grid" type="2d" file="textures/grid.png"/>
    <material name="mat" texture="grid"/>
    <hfield name="ground" file="ground.bin" content_type="image/vnd.mujoco.hfield" size="1 1 0.1 0.05"/>
  </asset>
  <worldbody>
    <geom type="hfield" hfield="ground"/>
    <body pos="0 0 0.3"><freejoint/><geom type="mesh" mesh="tet" material="mat" density="1234.5678"/></body>
  </worldbody>
</mujoco>"""


def _saved_xml(model, tmp_path) -> str:
    p = tmp_path / "saved.xml"
    mujoco.mj_saveLastXML(str(p), model)
    return p.read_text()


def _model_file(path, model, mjcf=None, **extra):
    """A one-sample file of ``model``: given as the MjModel (the engine's way), or with ``mjcf`` as
    MJB bytes and signature (a caller that copies another file's model)."""
    B, n = 1, model.nq + model.nv
    reg = StateRegistry()
    reg.register("q", StateSpec((n,)))
    how = dict(model=model) if mjcf is None else dict(mjcf=mjcf, mjb=h5.model_mjb(model),
                                                       model_signature=model.signature)
    spec = h5.FileSpec(attrs=dict(format=h5.FORMAT, format_version=h5.FORMAT_VERSION), compat_log=[],
                       layout=h5.layout_table(reg.finalize()), x0=np.zeros((B, n)), model_params={}, samples=1,
                       qpos=None, qvel=None, time_chunk=1, **how, **extra)
    h5.create_rollout_file(str(path), spec)


def _assert_bit_identical(a, b):
    """Every numeric field of MjModel (arrays, sizes, buffers, opt/stat/vis), bit for bit; independent of
    h5.model_differences. ``signature`` is not in MJB (checked against the file's attribute instead)."""
    def bits(v):
        if isinstance(v, np.ndarray):
            return v.dtype.str, v.shape, v.tobytes()
        return np.float64(v).tobytes() if isinstance(v, float) else v

    def compare(x, y, prefix):
        n = 0
        for name in dir(x):
            if name.startswith("_") or prefix + name == "signature":
                continue
            v = getattr(x, name)
            if callable(v) or isinstance(v, type):  # methods, loaders, nested struct types
                continue
            w = getattr(y, name)
            if isinstance(v, np.ndarray):
                assert np.array_equal(v, w, equal_nan=v.dtype.kind in "fc"), prefix + name
            if isinstance(v, (np.ndarray, bytes, int, float)):
                assert bits(v) == bits(w), prefix + name
                n += 1
            else:
                n += compare(v, w, prefix + name + ".")
        return n

    return compare(a, b, "")


@pytest.mark.parametrize("name", ["double_pendulum", "brick", "mixed", "ball_chain", "arm", "humanoid"])
def test_model_read_back_is_the_model_that_ran(tmp_path, name):
    model = mujoco.MjModel.from_xml_path(scene_path(name))
    _model_file(tmp_path / "m.h5", model)
    with open_rollout(tmp_path / "m.h5") as f:
        assert f'model="{name}"' in f.mjcf.lower()  # the readable XML, taken from the model
        back = f.model()
        assert f.model_signature == model.signature
        assert f.mjb == h5.model_mjb(model) == h5.model_mjb(back)
    assert _assert_bit_identical(model, back) > 600  # arrays, sizes, opt, stat, vis
    assert h5.model_differences(model, back) == []
    assert h5.model_differences(model, back, ignore=()) == [f"signature: {model.signature} vs 0"]


def test_model_with_in_memory_assets_round_trips(tmp_path):
    model = mujoco.MjModel.from_xml_string(ASSET_XML, ASSETS)
    assert (model.nmesh, model.ntex, model.nhfield) == (1, 1, 1)
    xml = _saved_xml(model, tmp_path)
    _model_file(tmp_path / "a.h5", model, xml, source_xml=ASSET_XML, assets=ASSETS)
    with h5py.File(tmp_path / "a.h5") as f:  # names with "/" are escaped, the original kept as an attribute
        assets = sorted(k for k in f["model/assets"] if not k.startswith("_"))  # not their byte axes
        assert assets == ["ground.bin", "meshes%2Ftet.obj", "textures%2Fgrid.png"]
    with open_rollout(tmp_path / "a.h5") as f:
        assert f.assets == ASSETS and f.source_xml == ASSET_XML
        back = f.model()
        from_xml = f.model(source="xml")  # the saved XML, compiled with the stored assets
    assert _assert_bit_identical(model, back) > 600
    assert np.array_equal(back.mesh_vert, model.mesh_vert) and np.array_equal(back.tex_data, model.tex_data)
    # The XML prints density 1234.5678 as 1234.57: the reason the MJB is stored at all.
    assert (from_xml.nmesh, from_xml.ntex, from_xml.nhfield) == (1, 1, 1)
    diff = h5.model_differences(model, from_xml)
    assert any(d.startswith("body_mass:") for d in diff)
    assert abs(from_xml.body_mass[1] / model.body_mass[1] - 1) > 1e-7


def test_model_differences_sees_one_ulp_and_nan():
    model = mujoco.MjModel.from_xml_path(scene_path("double_pendulum"))
    other = copy.copy(model)
    assert h5.model_differences(model, other) == []
    other.body_mass[1] = np.nextafter(other.body_mass[1], np.inf)
    other.opt.timestep = np.nextafter(model.opt.timestep, 1.0)
    diff = h5.model_differences(model, other)
    assert [d.split(":")[0] for d in diff] == ["body_mass", "opt.timestep"]
    assert "flat index 1" in diff[0]
    a, b = copy.copy(model), copy.copy(model)
    a.geom_margin[0] = b.geom_margin[0] = np.nan
    assert h5.model_differences(a, b) == []
    b.geom_margin[0] = -0.0
    a.geom_margin[0] = 0.0
    assert [d.split(":")[0] for d in h5.model_differences(a, b)] == ["geom_margin"]  # bits, not ==


def test_model_sha256_is_over_the_mjb_and_deterministic(tmp_path):
    path = scene_path("humanoid")
    a, b = mujoco.MjModel.from_xml_path(path), mujoco.MjModel.from_xml_path(path)
    digest = h5.model_sha256(a)
    assert digest == h5.model_sha256(b) == hashlib.sha256(h5.model_mjb(a)).hexdigest()
    assert h5.model_sha256(h5.model_mjb(a)) == digest  # the bytes as stored hash the same
    assert h5.model_sha256(h5.model_from_mjb(h5.model_mjb(a))) == digest  # so does the model read back
    # Another process compiling the same file gets the same bytes (the resume check depends on it).
    code = ("import hashlib, sys, mujoco, numpy as np; m = mujoco.MjModel.from_xml_path(sys.argv[1]); "
            "b = np.empty(mujoco.mj_sizeModel(m), np.uint8); mujoco.mj_saveModel(m, None, b); "
            "print(hashlib.sha256(b.tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest
    b.body_mass[1] = np.nextafter(b.body_mass[1], 0)
    assert h5.model_sha256(b) != digest
    xml = "<mujoco/>"
    assert h5.model_sha256(xml) == hashlib.sha256(xml.encode()).hexdigest()  # old callers and old files
    with pytest.raises(TypeError, match="MjModel, MJB bytes or an XML string"):
        h5.model_sha256(3)


def test_model_refuses_a_file_without_a_model_or_with_a_broken_mjb(tmp_path, scene_cache):
    scene = scene_cache("double_pendulum")
    p = str(tmp_path / "nomodel.h5")
    h5.create_rollout_file(p, _spec(scene, 1, 1, mjcf=""))
    with open_rollout(p) as f, pytest.raises(RolloutFileError, match="holds no model"):
        f.model()
    q = str(tmp_path / "broken.h5")
    h5.create_rollout_file(q, _spec(scene, 1, 1, mjb=b"not a binary model"))
    with open_rollout(q) as f:
        with pytest.raises(RolloutFileError, match=r"/model/mjb does not load.*model\(source='xml'\)"):
            f.model()
        with pytest.raises(ValueError, match="source must be one of"):
            f.model(source="json")


# -- a real rollout ---------------------------------------------------------------------------------

def test_header_of_a_real_rollout(rollout_a, scene_cache):
    """The attributes DESIGN.md section 5 lists, with values checked against their sources; the model
    and the carry the engine wrote."""
    r, integ = rollout_a
    with open_rollout(r.path) as f:
        a = f.attrs
        assert a["format"] == "mjharness-rollout" and a["format_version"] == h5.FORMAT_VERSION == 2
        import jax

        assert a["mujoco_version"] == mujoco.__version__ and a["jax_version"] == jax.__version__
        assert a["mjx_version"] == importlib.metadata.version("mujoco-mjx")
        assert a["mjharness_version"] == importlib.metadata.version("mjharness")
        # The digest is over the MJB where the file holds one, over the saved XML in older files.
        assert a["model_sha256"] == h5.model_sha256(f.mjb if f.mjb is not None else f.mjcf)
        assert "<mujoco" in f.mjcf and 'model="double_pendulum"' in f.mjcf
        assert a["integrator"] == json.loads(json.dumps(integ.config()))
        assert (a["dt"], a["record_every"], a["steps"], a["batch"], a["seed"]) == (0.001, 10, 200, 8, 0)
        created = datetime.fromisoformat(a["created"])
        assert created.tzinfo is not None and created.utcoffset() == timezone.utc.utcoffset(None)
        assert abs((datetime.now(timezone.utc) - created).total_seconds()) < 3600
        assert a["complete"] is True and f.samples == 20
        assert isinstance(f.compat_log, list)
        assert f.layout == r.layout
        ran = scene_cache("double_pendulum").model
        assert h5.model_differences(f.model(), ran) == [] and f.model_signature == ran.signature
        # The carry after the last recorded step is the carry the run ended with (steps % record_every == 0).
        assert [name for name, _ in f.carry_layout] == list(r.carry)
        last = f.carry_at(f.samples - 1)
        for name, v in r.carry.items():
            assert np.array_equal(np.asarray(v).reshape(last[name].shape), last[name]), name
