"""Models that register states: the MuJoCo/MJX scene and the reference rigid-body model."""

from mjharness.scenes import settings  # noqa: F401  (float64, XLA flags, compile caches: before any array exists)

from .mjcf_inertia import rigid_body_from_mjcf
from .mjscene import JointStates, MjScene, joint_states
from .reference import FreeJointState, RigidBody, SpatialInertia

__all__ = ["MjScene", "JointStates", "joint_states", "SpatialInertia", "FreeJointState", "RigidBody",
           "rigid_body_from_mjcf"]
