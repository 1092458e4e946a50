"""The options of ``render``, checked before any OpenGL context is made or any file is written.

Each ``parse_*`` takes what a user gives (the command line's string, or Python values) and returns
the checked value or raises ``RenderError`` naming the option, what was given and what is accepted.
"""

from __future__ import annotations

import math
import os

import mujoco
import numpy as np

from mjharness.integrators.errors import UserError

__all__ = ["RenderError", "OUTPUTS", "LAYOUTS", "DEFAULT_WORLDS", "MAX_SIDE", "parse_output", "parse_worlds",
           "parse_layout", "parse_size", "parse_positive", "parse_count", "parse_time", "parse_camera", "Camera",
           "frame_samples", "sheet_samples"]

# What each extension writes: a video at --fps, or one contact sheet (a few time points x worlds).
OUTPUTS = {".mp4": "video", ".gif": "video", ".png": "sheet"}
LAYOUTS = ("grid", "overlay")
DEFAULT_WORLDS = 4
# Offscreen framebuffers of 4096 pixels a side are within every OpenGL implementation's guaranteed minimum
# (GL_MAX_RENDERBUFFER_SIZE >= 4096 on desktop GL 4.x and Mesa); 16 keeps a caption legible.
MIN_SIDE, MAX_SIDE = 16, 4096


class RenderError(UserError, ValueError):
    """A render request that cannot be carried out: a bad option, a file with nothing to draw, or no
    OpenGL backend. Raised before anything is rendered or written."""


def parse_output(out) -> str | None:
    """``out`` -> its kind ("video" | "sheet"), or None for frames returned as an array."""
    if out is None:
        return None
    ext = os.path.splitext(os.fspath(out))[1].lower()
    if ext not in OUTPUTS:
        raise RenderError(f"out={os.fspath(out)!r}: unsupported extension {ext or '(none)'!r}; "
                          f"use one of {', '.join(OUTPUTS)} (.png writes a contact sheet)")
    return OUTPUTS[ext]


def _world_list(spec) -> list[int]:
    """"0:16" (a Python slice of world indices), "0,3,7", "5", an int, a range or a sequence of ints."""
    if isinstance(spec, str):
        text = spec.strip()
        try:
            if ":" in text:
                start, _, stop = text.partition(":")
                return list(range(int(start or 0), int(stop)))
            return [int(w) for w in text.split(",") if w.strip()]
        except ValueError:
            raise RenderError(f"worlds={spec!r}: expected START:STOP (e.g. 0:16) or indices (e.g. 0,3,7)") from None
    if isinstance(spec, (int, np.integer)):
        return [int(spec)]
    try:
        return [int(w) for w in spec]
    except (TypeError, ValueError):
        raise RenderError(f"worlds={spec!r}: expected START:STOP, indices, an int or a sequence of ints") from None


def parse_worlds(spec, batch: int, layout: str) -> list[int]:
    """The world indices to draw; default the first ``DEFAULT_WORLDS``."""
    worlds = list(range(min(batch, DEFAULT_WORLDS))) if spec is None else _world_list(spec)
    if not worlds:
        raise RenderError(f"worlds={spec!r} selects no world (the file has {batch}: 0..{batch - 1})")
    bad = [w for w in worlds if not 0 <= w < batch]
    if bad:
        raise RenderError(f"world {bad[0]} is out of range: the file has {batch} world(s), 0..{batch - 1}")
    if len(set(worlds)) != len(worlds):
        raise RenderError(f"worlds={spec!r} names a world twice")
    return worlds


def parse_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise RenderError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    return layout


def parse_size(size, even: bool = False) -> tuple[int, int]:
    """"640x480" or (width, height) -> (width, height); an .mp4 needs even sides (H.264's 4:2:0 chroma)."""
    try:
        w, h = (int(v) for v in size.lower().split("x")) if isinstance(size, str) else (int(v) for v in size)
    except (TypeError, ValueError, AttributeError):
        raise RenderError(f"size={size!r}: expected WIDTHxHEIGHT, e.g. 640x480") from None
    if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise RenderError(f"size={size!r}: each side must be {MIN_SIDE}..{MAX_SIDE} pixels")
    if even and (w % 2 or h % 2):
        raise RenderError(f"size={size!r}: an .mp4 (H.264, 4:2:0) needs an even width and height")
    return w, h


def parse_positive(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise RenderError(f"{name}={value!r}: must be a finite number > 0")
    return v


def parse_count(name: str, value) -> int:
    """An integer >= 1, given as an int or its decimal string."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise RenderError(f"{name}={value!r}: must be an integer >= 1")
    return int(text)


def parse_time(window) -> tuple[float, float]:
    """"t0:t1" (either side may be empty) or (t0, t1) with None for open -> (t0, t1) in simulated seconds."""
    if window is None:
        return -math.inf, math.inf
    try:
        parts = window.split(":") if isinstance(window, str) else list(window)
        if len(parts) != 2:
            raise ValueError
        t0, t1 = (float(p) if p not in ("", None) else d for p, d in zip(parts, (-math.inf, math.inf)))
    except (TypeError, ValueError, AttributeError):
        raise RenderError(f"time={window!r}: expected T0:T1 in seconds (either may be empty), e.g. 0.5:2") from None
    if math.isnan(t0) or math.isnan(t1) or not t0 < t1:
        raise RenderError(f"time={window!r}: needs T0 < T1")
    return t0, t1


class Camera:
    """What the view follows: ``kind`` "free" (the worlds' centre of mass), "track" (body ``id``'s subtree
    centre of mass) or "fixed" (the model's camera ``id``)."""

    def __init__(self, kind: str, id: int = -1, spec: str = "free"):
        self.kind, self.id, self.spec = kind, id, spec

    def __repr__(self):
        return f"Camera({self.spec!r})"


def _names(model, objtype, count) -> list[str]:
    return [mujoco.mj_id2name(model, objtype, i) or f"#{i}" for i in range(count)]


def parse_camera(spec, model) -> Camera:
    """"free" (default), "track:<body>" or the name of one of the model's cameras."""
    spec = "free" if spec is None else str(spec)
    if spec == "free":
        return Camera("free")
    if spec.startswith("track:"):
        body = spec.split(":", 1)[1]
        bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
        if bid < 0:
            raise RenderError(f"camera={spec!r}: the model has no body {body!r}; its bodies: "
                              f"{', '.join(_names(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody))}")
        return Camera("track", bid, spec)
    cid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, spec)
    if cid < 0:
        have = ", ".join(_names(model, mujoco.mjtObj.mjOBJ_CAMERA, model.ncam)) or "none"
        raise RenderError(f"camera={spec!r}: the model has no camera {spec!r} (its cameras: {have}); "
                          f"or use 'free' or 'track:<body>'")
    return Camera("fixed", cid, spec)


def _nearest(time: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Index of the recorded sample nearest each target time (``time`` increasing)."""
    j = np.clip(np.searchsorted(time, targets), 1, max(len(time) - 1, 1))
    left = np.abs(targets - time[j - 1]) <= np.abs(time[np.minimum(j, len(time) - 1)] - targets)
    return np.where(left, j - 1, np.minimum(j, len(time) - 1))


def _window(time: np.ndarray, t0: float, t1: float, given) -> np.ndarray:
    inside = np.flatnonzero((time >= t0) & (time <= t1))
    if inside.size == 0:
        span = f"{time[0]:g}..{time[-1]:g} s" if time.size else "no samples"
        raise RenderError(f"time={given!r} holds no recorded sample (the file's samples span {span})")
    return inside


def frame_samples(time: np.ndarray, fps: float, speed: float, t0: float, t1: float, given=None) -> np.ndarray:
    """The recorded sample shown in each video frame: frames every ``speed / fps`` simulated seconds from
    the window's first sample to its last, each showing the nearest sample (no interpolated states)."""
    inside = _window(time, t0, t1, given)
    ts = time[inside]
    count = int(math.floor((ts[-1] - ts[0]) * fps / speed + 1e-9)) + 1
    return inside[_nearest(ts, ts[0] + np.arange(count, dtype=np.float64) * speed / fps)]


def sheet_samples(time: np.ndarray, count: int, t0: float, t1: float, given=None) -> np.ndarray:
    """``count`` samples evenly spread over the window (first and last included) for a contact sheet."""
    inside = _window(time, t0, t1, given)
    ts = time[inside]
    return inside[_nearest(ts, np.linspace(ts[0], ts[-1], max(1, min(count, ts.size))))]
