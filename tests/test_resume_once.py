"""A resumed run reads its file once (``h5.read_resume``); only the writer opens it again."""

from __future__ import annotations

import sys

import h5py
import numpy as np
import pytest
from conftest import cached_scene

from mjharness.rollout.engine import Termination, rollout
from mjharness.rollout.h5 import open_rollout

RUN = dict(steps=60, batch=3, record_every=5, chunk=20, seed=2, progress=False, backend="mujoco",
           outputs=("energy",))


def _stop_when_low(t, x):
    return x[2] < -1.0  # box_on_plane's height: never true in 60 steps (the episode table is still written)


def _writer_frame() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name in ("open_rw", "open_for_write", "extend_rollout_file", "write_episode_table"):
            return True
        f = f.f_back
    return False


@pytest.fixture
def count_reads(monkeypatch):
    """The read-only opens of each path by h5py, outside the writer's own functions."""
    reads: dict[str, int] = {}
    real = h5py.File

    class Counting(real):
        def __init__(self, name, mode="r", *args, **kwargs):
            if mode == "r" and isinstance(name, str) and not _writer_frame():
                reads[name] = reads.get(name, 0) + 1
            super().__init__(name, mode, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", Counting)
    return reads


@pytest.mark.parametrize("keep", [True, False])
def test_a_resumed_run_opens_its_file_for_reading_once(tmp_path, count_reads, keep):
    scene = cached_scene("box_on_plane")
    whole = rollout(scene, **RUN, terminate=Termination(_stop_when_low))
    path = str(tmp_path / "short.h5")
    rollout(scene, **dict(RUN, steps=30), out=path, terminate=Termination(_stop_when_low))
    count_reads.clear()
    r = rollout(scene, **RUN, resume=path, keep=keep, terminate=Termination(_stop_when_low))
    opened = {p: n for p, n in count_reads.items() if p.endswith("short.h5")}
    assert sum(opened.values()) == 1, opened
    with open_rollout(path) as f:
        assert f.complete and np.array_equal(f.x, whole.x)
        assert np.array_equal(f.read("outputs/energy"), whole.outputs["energy"])
    if keep:
        assert np.array_equal(r.x, whole.x) and np.array_equal(r.outputs["energy"], whole.outputs["energy"])
