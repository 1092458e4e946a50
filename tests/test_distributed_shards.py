"""The pieces of a multi-process run checked in one process (issue 29, issue 34): the shards of a run are
made in turn by the same functions ``distributed_rollout`` runs between its barriers, then joined; the
joined file must label its axes like a single-process file (xarray sees no phony dimension) and report
contact overflow by global world; process 0's one progress bar reads the shards' ``/progress``.
Nothing here waits on a clock: the bar's poll is called directly."""

from __future__ import annotations

import io
import os

import h5py
import numpy as np
import pytest

from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.engine import distributed as D
from mjharness.rollout.engine.plan import initial_states, resolve_scene
from mjharness.rollout.engine.shard_progress import ShardProgress, shard_step
from mjharness.rollout.engine.spec import RunSpec, check_spec
from mjharness.rollout.h5.join import join_shards, shard_paths

# A box on a floor (4 contacts at rest) with a site sensor: sensordata, xpos and contacts:2 in one small C run.
XML = """<mujoco model="boxes"><option timestep="0.002"/><worldbody>
<geom name="floor" type="plane" size="5 5 0.1"/>
<body name="box" pos="0 0 0.1"><freejoint name="box"/><geom name="box" type="box" size="0.1 0.1 0.1" mass="1"/>
<site name="top" pos="0 0 0.1"/></body></worldbody>
<sensor><framepos name="top" objtype="site" objname="top"/><accelerometer name="acc" site="top"/></sensor></mujoco>"""
B, N, HIGH = 4, 2, [1, 2]  # worlds 1 and 2 start 1 m up (no contact): world 2 is world 0 of shard 1
RUN = dict(steps=40, record_every=10, chunk=20, outputs=("sensordata", "xpos", "contacts:2"))


def _x0(scene):
    x0 = initial_states(scene, B, 0, 0.0)
    x0[HIGH, 2] += 1.0
    return x0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(single-process result, joined result) of the same run; the joined one from N shards made in turn."""
    d = tmp_path_factory.mktemp("shards")
    scene = resolve_scene(XML, backend="mujoco", need_sensors=True)
    x0 = _x0(scene)
    single = rollout(scene, None, x0=x0, out=str(d / "single.h5"), progress=False, **RUN)
    joined = str(d / "joined.h5")
    spec = check_spec(RunSpec.from_options(x0=x0, out=joined, progress=False, **RUN))
    scene, spec = D._local_scene_spec(scene, spec, 0)
    results = {}
    for k in range(N):
        plan, resumed = D._plan_shard(scene, None, spec, joined=joined, k=k, n=N)
        results[k] = D._run_shard(plan, spec, resumed, progress=False)
    join_shards(joined, shard_paths(joined, N))
    stats = dict(results[0].stats, process=0, processes=N, shard=shard_paths(joined, N)[0])
    return single, D._joined_result(joined, results[0], stats), results


def _dims(path, group=None):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    with xr.open_dataset(path, engine="h5netcdf", group=group) as ds:
        return {k: v.dims for k, v in ds.variables.items()}, {k: ds[k].values for k in ("time", "world")}


def test_joined_file_labels_its_axes_like_a_single_process_file(runs):
    """Issue 29: xarray opens the joined file's root, /outputs and /sensors with named dimensions (no phony_dim)
    and time/world coordinates over the whole batch, the same dimensions as the single-process file's."""
    from mjharness.rollout.h5.integrity import verify

    single, joined, _ = runs
    for group in (None, "outputs", "sensors"):
        want, _ = _dims(single.path, group)
        got, coords = _dims(joined.path, group)
        assert not any("phony" in d for dims in got.values() for d in dims), (group, got)
        assert {k: v for k, v in got.items() if k != "world_index"} == want, group
        assert list(coords["world"]) == list(range(B)) and np.allclose(coords["time"], single.time)
    root, _ = _dims(joined.path)
    assert root["x"] == ("time", "world", "state") and root["world_index"] == ("world",)
    with open_rollout(joined.path) as f, open_rollout(single.path) as g:
        np.testing.assert_array_equal(f.x, single.x)
        np.testing.assert_array_equal(f.sensor("acc"), single.outputs["sensordata"][..., 3:6])
        for name in g.output_names:  # units, semantics, mujoco_field, capacity, ... as the single file's
            a, b = (dict((k, v) for k, v in h.h5["outputs"][name].attrs.items() if k != "DIMENSION_LIST")
                    for h in (f, g))
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), name
        assert len(f.contacts(3, row=0)) == 2  # the contacts table reads the joined file (K = 2 of 4 contacts)
    report = verify(joined.path)  # the content digest holds (the joined file's list of shards included)
    assert report.status == "intact", report.summary()


def test_joined_run_reports_contact_overflow_by_global_world(runs, capsys):
    """Issue 34: the multi-process summary names the flagged worlds of every process by global index
    (the shards' own stats count their worlds from 0)."""
    from mjharness.rollout.cli.launch import process_summary
    from mjharness.rollout.cli.show import flag_lines
    from mjharness.rollout.cli.summary import flagged_lines

    single, joined, shards = runs
    low = [w for w in range(B) if w not in HIGH]
    assert sorted(single.stats["flagged"]["contacts:2_ncon"]) == low
    assert joined.stats["flagged"] == single.stats["flagged"]
    assert sorted(shards[1].stats["flagged"]["contacts:2_ncon"]) == [1]  # shard 1's local world 1 = global 3
    process_summary(joined, (0, N))
    out = capsys.readouterr().out
    assert flagged_lines(single.stats["flagged"])[0] in out and "world 3 (row 0, 4 rows)" in out
    with open_rollout(joined.path) as f:
        assert flag_lines(f)[1:] == flagged_lines(single.stats["flagged"])


# -- process 0's one bar -----------------------------------------------------------------------------------

def _fake_shard(path, samples, complete):
    with h5py.File(path, "w") as f:
        f.create_dataset("progress", data=np.array([samples, int(complete)], dtype=np.int64))


def test_shard_step_reads_progress_and_survives_missing_or_unreadable_shards(tmp_path):
    p = str(tmp_path / "s.h5")
    assert shard_step(p, steps=100, record_every=10) is None  # not created yet
    with open(p, "wb") as fh:
        fh.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 8)  # a header being written
    assert shard_step(p, steps=100, record_every=10) is None
    _fake_shard(p, 3, False)
    assert shard_step(p, steps=100, record_every=10) == 30
    assert shard_step(p, steps=100, record_every=10, in_process=True) == 30
    _fake_shard(p, 10, True)
    assert shard_step(p, steps=105, record_every=10) == 105  # complete: the unrecorded trailing steps too
    _fake_shard(p, 10, True)
    assert shard_step(p, steps=200, record_every=10) == 100  # a resume to 200 steps not started yet


def test_one_bar_follows_the_slowest_process(tmp_path):
    """The bar's position is the slowest process's step; a missing shard counts as not started; on a fresh run
    a shard file from a previous run is ignored until this run replaces it; closing never waits on a shard."""
    out = str(tmp_path / "run.h5")
    paths = shard_paths(out, 3)
    _fake_shard(paths[2], 10, True)  # a previous run's finished shard
    text = io.StringIO()
    bar = ShardProgress(paths, steps=100, record_every=10, fresh=True, file=text)
    bar.update()
    assert bar.last == [None, None, None] and bar.position() == 0
    _fake_shard(paths[0], 5, False)
    _fake_shard(paths[1], 2, False)
    bar.update()
    assert bar.last == [50, 20, None] and bar.position() == 0  # process 2 has not replaced its old shard yet
    os.remove(paths[2])
    _fake_shard(paths[2], 4, False)
    os.utime(paths[2], ns=(0, 0))  # replaced (a new file can reuse the inode, size and clock tick of the old)
    bar.update()
    assert bar.position() == 20 and bar.bar.n == 20
    assert "rollout (3 processes, slowest)" in text.getvalue() and "p0 50 p1 20 p2 40" in text.getvalue()
    bar.close(done=True)
    assert "100/100" in text.getvalue()
    stalled = ShardProgress(shard_paths(str(tmp_path / "none.h5"), 2), steps=10, record_every=1, poll_s=0.01,
                            file=io.StringIO()).start()
    stalled.close()  # no shard ever appeared: returns, the bar closed where it was
    assert stalled.bar is None and stalled.last == [None, None]
