"""LeRobot videos: ``observation.images.<camera>``, every episode's frames rendered with the project's renderer
(``rollout.rendering``: ``Stage``, ``Offscreen``; MUJOCO_GL chooses EGL or OSMesa) into H.264 MP4s per camera
of up to ~500 MB, episodes one after the other; each episode's ``chunk_index``/``file_index`` and
``from_timestamp``/``to_timestamp`` locate it. Frame k of an
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
        return Videos(self, root, plan.fps, vds_segment(plan.file.h5["qpos"]),
                      WorldFields(plan, self.stage.model, strict=False))


class Videos:
    """The MP4s of one camera; ``write`` renders a block's episodes and returns their ``videos/...`` columns. An
    episode starts a new file (``videos/<key>/chunk-c/file-f.mp4``, LeRobot's numbering) once the current one
    holds ``DEFAULT_VIDEO_FILE_SIZE_IN_MB`` on disk (what ffmpeg has flushed so far: a file ends a little past
    the limit, as LeRobot's own do); an episode never spans two files."""

    def __init__(self, spec: VideoSpec, root: str, fps: float, qcols: slice, fields: WorldFields):
        self.spec, self.root, self.fps, self.qcols, self.fields = spec, root, fps, qcols, fields
        self.chunk, self.file, self.frames = 0, 0, 0  # frames: in the current file
        self.path: str | None = None
        self._append: Any = None
        self._close: Any = None
        self._qpos: Any = None  # (block, its worlds' qpos (T, b, nq), /x0)

    def _next_file(self) -> None:
        from mjharness.rollout.rendering.output import open_frames

        from .lerobot import DEFAULT_VIDEO_PATH, next_file

        self._finish()
        self.chunk, self.file = (0, 0) if self.path is None else next_file(self.chunk, self.file)
        self.path = os.path.join(self.root, DEFAULT_VIDEO_PATH.format(video_key=self.spec.key,
                                                                      chunk_index=self.chunk, file_index=self.file))
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with _no_fork_warning():
            self._append, self._close = open_frames(self.path, self.fps)
        self.frames = 0

    def _full(self) -> bool:
        from .lerobot import DEFAULT_VIDEO_FILE_SIZE_IN_MB

        if self.path is None:
            return True
        flushed = os.path.getsize(self.path) if os.path.exists(self.path) else 0  # ffmpeg may not have made it yet
        return self.frames > 0 and flushed >= DEFAULT_VIDEO_FILE_SIZE_IN_MB * 2**20

    def write(self, plan: ExportPlan, block, eps, fr, stats) -> dict:
        """Render each frame's observation state (the episode's first state, then the period ends)."""
        f, T = plan.file, plan.file.samples
        if self._qpos is None or self._qpos[0] is not block:  # once a block (write is called per part)
            qpos = (block.x[..., self.qcols] if block.x.shape[2] else  # the block's states hold them when read
                    f.read("x", np.s_[:T, block.w0:block.w0 + block.x.shape[1], self.qcols]))
            self._qpos = (block, qpos, f.x0)
        _, qpos, x0 = self._qpos
        where, start, end = [], [], []
        for ep in eps:
            if self._full():
                self._next_file()
            q0 = start_state(plan, ep, x0)[self.qcols]
            qs = np.concatenate([q0[None], qpos[ep.frames[:-1], ep.local_world - block.w0]])
            where.append((self.chunk, self.file))
            start.append(self.frames / plan.fps)
            self.fields.set(ep.local_world)
            for q in qs:
                image = self.spec.screen.draw(self.spec.stage.show(q[None]))
                self._append(image)
                # LeRobot's image stats: per channel, over pixels scaled to [0, 1], shape (3, 1, 1)
                stats.add(self.spec.key, (image.reshape(-1, 3) / 255.0), axis=0)
            self.frames += len(qs)
            end.append(self.frames / plan.fps)
        k = f"videos/{self.spec.key}"
        w = np.array(where, dtype=np.int64).reshape(-1, 2)
        return {f"{k}/chunk_index": w[:, 0], f"{k}/file_index": w[:, 1],
                f"{k}/from_timestamp": np.array(start), f"{k}/to_timestamp": np.array(end)}

    def _finish(self) -> None:
        if self._close is not None:
            with _no_fork_warning():
                self._close()
            self._close = None

    def close(self) -> None:
        self._finish()
        self.spec.screen.close()


@contextlib.contextmanager
def _no_fork_warning():
    """imageio starts ffmpeg (fork + exec, no Python in the child): JAX's warning about forks that go on running
    Python does not apply (as ``rendering.output`` says)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        yield
