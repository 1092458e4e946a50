"""Turning recorded ``qpos`` into pictures: posing worlds, pointing the camera, drawing tiles and captions.

A *view* is what one tile shows: one world (``grid``) or several worlds in one scene (``overlay``: the
first world opaque, the others' moving bodies added as translucent geoms with ``mjv_addGeoms``).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .options import Camera

__all__ = ["Stage", "grid_shape", "tile_size", "assemble", "caption", "light_unlit", "body_radius"]

OVERLAY_ALPHA = 0.35
# A model without lights has only MuJoCo's headlight, which shines along the view: faces at equal angles to
# it look alike and nothing casts a shadow (box_on_plane: a grey box lost on a grey plane). Such a model is
# drawn with a dimmer headlight plus a key light from above that casts shadows, as MuJoCo's samples are lit.
UNLIT_HEADLIGHT = {"ambient": 0.2, "diffuse": 0.3, "specular": 0.1}
KEY_LIGHT_DIR = np.array([0.3, 0.5, -1.0]) / np.linalg.norm([0.3, 0.5, -1.0])
KEY_LIGHT = {"diffuse": 0.6, "specular": 0.3, "ambient": 0.0}
# The free camera stands back this much more than needed for the moving bodies' bounding sphere to fit.
FIT_MARGIN = 1.6


def light_unlit(model: mujoco.MjModel) -> None:
    if model.nlight == 0:
        for field, value in UNLIT_HEADLIGHT.items():
            getattr(model.vis.headlight, field)[:] = value


def _add_key_light(scene: mujoco.MjvScene, target: np.ndarray) -> None:
    light = scene.lights[scene.nlight]
    scene.nlight += 1
    light.type, light.headlight, light.castshadow = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, 0, 1
    light.dir[:] = KEY_LIGHT_DIR
    light.pos[:] = target - 3.0 * KEY_LIGHT_DIR  # directional: only where its shadow map is centred
    for field, value in KEY_LIGHT.items():
        getattr(light, field)[:] = value


def body_radius(model: mujoco.MjModel) -> float:
    """Radius about the centre of mass of the sphere holding every geom of a moving body, at qpos0."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    moving = model.geom_bodyid > 0
    if not moving.any():
        return 0.0
    gap = np.linalg.norm(data.geom_xpos[moving] - data.subtree_com[0], axis=1)
    return float(np.max(gap + model.geom_rbound[moving]))


def grid_shape(n: int) -> tuple[int, int]:
    """(rows, columns) of a near-square grid of n tiles, wider than tall."""
    cols = math.ceil(math.sqrt(n))
    return math.ceil(n / cols), cols


def tile_size(size: tuple[int, int], rows: int, cols: int) -> tuple[int, int]:
    return size[0] // cols, size[1] // rows


def assemble(tiles: list[np.ndarray], rows: int, cols: int, size: tuple[int, int]) -> np.ndarray:
    """Tiles row-major into one (height, width, 3) image of ``size``; unused cells and margins stay black."""
    canvas = np.zeros((size[1], size[0], 3), dtype=np.uint8)
    for k, tile in enumerate(tiles):
        r, c = divmod(k, cols)
        h, w = tile.shape[:2]
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = tile
    return canvas


def _font(height: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=max(8, height // 12))


def caption(image: np.ndarray, top: str | None = None, bottom: str | None = None) -> np.ndarray:
    """Write ``top`` (the time) at the top left and ``bottom`` (the world) at the bottom left, white on a
    black outline so that they read on a sky, a floor or a body."""
    from PIL import Image, ImageDraw

    picture = Image.fromarray(image)
    draw = ImageDraw.Draw(picture)
    font = _font(image.shape[0])
    pad = max(2, image.shape[0] // 60)
    if top:
        draw.text((pad, pad), top, font=font, fill="white", stroke_width=1, stroke_fill="black")
    if bottom:
        draw.text((pad, image.shape[0] - pad), bottom, font=font, fill="white", stroke_width=1, stroke_fill="black",
                  anchor="ld")
    return np.asarray(picture)


class Stage:
    """The scene of one view: ``show(qposes)`` poses the worlds of a view ((n, nq), the first drawn opaque)
    and returns the ``MjvScene`` to draw, the camera following as ``camera`` says."""

    def __init__(self, model: mujoco.MjModel, camera: Camera, worlds_per_view: int):
        self.model, self.camera = model, camera
        self._data = [mujoco.MjData(model) for _ in range(worlds_per_view)]
        self._opt, self._pert = mujoco.MjvOption(), mujoco.MjvPerturb()
        self._cam = mujoco.MjvCamera()
        # Half the free camera's vertical field of view: a sphere of radius r fits at distance r / sin of it.
        self._sin_half_fovy = math.sin(math.radians(model.vis.global_.fovy / 2))
        radius = body_radius(model)
        self._fit = FIT_MARGIN * radius / self._sin_half_fovy if radius > 0 else math.inf
        # Room for every world's geoms plus MuJoCo's decor (contact points, frames) of the first.
        self.scene = mujoco.MjvScene(model, maxgeom=1000 + worlds_per_view * max(1000, 2 * model.ngeom))

    def _pose(self, qposes: np.ndarray) -> list[mujoco.MjData]:
        shown = []
        for data, qpos in zip(self._data, qposes):
            if np.all(np.isfinite(qpos)):  # a failed world's non-finite state is not drawn
                data.qpos[:] = qpos
                mujoco.mj_forward(self.model, data)
                shown.append(data)
        return shown

    def _aim(self, shown: list[mujoco.MjData]) -> None:
        cam, kind = self._cam, self.camera.kind
        if kind == "fixed":
            cam.type, cam.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, self.camera.id
            return
        # The viewer's default free camera (distance 1.5 x the model's extent, the model's azimuth and
        # elevation), nearer when the moving bodies are small in a large scene (a box on a wide plane),
        # looking at the centre of mass: of the whole world (free) or of one body's subtree (track).
        mujoco.mjv_defaultFreeCamera(self.model, cam)
        cam.distance = min(cam.distance, self._fit)
        body = self.camera.id if kind == "track" else 0
        if shown:
            com = np.array([d.subtree_com[body] for d in shown])
            centre = com.mean(axis=0)
            cam.lookat[:] = centre
            spread = float(np.max(np.linalg.norm(com - centre, axis=1)))
            cam.distance += spread / self._sin_half_fovy  # overlay: step back until every world is in view

    def show(self, qposes: np.ndarray) -> mujoco.MjvScene:
        shown = self._pose(qposes)
        self._aim(shown)
        scene, m = self.scene, self.model
        if not shown:  # nothing finite to draw: the static world alone
            data = self._data[0]
            mujoco.mj_resetData(m, data)
            mujoco.mj_forward(m, data)
            mujoco.mjv_updateScene(m, data, self._opt, self._pert, self._cam, mujoco.mjtCatBit.mjCAT_STATIC, scene)
            return scene
        mujoco.mjv_updateScene(m, shown[0], self._opt, self._pert, self._cam, mujoco.mjtCatBit.mjCAT_ALL, scene)
        if m.nlight == 0:
            _add_key_light(scene, np.array(shown[0].subtree_com[0]))
        for data in shown[1:]:
            first = scene.ngeom
            mujoco.mjv_addGeoms(m, data, self._opt, self._pert, mujoco.mjtCatBit.mjCAT_DYNAMIC, scene)
            for k in range(first, scene.ngeom):
                scene.geoms[k].rgba[3] *= OVERLAY_ALPHA
        return scene
