"""Rollout files as learning datasets: LeRobot v3 and Minari (docs/datasets.md).

    from mjharness.rollout.export import export
    export("run.h5", "ds", format="minari", obs=("qpos", "qvel"))
    export("run.h5", "ds_lerobot", format="lerobot", obs="qpos,qvel", camera="free")

One frame per control period of a closed loop (``core``); every option is checked against the file before
anything is written (one ``RolloutError`` / ``RolloutFileError``). The writers need ``pip install
'mjharness[export]'`` (pyarrow, pandas; minari).
"""

from __future__ import annotations

import os

from mjharness.rollout.errors import RolloutError
from mjharness.rollout.h5 import RolloutFile, open_rollout

from .core import DEFAULT_OBS, FORMATS, ExportPlan, plan_export

__all__ = ["export", "plan_export", "ExportPlan", "FORMATS", "DEFAULT_OBS"]

REQUIRES = {"lerobot": ("pyarrow", "pandas"), "minari": ("minari", "gymnasium")}


def _require(format: str) -> None:
    import importlib.util

    missing = [m for m in REQUIRES[format] if importlib.util.find_spec(m) is None]
    if missing:
        raise RolloutError(f"format={format!r} needs {', '.join(missing)}: pip install 'mjharness[export]'")


def export(path: str | os.PathLike[str] | RolloutFile, out: str | os.PathLike[str], *, format: str,
           obs=DEFAULT_OBS, camera: str | None = None, name: str | None = None, size=(320, 240),
           task: str | None = None, progress: bool = True) -> str:
    """Export the finished episodes of rollout file ``path`` as a dataset in the new folder ``out``; returns
    the dataset's folder.

    format: "lerobot" (LeRobot v3: Parquet frames, ``meta/``; MP4 per camera) or "minari" (Minari's HDF5
        dataset, loadable with ``minari.load_dataset(name)`` and ``MINARI_DATASETS_PATH=out``).
    obs: names of the observations ("qpos", "qvel", "x", named states such as "hinge/qpos", recorded outputs
        such as "sensordata"), a sequence or one comma-separated string; concatenated in this order in
        LeRobot's ``observation.state``, one ``Dict`` entry each in Minari.
    camera: LeRobot only: render ``observation.images.<camera>`` videos ("free", "track:<body>" or a camera of
        the model; MUJOCO_GL chooses the OpenGL backend); ``size``: their (width, height).
    name: the Minari dataset id (default ``<file stem>-v0``). task: the LeRobot task string (default the
        scene's name).
    A file still being written exports the episodes finished so far; a run without ``reward=`` exports
    rewards of 0, flagged in the metadata (``reward_recorded: false``).
    """
    from .core import check_format

    check_format(format)
    _require(format)
    if camera is not None and format != "lerobot":
        raise RolloutError(f"camera={camera!r}: videos are written only by format='lerobot'")
    own = not isinstance(path, RolloutFile)
    f = path if isinstance(path, RolloutFile) else open_rollout(path)
    try:
        plan = plan_export(f, out, format=format, obs=obs)
        if format == "minari":
            from .minari_writer import write_minari

            return write_minari(plan, name=name, progress=progress)
        from .lerobot import write_lerobot

        video = None
        if camera is not None:
            from .video import VideoSpec

            video = VideoSpec.of(plan, camera, size)
        return write_lerobot(plan, video=video, task=task, progress=progress)
    finally:
        if own:
            f.close()
