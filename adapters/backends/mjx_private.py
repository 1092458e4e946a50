"""MJX's private API behind small named accessors: the only door from mjharness to ``mujoco.mjx._src`` and to the
``_impl`` halves of MJX's Model and Data (besides the backends themselves).

MJX keeps implementation fields (the inertia matrix, contacts, actuator moments, MuJoCo Warp's arena) in
``Model._impl`` / ``Data._impl`` and several functions mjharness reproduces MuJoCo C with (the M solve,
contact forces, muscle gains, spatial algebra) in ``mujoco.mjx._src``. Both change between releases, so they
are read here only, for the versions in ``versions.TESTED_VERSIONS`` (checked when the MJX backend is first
used). Public MJX functions (``mjx.jac``, ``mjx.full_m``, ...) are used directly elsewhere.
"""

from __future__ import annotations

import importlib
from typing import Any

from mjharness.scenes.settings import import_mjx


def _src(name: str) -> Any:
    """``mujoco.mjx._src.<name>``, imported on first use (importing it imports mujoco.mjx: quietly, and never on
    a MuJoCo C run)."""
    import_mjx()
    return importlib.import_module(f"mujoco.mjx._src.{name}")


# -- functions of mujoco.mjx._src that mujoco.mjx does not export ------------------------------------------
def solve_m(m, d, x):
    """M(q)^-1 x with MJX's own factor of M (``smooth.solve_m``)."""
    return _src("smooth").solve_m(m, d, x)


def contact_force(m, d, i):
    """Contact i's force in its frame (``support.contact_force``, as ``mj_contactForce``)."""
    return _src("support").contact_force(m, d, i)


def muscle_gain(length, vel, lengthrange, acc0, prm):
    """MuJoCo's muscle gain (``support.muscle_gain``)."""
    return _src("support").muscle_gain(length, vel, lengthrange, acc0, prm)


def motion_cross(u, v):
    return _src("math").motion_cross(u, v)


def motion_cross_force(v, f):
    return _src("math").motion_cross_force(v, f)


def inert_mul(i, v):
    return _src("math").inert_mul(i, v)


def advance(m, d, act_dot, qacc):
    """MJX's explicit Euler update of act, qvel, qpos and time (``forward._advance``)."""
    return _src("forward")._advance(m, d, act_dot, qacc)


def forward_to_velocity(m, d):
    """``mjx.forward``'s position and velocity stages (MJX 3.17's ``forward._src.forward.forward``, first half):
    kinematics, centres of mass, ``cvel``, the position and velocity sensors."""
    fwd, sensor = _src("forward"), _src("sensor")
    d = fwd.fwd_position(m, d)
    d = sensor.sensor_pos(m, d)
    d = fwd.fwd_velocity(m, d)
    return sensor.sensor_vel(m, d)


def forward_from_actuation(m, d):
    """The rest of ``mjx.forward`` after ``forward_to_velocity``, as MJX 3.17 runs it: actuation, the smooth
    acceleration (where ``xfrc_applied`` / ``qfrc_applied`` enter), the constraint solve and the acceleration
    sensors."""
    fwd = _src("forward")
    d = fwd.fwd_actuation(m, d)
    d = fwd.fwd_acceleration(m, d)
    if d._impl.efc_J.size == 0:
        return d.replace(qacc=d.qacc_smooth)
    d = _src("solver").solve(m, d)
    return _src("sensor").sensor_acc(m, d)


def collision_ncon(t1: int, t2: int) -> int | None:
    """Contacts MJX's collision function returns for geom types ``t1 <= t2`` (its ``ncon``), None without one."""
    driver = _src("collision_driver")
    fn = driver._COLLISION_FUNC.get((driver.GeomType(t1), driver.GeomType(t2)))
    return None if fn is None else int(fn.ncon)


# -- the _impl halves of MJX's Model and Data ----------------------------------------------------------------
def impl_field(d, name: str) -> Any:
    """``d._impl.<name>`` (MJX moved e.g. ``actuator_moment``, ``crb``, ``contact``, ``M`` there)."""
    return getattr(d._impl, name)


def has_impl_field(d, name: str) -> bool:
    """Whether MJX data ``d`` has ``d._impl.<name>`` (MuJoCo Warp's data: ``contact__worldid``)."""
    return hasattr(d._impl, name)


def data_field(d, name: str) -> Any:
    """``d.<name>``; fields MJX moved to ``d._impl`` (contact, cfrc_ext, ...) are read there."""
    impl = getattr(d, "_impl", None)
    return getattr(impl, name) if impl is not None and hasattr(impl, name) else getattr(d, name)


def has_fluid_params(m) -> Any:
    """MJX's ``m.opt._impl.has_fluid_params`` (False where the model's options have no such field)."""
    return getattr(getattr(m.opt, "_impl", None), "has_fluid_params", False)
