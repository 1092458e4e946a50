"""Models that register states: the MuJoCo/MJX scene and the reference rigid-body model."""

# Process settings (float64, XLA flags, compile caches, the log filter) are applied by configure(), not on import;
# mujoco.mjx is imported (without its notices about an absent optional Warp backend) where it is first used.
from mjharness.scenes.settings import configure

from .forces import ForceError, ForceProvider
from .mjcf_inertia import rigid_body_from_mjcf
from .mjscene import MjScene
from .motor import DCMotor
from .reference import FreeJointState, RigidBody, SpatialInertia
from .scene_layout import JointStates, joint_states
from .system import System
from .system_spec import RigidBodyModel, system_from_spec
from .system_types import Coupling, GlobalOffset, LocalOffset, OffsetTypeError, SystemSpecError

__all__ = ["configure", "MjScene", "JointStates", "joint_states", "SpatialInertia", "FreeJointState", "RigidBody",
           "rigid_body_from_mjcf", "System", "Coupling", "LocalOffset", "GlobalOffset", "OffsetTypeError", "DCMotor",
           "SystemSpecError", "RigidBodyModel", "system_from_spec", "ForceError", "ForceProvider"]
