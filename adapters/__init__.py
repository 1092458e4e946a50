"""Models that register states: the MuJoCo/MJX scene and the reference rigid-body model."""

from .mjscene import JointStates, MjScene, joint_states

__all__ = ["MjScene", "JointStates", "joint_states"]

try:  # the reference model lands separately (issue 6); import it when present
    from .mjcf_inertia import rigid_body_from_mjcf  # noqa: F401
    from .reference import FreeJointState, RigidBody, SpatialInertia  # noqa: F401

    __all__ += ["SpatialInertia", "FreeJointState", "RigidBody", "rigid_body_from_mjcf"]
except ImportError:  # pragma: no cover
    pass
