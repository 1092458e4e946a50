"""The reference rigid body as a System member (``RigidBodyModel``), and a System from a spec file
(``mjharness run system.toml``: members, couplings and shared noise in TOML or JSON)."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mjharness.integrators import StateError, StateRegistry

from .mjscene import MjScene
from .reference import RigidBody
from .system import System
from .system_types import Coupling, SystemSpecError


class RigidBodyModel:
    """The reference ``RigidBody`` as a System member: states pos (3), quat (4, exp-map policy), vel (3),
    angvel (3), in MuJoCo's free-joint convention, so its derivative is [v; omega; qacc] like MjScene's."""

    def __init__(self, body, x0=None):
        from mjharness.integrators import StateSpec

        self.body = body
        reg = StateRegistry()
        for n, spec in (("pos", StateSpec((3,))), ("quat", StateSpec((4,), deriv_shape=(3,), update="quaternion")),
                        ("vel", StateSpec((3,))), ("angvel", StateSpec((3,)))):
            reg.register(n, spec, model="rigid_body")
        self.layout = reg.finalize()
        base = np.array([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], np.float64)
        self._x0 = base if x0 is None else np.asarray(x0, np.float64)
        if self._x0.shape != (13,):
            raise StateError(f"RigidBodyModel x0 must have shape (13,), got {self._x0.shape}")

    def x0(self) -> np.ndarray:
        return self._x0.copy()

    def dynamics(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None) -> jax.Array:
        return jnp.concatenate([x[7:10], x[10:13], self.body.accelerations(x)])


# -- a system from a spec file (``mjharness run system.toml``) -------------------------------------

SPEC_SUFFIXES = (".toml", ".json")


def _member_from_spec(name: str, entry: Mapping):
    from .motor import DCMotor

    kinds = [k for k in ("scene", "dc_motor", "rigid_body") if k in entry]
    if len(kinds) != 1:
        raise SystemSpecError(f"system spec: model {name!r} needs exactly one of scene / dc_motor / rigid_body, "
                              f"got {sorted(entry)}")
    kind = kinds[0]
    if kind == "scene":
        return MjScene(entry["scene"], quaternion_update=entry.get("quaternion_update", "quaternion"))
    if kind == "dc_motor":
        params = entry["dc_motor"]
        if not isinstance(params, Mapping):
            raise SystemSpecError(f"system spec: model {name!r}: dc_motor must be a table of DCMotor parameters")
        try:
            return DCMotor(**params)
        except TypeError as e:
            raise SystemSpecError(f"system spec: model {name!r}: {e}") from None

    rb = entry["rigid_body"]
    sc = MjScene(rb["scene"])
    x0 = sc.reset(keyframe=rb["keyframe"]) if "keyframe" in rb else sc.x0()
    j = sc.joints[0]
    return RigidBodyModel(RigidBody.from_mujoco(sc.model, rb.get("body", 1)), x0=x0[j.qposadr:j.qposadr + 13])


def _coupling_from_spec(entry: Mapping) -> Coupling:
    """``{reads = ["arm.yaw/qvel"], writes = "motor.omega", gain = 1.0}``: writes = gain * sum(reads)."""
    try:
        reads, writes = entry["reads"], entry["writes"]
    except (KeyError, TypeError):
        raise SystemSpecError(f"system spec: a coupling needs reads and writes, got {entry!r}") from None
    gain = float(entry.get("gain", 1.0))
    return Coupling(tuple([reads] if isinstance(reads, str) else reads), writes,
                    lambda *v: gain * functools.reduce(lambda a, b: a + b, v))


def system_from_spec(path: str | os.PathLike[str]) -> System:
    """A System from a TOML (Python >= 3.11) or JSON file: ``[models.<name>]`` tables (``scene = "arm"``,
    ``dc_motor = {...}`` or ``rigid_body = {scene, body, keyframe}``) in synchronization order, and
    ``[[couplings]]`` entries (reads, writes, gain)."""
    from pathlib import Path

    path = Path(path)
    if path.suffix not in SPEC_SUFFIXES:
        raise SystemSpecError(f"system spec {str(path)!r} must end in {SPEC_SUFFIXES}")
    text = path.read_text()
    if path.suffix == ".json":
        spec = json.loads(text)
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the same parser as the tomli package
            import tomli as tomllib

        spec = tomllib.loads(text)
    models = spec.get("models")
    if not isinstance(models, Mapping) or not models:
        raise SystemSpecError(f"system spec {str(path)!r} needs a non-empty 'models' table")
    members = {n: _member_from_spec(n, e) for n, e in models.items()}
    return System(members, couplings=[_coupling_from_spec(c) for c in spec.get("couplings", ())])
