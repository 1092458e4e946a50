"""``render``: a rollout file (or result) to an .mp4, a .gif, a .png contact sheet or an array of frames.

The model comes from the file's ``/model/mjb``, so a file renders after its XML is gone. Frames show the
recorded samples nearest to times ``speed / fps`` apart (no interpolated states), with the sample's time
drawn on each. Rendering is headless (EGL, else OSMesa; ``MUJOCO_GL`` respected, see ``gl``).
Every option is checked, and the OpenGL context made, before anything is written; failures are one
``RenderError`` (a ``ValueError``). The full reference: docs/render.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .options import (
    LAYOUTS,
    OUTPUTS,
    RenderError,
    frame_samples,
    parse_camera,
    parse_count,
    parse_layout,
    parse_output,
    parse_positive,
    parse_size,
    parse_time,
    parse_worlds,
    sheet_samples,
)

if TYPE_CHECKING:
    import mujoco

    from mjharness.rollout.engine.results import RolloutResult
    from mjharness.rollout.h5 import RolloutFile

__all__ = ["render", "RenderError", "OUTPUTS", "LAYOUTS", "DEFAULT_SIZE", "DEFAULT_FPS", "DEFAULT_SHEET_TIMES"]

DEFAULT_SIZE = (640, 480)
DEFAULT_FPS = 30.0
DEFAULT_SHEET_TIMES = 4
MIN_TILE = 8  # pixels a side; below that a tile shows nothing


class _Trajectory:
    """What rendering needs of a rollout: the model, time (T,), status (B,), status_step (B,) and
    ``read(worlds)`` -> qpos (T, len(worlds), nq)."""

    def __init__(self, model, time, status, status_step, read):
        self.model, self.time, self.status, self.status_step, self.read = model, time, status, status_step, read
        self.batch = len(status)


def _from_file(f) -> _Trajectory:
    if "qpos" not in f.h5:
        raise RenderError(f"{f.path}: holds no qpos (the rolled-out model is not a MuJoCo scene): nothing to draw")
    model, ds, samples = f.model(), f.h5["qpos"], f.samples
    # One world's whole series at a time: h5py reads a strided slab, and only the drawn worlds are loaded.
    return _Trajectory(model, f.time, f.status, f.status_step,
                       lambda worlds: np.stack([ds[:samples, w] for w in worlds], axis=1))


@contextlib.contextmanager
def _trajectory(source, model):
    from mjharness.rollout.engine import RolloutResult
    from mjharness.rollout.h5 import RolloutFile, open_rollout

    if isinstance(source, RolloutResult) and source.path is None:
        if model is None:
            raise RenderError("this RolloutResult has no file (rollout(..., out=None)): pass model=<the MjModel "
                              "that ran>, or roll out with out=PATH")
        yield _Trajectory(model, np.asarray(source.time), np.asarray(source.status), np.asarray(source.status_step),
                          lambda worlds: np.asarray(source.qpos)[:, worlds])
        return
    if isinstance(source, (RolloutResult, RolloutFile)):
        source = source.path
    if not isinstance(source, (str, os.PathLike)):
        raise RenderError(f"render takes a rollout file's path, a RolloutFile or a RolloutResult, "
                          f"got {type(source).__name__}")
    with open_rollout(source) as f:
        traj = _from_file(f)
        if model is not None:
            traj.model = model
        yield traj


def _world_label(w: int, traj: _Trajectory) -> str:
    from mjharness.integrators.status import status_name

    code = int(traj.status[w])
    return f"world {w}" + (f" ({status_name(code)} at step {int(traj.status_step[w])})" if code else "")


def _view_label(view: list[int], traj: _Trajectory) -> str:
    if len(view) == 1:
        return _world_label(view[0], traj)
    failed = [w for w in view if traj.status[w]]
    return f"worlds {', '.join(map(str, view))}" + (f" ({len(failed)} failed)" if failed else "")


def _time_label(t: float) -> str:
    return f"t = {t:.3f} s"


def _layout_views(worlds: list[int], layout: str) -> list[list[int]]:
    """Positions (into ``worlds``) drawn together in each tile: one per tile (grid) or all in one (overlay)."""
    return [[k] for k in range(len(worlds))] if layout == "grid" else [list(range(len(worlds)))]


def _check_tile(size, rows, cols, what) -> tuple[int, int]:
    from .stage import tile_size

    tile = tile_size(size, rows, cols)
    if min(tile) < MIN_TILE:
        raise RenderError(f"size={size[0]}x{size[1]} is too small for {what} ({rows} x {cols} tiles of "
                          f"{tile[0]}x{tile[1]} pixels): give a larger --size or fewer worlds")
    return tile


def render(source: str | os.PathLike[str] | RolloutFile | RolloutResult, out: str | os.PathLike[str] | None = None,
           *, worlds: str | int | Sequence[int] | None = None, layout: str = "grid", camera: str = "free",
           size: str | tuple[int, int] = DEFAULT_SIZE, fps: float = DEFAULT_FPS, speed: float = 1.0,
           time: str | tuple[float | None, float | None] | None = None, sheet: int = DEFAULT_SHEET_TIMES,
           progress: bool = True, model: mujoco.MjModel | None = None) -> str | np.ndarray:
    """Render a rollout to ``out`` and return its path, or return the frames (F, H, W, 3) uint8 when ``out``
    is None.

    source: a rollout file's path, a ``RolloutFile`` or a ``RolloutResult`` (its file; a result without a
        file needs ``model=``, the MjModel that ran).
    out: ``.mp4`` (H.264) or ``.gif`` video, ``.png`` contact sheet (``sheet`` time points x the worlds),
        or None (the video's frames as an array).
    worlds: "0:16" (a slice), "0,3,7", an int or a sequence of world indices; default the first 4.
    layout: "grid" (one tile per world, captioned with its index and its status if it failed) or
        "overlay" (all the worlds in one scene, all but the first translucent).
    camera: "free" (default: MuJoCo's free camera at 1.5 x the model's extent, looking at the centre of
        mass of the shown worlds), "track:<body>" (looking at that body's subtree centre of mass) or the
        name of a camera of the model.
    size: "WIDTHxHEIGHT" or (width, height) of each frame (of the whole sheet for .png).
    fps, speed: frames per second of the video and simulated seconds per video second; each frame
        shows the recorded sample nearest its time.
    time: "t0:t1" or (t0, t1), the simulated interval shown (either end may be open).
    """
    kind = parse_output(out)
    layout = parse_layout(layout)
    fps, speed = parse_positive("fps", fps), parse_positive("speed", speed)
    sheet = parse_count("sheet", sheet)
    window = parse_time(time)
    size = parse_size(size, even=out is not None and os.fspath(out).lower().endswith(".mp4"))
    from . import output

    output.require(out)
    with _trajectory(source, model) as traj:
        chosen = parse_worlds(worlds, traj.batch, layout)
        cam = parse_camera(camera, traj.model)
        if kind == "sheet":
            samples = sheet_samples(traj.time, sheet, *window, given=time)
        else:
            samples = frame_samples(traj.time, fps, speed, *window, given=time)
        qpos = traj.read(chosen)
    if qpos.shape[-1] != traj.model.nq:
        raise RenderError(f"the file's qpos has {qpos.shape[-1]} coordinates, its model nq={traj.model.nq}")
    views = _layout_views(chosen, layout)
    labels = [_view_label([chosen[k] for k in view], traj) for view in views]
    draw = _draw_sheet if kind == "sheet" else _draw_video
    return draw(traj, qpos, samples, views, labels, cam, size, out, fps, progress)


def _renderer(traj, cam, views, tile):
    from .gl import Offscreen
    from .stage import Stage, light_unlit

    light_unlit(traj.model)
    return Stage(traj.model, cam, max(len(v) for v in views)), Offscreen(traj.model, *tile)


def _draw_video(traj, qpos, samples, views, labels, cam, size, out, fps, progress):
    from tqdm.auto import tqdm

    from .output import open_frames
    from .stage import assemble, caption, grid_shape

    rows, cols = grid_shape(len(views))
    tile = _check_tile(size, rows, cols, f"{len(views)} tile(s)")
    stage, screen = _renderer(traj, cam, views, tile)
    append, close = open_frames(out, fps)
    with screen:
        for s in tqdm(samples, desc="render", unit="frame", disable=not progress, leave=False):
            tiles = [caption(screen.draw(stage.show(qpos[s, view])), bottom=label)
                     for view, label in zip(views, labels)]
            append(caption(assemble(tiles, rows, cols, size), top=_time_label(traj.time[s])))
    return close()


def _draw_sheet(traj, qpos, samples, views, labels, cam, size, out, fps, progress):
    """Rows of time points x columns of views; one view (overlay): the time points in a near-square grid."""
    from tqdm.auto import tqdm

    from .output import write_image
    from .stage import assemble, caption, grid_shape

    rows, cols = grid_shape(len(samples)) if len(views) == 1 else (len(samples), len(views))
    tile = _check_tile(size, rows, cols, f"{len(samples)} time points x {len(views)} view(s)")
    stage, screen = _renderer(traj, cam, views, tile)
    cells = [(s, view, label) for s in samples for view, label in zip(views, labels)]
    with screen:
        tiles = [caption(screen.draw(stage.show(qpos[s, view])), top=_time_label(traj.time[s]), bottom=label)
                 for s, view, label in tqdm(cells, desc="render", unit="tile", disable=not progress, leave=False)]
    return write_image(out, assemble(tiles, rows, cols, size))
