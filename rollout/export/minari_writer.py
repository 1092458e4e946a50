"""A rollout file as a Minari dataset, written with Minari's own API (``create_dataset_from_buffers``).

The dataset ``name`` (default ``<file stem>-v0``) lives in the export's folder: ``minari.load_dataset(name)``
with ``MINARI_DATASETS_PATH`` pointing there loads it. Observations are a ``Dict`` space (one ``Box`` per
observation name, "/" in a name written "."), N+1 per episode; actions a ``Box`` with the actuators' control
ranges, N; rewards, terminations and truncations N. Episode metadata (``dataset.storage.get_episode_metadata``)
holds ``core.episode_meta``; the dataset metadata's ``mjharness`` entry where the data came from.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from typing import Any

import numpy as np

from .core import ExportPlan, block_frames, episode_meta, read_block, world_blocks
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


def write_minari(plan: ExportPlan, *, name: str | None = None, progress: bool = True) -> str:
    """Write ``plan`` as Minari dataset ``name`` under ``plan.out``; returns the dataset's folder."""
    import minari
    from minari.data_collector import EpisodeBuffer
    from tqdm.auto import tqdm

    name = name or default_name(plan.file.path)
    os.makedirs(plan.out, exist_ok=True)
    obs_space, act_space = _spaces(plan)
    x0, outputs_at = plan.file.x0, OutputsAt(plan)
    dataset: Any = None
    metas: list[dict] = []
    bar = tqdm(total=len(plan.episodes), desc="export minari", unit="episode", disable=not progress, leave=False)
    with _datasets_path(plan.out), bar:
        for w0, w1, eps in world_blocks(plan):
            block = read_block(plan, w0, w1)
            fr = block_frames(plan, block, eps, [first_observations(plan, ep, x0, outputs_at) for ep in eps])
            buffers = []
            for i, ep in enumerate(eps):
                e = fr.episode(i)
                buffers.append(EpisodeBuffer(
                    id=len(metas), seed=plan.meta["seed"],
                    observations={obs_key(k): v for k, v in fr.observations(i).items()}, actions=fr.action[e],
                    rewards=fr.reward[e], terminations=fr.terminated[e], truncations=fr.truncated[e]))
                metas.append(episode_meta(plan, ep))
            if dataset is None:
                dataset = _create(
                    minari, name, buffers, observation_space=obs_space, action_space=act_space,
                    algorithm_name="mjharness closed-loop rollout", code_permalink="https://github.com/mjharness",
                    description=f"mjharness export of {plan.meta['source_file']} ({plan.meta['scene']}): one "
                                f"episode per /episodes row, one step per control period of "
                                f"{plan.every * plan.dt:g} s", data_format="hdf5")
            else:
                dataset.update_dataset_from_buffer(buffers)
            bar.update(len(eps))
        assert dataset is not None  # plan_export refuses a file without an episode
        dataset.storage.update_episode_metadata(metas, range(len(metas)))
        dataset.storage.update_metadata({"mjharness": {**plan.meta, "fps": plan.fps, "skipped": plan.skipped,
                                                       "rewards_are_zero": not plan.has_reward}})
    return os.path.join(plan.out, name)
