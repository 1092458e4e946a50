"""A rollout file as a Minari dataset: Minari's own API creates it (``create_dataset_from_buffers``: the folder,
``metadata.json``, the spaces), the episodes are then written into its ``main_data.hdf5`` in the layout
Minari's ``HDF5Storage`` writes (``episode_<id>`` groups, attributes ``id``, ``seed``, ``total_steps`` and the
episode metadata, datasets with an unlimited first axis) through h5py's low-level calls: Minari's writer
spends ~0.7 ms of Python per dataset (7,000 of them for 1,000 episodes), several times the time of the bytes.
A dataset is one chunk of up to ``CHUNK_BYTES`` (an episode's array is read whole): h5py's guessed chunks
(halves of it) cost twice the write.

The dataset ``name`` (default ``<file stem>-v0``) lives in the export's folder: ``minari.load_dataset(name)``
with ``MINARI_DATASETS_PATH`` pointing there loads it. Observations are a ``Dict`` space (one ``Box`` per
observation name, "/" in a name written "."), N+1 per episode; actions a ``Box`` with the actuators' control
ranges, N; rewards, terminations and truncations N. Episode metadata (``dataset.storage.get_episode_metadata``)
holds ``core.episode_meta``; the dataset metadata's ``mjharness`` entry where the data came from.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from typing import Any

import numpy as np

from .core import ExportPlan, block_parts, episode_meta, episode_observations, read_block, world_blocks
from .start import OutputsAt, first_observations


def obs_key(name: str) -> str:
    return name.replace("/", ".")


def default_name(path: str) -> str:
    """``<file stem>-v0`` with the characters Minari's ids allow."""
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", os.path.splitext(os.path.basename(path))[0]) or "rollout"
    return f"{stem}-v0"


@contextlib.contextmanager
def _datasets_path(folder: str):
    """Minari finds datasets through ``MINARI_DATASETS_PATH``: pointed at the export's folder while writing."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = os.path.abspath(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


def _spaces(plan: ExportPlan):
    from gymnasium import spaces

    m = plan.file.model()
    obs = spaces.Dict({obs_key(o.name): spaces.Box(-np.inf, np.inf, (o.size,), np.float64) for o in plan.obs})
    low = np.where(m.actuator_ctrllimited > 0, m.actuator_ctrlrange[:, 0], -np.inf) if m.nu == plan.nu else None
    high = np.where(m.actuator_ctrllimited > 0, m.actuator_ctrlrange[:, 1], np.inf) if m.nu == plan.nu else None
    act = spaces.Box(-np.inf if low is None else low, np.inf if high is None else high, (plan.nu,), np.float64)
    return obs, act


def _create(minari, *args, **kwargs):
    """``minari.create_dataset_from_buffers`` without its advice for datasets published by a person (an author, an
    email, an environment to evaluate in): an export has none of them, and says where it came from instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`(author|author_email|eval_env)` is set to None", UserWarning)
        warnings.filterwarnings("ignore", r"env_spec is None", UserWarning)
        return minari.create_dataset_from_buffers(*args, **kwargs)


CHUNK_BYTES = 2**20  # HDF5's default chunk cache: a chunk read whole


def chunk_rows(shape: tuple, itemsize: int) -> tuple:
    """The chunk of a (N, ...) dataset: whole rows, the whole array up to ``CHUNK_BYTES``."""
    row = itemsize * math.prod(shape[1:])
    return (max(1, min(int(shape[0]), CHUNK_BYTES // max(row, 1))),) + tuple(shape[1:])


class _Writer:
    """Episode groups of a Minari ``main_data.hdf5`` through h5py's low-level API, types and property lists
    made once per (shape tail, dtype) and per attribute name."""

    def __init__(self, h5):
        import h5py

        self.h5py, self.h5 = h5py, h5
        self.types: dict = {}
        self.attr_types: dict = {}
        # one creation property list, its chunk set per dataset: making a list costs ~30 us, an eighth of a dataset
        self.dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)

    def _type(self, dtype):
        if dtype.str not in self.types:
            self.types[dtype.str] = self.h5py.h5t.py_create(dtype, logical=True)
        return self.types[dtype.str]

    def dataset(self, gid, name: str, a: np.ndarray) -> None:
        """``group.create_dataset(name, data=a, chunks=..., maxshape=(None, *a.shape[1:]))`` (Minari's call, with
        ``chunk_rows``' chunks)."""
        h5py = self.h5py
        a = np.ascontiguousarray(a)
        dcpl = self.dcpl
        dcpl.set_chunk(chunk_rows(a.shape, a.dtype.itemsize))
        space = h5py.h5s.create_simple(a.shape, (h5py.h5s.UNLIMITED,) + a.shape[1:])
        tid = self._type(a.dtype)  # numbers and bools: the memory type is the file's (no conversion to look up)
        h5py.h5d.create(gid, name.encode(), tid, space, dcpl=dcpl).write(h5py.h5s.ALL, h5py.h5s.ALL, a, mtype=tid)

    def attrs(self, gid, values: dict) -> None:
        """``group.attrs[k] = v`` for every item (values of one name keep one type across episodes)."""
        h5py = self.h5py
        for k, v in values.items():
            a = np.array(v, dtype=h5py.string_dtype()) if isinstance(v, str) else np.asarray(v)
            key = (k, a.dtype.str, a.shape)
            if key not in self.attr_types:
                space = h5py.h5s.create_simple(a.shape) if a.shape else h5py.h5s.create(h5py.h5s.SCALAR)
                # the file's type logical, the memory type the bytes as numpy holds them (as attrs.create does)
                self.attr_types[key] = (self._type(a.dtype), h5py.h5t.py_create(a.dtype), space)
            tid, mtype, space = self.attr_types[key]
            h5py.h5a.create(gid, k.encode(), tid, space).write(a, mtype=mtype)

    def episode(self, eid: int, attrs: dict, observations: dict, arrays: dict) -> None:
        g = self.h5py.h5g.create(self.h5.id, f"episode_{eid}".encode())
        self.attrs(g, attrs)
        o = self.h5py.h5g.create(g, b"observations")
        for k, a in observations.items():
            self.dataset(o, k, a)
        for k, a in arrays.items():
            self.dataset(g, k, a)


def write_minari(plan: ExportPlan, *, name: str | None = None, progress: bool = True) -> str:
    """Write ``plan`` as Minari dataset ``name`` under ``plan.out``; returns the dataset's folder."""
    import h5py
    import minari
    from tqdm.auto import tqdm

    name = name or default_name(plan.file.path)
    os.makedirs(plan.out, exist_ok=True)
    obs_space, act_space = _spaces(plan)
    x0, outputs_at = plan.file.x0, OutputsAt(plan)
    n_episodes = n_steps = 0
    bar = tqdm(total=len(plan.episodes), desc="export minari", unit="episode", disable=not progress, leave=False)
    with _datasets_path(plan.out), bar:
        dataset: Any = _create(
            minari, name, [], observation_space=obs_space, action_space=act_space,
            algorithm_name="mjharness closed-loop rollout", code_permalink="https://github.com/mjharness",
            description=f"mjharness export of {plan.meta['source_file']} ({plan.meta['scene']}): one "
                        f"episode per /episodes row, one step per control period of "
                        f"{plan.every * plan.dt:g} s", data_format="hdf5")
        storage = dataset.storage
        with h5py.File(storage.data_path / "main_data.hdf5", "a") as h5:
            w = _Writer(h5)
            for w0, w1, block_eps in world_blocks(plan):
                block = read_block(plan, w0, w1)
                for eps, fr in block_parts(plan, block, block_eps,
                                           lambda ep: first_observations(plan, ep, x0, outputs_at)):
                    obs = {obs_key(k): v for k, v in episode_observations(fr).items()}
                    for i, ep in enumerate(eps):
                        e, oe = fr.episode(i), slice(int(fr.bounds[i]) + i, int(fr.bounds[i + 1]) + i + 1)
                        attrs = {"id": n_episodes, "seed": plan.meta["seed"], "total_steps": e.stop - e.start}
                        w.episode(n_episodes, attrs | episode_meta(plan, ep), {k: v[oe] for k, v in obs.items()},
                                  {"actions": fr.action[e], "rewards": fr.reward[e],
                                   "terminations": fr.terminated[e], "truncations": fr.truncated[e]})
                        n_episodes, n_steps = n_episodes + 1, n_steps + e.stop - e.start
                    bar.update(len(eps))
        storage.update_metadata({"total_episodes": n_episodes, "total_steps": n_steps,
                                 "dataset_size": storage.get_size(),
                                 "mjharness": {**plan.meta, "fps": plan.fps, "skipped": plan.skipped,
                                               "rewards_are_zero": not plan.has_reward}})
    return os.path.join(plan.out, name)
