"""Models that register states: the MuJoCo/MJX scene and the reference rigid-body model."""

# Process settings (float64, XLA flags, compile caches, the log filter) are applied by configure(), not on import;
# importing only keeps mujoco-mjx's notices about its absent optional Warp backend off stdout.
from mjharness.scenes.settings import configure, import_mjx

import_mjx()

from .forces import ForceError, ForceProvider  # noqa: E402 - after the quiet MJX import
from .mjcf_inertia import rigid_body_from_mjcf  # noqa: E402 - after the quiet MJX import
from .mjscene import MjScene  # noqa: E402 - after the quiet MJX import
from .motor import DCMotor  # noqa: E402 - after the quiet MJX import
from .reference import FreeJointState, RigidBody, SpatialInertia  # noqa: E402 - after the quiet MJX import
from .scene_layout import JointStates, joint_states  # noqa: E402 - after the quiet MJX import
from .system import System  # noqa: E402 - after the quiet MJX import
from .system_spec import RigidBodyModel, system_from_spec  # noqa: E402
from .system_types import Coupling, GlobalOffset, LocalOffset, OffsetTypeError, SystemSpecError  # noqa: E402

__all__ = ["configure", "MjScene", "JointStates", "joint_states", "SpatialInertia", "FreeJointState", "RigidBody",
           "rigid_body_from_mjcf", "System", "Coupling", "LocalOffset", "GlobalOffset", "OffsetTypeError", "DCMotor",
           "SystemSpecError", "RigidBodyModel", "system_from_spec", "ForceError", "ForceProvider"]
