"""A rollout file as a LeRobot v3 dataset (``codebase_version`` "v3.0"), written with pyarrow.

The layout is LeRobot's (``lerobot/datasets/utils.py``: ``INFO_PATH``, ``DEFAULT_DATA_PATH``, ...)::

    meta/info.json                                  fps, features (dtype, shape, names), path templates, totals
    meta/stats.json                                 mean/std/min/max/count per feature over every frame
    meta/tasks.parquet                              task (index) -> task_index
    meta/episodes/chunk-000/file-000.parquet        one row per episode: length, data/video locations, stats/...
    data/chunk-{c:03d}/file-{f:03d}.parquet         the frames, files of at most data_files_size_in_mb
    videos/observation.images.<camera>/chunk-{c:03d}/file-{f:03d}.mp4   episodes' frames, files of ~500 MB

A frame is one control period (``core``): ``observation.state`` (the observations before it, concatenated),
``action`` (the control held during it), ``next.reward``, ``next.done``, ``next.terminated``,
``next.truncated`` and LeRobot's ``timestamp`` (frame_index / fps), ``frame_index``, ``episode_index``,
``index``, ``task_index``. Values stay float64 (LeRobot's features take any numpy dtype). Per-episode
metadata (``core.episode_meta``) are the ``mjharness/...`` columns of ``meta/episodes``.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .core import ExportPlan, block_parts, episode_meta, read_block, world_blocks
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


REDUCEAT_MAX_COMPONENTS = 8  # reduceat down a (F, k) array is ~10 ms an op at k = 4, ~80 at 17 (grows with k)


def _segment_sums(a: np.ndarray, bounds: np.ndarray) -> tuple:
    """(min, max, sum, sum of squares) of each segment ``bounds[i]:bounds[i+1]`` of (F, k) ``a``, each (E, k):
    ``reduceat`` for up to ``REDUCEAT_MAX_COMPONENTS`` components, a loop over segments for more (its ~0.2 s for
    1,000 segments hardly grows with k; a transposed copy costs as much)."""
    if a.shape[1] <= REDUCEAT_MAX_COMPONENTS:
        at = bounds[:-1]
        return (np.minimum.reduceat(a, at, axis=0), np.maximum.reduceat(a, at, axis=0),
                np.add.reduceat(a, at, axis=0), np.add.reduceat(a * a, at, axis=0))
    segs = [a[i:j] for i, j in zip(bounds[:-1], bounds[1:])]
    return (np.stack([g.min(axis=0) for g in segs]), np.stack([g.max(axis=0) for g in segs]),
            np.stack([g.sum(axis=0) for g in segs]), np.stack([np.einsum("ij,ij->j", g, g) for g in segs]))


def _episode_stats(columns: dict, bounds: np.ndarray, stats: Stats) -> dict:
    """stats/<feature>/<stat> of each episode over the concatenated frames ``bounds`` (E+1,); the same sums,
    merged, make the dataset's stats."""
    n = np.diff(bounds)
    out = {}
    for name, a in columns.items():
        lo, hi, s, ss = _segment_sums(np.asarray(a, dtype=np.float64).reshape(len(a), -1), bounds)
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
        "observation.state": fr.before([o.name for o in plan.obs]),
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


def next_file(chunk: int, file: int) -> tuple:
    """The (chunk, file) index after ``(chunk, file)``: ``DEFAULT_CHUNK_SIZE`` files a chunk folder."""
    return (chunk + 1, 0) if file + 1 == DEFAULT_CHUNK_SIZE else (chunk, file + 1)


def _write_parquet(path: str, tables: list) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Snappy as LeRobot writes; no dictionary pages: simulated floats never repeat (the encoder's attempt cost a
    # third of the write). Page statistics (min/max) for the scalar columns only, which filters select rows by
    # (episode_index, index, timestamp): those of every component of observation.state and action cost a third
    # of the rest, and nothing reads them (LeRobot's statistics are meta/stats.json).
    scalars = [f.name for f in tables[0].schema if not pa.types.is_fixed_size_list(f.type)]
    with pq.ParquetWriter(path, tables[0].schema, compression="snappy", use_dictionary=False,
                          write_statistics=scalars) as w:
        for t in tables:
            w.write_table(t)


class DataFiles:
    """``data/chunk-*/file-*.parquet``: whole episodes, a new file before the current one would pass
    ``DEFAULT_DATA_FILE_SIZE_IN_MB`` (uncompressed, as LeRobot counts it; an episode larger than that has a file
    of its own), and a new file for each block. Each file is encoded and written as one job on a pool of two
    threads (pyarrow releases the GIL: files are written side by side, and while the block's stats and the next
    block's frames are computed); ``close`` waits for them and raises what failed."""

    def __init__(self, root: str):
        from concurrent.futures import ThreadPoolExecutor

        self.root, self.chunk, self.file, self.mb = root, 0, 0, 0.0
        self.tables: list = []  # the current file's
        self._pool = ThreadPoolExecutor(2)
        self._jobs: list = []

    def _flush(self) -> None:
        if self.tables:
            path = os.path.join(self.root, DEFAULT_DATA_PATH.format(chunk_index=self.chunk, file_index=self.file))
            self._jobs.append(self._pool.submit(_write_parquet, path, self.tables))
            self.tables, self.mb = [], 0.0
            self.chunk, self.file = next_file(self.chunk, self.file)

    def write(self, table, bounds: np.ndarray) -> np.ndarray:
        """Add ``table``, whole episodes at rows ``bounds`` (E+1,), to the current file (a full one is queued for
        writing); returns each episode's (chunk, file), (E, 2)."""
        row_mb = table.nbytes / 2**20 / max(table.num_rows, 1)
        where = np.empty((len(bounds) - 1, 2), dtype=np.int64)
        i = 0
        while i < len(bounds) - 1:
            ends_mb = (bounds[i + 1:] - bounds[i]) * row_mb  # the file's growth with each further episode
            j = i + int(np.searchsorted(ends_mb, DEFAULT_DATA_FILE_SIZE_IN_MB - self.mb, side="right"))
            if j == i:
                if self.tables:
                    self._flush()
                    continue
                j = i + 1  # one episode larger than a file
            self.tables.append(table.slice(int(bounds[i]), int(bounds[j] - bounds[i])))
            self.mb += float(ends_mb[j - i - 1])
            where[i:j] = self.chunk, self.file
            i = j
        return where

    def end_block(self) -> None:
        """The block's last file is written now (the next block starts a file of its own)."""
        self._flush()

    def close(self) -> None:
        self._flush()
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
            for w0, w1, block_eps in world_blocks(plan):
                block = read_block(plan, w0, w1)
                for eps, fr in block_parts(plan, block, block_eps, lambda ep: first_observations(plan, ep, x0,
                                                                                               outputs_at)):
                    cols, bounds = _block_columns(plan, fr, n_frames, n_episodes), fr.bounds
                    table = pa.table({k: _column(cols[k]) for k in feats if k in cols})
                    where = data.write(table, bounds)
                    ep_cols = {"episode_index": np.arange(n_episodes, n_episodes + len(eps), dtype=np.int64),
                               "length": np.diff(bounds), "data/chunk_index": where[:, 0],
                               "data/file_index": where[:, 1], "dataset_from_index": n_frames + bounds[:-1],
                               "dataset_to_index": n_frames + bounds[1:]}
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
                data.end_block()
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
