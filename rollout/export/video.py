"""LeRobot videos: ``observation.images.<camera>``, every episode's frames rendered with the project's renderer
(``rollout.rendering``: ``Stage``, ``Offscreen``; MUJOCO_GL chooses EGL or OSMesa) into one H.264 MP4 per
camera, one after the other; each episode's ``from_timestamp``/``to_timestamp`` locate it there. Frame k of an
episode shows the state its frame's observation was taken in (the episode's first state, then the period
ends), drawn with the world's model: its randomized fields (``/model_params``, e.g. ``geom_rgba``, ``body_pos``)
written into the drawing model before its episodes."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from mjharness.rollout.h5.layout import vds_segment
from mjharness.rollout.rendering.options import RenderError, parse_camera, parse_size

from .core import ExportPlan
from .start import WorldFields, start_state


@dataclass
class VideoSpec:
    """A camera checked against the model and an OpenGL context opened, before anything is written."""

    camera: Any
    size: tuple
    key: str
    stage: Any
    screen: Any

    @classmethod
    def of(cls, plan: ExportPlan, camera: str, size) -> VideoSpec:
        from mjharness.rollout.rendering.gl import Offscreen
        from mjharness.rollout.rendering.stage import Stage, light_unlit

        if "qpos" not in plan.file.h5:
            raise RenderError(f"camera={camera!r}: {plan.file.path} holds no qpos (not a MuJoCo scene): nothing "
                              f"to draw")
        model = plan.file.model()
        cam = parse_camera(camera, model)
        size = parse_size(size, even=True)
        light_unlit(model)
        key = "observation.images." + re.sub(r"[^A-Za-z0-9_.-]+", "_", str(camera))
        return cls(cam, size, key, Stage(model, cam, 1), Offscreen(model, *size))

    def feature(self, fps: float) -> dict:
        w, h = self.size
        return {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                "info": {"video.height": h, "video.width": w, "video.codec": "h264", "video.pix_fmt": "yuv420p",
                         "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False}}

    def open(self, root: str, plan: ExportPlan) -> Videos:
        from mjharness.rollout.rendering.output import open_frames

        from .lerobot import DEFAULT_VIDEO_PATH

        path = os.path.join(root, DEFAULT_VIDEO_PATH.format(video_key=self.key, chunk_index=0, file_index=0))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with _no_fork_warning():
            append, close = open_frames(path, plan.fps)
        return Videos(self, append, close, vds_segment(plan.file.h5["qpos"]),
                      WorldFields(plan, self.stage.model, strict=False))


class Videos:
    """The open MP4 of one camera; ``write`` renders a block's episodes and returns their ``videos/...`` columns."""

    def __init__(self, spec: VideoSpec, append, close, qcols: slice, fields: WorldFields):
        self.spec, self.append, self._close, self.qcols, self.frames = spec, append, close, qcols, 0
        self.fields = fields

    def write(self, plan: ExportPlan, block, eps, fr, stats) -> dict:
        """Render each frame's observation state (the episode's first state, then the period ends)."""
        f, T = plan.file, plan.file.samples
        w1 = max(ep.local_world for ep in eps) + 1
        qpos = f.read("x", np.s_[:T, block.w0:w1, self.qcols])
        x0 = f.x0
        start, end = [], []
        for ep in eps:
            q0 = start_state(plan, ep, x0)[self.qcols]
            qs = np.concatenate([q0[None], qpos[ep.frames[:-1], ep.local_world - block.w0]])
            start.append(self.frames / plan.fps)
            self.fields.set(ep.local_world)
            for q in qs:
                image = self.spec.screen.draw(self.spec.stage.show(q[None]))
                self.append(image)
                # LeRobot's image stats: per channel, over pixels scaled to [0, 1], shape (3, 1, 1)
                stats.add(self.spec.key, (image.reshape(-1, 3) / 255.0), axis=0)
            self.frames += len(qs)
            end.append(self.frames / plan.fps)
        k = f"videos/{self.spec.key}"
        n = len(eps)
        return {f"{k}/chunk_index": np.zeros(n, np.int64), f"{k}/file_index": np.zeros(n, np.int64),
                f"{k}/from_timestamp": np.array(start), f"{k}/to_timestamp": np.array(end)}

    def close(self) -> None:
        with _no_fork_warning():
            self._close()
        self.spec.screen.close()


@contextlib.contextmanager
def _no_fork_warning():
    """imageio starts ffmpeg (fork + exec, no Python in the child): JAX's warning about forks that go on running
    Python does not apply (as ``rendering.output`` says)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        yield
