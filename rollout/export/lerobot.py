"""A rollout file as a LeRobot v3 dataset (``codebase_version`` "v3.0"), written with pyarrow.

The layout is LeRobot's (``lerobot/datasets/utils.py``: ``INFO_PATH``, ``DEFAULT_DATA_PATH``, ...)::

    meta/info.json                                  fps, features (dtype, shape, names), path templates, totals
    meta/stats.json                                 mean/std/min/max/count per feature over every frame
    meta/tasks.parquet                              task (index) -> task_index
    meta/episodes/chunk-000/file-000.parquet        one row per episode: length, data/video locations, stats/...
    data/chunk-{c:03d}/file-{f:03d}.parquet         the frames, files of at most data_files_size_in_mb
    videos/observation.images.<camera>/chunk-000/file-000.mp4   every episode's frames, one after the other

A frame is one control period (``core``): ``observation.state`` (the observations before it, concatenated),
``action`` (the control held during it), ``next.reward``, ``next.done``, ``next.terminated``,
``next.truncated`` and LeRobot's ``timestamp`` (frame_index / fps), ``frame_index``, ``episode_index``,
``index``, ``task_index``. Values stay float64 (LeRobot's features take any numpy dtype). Per-episode
metadata (``core.episode_meta``) are the ``mjharness/...`` columns of ``meta/episodes``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .core import ExportPlan, block_frames, episode_meta, read_block, world_blocks
from .start import OutputsAt, first_observations

CODEBASE_VERSION = "v3.0"
DEFAULT_CHUNK_SIZE = 1000  # files per chunk folder
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 500
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
INFO_PATH, STATS_PATH, TASKS_PATH = "meta/info.json", "meta/stats.json", "meta/tasks.parquet"
DEFAULT_EPISODES_PATH = "meta/episodes/" + CHUNK_FILE_PATTERN + ".parquet"
DEFAULT_DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
INDEX_FEATURES: dict[str, dict] = {  # LeRobot's DEFAULT_FEATURES
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
STEP_FEATURES = {"next.reward": "float64", "next.done": "bool", "next.terminated": "bool", "next.truncated": "bool"}


def _actuator_names(plan: ExportPlan) -> list:
    import mujoco

    m = plan.file.model()
    if m.nu != plan.nu:
        return [f"ctrl[{i}]" for i in range(plan.nu)]
    return [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"ctrl[{i}]" for i in range(m.nu)]


def features(plan: ExportPlan, video=None) -> dict:
    """info.json's ``features``: dtype, shape and names of every column (and video)."""
    labels = [f"{o.name}:{lab}" if len(plan.obs) > 1 else lab for o in plan.obs for lab in o.labels]
    out: dict[str, dict] = {"observation.state": {"dtype": "float64", "shape": [len(labels)], "names": labels},
           "action": {"dtype": "float64", "shape": [plan.nu], "names": _actuator_names(plan)}}
    out.update({k: {"dtype": v, "shape": [1], "names": None} for k, v in STEP_FEATURES.items()})
    if video is not None:
        out[video.key] = video.feature(plan.fps)
    out.update(INDEX_FEATURES)
    return out


class Stats:
    """Running min/max/sum/sum of squares/count per feature (vectorized over a block's frames)."""

    def __init__(self):
        self.acc: dict = {}

    def add(self, name: str, a: np.ndarray, axis=0) -> None:
        a = np.asarray(a, dtype=np.float64)
        self.merge(name, (a.min(axis=axis), a.max(axis=axis), a.sum(axis=axis), (a * a).sum(axis=axis), a.shape[0]))

    def merge(self, name: str, s: tuple) -> None:
        """Add (min, max, sum, sum of squares, count) of more frames."""
        if name not in self.acc:
            self.acc[name] = list(s)
            return
        c = self.acc[name]
        c[0], c[1] = np.minimum(c[0], s[0]), np.maximum(c[1], s[1])
        c[2], c[3], c[4] = c[2] + s[2], c[3] + s[3], c[4] + s[4]

    def result(self) -> dict:
        out = {}
        for name, (lo, hi, s, ss, n) in self.acc.items():
            mean = s / n
            std = np.sqrt(np.maximum(ss / n - mean * mean, 0.0))
            # images: per channel, LeRobot's (3, 1, 1)
            shape = (-1, 1, 1) if name.startswith("observation.images.") else (-1,)
            out[name] = {k: np.reshape(v, shape).tolist() for k, v in
                         (("min", lo), ("max", hi), ("mean", mean), ("std", std))} | {"count": [int(n)]}
        return out


def _episode_stats(columns: dict, bounds: np.ndarray, stats: Stats) -> dict:
    """stats/<feature>/<stat> of each episode: ``reduceat`` over the concatenated frames ``bounds`` (E+1,); the
    same sums, merged, make the dataset's stats."""
    starts, n = bounds[:-1], np.diff(bounds)
    out = {}
    for name, a in columns.items():
        a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
        s, ss = np.add.reduceat(a, starts, axis=0), np.add.reduceat(a * a, starts, axis=0)
        lo, hi = np.minimum.reduceat(a, starts, axis=0), np.maximum.reduceat(a, starts, axis=0)
        stats.merge(name, (lo.min(axis=0), hi.max(axis=0), s.sum(axis=0), ss.sum(axis=0), int(n.sum())))
        mean = s / n[:, None]
        var = np.maximum(ss / n[:, None] - mean * mean, 0.0)
        for stat, v in (("min", lo), ("max", hi), ("mean", mean), ("std", np.sqrt(var))):
            out[f"stats/{name}/{stat}"] = v
        out[f"stats/{name}/count"] = n[:, None]
    return out


def _column(a: np.ndarray):
    """A pyarrow column: scalars plain, vectors LeRobot's fixed-size lists (``datasets.Sequence(length=n)``)."""
    import pyarrow as pa

    if a.ndim == 1:
        return pa.array(a)
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(a).reshape(-1)), a.shape[1])


def _block_columns(plan: ExportPlan, fr, first_index: int, first_episode: int) -> dict:
    """The data columns of a block's episodes (``core.Frames``, concatenated)."""
    bounds = fr.bounds
    lengths, total = np.diff(bounds), int(bounds[-1])
    frame_index = np.arange(total, dtype=np.int64) - np.repeat(bounds[:-1], lengths)
    cols = {
        "observation.state": np.concatenate([fr.before[o.name] for o in plan.obs], axis=1),
        "action": fr.action.reshape(total, plan.nu),
        "next.reward": fr.reward.astype(np.float64),
        "next.terminated": fr.terminated,
        "next.truncated": fr.truncated,
        "timestamp": (frame_index / plan.fps).astype(np.float32),
        "frame_index": frame_index,
        "episode_index": np.repeat(np.arange(first_episode, first_episode + len(lengths), dtype=np.int64), lengths),
        "index": np.arange(first_index, first_index + total, dtype=np.int64),
        "task_index": np.zeros(total, dtype=np.int64),
    }
    cols["next.done"] = cols["next.terminated"] | cols["next.truncated"]
    return cols


class DataFiles:
    """``data/chunk-*/file-*.parquet``: a new file once the current one holds ``DEFAULT_DATA_FILE_SIZE_IN_MB``
    (uncompressed, as LeRobot counts it); an episode never spans two files. Tables are encoded and written on a
    thread of their own (pyarrow releases the GIL) while the next block's frames and stats are computed; ``close``
    waits for them and raises what failed."""

    def __init__(self, root: str):
        from concurrent.futures import ThreadPoolExecutor

        self.root, self.chunk, self.file, self.mb = root, 0, 0, 0.0
        self.writer: Any = None
        self.paths: list[str] = []
        self._pool = ThreadPoolExecutor(1)  # one worker: the writes keep their order
        self._jobs: list = []

    def write(self, table) -> tuple:
        """Queue ``table`` (whole episodes) for writing; returns the (chunk, file) it goes to."""
        import pyarrow.parquet as pq

        mb = table.nbytes / 2**20
        if self.writer is not None and self.mb + mb > DEFAULT_DATA_FILE_SIZE_IN_MB:
            self._jobs.append(self._pool.submit(self.writer.close))
            self.writer, self.mb = None, 0.0
            self.file += 1
            if self.file == DEFAULT_CHUNK_SIZE:
                self.chunk, self.file = self.chunk + 1, 0
        if self.writer is None:
            path = os.path.join(self.root, DEFAULT_DATA_PATH.format(chunk_index=self.chunk, file_index=self.file))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # Snappy as LeRobot writes; no dictionary pages: simulated floats never repeat (the encoder's attempt
            # cost a third of the write).
            self.writer = pq.ParquetWriter(path, table.schema, compression="snappy", use_dictionary=False)
            self.paths.append(path)
        self._jobs.append(self._pool.submit(self.writer.write_table, table))
        self.mb += mb
        return self.chunk, self.file

    def close(self) -> None:
        if self.writer is not None:
            self._jobs.append(self._pool.submit(self.writer.close))
            self.writer = None
        self._pool.shutdown(wait=True)
        for job in self._jobs:
            job.result()


def write_lerobot(plan: ExportPlan, *, video=None, task: str | None = None, progress: bool = True) -> str:
    """Write ``plan`` as a LeRobot v3 dataset in ``plan.out``; returns ``plan.out``."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tqdm.auto import tqdm

    root = plan.out
    os.makedirs(root, exist_ok=True)
    task = task or plan.meta["scene"] or "mjharness rollout"
    feats = features(plan, video)
    x0, outputs_at = plan.file.x0, OutputsAt(plan)
    stats, data = Stats(), DataFiles(root)
    episode_cols: dict = {}
    n_episodes, n_frames = 0, 0
    videos = video.open(root, plan) if video is not None else None
    bar = tqdm(total=len(plan.episodes), desc="export lerobot", unit="episode", disable=not progress, leave=False)
    try:
        with bar:
            for w0, w1, eps in world_blocks(plan):
                block = read_block(plan, w0, w1)
                fr = block_frames(plan, block, eps, [first_observations(plan, ep, x0, outputs_at) for ep in eps])
                cols, bounds = _block_columns(plan, fr, n_frames, n_episodes), fr.bounds
                table = pa.table({k: _column(cols[k]) for k in feats if k in cols})
                chunk, file = data.write(table)
                ep_cols = {"episode_index": np.arange(n_episodes, n_episodes + len(eps), dtype=np.int64),
                           "length": np.diff(bounds), "data/chunk_index": np.full(len(eps), chunk),
                           "data/file_index": np.full(len(eps), file),
                           "dataset_from_index": n_frames + bounds[:-1], "dataset_to_index": n_frames + bounds[1:]}
                if videos is not None:
                    ep_cols.update(videos.write(plan, block, eps, fr, stats))
                ep_cols.update(_episode_stats(cols, bounds, stats))
                for k, v in ep_cols.items():
                    episode_cols.setdefault(k, []).append(np.asarray(v))
                for ep in eps:
                    for k, v in episode_meta(plan, ep).items():
                        episode_cols.setdefault(f"mjharness/{k}", []).append(v)
                n_episodes, n_frames = n_episodes + len(eps), n_frames + int(bounds[-1])
                bar.update(len(eps))
    finally:
        data.close()
        if videos is not None:
            videos.close()
    ep_table = {"tasks": pa.array([[task]] * n_episodes, type=pa.list_(pa.string()))}
    for k, parts in episode_cols.items():
        if k.startswith("mjharness/"):
            ep_table[k] = pa.array(parts)
        else:
            ep_table[k] = _column(np.concatenate(parts))
    ep_table["meta/episodes/chunk_index"] = pa.array(np.zeros(n_episodes, dtype=np.int64))
    ep_table["meta/episodes/file_index"] = pa.array(np.zeros(n_episodes, dtype=np.int64))
    path = os.path.join(root, DEFAULT_EPISODES_PATH.format(chunk_index=0, file_index=0))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(ep_table), path, compression="snappy")
    pd.DataFrame({"task_index": [0]}, index=pd.Index([task], name="task")).to_parquet(os.path.join(root, TASKS_PATH))
    _write_json(os.path.join(root, STATS_PATH), stats.result())
    info = {"codebase_version": CODEBASE_VERSION, "robot_type": plan.meta["scene"] or None,
            "total_episodes": n_episodes, "total_frames": n_frames, "total_tasks": 1,
            "chunks_size": DEFAULT_CHUNK_SIZE, "data_files_size_in_mb": DEFAULT_DATA_FILE_SIZE_IN_MB,
            "video_files_size_in_mb": DEFAULT_VIDEO_FILE_SIZE_IN_MB, "fps": _fps(plan.fps),
            "splits": {"train": f"0:{n_episodes}"}, "data_path": DEFAULT_DATA_PATH,
            "video_path": DEFAULT_VIDEO_PATH if video is not None else None, "features": feats,
            "mjharness": {**plan.meta, "skipped": plan.skipped, "rewards_are_zero": not plan.has_reward}}
    _write_json(os.path.join(root, INFO_PATH), info)
    return root


def _fps(fps: float):
    """LeRobot's fps is an int: whole rates are written as one, others as they are."""
    return int(round(fps)) if abs(fps - round(fps)) < 1e-9 * fps else fps


def _write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=4)
