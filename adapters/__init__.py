"""Models that register states: the MuJoCo/MJX scene and the reference rigid-body model."""

from mjharness.scenes import settings  # noqa: F401  (float64, XLA flags, compile caches: before any array exists)

from .mjcf_inertia import rigid_body_from_mjcf
from .mjscene import JointStates, MjScene, joint_states
from .motor import DCMotor
from .reference import FreeJointState, RigidBody, SpatialInertia
from .system import (
    Coupling,
    GlobalOffset,
    LocalOffset,
    OffsetTypeError,
    RigidBodyModel,
    System,
    SystemSpecError,
    system_from_spec,
)

__all__ = ["MjScene", "JointStates", "joint_states", "SpatialInertia", "FreeJointState", "RigidBody",
           "rigid_body_from_mjcf", "System", "Coupling", "LocalOffset", "GlobalOffset", "OffsetTypeError", "DCMotor",
           "SystemSpecError", "RigidBodyModel", "system_from_spec"]
