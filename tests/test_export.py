"""Rollout files exported as datasets (issue 44 items 2 and 4): Minari read back with ``minari.load_dataset``,
LeRobot v3 checked against the documented layout (a validator written from lerobot/datasets/utils.py's paths,
info.json and meta/episodes columns) and read with ``datasets`` the way ``LeRobotDataset`` reads its Parquet.
The exported frames are compared with the file's own arrays (``open_rollout``), not with the exporter's code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import h5py
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.examples import arm_reach
from mjharness.rollout import Controller, open_rollout, rollout
from mjharness.rollout.errors import RolloutError
from mjharness.rollout.export import export
from mjharness.rollout.h5 import RolloutFileError

minari = pytest.importorskip("minari")
pq = pytest.importorskip("pyarrow.parquet")

B, STEPS = 8, 600


def _reward(t, x):
    """Minus the squared joint angles: a reward that differs every period."""
    return -jnp.sum(x[:4] ** 2)


def _soft_step(t, x, c):
    """A gentle PD (stable at every=2, unlike arm_reach's gains) towards the world's target."""
    e = c["target"] - x[:4]
    return 2.0 * e - 0.5 * x[4:8], c


def _soft_init(x0, world):
    return {"target": arm_reach.TARGET0 * (1.0 - 0.1 * world)}


def _early(t, x):
    return x[0] > 0.1  # joint 0 past 0.1 rad: episodes of an odd number of steps (resets start on odd steps)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The bar's closed loop, small: arm_reach's controller, its `reached` rule, resets, a reward."""
    d = tmp_path_factory.mktemp("export")
    path = str(d / "arm.h5")
    rollout("arm", steps=STEPS, batch=B, ctrl=arm_reach.make(), terminate=arm_reach.reached, on_terminate="reset",
            reward=_reward, backend="mujoco", out=path, progress=False)
    return d, path


def _minari(out, name):
    os.environ["MINARI_DATASETS_PATH"] = str(out)
    try:
        return minari.load_dataset(name)
    finally:
        del os.environ["MINARI_DATASETS_PATH"]


def _finished(f):
    return [r for r in f.episode_table() if r["end"] != "running"]


def test_minari_round_trip(run):
    """One Minari episode per finished /episodes row: observations (N+1: the start state, then every sample),
    actions, rewards, terminations and truncations equal to the file's (every=1, record_every=1)."""
    d, path = run
    export(path, d / "mi", format="minari", obs=("qpos", "qvel"), progress=False)
    ds = _minari(d / "mi", "arm-v0")
    with open_rollout(path) as f:
        rows = _finished(f)
        qpos, qvel, ctrl, reward, x0 = f.qpos, f.qvel, f.ctrl, f.reward, f.x0
        metas = list(ds.storage.get_episode_metadata(range(len(rows))))
        assert ds.total_episodes == len(rows) == 2 * B  # each world: one terminated, one truncated by the run's end
        for ep, row, meta in zip(ds.iterate_episodes(), rows, metas):
            w, s = row["world"], row["samples"]
            assert (meta["world"], meta["episode"], meta["end"]) == (w, row["episode"], row["end"])
            start = x0[w] if row["episode"] == 0 else f.episode_start(w, row["episode"])["x"]
            np.testing.assert_array_equal(ep.observations["qpos"], np.concatenate([start[None, :4], qpos[s, w]]))
            np.testing.assert_array_equal(ep.observations["qvel"][1:], qvel[s, w])
            np.testing.assert_array_equal(ep.actions, ctrl[s, w])
            np.testing.assert_array_equal(ep.rewards, reward[s, w])
            assert ep.rewards.sum() == pytest.approx(row["return"], rel=1e-12)
            term, trunc = np.zeros(len(s), bool), np.zeros(len(s), bool)
            (term if row["end"] == "terminated" else trunc)[-1] = True
            np.testing.assert_array_equal(ep.terminations, term)
            np.testing.assert_array_equal(ep.truncations, trunc)
    # A reset episode starts from x0 (reset_to="x0"): its first observation is the world's initial state.
    second = [i for i, r in enumerate(rows) if r["episode"] == 1][0]
    ep = ds[second]
    np.testing.assert_array_equal(ep.observations["qpos"][0], x0[rows[second]["world"], :4])


def test_minari_file_is_what_minaris_own_writer_writes(run):
    """The episodes written through h5py's low-level calls are, object for object, what Minari's own writer
    (create_dataset_from_buffers + update_episode_metadata) makes of the same episodes: groups, datasets (dtype,
    shape, unlimited first axis, values), attributes (names, values, HDF5 types); only the chunk sizes differ."""
    from minari.data_collector import EpisodeBuffer

    d, path = run
    export(path, d / "mi_layout", format="minari", obs=("qpos", "qvel"), progress=False)
    ds = _minari(d / "mi_layout", "arm-v0")
    n = 3
    metas = list(ds.storage.get_episode_metadata(range(n)))
    buffers = [EpisodeBuffer(id=i, seed=int(m["seed"]), observations=dict(ep.observations), actions=ep.actions,
                             rewards=ep.rewards, terminations=ep.terminations, truncations=ep.truncations)
               for i, (ep, m) in enumerate(zip(ds.iterate_episodes(range(n)), metas))]
    os.environ["MINARI_DATASETS_PATH"] = str(d / "mi_theirs")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = minari.create_dataset_from_buffers("theirs-v0", buffers, observation_space=ds.observation_space,
                                                        action_space=ds.action_space, data_format="hdf5")
        theirs.storage.update_episode_metadata([{k: v for k, v in m.items() if k not in ("id", "seed")}
                                               for m in metas], range(n))
    finally:
        del os.environ["MINARI_DATASETS_PATH"]

    def objects(p):
        out = {}
        with h5py.File(p) as h:
            def visit(name, o):
                attrs = {k: (o.attrs[k], o.attrs.get_id(k).get_type().get_class(), o.attrs.get_id(k).shape)
                         for k in o.attrs}
                if isinstance(o, h5py.Dataset):
                    out[name] = (o.dtype, o.shape, o.maxshape, o[()].tobytes(), attrs)
                else:
                    out[name] = ("group", attrs)
            for i in range(n):
                visit(f"episode_{i}", h[f"episode_{i}"])
                h[f"episode_{i}"].visititems(lambda name, o, i=i: visit(f"episode_{i}/{name}", o))
        return out

    ours = objects(d / "mi_layout" / "arm-v0" / "data" / "main_data.hdf5")
    ref = objects(d / "mi_theirs" / "theirs-v0" / "data" / "main_data.hdf5")
    assert ours.keys() == ref.keys()
    for k in ref:
        a, b = ours[k], ref[k]
        assert a[:-1] == b[:-1], k
        assert a[-1].keys() == b[-1].keys(), k
        for name in b[-1]:
            (va, ca, sa), (vb, cb, sb) = a[-1][name], b[-1][name]
            assert (type(va), ca, sa) == (type(vb), cb, sb) and np.array_equal(va, vb), (k, name, va, vb)


def test_drawn_resets_start_where_episode_start_says(run):
    """reset_to="draw": every reset episode's first observation is the state episode_start draws for it (bit for
    bit), from one compiled draw for the whole export."""
    d, _ = run
    path = str(d / "drawn.h5")
    rollout("arm", steps=STEPS, batch=4, ctrl=arm_reach.make(), terminate=arm_reach.reached, on_terminate="reset",
            reset_to="draw", perturb=0.05, seed=3, backend="mujoco", out=path, progress=False)
    export(path, d / "mi_drawn", format="minari", obs=("qpos", "qvel"), progress=False)
    ds = _minari(d / "mi_drawn", "drawn-v0")
    with open_rollout(path) as f:
        rows = _finished(f)
        assert any(r["episode"] > 0 for r in rows)
        for ep, row in zip(ds.iterate_episodes(), rows):
            start = f.episode_start(row["world"], row["episode"])["x"]
            np.testing.assert_array_equal(ep.observations["qpos"][0], start[:4])
            np.testing.assert_array_equal(ep.observations["qvel"][0], start[4:8])
            if row["episode"] > 0:
                assert not np.array_equal(start, f.x0[row["world"]])  # drawn, not x0


def _decimated(d, every, record_every):
    path = str(d / f"soft_{every}_{record_every}.h5")
    if not os.path.exists(path):
        rollout("arm", steps=240, batch=3, ctrl=Controller(_soft_init, _soft_step, every=every), terminate=_early,
                on_terminate="reset", backend="mujoco", out=path, record_every=record_every, progress=False)
    return path


def test_one_frame_per_control_period(run):
    """Controller every=2: a frame per period, from the samples ending periods, counted from each episode's start
    step (odd after a reset at an odd step); the same frames from a file recorded every 2 steps."""
    d, _ = run
    path = _decimated(d, 2, 1)
    export(path, d / "mi2", format="minari", obs="qpos", name="soft-v0", progress=False)
    ds = _minari(d / "mi2", "soft-v0")
    with open_rollout(path) as f:
        rows, qpos, ctrl = _finished(f), f.qpos, f.ctrl
        assert any(r["start_step"] % 2 for r in rows)
        for ep, row in zip(ds.iterate_episodes(), rows):
            w, start = row["world"], row["start_step"]
            steps = np.arange(start + 1, row["end_step"] + 1, 2)  # steps k ending periods: (k+1-start) % 2 == 0
            if row["end"] == "terminated" and steps[-1] != row["end_step"]:
                steps = np.append(steps, row["end_step"])  # ended mid-period: the terminal state is the last frame
            j = steps  # record_every=1: sample j holds the state after step j
            np.testing.assert_array_equal(ep.observations["qpos"][1:], qpos[j, w])
            np.testing.assert_array_equal(ep.actions, ctrl[j, w])


def test_record_every_must_divide_every(run):
    d, _ = run
    path = _decimated(d, 2, 1)
    with open_rollout(path) as f:
        attrs = dict(f.h5.attrs)
    assert "every=2" in str(attrs["controller"])
    path3 = _decimated(d, 3, 2)
    with pytest.raises(RolloutFileError, match=r"record_every=2 does not divide the controller's every=3"):
        export(path3, d / "never", format="minari", progress=False)
    assert not os.path.exists(d / "never")


# -- LeRobot v3 ---------------------------------------------------------------------------------------------

# The v3 layout (lerobot/datasets/utils.py: INFO_PATH, DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, DEFAULT_FEATURES,
# create_empty_dataset_info; dataset_metadata.py: the meta/episodes columns), written down independently.
V3_INFO_KEYS = {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
                "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path",
                "features"}
V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V3_DEFAULT = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
              "task_index": "int64"}
V3_EPISODE_COLUMNS = {"episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                      "dataset_to_index", "meta/episodes/chunk_index", "meta/episodes/file_index"}


def validate_v3(root) -> tuple:
    """Check a folder against the LeRobot v3 layout; returns (info, frames table, episodes table)."""
    import pandas as pd
    import pyarrow as pa

    info = json.load(open(os.path.join(root, "meta/info.json")))
    assert V3_INFO_KEYS <= set(info), V3_INFO_KEYS - set(info)
    assert info["codebase_version"] == "v3.0" and info["data_path"] == V3_DATA
    assert info["video_path"] in (None, V3_VIDEO)
    assert info["splits"] == {"train": f"0:{info['total_episodes']}"}
    feats = info["features"]
    for k, dtype in V3_DEFAULT.items():
        assert feats[k]["dtype"] == dtype and feats[k]["shape"] == [1], k
    for k, ft in feats.items():
        assert "/" not in k and {"dtype", "shape", "names"} <= set(ft), k
        if ft["dtype"] == "video":
            assert len(ft["shape"]) == 3 and ft["names"] == ["height", "width", "channels"]
        else:
            np.dtype(ft["dtype"])  # a numpy dtype string
            if ft["names"] is not None:
                assert len(ft["names"]) == int(np.prod(ft["shape"])), k
    eps = pq.read_table(os.path.join(root, "meta/episodes/chunk-000/file-000.parquet")).to_pandas()
    assert V3_EPISODE_COLUMNS <= set(eps.columns)
    assert list(eps["episode_index"]) == list(range(info["total_episodes"]))
    assert int(eps["length"].sum()) == info["total_frames"]
    assert (eps["dataset_to_index"] - eps["dataset_from_index"] == eps["length"]).all()
    tables = []
    for (c, fi), _ in eps.groupby(["data/chunk_index", "data/file_index"]):
        t = pq.read_table(os.path.join(root, V3_DATA.format(chunk_index=c, file_index=fi)))
        non_video = {k for k, ft in feats.items() if ft["dtype"] != "video"}
        assert set(t.column_names) == non_video
        for k in non_video:
            typ, ft = t.schema.field(k).type, feats[k]
            if ft["shape"] == [1]:
                assert typ == pa.from_numpy_dtype(np.dtype(ft["dtype"])), k
            else:
                assert pa.types.is_fixed_size_list(typ) and typ.list_size == ft["shape"][0], k
        tables.append(t)
    frames = pa.concat_tables(tables).to_pandas()
    np.testing.assert_array_equal(frames["index"], np.arange(info["total_frames"]))
    for _, e in eps.iterrows():  # each episode's rows: its index range, frame_index 0.., timestamps at fps
        rows = frames.iloc[e["dataset_from_index"]:e["dataset_to_index"]]
        assert (rows["episode_index"] == e["episode_index"]).all()
        np.testing.assert_array_equal(rows["frame_index"], np.arange(e["length"]))
        np.testing.assert_allclose(rows["timestamp"], np.arange(e["length"]) / info["fps"], atol=1e-4)
    tasks = pd.read_parquet(os.path.join(root, "meta/tasks.parquet"))
    assert tasks.index.name == "task" and list(tasks["task_index"]) == list(range(info["total_tasks"]))
    stats = json.load(open(os.path.join(root, "meta/stats.json")))
    for k in feats:
        assert {"min", "max", "mean", "std", "count"} <= set(stats[k]), k
    return info, frames, eps


def test_lerobot_round_trip(run):
    """The v3 layout validates; frames equal the file's (observation.state = qpos, qvel before each period, action
    the control held, next.reward the reward after it); stats equal numpy's over the Parquet; `datasets` loads the
    Parquet with the features LeRobot derives from info.json."""
    d, path = run
    root = export(path, d / "le", format="lerobot", obs="qpos,qvel", progress=False)
    info, frames, eps = validate_v3(root)
    assert info["fps"] == 500 and info["features"]["observation.state"]["shape"] == [8]
    with open_rollout(path) as f:
        rows, x, ctrl, reward, x0 = _finished(f), f.x, f.ctrl, f.reward, f.x0
        assert info["total_episodes"] == len(rows)
        state = np.stack(frames["observation.state"].to_numpy())
        action = np.stack(frames["action"].to_numpy())
        for (_, e), row in zip(eps.iterrows(), rows):
            w, s = row["world"], row["samples"]
            sl = slice(e["dataset_from_index"], e["dataset_to_index"])
            start = x0[w] if row["episode"] == 0 else f.episode_start(w, row["episode"])["x"]
            before = np.concatenate([start[None, :8], x[s[:-1], w, :8]])  # arm: x = qpos (4), qvel (4), act
            np.testing.assert_array_equal(state[sl], before)
            np.testing.assert_array_equal(action[sl], ctrl[s, w])
            np.testing.assert_array_equal(frames["next.reward"].to_numpy()[sl], reward[s, w])
            assert frames["next.terminated"].to_numpy()[sl][-1] == (row["end"] == "terminated")
            assert frames["next.done"].to_numpy()[sl].sum() == 1
            assert (e["mjharness/world"], e["mjharness/end"]) == (w, row["end"])
    stats = json.load(open(os.path.join(root, "meta/stats.json")))
    np.testing.assert_allclose(stats["action"]["mean"], action.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats["action"]["std"], action.std(axis=0), rtol=1e-8)
    np.testing.assert_array_equal(stats["observation.state"]["min"], state.min(axis=0))
    datasets = pytest.importorskip("datasets")
    feats = {}  # lerobot's get_hf_features_from_features
    for k, ft in info["features"].items():
        if ft["shape"] == [1]:
            feats[k] = datasets.Value(ft["dtype"])
        elif ft["dtype"] != "video":
            feats[k] = datasets.Sequence(length=ft["shape"][0], feature=datasets.Value(ft["dtype"]))
    hf = datasets.Dataset.from_parquet(os.path.join(root, V3_DATA.format(chunk_index=0, file_index=0)),
                                       features=datasets.Features(feats), cache_dir=str(d / "hf"))
    assert len(hf) == info["total_frames"]
    np.testing.assert_array_equal(np.asarray(hf[5]["action"]), action[5])
    # meta/episodes as LeRobot's load_episodes reads it: every file under meta/episodes, the stats/ columns left out
    ep_hf = datasets.Dataset.from_parquet(os.path.join(root, "meta/episodes/chunk-000/file-000.parquet"),
                                          cache_dir=str(d / "hf"))
    ep_hf = ep_hf.select_columns([k for k in ep_hf.features if not k.startswith("stats/")])
    assert ep_hf["dataset_to_index"][-1] == info["total_frames"] and ep_hf["tasks"][0] == [info["robot_type"]]


def test_lerobot_data_files_hold_whole_episodes(run, monkeypatch):
    """Data files end before DEFAULT_DATA_FILE_SIZE_IN_MB (here 0.05 MB: some episodes are larger than a file and
    have one of their own): several files, written side by side, each episode whole in the file meta/episodes
    names, the frames and stats those of the one-file export."""
    from mjharness.rollout.export import lerobot

    d, path = run
    one = export(path, d / "le_one", format="lerobot", obs="qpos,qvel", progress=False)
    monkeypatch.setattr(lerobot, "DEFAULT_DATA_FILE_SIZE_IN_MB", 0.05)
    root = export(path, d / "le_split", format="lerobot", obs="qpos,qvel", progress=False)
    info, frames, eps = validate_v3(root)
    files = eps.groupby(["data/chunk_index", "data/file_index"])
    assert files.ngroups > 3
    row_mb = pq.read_table(os.path.join(one, V3_DATA.format(chunk_index=0, file_index=0))).nbytes / 2**20 / len(frames)
    for (c, fi), group in files:
        index = pq.read_table(os.path.join(root, V3_DATA.format(chunk_index=c, file_index=fi)),
                              columns=["index"]).column("index").to_numpy()
        expect = np.concatenate([np.arange(a, b) for a, b in zip(group["dataset_from_index"],
                                                                 group["dataset_to_index"])])
        np.testing.assert_array_equal(index, expect)  # whole episodes, nothing else
        assert len(group) == 1 or len(index) * row_mb <= 0.05 + 1e-12
    _, frames_one, _ = validate_v3(one)
    for k in frames.columns:
        np.testing.assert_array_equal(np.stack(frames[k].to_numpy()), np.stack(frames_one[k].to_numpy()), err_msg=k)
    stats = [json.load(open(os.path.join(r, "meta/stats.json"))) for r in (root, one)]
    assert stats[0] == stats[1]


def test_lerobot_video(run):
    """--camera: one MP4 per camera holding every frame of every episode, located by from/to timestamps."""
    iio = pytest.importorskip("imageio.v3")
    d, _ = run
    path = str(d / "short.h5")
    rollout("arm", steps=30, batch=2, ctrl=arm_reach.make(), backend="mujoco", out=path, progress=False)
    root = export(path, d / "lev", format="lerobot", camera="free", size=(32, 24), progress=False)
    info, frames, eps = validate_v3(root)
    key = "observation.images.free"
    assert info["features"][key]["shape"] == [24, 32, 3]
    with warnings.catch_warnings():  # imageio's ffmpeg: fork + exec, which JAX warns about needlessly
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        video = iio.imread(os.path.join(root, V3_VIDEO.format(video_key=key, chunk_index=0, file_index=0)))
    assert video.shape == (info["total_frames"], 24, 32, 3) == (60, 24, 32, 3)
    np.testing.assert_allclose(eps[f"videos/{key}/from_timestamp"], [0.0, 30 / 500])
    np.testing.assert_allclose(eps[f"videos/{key}/to_timestamp"], [30 / 500, 60 / 500])
    stats = json.load(open(os.path.join(root, "meta/stats.json")))
    assert np.shape(stats[key]["mean"]) == (3, 1, 1)


def test_lerobot_video_files_end_at_the_size_limit(run, monkeypatch):
    """A video file full (here a limit of 0 MB: every written episode fills one) ends before the next episode: each
    episode in the file meta/episodes names, from timestamp 0 there, its frames all in it."""
    iio = pytest.importorskip("imageio.v3")
    from mjharness.rollout.export import lerobot

    d, _ = run
    path = str(d / "short3.h5")
    rollout("arm", steps=10, batch=3, ctrl=arm_reach.make(), backend="mujoco", out=path, progress=False)
    monkeypatch.setattr(lerobot, "DEFAULT_VIDEO_FILE_SIZE_IN_MB", 0)
    root = export(path, d / "lev_split", format="lerobot", camera="free", size=(32, 24), progress=False)
    info, frames, eps = validate_v3(root)
    key = "observation.images.free"
    assert list(zip(eps[f"videos/{key}/chunk_index"], eps[f"videos/{key}/file_index"])) == [(0, 0), (0, 1), (0, 2)]
    np.testing.assert_allclose(eps[f"videos/{key}/from_timestamp"], 0.0)
    np.testing.assert_allclose(eps[f"videos/{key}/to_timestamp"], 10 / 500)
    for fi in range(3):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
            video = iio.imread(os.path.join(root, V3_VIDEO.format(video_key=key, chunk_index=0, file_index=fi)))
        assert video.shape == (10, 24, 32, 3)


def test_lerobot_video_draws_each_worlds_model(run):
    """A world's randomized visual fields (here geom_rgba: the upper arm red in world 0, blue in world 1) are drawn
    in its episodes' frames: each decoded frame is nearer the renderer's own image of that world's model than of
    the other world's, and the two differ."""
    iio = pytest.importorskip("imageio.v3")
    from mjharness.rollout.rendering.gl import Offscreen
    from mjharness.rollout.rendering.options import parse_camera
    from mjharness.rollout.rendering.stage import Stage, light_unlit

    d, _ = run
    path = str(d / "rgba.h5")
    rgba = np.array([[[0.95, 0.05, 0.05, 1.0]] * 4, [[0.05, 0.05, 0.95, 1.0]] * 4])  # (worlds, ngeom, 4)
    rollout("arm", steps=6, batch=2, ctrl=arm_reach.make(), backend="mujoco", out=path, progress=False,
            model_params={"geom_rgba": rgba})
    size = (64, 48)
    root = export(path, d / "le_rgba", format="lerobot", camera="free", size=size, progress=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        video = iio.imread(os.path.join(root, V3_VIDEO.format(video_key="observation.images.free", chunk_index=0,
                                                              file_index=0))).astype(np.float64)
    with open_rollout(path) as f:
        m, qpos, x0 = f.model(), f.qpos, f.x0
    light_unlit(m)
    stage, screen = Stage(m, parse_camera("free", m), 1), Offscreen(m, *size)
    try:
        def draw(world, q):
            m.geom_rgba[:] = rgba[world]
            return screen.draw(stage.show(q[None])).astype(np.float64)

        frames_per_world = 6
        for w in range(2):
            q = np.concatenate([x0[w, None, :4], qpos[:-1, w]])  # the observation states: first, then period ends
            for k in (0, frames_per_world - 1):
                got = video[w * frames_per_world + k]
                own, other = draw(w, q[k]), draw(1 - w, q[k])
                assert np.abs(own - other).mean() > 1.0  # the colours show
                assert np.abs(got - own).mean() < 0.5 * np.abs(got - other).mean(), (w, k)
    finally:
        screen.close()


def test_outputs_as_observations(run):
    """A recorded output (xpos) as observation: the samples' values, and at the episode's first state the value
    mj_forward gives there (checked against a separately loaded model)."""
    import mujoco

    from mjharness.scenes import load_scene

    d, _ = run
    path = str(d / "outputs.h5")
    rollout("arm", steps=20, batch=2, ctrl=arm_reach.make(), outputs=("xpos",), backend="mujoco", out=path,
            progress=False)
    export(path, d / "mo", format="minari", obs=("qpos", "xpos"), progress=False)
    ds = _minari(d / "mo", "outputs-v0")
    m = load_scene("arm")
    data = mujoco.MjData(m)
    with open_rollout(path) as f:
        xpos, x0 = f.output("xpos"), f.x0
        for w, ep in enumerate(ds.iterate_episodes()):
            data.qpos[:] = x0[w, :4]
            mujoco.mj_kinematics(m, data)
            np.testing.assert_allclose(ep.observations["xpos"][0], data.xpos.reshape(-1), atol=1e-15)
            np.testing.assert_array_equal(ep.observations["xpos"][1:], xpos[:, w].reshape(20, -1))


def test_partial_file_exports_finished_episodes(run):
    """A file as a killed run leaves it (/progress: half the samples, not complete): the finished episodes so far
    are exported, the running ones are not."""
    d, path = run
    part = str(d / "part.h5")
    shutil.copy(path, part)
    with open_rollout(path) as f:  # cut where half the worlds' first episodes have terminated
        cut = sorted(r["end_step"] for r in f.episode_table() if r["end"] == "terminated")[B // 2] + 1
    with h5py.File(part, "r+") as h:
        h["progress"][0] = cut
        h["progress"][1] = 0
    with open_rollout(part) as f:
        rows = f.episode_table()
        finished = [r for r in rows if r["end"] != "running"]
        assert 0 < len(finished) < len(rows)
    export(part, d / "mp", format="minari", progress=False)
    ds = _minari(d / "mp", "part-v0")
    assert ds.total_episodes == len(finished)
    assert all(m["end"] == "terminated" for m in ds.storage.get_episode_metadata(range(len(finished))))


def _pd(t, x):
    """A stateless control function (its controls are recorded in /ctrl as a Controller's are)."""
    return 2.0 * (0.3 - x[:4]) - 0.5 * x[4:8]


def test_joined_file_exports_as_the_single_file(run):
    """The shards of a two-process run joined (rollout/h5/join.py) export the same episodes as one process.
    (A stateless ctrl function: the multi-process plan does not split a Controller among processes.)"""
    from mjharness.rollout.engine import distributed as D
    from mjharness.rollout.engine.plan import resolve_scene
    from mjharness.rollout.engine.spec import RunSpec, check_spec
    from mjharness.rollout.h5.join import join_shards, shard_paths

    d, _ = run
    opts = dict(steps=200, batch=4, ctrl=_pd, terminate=_early, on_terminate="reset", progress=False)
    single, joined = str(d / "single.h5"), str(d / "joined.h5")
    rollout("arm", backend="mujoco", out=single, **opts)
    scene = resolve_scene("arm", backend="mujoco")
    spec = check_spec(RunSpec.from_options(out=joined, **opts))
    scene, spec = D._local_scene_spec(scene, spec, 0)
    for k in range(2):
        plan, resumed = D._plan_shard(scene, None, spec, joined=joined, k=k, n=2)
        D._run_shard(plan, spec, resumed, progress=False)
    join_shards(joined, shard_paths(joined, 2))
    export(joined, d / "mj", format="minari", progress=False)
    export(single, d / "ms", format="minari", progress=False)
    a, b = _minari(d / "mj", "joined-v0"), _minari(d / "ms", "single-v0")
    assert a.total_episodes == b.total_episodes > 4
    metas = list(a.storage.get_episode_metadata(range(a.total_episodes)))
    assert sorted({m["world"] for m in metas}) == [0, 1, 2, 3]
    for ea, eb in zip(a.iterate_episodes(), b.iterate_episodes()):
        np.testing.assert_allclose(ea.observations["qpos"], eb.observations["qpos"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(ea.actions, eb.actions, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(ea.terminations, eb.terminations)


def test_file_without_reward_exports_zero_rewards_flagged(run):
    d, _ = run
    path = _decimated(d, 2, 1)
    root = export(path, d / "nr", format="lerobot", progress=False)
    info = json.load(open(os.path.join(root, "meta/info.json")))
    assert info["mjharness"]["reward_recorded"] is False and info["mjharness"]["rewards_are_zero"] is True
    assert not pq.read_table(os.path.join(root, V3_DATA.format(chunk_index=0, file_index=0)))["next.reward"] \
        .to_numpy().any()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(format="minari", obs="qpos,nosuch"), RolloutError, r"obs 'nosuch': .* has no state or output 'nosuch'"),
    (dict(format="parquet"), RolloutError, r"format='parquet': not a dataset format; use one of lerobot, minari"),
    (dict(format="minari", camera="free"), RolloutError, r"camera='free': videos are written only by"),
    (dict(format="lerobot", camera="nosuch"), ValueError, r"camera='nosuch': the model has no camera"),
])
def test_bad_options_write_nothing(run, kwargs, error, match):
    d, path = run
    out = d / f"bad_{kwargs['format']}_{len(kwargs)}"
    with pytest.raises(error, match=match):
        export(path, out, progress=False, **kwargs)
    assert not os.path.exists(out)


def test_cli_refuses_a_non_empty_folder(run):
    d, path = run
    out = d / "full"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", "export", path, "--format", "lerobot",
                        "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 2
    assert "exists and is not an empty folder" in p.stderr and p.stderr.count("error") == 1
    assert os.listdir(out) == ["keep.txt"]
    p = subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", "export", path, "--format", "minari",
                        "--obs", "qpos", "--out", str(d / "cli"), "--no-progress"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert _minari(d / "cli", "arm-v0").total_episodes == 2 * B


def test_failed_episodes_end_truncated_and_flagged(run):
    """arm_reach's gains at every=2 blow up (non-finite state): a failed episode ends truncated at the last period
    end before the failed step, its metadata saying failed."""
    d, _ = run
    path = str(d / "unstable.h5")
    rollout("arm", steps=120, batch=2, ctrl=Controller(arm_reach.init, arm_reach.step, every=2), backend="mujoco",
            out=path, progress=False)
    export(path, d / "mf", format="minari", obs="qpos", progress=False)
    ds = _minari(d / "mf", "unstable-v0")
    metas = list(ds.storage.get_episode_metadata(range(ds.total_episodes)))
    with open_rollout(path) as f:
        status_step, qpos = f.status_step, f.qpos
        assert (f.status != 0).all()
    for ep, meta in zip(ds.iterate_episodes(), metas):
        w = meta["world"]
        assert meta["end"] == "failed" and meta["failed"]
        last = np.arange(1, status_step[w], 2)[-1]  # the last step k < the failed step with (k + 1) % 2 == 0
        np.testing.assert_array_equal(ep.observations["qpos"][-1], qpos[last, w])
        assert np.isfinite(ep.observations["qpos"]).all() and len(ep.actions) == (last + 1) // 2
        assert ep.truncations[-1] and not ep.terminations.any()
