"""A headless OpenGL context and MuJoCo's offscreen framebuffer: EGL, else OSMesa; ``MUJOCO_GL`` respected.

``mujoco.Renderer`` takes its context class from ``MUJOCO_GL`` as it was when ``import mujoco`` ran, which
in mjharness is long before ``render`` is called (and unset means GLFW, which needs a display). So the
context here is made from the backend modules MuJoCo ships (``mujoco.egl``, ``mujoco.osmesa``,
``mujoco.glfw``) directly, chosen when rendering starts.
"""

from __future__ import annotations

import importlib
import os
import sys

import mujoco
import numpy as np

from .options import RenderError

__all__ = ["BACKENDS", "HEADLESS", "backend_order", "open_context", "Offscreen"]

# MUJOCO_GL value -> (module with MuJoCo's GLContext, name shown to the user).
BACKENDS = {"egl": ("mujoco.egl", "EGL"), "osmesa": ("mujoco.osmesa", "OSMesa"), "glfw": ("mujoco.glfw", "GLFW")}
HEADLESS = ("egl", "osmesa")
INSTALL = ("install Mesa's EGL (Debian/Ubuntu: apt-get install libegl1 libgl1-mesa-dri) or OSMesa "
           "(apt-get install libosmesa6), or choose a working backend with MUJOCO_GL=egl|osmesa|glfw")

SHADOW_SCALE = 2
_chosen: list[str] = []  # the backend that started in this process: later renders go straight to it


def backend_order(environ=os.environ) -> tuple[str, ...]:
    """The backends to try: the user's ``MUJOCO_GL`` alone when set, else EGL then OSMesa."""
    if _chosen:
        return tuple(_chosen)
    value = environ.get("MUJOCO_GL", "").strip().lower()
    if not value:
        return HEADLESS
    if value not in BACKENDS:
        raise RenderError(f"MUJOCO_GL={value!r} cannot render offscreen here; use one of {', '.join(BACKENDS)} "
                          f"(or unset it: EGL, then OSMesa)")
    return (value,)


def _forget_pyopengl(module: str, platform_before, loaded_before: set) -> None:
    """Undo a failed backend's import: PyOpenGL binds its platform (PYOPENGL_PLATFORM, which mujoco.egl and
    mujoco.osmesa set) when first imported, so the next backend can only load on a fresh import."""
    for name in [m for m in sys.modules if (m == "OpenGL" or m.startswith(("OpenGL.", module)))]:
        if name not in loaded_before:
            del sys.modules[name]
    if platform_before is None:
        os.environ.pop("PYOPENGL_PLATFORM", None)
    else:
        os.environ["PYOPENGL_PLATFORM"] = platform_before


def _start(name: str, width: int, height: int):
    module, _ = BACKENDS[name]
    platform_before, loaded_before = os.environ.get("PYOPENGL_PLATFORM"), set(sys.modules)
    try:
        context = importlib.import_module(module).GLContext(width, height)
        context.make_current()
        return context
    except Exception:
        if "OpenGL" not in loaded_before:
            _forget_pyopengl(module, platform_before, loaded_before)
        raise


def open_context(width: int, height: int, order: tuple[str, ...] | None = None):
    """(backend name, a current GL context of at least width x height); ``RenderError`` naming every
    backend tried and why it failed when none starts."""
    failures = []
    for name in order or backend_order():
        try:
            context = _start(name, width, height)
        except Exception as e:  # ImportError (no libEGL / libOSMesa), RuntimeError or GLError (no display)
            failures.append(f"{BACKENDS[name][1]}: {type(e).__name__}: {' '.join(str(e).split()) or 'failed'}")
            continue
        _chosen[:] = [name]
        return name, context
    raise RenderError(f"no OpenGL backend could start for offscreen rendering (tried {'; '.join(failures)}); "
                      f"{INSTALL}")


class Offscreen:
    """One tile-sized offscreen framebuffer: ``draw(scene)`` -> (height, width, 3) uint8, top row first."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int):
        # The offscreen buffer is sized from the model's <visual><global offwidth/offheight>; this copy of
        # the model is ours, so it is enlarged instead of refusing tiles bigger than the default 640x480.
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        # Shadow maps of MuJoCo's default 4096 x 4096 cost ~50x a small tile's own pixels in software GL (Mesa's
        # llvmpipe); a map SHADOW_SCALE times the tile's longer side keeps shadow edges as sharp as the tile.
        model.vis.quality.shadowsize = min(model.vis.quality.shadowsize, SHADOW_SCALE * max(width, height))
        self.backend, self._gl = open_context(width, height)
        self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._rgb = np.empty((height, width, 3), dtype=np.uint8)

    def draw(self, scene: mujoco.MjvScene) -> np.ndarray:
        mujoco.mjr_render(self._rect, scene, self._con)
        mujoco.mjr_readPixels(self._rgb, None, self._rect, self._con)
        return self._rgb[::-1].copy()  # OpenGL's rows start at the bottom

    def close(self) -> None:
        if self._con is not None:
            self._gl.make_current()
            self._con.free()
            self._gl.free()
            self._con = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
