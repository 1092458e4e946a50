"""MuJoCo's profiling timers, which the ``mujoco`` Python bindings switch on and mjharness switches off.

MuJoCo's engine times its pipeline stages (``mjData.timer``) whenever the global ``mjcb_time`` is set, with two
clock reads around every timed stage. The bindings set it, in C, on import (``mujoco.get_mjcb_time()`` still
says None, and ``set_mjcb_time(None)`` does not clear it), so every ``mj_step``, ``mujoco.rollout`` and
``mujoco.batch`` call in Python pays for the clock: on the 2-core VM, 1.77 -> 1.13 us a free sphere's
``mj_step``, 2.09 -> 1.52 us the bundled arm's, 20.3 -> 19.6 us the humanoid's, and 10,000 dropped spheres'
whole RK4 chunks 1.6x faster (``docs/run.md``). The results are the same bits: the timers only write
``mjData.timer``.

``set_timers(False)`` writes NULL into libmujoco's ``mjcb_time`` (through ctypes: the bindings have no call for
it) where the bindings' own timer is installed, and ``set_timers(True)`` puts that timer back. A timer of the
user's (``mujoco.set_mjcb_time(fn)``) is never touched. ``configure()`` switches the timers off once per
process unless ``MJHARNESS_MUJOCO_TIMERS=1``.
"""

from __future__ import annotations

import ctypes
import glob
import os

import mujoco

__all__ = ["timer_slot", "set_timers", "timers_on"]

# libmujoco's file name on Linux, macOS and Windows, in the mujoco package's folder
_LIBRARIES = ("libmujoco.so*", "libmujoco*.dylib", "mujoco.dll")
_slot: ctypes.c_void_p | None = None
_searched = False
_default: int | None = None  # the bindings' timer, once taken out


def timer_slot() -> ctypes.c_void_p | None:
    """libmujoco's global ``mjcb_time`` (a pointer-sized ctypes view of it), or None where the library or the
    symbol cannot be found (then nothing here changes anything)."""
    global _slot, _searched
    if not _searched:
        _searched = True
        folder = os.path.dirname(mujoco.__file__)
        for path in sorted(p for pattern in _LIBRARIES for p in glob.glob(os.path.join(folder, pattern))):
            try:  # the library the bindings loaded: dlopen of the same file returns the same handle
                _slot = ctypes.c_void_p.in_dll(ctypes.CDLL(path), "mjcb_time")
                break
            except (OSError, ValueError):
                continue
    return _slot


def timers_on() -> bool:
    """Whether MuJoCo's stage timers run (``mjcb_time`` is set)."""
    slot = timer_slot()
    return bool(slot is not None and slot.value)


def set_timers(on: bool) -> bool:
    """Switch the bindings' timer on or off; True when the timers are then as asked. A timer the user installed
    (``mujoco.get_mjcb_time()`` is not None) is left as it is (False when asked to switch it off)."""
    global _default
    slot = timer_slot()
    if slot is None:
        return not on
    if mujoco.get_mjcb_time() is not None:
        return on
    if on:
        if not slot.value and _default is not None:
            slot.value = _default
        return bool(slot.value)
    if slot.value:
        _default = slot.value
        slot.value = None
    return True
