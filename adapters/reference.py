"""Reference rigid-body model: one free body, Newton–Euler dynamics in JAX, no MuJoCo inside.

Conventions (chosen to match MuJoCo's free joint exactly, so that states compare 1:1):

- ``SpatialInertia(mass, com, inertia)``: ``com`` is the centre of mass in the body frame;
  ``inertia`` is the full 3x3 tensor *about the centre of mass*, in *body* axes (MuJoCo's
  ``body_inertia`` rotated by ``body_iquat``).
- ``FreeJointState``: ``qpos = [x, y, z, w, qx, qy, qz]`` (position of the body-frame origin in the
  world, unit quaternion world-from-body) and ``qvel = [v; ω]``: ``v`` is the velocity of the
  body-frame origin in world axes, ``ω`` the angular velocity in body axes. The flat 13-vector is
  ``[qpos; qvel]`` — MuJoCo's qpos/qvel of a single free body.
- Wrench ``[f; τ]`` (6,): force and torque in *world* axes, applied at the centre of mass — exactly
  MuJoCo's ``xfrc_applied``. ``wrench_at`` converts a force/torque given in body or world axes and
  applied at any body point to this convention. Gravity acts at the centre of mass.

All functions are pure JAX and accept a ``FreeJointState`` or a flat (13,) array; they ``vmap``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from mjharness.integrators.errors import UserError
from mjharness.integrators.rotations import quat_dot, quat_integrate, quat_normalize, quat_to_mat
from mjharness.scenes.settings import configure

# A free body's state: a FreeJointState or its (..., 13) vector [qpos (7), qvel (6)] (results come back alike).
State: TypeAlias = "FreeJointState | ArrayLike"
Vector3: TypeAlias = "ArrayLike | tuple[float, float, float]"  # a 3-vector, or (..., 3)

__all__ = [
    "SpatialInertia", "FreeJointState", "RigidBody", "InertiaError", "MassError", "NonFiniteInertiaError",
    "AsymmetricInertiaError", "IndefiniteInertiaError", "StateShapeError", "principal_axes",
]


# ----------------------------------------------------------------------------------------------------
# errors: one class per way an inertia can be invalid (all ValueError)

class InertiaError(UserError, ValueError):
    """A SpatialInertia could not be built from the given values."""


class MassError(InertiaError):
    """The mass is not a positive finite number."""


class NonFiniteInertiaError(InertiaError):
    """The centre of mass or the inertia tensor contains inf or NaN."""


class AsymmetricInertiaError(InertiaError):
    """The inertia tensor is not symmetric."""


class IndefiniteInertiaError(InertiaError):
    """The inertia tensor is not positive-definite."""


class StateShapeError(UserError, ValueError):
    """A free-body state, wrench or gravity has the wrong shape."""


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _pytree(*fields):
    """Register a frozen class as a JAX pytree with leaves ``fields``; JAX rebuilds it from tracers
    without running ``__init__`` (no re-validation)."""
    def register(cls):
        def unflatten(_, children):
            obj = object.__new__(cls)
            for k, v in zip(fields, children):
                object.__setattr__(obj, k, v)
            return obj

        jax.tree_util.register_pytree_node(cls, lambda obj: (tuple(getattr(obj, f) for f in fields), None), unflatten)
        return cls

    return register


def _as_tensor(inertia) -> np.ndarray:
    """(3,) principal diagonal, (6,) MuJoCo fullinertia [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] or (3, 3)."""
    a = np.asarray(inertia, dtype=np.float64)
    if a.shape[-1:] == (3,) and a.shape[-2:] != (3, 3):
        return a[..., :, None] * np.eye(3)
    if a.shape[-1:] == (6,):
        xx, yy, zz, xy, xz, yz = (a[..., i] for i in range(6))
        return np.stack([np.stack([xx, xy, xz], -1), np.stack([xy, yy, yz], -1),
                         np.stack([xz, yz, zz], -1)], -2)
    if a.shape[-2:] == (3, 3):
        return a
    raise InertiaError(f"inertia must have shape (3,) (diagonal), (6,) (Ixx, Iyy, Izz, Ixy, Ixz, Iyz) "
                       f"or (3, 3), got {a.shape}")


# ----------------------------------------------------------------------------------------------------
# SpatialInertia

@_pytree("mass", "com", "inertia")
@dataclass(frozen=True, init=False)
class SpatialInertia:
    """Mass, centre of mass (body frame) and inertia tensor about the COM (body axes), validated.

    Construction checks, each with its own error class (all ``InertiaError``/``ValueError``):
    ``MassError`` (mass not positive and finite), ``NonFiniteInertiaError`` (com or inertia not
    finite), ``AsymmetricInertiaError``, ``IndefiniteInertiaError`` (an eigenvalue <= 0). A
    tensor symmetric to rounding (1e-12 relative) is stored exactly symmetrised. Leading batch
    axes are allowed (validated element-wise). Values rebuilt by JAX transformations (vmap/jit
    tracers) are not re-validated.
    """

    mass: jax.Array
    com: jax.Array
    inertia: jax.Array

    def __init__(self, mass, com=(0.0, 0.0, 0.0), inertia=None):
        configure()  # float64 before the first array
        if inertia is None:
            raise InertiaError("SpatialInertia needs an inertia tensor (about the centre of mass, body axes)")
        if _is_traced(mass, com, inertia):
            m, c, I = jnp.asarray(mass), jnp.asarray(com), jnp.asarray(inertia)
            if I.shape[-2:] != (3, 3):
                raise InertiaError(f"a traced inertia must have shape (..., 3, 3), got {I.shape}")
        else:
            m, c, I = _validate(mass, com, inertia)
        object.__setattr__(self, "mass", jnp.asarray(m, dtype=jnp.result_type(float)))
        object.__setattr__(self, "com", jnp.asarray(c, dtype=jnp.result_type(float)))
        object.__setattr__(self, "inertia", jnp.asarray(I, dtype=jnp.result_type(float)))

    def inertia_about(self, point: ArrayLike) -> jax.Array:
        """Inertia tensor about ``point`` (body frame), body axes: parallel-axis theorem."""
        d = jnp.asarray(point, dtype=self.com.dtype) - self.com
        dd = jnp.sum(d * d, axis=-1)[..., None, None]
        return self.inertia + self.mass[..., None, None] * (dd * jnp.eye(3) - d[..., :, None] * d[..., None, :])

    def principal(self) -> tuple[jax.Array, jax.Array]:
        """(moments (3,), rotation (3, 3)) with inertia = R diag(moments) R^T, moments ascending."""
        return principal_axes(self.inertia)

    @classmethod
    def from_mujoco(cls, model, body) -> SpatialInertia:
        """MuJoCo's compiled inertia of ``body`` (name or id): body_mass, body_ipos, body_inertia/iquat.

        For comparisons only; ``rigid_body_from_mjcf`` computes the same from the MJCF itself.
        """
        bid = _body_id(model, body)
        R = np.asarray(quat_to_mat(model.body_iquat[bid]))
        return cls(model.body_mass[bid], model.body_ipos[bid], R @ np.diag(model.body_inertia[bid]) @ R.T)


def _body_id(model, body) -> int:
    import mujoco

    bid = body if isinstance(body, (int, np.integer)) else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
    if bid < 0 or bid >= model.nbody:
        raise ValueError(f"model has no body {body!r}")
    return int(bid)


def principal_axes(inertia):
    """(moments ascending (..., 3), R (..., 3, 3)) with inertia = R diag(moments) R^T and det R = +1:
    the columns of R are the principal axes, a right-handed frame (eigh alone may return a reflection)."""
    w, v = jnp.linalg.eigh(jnp.asarray(inertia))
    flip = jnp.where(jnp.linalg.det(v) < 0, -1.0, 1.0)[..., None]
    return w, v.at[..., :, 0].multiply(flip)


def _validate(mass, com, inertia):
    try:
        m = np.asarray(mass, dtype=np.float64)
        c = np.asarray(com, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InertiaError(f"mass and com must be numbers: {e}") from None
    I = _as_tensor(inertia)
    if c.shape[-1:] != (3,):
        raise InertiaError(f"com must have shape (3,), got {c.shape}")
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise MassError(f"mass must be positive and finite, got {m.tolist()}")
    if not np.all(np.isfinite(c)):
        raise NonFiniteInertiaError(f"com must be finite, got {c.tolist()}")
    if not np.all(np.isfinite(I)):
        raise NonFiniteInertiaError(f"inertia must be finite, got {I.tolist()}")
    asym = np.max(np.abs(I - np.swapaxes(I, -1, -2)), axis=(-1, -2))
    scale = np.max(np.abs(I), axis=(-1, -2))
    if np.any(asym > 1e-12 * scale):
        raise AsymmetricInertiaError(f"inertia must be symmetric; |I - I^T| max {float(np.max(asym)):.3g} "
                                     f"for |I| max {float(np.max(scale)):.3g}: {I.tolist()}")
    I = 0.5 * (I + np.swapaxes(I, -1, -2))
    eig = np.linalg.eigvalsh(I)
    if np.any(eig <= 0):
        raise IndefiniteInertiaError(f"inertia must be positive-definite (all eigenvalues > 0); "
                                     f"eigenvalues {eig.tolist()}")
    return m, c, I


# ----------------------------------------------------------------------------------------------------
# state

@_pytree("qpos", "qvel")
@dataclass(frozen=True, init=False)
class FreeJointState:
    """Free-body state: ``qpos`` (..., 7) = [x, y, z, w, qx, qy, qz], ``qvel`` (..., 6) = [v_world; ω_body].

    Identical to MuJoCo's free-joint qpos/qvel (joint at the body-frame origin).
    """

    qpos: jax.Array
    qvel: jax.Array

    def __init__(self, qpos, qvel=None):
        configure()  # float64 before the first array
        qpos = jnp.asarray(qpos, dtype=jnp.result_type(float))
        qvel = jnp.zeros(qpos.shape[:-1] + (6,), qpos.dtype) if qvel is None else \
            jnp.asarray(qvel, dtype=jnp.result_type(float))
        if qpos.shape[-1:] != (7,) or qvel.shape[-1:] != (6,) or qpos.shape[:-1] != qvel.shape[:-1]:
            raise StateShapeError(f"FreeJointState needs qpos (..., 7) and qvel (..., 6) with equal batch "
                                  f"shapes, got qpos {qpos.shape} and qvel {qvel.shape}")
        object.__setattr__(self, "qpos", qpos)
        object.__setattr__(self, "qvel", qvel)

    @classmethod
    def from_vector(cls, x) -> FreeJointState:
        x = _check_vector(x)
        return cls(x[..., :7], x[..., 7:])

    def to_vector(self) -> jax.Array:
        return jnp.concatenate([self.qpos, self.qvel], axis=-1)

    @property
    def pos(self):
        return self.qpos[..., :3]

    @property
    def quat(self):
        return self.qpos[..., 3:7]

    @property
    def vel(self):
        """Velocity of the body-frame origin, world axes."""
        return self.qvel[..., :3]

    @property
    def angvel(self):
        """Angular velocity, body axes."""
        return self.qvel[..., 3:6]


def _check_vector(x):
    x = jnp.asarray(x, dtype=jnp.result_type(float))
    if x.shape[-1:] != (13,):
        raise StateShapeError(f"a free-body state vector must have shape (..., 13) = [qpos(7); qvel(6)], "
                              f"got {x.shape}")
    return x


def _split(state):
    """(pos, quat, v, ω) from a FreeJointState or a (..., 13) vector."""
    x = state.to_vector() if isinstance(state, FreeJointState) else _check_vector(state)
    return x[..., 0:3], x[..., 3:7], x[..., 7:10], x[..., 10:13]


def _like(state, x):
    return FreeJointState.from_vector(x) if isinstance(state, FreeJointState) else x


def _wrench(wrench, dtype):
    if wrench is None:
        return jnp.zeros(6, dtype)
    w = jnp.asarray(wrench, dtype=dtype)
    if w.shape[-1:] != (6,):
        raise StateShapeError(f"wrench must have shape (..., 6) = [force_world(3); torque_world(3)] at the "
                              f"centre of mass (MuJoCo's xfrc_applied), got {w.shape}")
    return w


def _rot(R, v):
    return jnp.einsum("...ij,...j->...i", R, v)


def _rotT(R, v):
    return jnp.einsum("...ji,...j->...i", R, v)


# ----------------------------------------------------------------------------------------------------
# RigidBody

@_pytree("inertia", "gravity")
@dataclass(frozen=True, init=False)
class RigidBody:
    """A free rigid body with ``inertia`` (SpatialInertia) under uniform ``gravity`` (world, m/s^2).

    ``accelerations(state, wrench)`` -> qacc (6,) = [dv/dt (world, body origin); dω/dt (body)].
    ``state_derivative(state, wrench)`` -> (13,) = [v; ½ q⊗[0, ω]; qacc].
    ``stepped(state, wrench, h)``: explicit midpoint on the Lie group (second order, quaternion via
    the exponential map, unit to rounding). ``stepped_rk4``: classic RK4 with the quaternion as a
    4-vector (q-dot = ½ q⊗[0, ω], plain stage sums, normalised after the step). MuJoCo C's RK4 is
    RKMK on the exponential map instead; the two agree to the method's truncation error (1e-8 over
    10 s at 1 ms in the tests), not to rounding.
    """

    inertia: SpatialInertia
    gravity: jax.Array

    def __init__(self, inertia: SpatialInertia, gravity=(0.0, 0.0, -9.81)):
        configure()  # float64 before the first array
        if not isinstance(inertia, SpatialInertia):
            raise TypeError(f"RigidBody needs a SpatialInertia, got {type(inertia).__name__}")
        g = jnp.asarray(gravity, dtype=jnp.result_type(float))
        if g.shape[-1:] != (3,):
            raise StateShapeError(f"gravity must have shape (3,), got {g.shape}")
        if not _is_traced(g) and not np.all(np.isfinite(np.asarray(g))):
            raise ValueError(f"gravity must be finite, got {np.asarray(g).tolist()}")
        object.__setattr__(self, "inertia", inertia)
        object.__setattr__(self, "gravity", g)

    @classmethod
    def from_mujoco(cls, model, body) -> RigidBody:
        """MuJoCo's compiled ``body`` (name or id) as a free body: ``SpatialInertia.from_mujoco`` under the
        model's gravity (zero when disabled) scaled by ``1 - body_gravcomp``. For comparisons only."""
        import mujoco

        bid = _body_id(model, body)
        off = model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)
        g = np.zeros(3) if off else np.asarray(model.opt.gravity, dtype=np.float64)
        return cls(SpatialInertia.from_mujoco(model, bid), g * (1.0 - float(model.body_gravcomp[bid])))

    # -- kinematics of the centre of mass -------------------------------------------------------
    def com_position(self, state: State) -> jax.Array:
        p, q, _, _ = _split(state)
        return p + _rot(quat_to_mat(q), self.inertia.com)

    def com_velocity(self, state: State) -> jax.Array:
        _, q, v, w = _split(state)
        return v + _rot(quat_to_mat(q), jnp.cross(w, self.inertia.com))

    # -- dynamics ---------------------------------------------------------------------------------
    def accelerations(self, state: State, wrench: ArrayLike | None = None) -> jax.Array:
        """qacc = [a (world, acceleration of the body-frame origin); α (body axes)].

        Newton–Euler about the COM: m a_c = f + m g; I_c α + ω × I_c ω = R^T τ. The body-origin
        acceleration follows from a_c = a + R(α × c + ω × (ω × c)), c the COM in the body frame.
        """
        _, q, _, w = _split(state)
        f = _wrench(wrench, q.dtype)
        m, c, I = self.inertia.mass, self.inertia.com, self.inertia.inertia
        R = quat_to_mat(q)
        tau_b = _rotT(R, f[..., 3:])
        Iw = jnp.einsum("ij,...j->...i", I, w)
        alpha = jnp.linalg.solve(I, (tau_b - jnp.cross(w, Iw))[..., None])[..., 0]
        a_c = f[..., :3] / m + self.gravity
        a = a_c - _rot(R, jnp.cross(alpha, c) + jnp.cross(w, jnp.cross(w, c)))
        return jnp.concatenate([a, alpha], axis=-1)

    def state_derivative(self, state: State, wrench: ArrayLike | None = None) -> jax.Array:
        """d/dt [pos; quat; v; ω] (13,): quat-dot = ½ q ⊗ [0, ω] with the quaternion as stored."""
        _, q, v, w = _split(state)
        return jnp.concatenate([v, quat_dot(q, w), self.accelerations(state, wrench)], axis=-1)

    def stepped(self, state: State, wrench: ArrayLike | None = None, h: float = 1e-3) -> State:
        """One explicit-midpoint step of size ``h`` on R^3 x S^3 x R^6 (second order).

        Stage and final quaternions are q ← normalize(q) ⊗ exp(h ω) (body-frame increment), so
        the quaternion stays unit to rounding without projection. The wrench is held constant.
        """
        p, q, v, w = _split(state)
        acc1 = self.accelerations(jnp.concatenate([p, q, v, w], -1), wrench)
        p2, q2 = p + 0.5 * h * v, quat_integrate(q, 0.5 * h * w)
        v2, w2 = v + 0.5 * h * acc1[..., :3], w + 0.5 * h * acc1[..., 3:]
        acc2 = self.accelerations(jnp.concatenate([p2, q2, v2, w2], -1), wrench)
        x = jnp.concatenate([p + h * v2, quat_integrate(q, h * w2), v + h * acc2[..., :3],
                             w + h * acc2[..., 3:]], -1)
        return _like(state, x)

    def stepped_rk4(self, state: State, wrench: ArrayLike | None = None, h: float = 1e-3) -> State:
        """Classic RK4 on the 13-vector, quaternion normalised once after the step (see the class)."""
        x = state.to_vector() if isinstance(state, FreeJointState) else _check_vector(state)
        f = lambda y: self.state_derivative(y, wrench)  # noqa: E731
        k1 = f(x)
        k2 = f(x + 0.5 * h * k1)
        k3 = f(x + 0.5 * h * k2)
        k4 = f(x + h * k3)
        y = x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        y = y.at[..., 3:7].set(quat_normalize(y[..., 3:7]))
        return _like(state, y)

    def simulate(self, state: State, h: float, steps: int, wrench: ArrayLike | None = None,
                 method: str = "rk4") -> jax.Array:
        """Trajectory of ``steps`` steps (jit-compiled scan): (steps + 1, 13) including the start.

        ``wrench``: None, a constant (6,) or one per step (steps, 6). ``method``: "rk4" or "midpoint".
        """
        if method not in ("rk4", "midpoint"):
            raise ValueError(f"method must be 'rk4' or 'midpoint', got {method!r}")
        x0 = state.to_vector() if isinstance(state, FreeJointState) else _check_vector(state)
        steps = int(steps)
        w = _wrench(wrench, x0.dtype)
        if w.ndim == 1:
            w = jnp.broadcast_to(w, (steps, 6))
        elif w.shape != (steps, 6):
            raise StateShapeError(f"a per-step wrench must have shape ({steps}, 6), got {w.shape}")
        return _simulate(self, x0, w, jnp.asarray(h, x0.dtype), method)

    # -- invariants -------------------------------------------------------------------------------
    def kinetic_energy(self, state: State) -> jax.Array:
        _, _, _, w = _split(state)
        vc = self.com_velocity(state)
        Iw = jnp.einsum("ij,...j->...i", self.inertia.inertia, w)
        return 0.5 * self.inertia.mass * jnp.sum(vc * vc, -1) + 0.5 * jnp.sum(w * Iw, -1)

    def potential_energy(self, state: State) -> jax.Array:
        """-m g·p_c (zero at the world origin), as MuJoCo's energy[0]."""
        return -self.inertia.mass * jnp.sum(self.gravity * self.com_position(state), -1)

    def energy(self, state: State) -> jax.Array:
        return self.kinetic_energy(state) + self.potential_energy(state)

    def linear_momentum(self, state: State) -> jax.Array:
        return self.inertia.mass * self.com_velocity(state)

    def angular_momentum(self, state: State, about: Vector3 = (0.0, 0.0, 0.0)) -> jax.Array:
        """World-axes angular momentum about the world point ``about``: R I_c ω + (p_c - about) × m v_c."""
        _, q, _, w = _split(state)
        R = quat_to_mat(q)
        spin = _rot(R, jnp.einsum("ij,...j->...i", self.inertia.inertia, w))
        r = self.com_position(state) - jnp.asarray(about, dtype=q.dtype)
        return spin + jnp.cross(r, self.linear_momentum(state))

    def wrench_at(self, state: State, force: ArrayLike, torque: Vector3 = (0.0, 0.0, 0.0),
                  point: ArrayLike | None = None, frame: str = "world") -> jax.Array:
        """Wrench in the model's convention ([f; τ] world axes, at the COM) from a force/torque in
        ``frame`` axes ("world" or "body") with the force acting at body-frame ``point`` (None: COM)."""
        if frame not in ("world", "body"):
            raise ValueError(f"frame must be 'world' or 'body', got {frame!r}")
        _, q, _, _ = _split(state)
        R = quat_to_mat(q)
        f = jnp.asarray(force, dtype=q.dtype)
        t = jnp.asarray(torque, dtype=q.dtype)
        if frame == "body":
            f, t = _rot(R, f), _rot(R, t)
        if point is not None:
            arm = _rot(R, jnp.asarray(point, dtype=q.dtype) - self.inertia.com)
            t = t + jnp.cross(arm, f)
        return jnp.concatenate([f, t], axis=-1)


@partial(jax.jit, static_argnames=("method",))
def _simulate(body, x0, wrenches, h, method):
    step = body.stepped_rk4 if method == "rk4" else body.stepped

    def body_fn(x, w):
        y = step(x, w, h)
        return y, y

    _, xs = jax.lax.scan(body_fn, x0, wrenches)
    return jnp.concatenate([x0[None], xs], axis=0)
