"""MjScene: a MuJoCo model as a set of named states whose dynamics run through ``mjx.forward``.

Joints register in MuJoCo order, all positions first and all velocities second, so ``qpos`` and
``qvel`` are contiguous segments of the value buffer ``x`` (element for element MuJoCo's order):

    hinge/slide  "<joint>/qpos" (1,)            "<joint>/qvel" (1,)
    ball         "<joint>/qpos" (4,) quaternion "<joint>/qvel" (3,)
    free         "<joint>/pos" (3,), "<joint>/quat" (4,) quaternion,
                 "<joint>/vel" (3,) (world frame), "<joint>/angvel" (3,) (body frame)
    activations  "act" (na,) when na > 0
    extras       "<prefix>/<name>" from ``add_state``

The derivative buffer holds qvel for the positions (3-component body-frame angular velocity for a
``quaternion`` attitude, 1/2 q * [0, w] for ``quaternion_qdot``), qacc for the velocities and
act_dot for the activations.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax.typing import ArrayLike

from mjharness.integrators import ContractError, StateError, StateLayout, StateRegistry, StateSpec
from mjharness.integrators.state import canonical_update
from mjharness.scenes import scene_info
from mjharness.scenes.settings import (
    configure,
    mjx,  # mujoco.mjx, imported on first use
)

from . import forces as _forces
from . import noise as _noise
from . import scene_layout as _layout
from .backends import AUTO, BACKEND_NAMES, check_name, get_backend, initial_backend, requested
from .backends import host as _host
from .backends.base import ChunkRun, ChunkStatic, warmstart
from .scene_layout import _mujoco_specs, carried_data, check_same_layout, joint_states, model_name, qdot_positions

QUATERNION_UPDATES = ("quaternion", "quaternion_qdot")
BACKENDS = BACKEND_NAMES
# MuJoCo's <option integrator> -> the registry name of ours that reproduces it.
SCENE_INTEGRATORS = {int(mujoco.mjtIntegrator.mjINT_EULER): "semi_implicit_euler",
                     int(mujoco.mjtIntegrator.mjINT_RK4): "rk4",
                     int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicit_fast"}


class MjScene:
    """A MuJoCo model registered as named states (see module docstring).

    ``model``: an ``MjModel`` or anything ``load_scene`` accepts. ``quaternion_update`` picks the
    policy of every ball/free attitude: ``"quaternion"`` (3-component exp map: MuJoCo C's Euler, and
    with our multi-stage RK methods Runge-Kutta-Munthe-Kaas stages, which is what MuJoCo C 4.0's RK4
    does to 1e-14) or ``"quaternion_qdot"`` (4-component q-dot integrated as a vector, normalised
    after the step; agrees with C's RK4 only to O(h^5 w^5) per step).
    The layout is finalized on first use of ``layout``; ``add_state`` must come before that.

    ``backend`` (``adapters/backends``): ``"auto"`` (default) evaluates through MJX when used directly
    (``dynamics``, ``forward``, ``jax.grad``, ``simulate``, ``fit``), and a ``rollout`` resolves it per
    run (``backends.choose``: MuJoCo C on CPU unless the run needs an MJX-only capability; MJX on an
    accelerator). A model MJX refuses makes an auto scene MuJoCo C from the start. ``"mjx"``,
    ``"mujoco"``, ``"warp"`` fix the backend. ``threads`` (MuJoCo C) and ``naconmax`` (warp) are
    backend options.
    """

    def __init__(self, model: Any, quaternion_update: str = "quaternion", backend: str = AUTO,
                 threads: int | None = None, naconmax: int | None = None) -> None:
        configure()  # float64, the XLA:CPU flag and the caches, before MJX makes the first array
        quaternion_update = canonical_update(quaternion_update)
        if quaternion_update not in QUATERNION_UPDATES:
            raise StateError(f"quaternion_update must be one of {QUATERNION_UPDATES}, got {quaternion_update!r}")
        self.requested_backend = check_name(backend)
        self._source = model
        self._opts = dict(threads=threads, naconmax=naconmax)
        impl, self.model, self.mjx_model, self.backend_note = initial_backend(model, backend, self._opts)
        self.backend_impl = impl
        self.backend = impl.name
        self.quaternion_update = quaternion_update
        self.data = mujoco.MjData(self.model)  # runtime values: the default state and controls
        self.joints = joint_states(self.model)
        # The registry groups states by model (noise slots, tolerance overrides): the MuJoCo states
        # form the model named after the MJCF <mujoco model="...">; extra states group by prefix.
        self.name = model_name(self.model)
        self.registry = StateRegistry()
        for name, spec in _mujoco_specs(self.model, quaternion_update):
            self.registry.register(name, spec, model=self.name)
        self._extras: dict[str, tuple[Callable, np.ndarray]] = {}
        # The backend's own state of this scene (MJX data template, MuJoCo C's thread pool), opaque here. Built
        # eagerly: created lazily inside a jit/vmap trace it would leak tracers.
        self.backend_state: object = impl.scene_state(self.model, self.data, self._opts)
        # Bumped by recompile(): what a run compiled for this scene object (rollout/engine/chunk.py keys its
        # per-scene cache on it) closes over the model it was traced with.
        self.revision = 0

    def on_backend(self, name: str) -> MjScene:
        """This scene evaluated by backend ``name``: itself, or (an ``"auto"`` scene) a twin sharing its
        registry, noise and runtime values, with the model compiled for that backend from the same source."""
        if name == self.backend:
            return self
        requested((self.requested_backend, "this MjScene"), (name, "the run"))  # only an auto scene has twins
        impl = get_backend(name)
        impl.check_options(**self._opts)
        if self._extras:
            impl.require("extra_states", f"add_state {sorted(self._extras)}")
        twin = copy.copy(self)
        model = impl.load(self._source)
        mjx_model = impl.put_model(model, scene_info(model).source, self._opts)
        twin.backend_impl, twin.backend, twin.requested_backend = impl, impl.name, impl.name
        twin.backend_note = ""
        twin._rebuild(model, mjx_model)
        if self.force_providers:  # a provider runs as the twin's backend calls it (JAX per world, NumPy batch)
            impl.check_forces(twin)
        return twin

    def _rebuild(self, model, mjx_model) -> None:
        """Swap in ``model`` (same layout) for this scene's backend; runtime values carry over."""
        data = carried_data(self.data, model)
        self.model, self.mjx_model, self.data = model, mjx_model, data
        self.backend_state = self.backend_impl.scene_state(model, data, self._opts)
        self.joints = joint_states(model)

    # -- registration ---------------------------------------------------------------------------
    def add_state(self, prefix: str, name: str, spec: StateSpec, derivative_fn: Callable,
                  initial: ArrayLike | None = None, diffusion_fn: Callable | None = None) -> str:
        """Register an extra continuous state ``"<prefix>/<name>"`` integrated with the rest.

        ``derivative_fn(t, value, data) -> derivative`` (shape ``spec.deriv_shape``), where ``data``
        is the MJX data after ``mjx.forward`` at this stage (qpos, qvel, ctrl, sensordata, ...).
        ``initial`` (default zeros / identity quaternion) is the value ``x0()`` starts from.
        ``diffusion_fn(t, value, data) -> (spec.noise_count, *spec.diffusion_shape)``: the state's
        own noise (required exactly when ``spec.noise_count > 0``; see ``adapters/noise.py``).
        """
        if not isinstance(prefix, str) or not prefix or not isinstance(name, str) or not name:
            raise StateError(f"add_state needs non-empty prefix and name, got {prefix!r}, {name!r}")
        self._require_mjx(f"add_state({prefix!r}, {name!r}) (its derivative_fn reads MJX data)")
        full = f"{prefix}/{name}"
        if not callable(derivative_fn):
            raise StateError(f"state {full!r}: derivative_fn must be callable")
        if not isinstance(spec, StateSpec):
            raise StateError(f"state {full!r}: spec must be a StateSpec, got {type(spec).__name__}")
        if initial is not None:
            init = np.asarray(initial, dtype=np.float64)
        elif spec.update != "euclidean":
            init = np.array([1.0, 0.0, 0.0, 0.0])
        else:
            init = np.zeros(spec.shape)
        if init.shape != spec.shape:
            raise StateError(f"state {full!r} has shape {spec.shape}; initial value has shape {init.shape}")
        _noise.check_extra_diffusion(full, spec, diffusion_fn)
        self.registry.register(full, spec, model=prefix)
        self._extras[full] = (derivative_fn, init)
        _noise.register_extra_diffusion(self, full, diffusion_fn)
        return full

    def needs(self) -> dict[str, str]:
        """The backend capabilities what is registered on this scene needs ({capability: what needs it})."""
        kinds = {s.kind for s in _noise.scene_noise(self).sources}
        forces = [p.name for p in self.force_providers]
        table = (("extra_states", bool(self._extras), f"add_state {sorted(self._extras)}"),
                 ("body_noise", "body" in kinds, "add_body_noise"),
                 ("joint_noise", "joint" in kinds, "add_joint_noise"),
                 ("force_providers", bool(forces), f"add_force {forces}"))
        return {cap: what for cap, on, what in table if on}

    @property
    def layout(self) -> StateLayout:
        return self.registry.finalize()

    @property
    def threads(self) -> int | None:
        """The CPU threads this scene's MuJoCo C evaluations run on (None on MJX and warp)."""
        return self.backend_impl.threads(self.backend_state)

    @property
    def unroll_stages(self) -> bool:
        """Whether integrators should trace their stages one by one (``rk.rk_stages``): true where a stage is a host
        call (MuJoCo C), cheap to trace s times; MJX traces its model once per stage in a loop instead."""
        return self.backend_impl.unroll_stages

    # -- MuJoCo views ---------------------------------------------------------------------------
    @property
    def nq(self) -> int:
        return self.model.nq

    @property
    def nv(self) -> int:
        return self.model.nv

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def na(self) -> int:
        return self.model.na

    @property
    def qpos_segment(self) -> slice:
        return slice(0, self.model.nq)

    @property
    def qvel_segment(self) -> slice:
        return slice(self.model.nq, self.model.nq + self.model.nv)

    @property
    def act_segment(self) -> slice:
        o = self.model.nq + self.model.nv
        return slice(o, o + self.model.na)

    @property
    def compat_log(self) -> list:
        return scene_info(self.model).compat_log

    def joint_slices(self, name: str) -> tuple[slice, slice]:
        """(slice into qpos, slice into qvel) of joint ``name`` (jnt_qposadr / jnt_dofadr)."""
        for js in self.joints:
            if js.name == name:
                return slice(js.qposadr, js.qposadr + js.nq), slice(js.dofadr, js.dofadr + js.nv)
        raise KeyError(f"no joint named {name!r}; joints: {', '.join(j.name for j in self.joints)}")

    @property
    def default_integrator(self) -> str:
        """Registry name of the integrator the MJCF names (``<option integrator=...>``).

        Euler -> semi_implicit_euler (MuJoCo's Euler is semi-implicit, with implicit joint damping),
        RK4 -> rk4, implicitfast -> implicit_fast. Others (implicit, with the full RNE derivative)
        raise ``ContractError`` naming the option.
        """
        it = int(self.model.opt.integrator)
        if it not in SCENE_INTEGRATORS:
            name = mujoco.mjtIntegrator(it).name
            raise ContractError(f"scene {self.name!r} names <option integrator={name!r}>, which mjharness does not "
                                f"implement (implicit with the full RNE derivative); pass an integrator, e.g. "
                                f"'implicit_fast' (MuJoCo's recommendation for robots) or 'rk4'")
        return SCENE_INTEGRATORS[it]

    @property
    def second_order(self) -> tuple[tuple[str, str], ...]:
        """(position state, velocity state) pairs: what SemiImplicitEuler moves with the new velocities."""
        return tuple(p for js in self.joints for p in zip(js.positions, js.velocities))

    def joint_of(self, state: str) -> str | None:
        """Name of the joint a state belongs to (None for act and extra states)."""
        for js in self.joints:
            if state in js.positions or state in js.velocities:
                return js.name
        return None

    # -- state buffers --------------------------------------------------------------------------
    def x0(self) -> np.ndarray:
        """The value buffer of the scene's current runtime state (``self.data``) and extras' initials."""
        layout = self.layout
        x = np.empty(layout.size)
        x[self.qpos_segment] = self.data.qpos
        x[self.qvel_segment] = self.data.qvel
        x[self.act_segment] = self.data.act
        for name, (_, init) in self._extras.items():
            x[layout[name].value_slice] = init.ravel()
        return x

    def reset(self, values: dict | None = None, keyframe: str | int | None = None,
              batch: int | None = None) -> np.ndarray:
        """Value buffer from the default state (or a keyframe) with ``values`` written by name."""
        x = self.x0()
        if keyframe is not None:
            k = keyframe if isinstance(keyframe, int) else mujoco.mj_name2id(
                self.model, mujoco.mjtObj.mjOBJ_KEY, keyframe)
            if not 0 <= k < self.model.nkey:
                raise KeyError(f"no keyframe {keyframe!r} in this model ({self.model.nkey} keyframes)")
            x[self.qpos_segment] = self.model.key_qpos[k]
            x[self.qvel_segment] = self.model.key_qvel[k]
            x[self.act_segment] = self.model.key_act[k]
        if batch is not None:
            x = np.broadcast_to(x, (batch, x.size)).copy()
        return self.layout.reset(values or {}, base=x)

    def _require_mjx(self, what: str) -> None:
        self.backend_impl.require("mjx_data", what)

    @property
    def _template(self) -> Any:
        """MJX data of the runtime values that ``to_mjx`` writes states into (the backend's, from its state)."""
        return self.backend_impl.data_template(self.backend_state)

    def to_mjx(self, x: jax.Array | np.ndarray, data: mjx.Data | None = None) -> mjx.Data:
        """Write a (batched) value buffer into MJX data (qpos, qvel, act)."""
        self._require_mjx("to_mjx")
        data = self._template if data is None else data
        x = self.backend_impl.cast_input(jnp.asarray(x), data.qpos.dtype)  # a NumPy buffer works outside jit too
        upd = dict(qpos=x[..., self.qpos_segment], qvel=x[..., self.qvel_segment])
        if self.model.na:
            upd["act"] = x[..., self.act_segment]
        return data.replace(**upd)

    def from_mjx(self, data: mjx.Data, x: jax.Array | None = None) -> jax.Array:
        """Read MJX data back into a value buffer; extra states are taken from ``x`` (or initials)."""
        parts = [data.qpos, data.qvel] + ([data.act] if self.model.na else [])
        core = jnp.concatenate(parts, axis=-1)
        n_core = core.shape[-1]
        if self.layout.size == n_core:
            return core
        if x is None:
            rest = jnp.asarray(self.x0()[n_core:])
            rest = jnp.broadcast_to(rest, core.shape[:-1] + rest.shape)
        else:
            rest = x[..., n_core:]
        return jnp.concatenate([core, rest], axis=-1)

    # -- dynamics -------------------------------------------------------------------------------
    def with_model(self, mjx_model: mjx.Model) -> MjScene:
        """Shallow copy evaluating with another MJX model (e.g. one world's randomized parameters)."""
        self._require_mjx("with_model (per-world model parameters)")
        other = copy.copy(self)
        other.mjx_model = mjx_model
        return other

    _force_values: dict  # set on a copy only (with_force_values); forces.provider_params reads it

    def with_force_values(self, values: dict) -> MjScene:
        """Shallow copy whose force providers get ``values`` ``{"force:<provider>.<param>": value}`` (one world's
        provider parameters, read by ``forces.provider_params``)."""
        other = copy.copy(self)
        other._force_values = dict(values)
        return other

    def with_params(self, params: dict) -> MjScene:
        """Shallow copy evaluating one world's model fields ``{path: value}`` (per-world parameters: model_params,
        randomize): its backend decides how (MJX: the MJX model with them replaced; MuJoCo C: the host pool
        writes them into a thread's model copy before the world's evaluation)."""
        return self.backend_impl.with_params(self, params)

    def forward(self, t: ArrayLike, x: jax.Array | np.ndarray, ctrl: ArrayLike | None = None,
                qacc_warmstart: ArrayLike | None = None) -> mjx.Data:
        """``mjx.forward`` on the state ``x`` at time ``t`` with controls ``ctrl`` (one world).

        ``qacc_warmstart``: the constraint solver's warm start (MuJoCo keeps it in ``mjData`` between
        steps); None = the cold start of fresh data (zeros).
        """
        self._require_mjx("forward (MJX data)")
        d = self.to_mjx(x).replace(time=jnp.asarray(t, dtype=self._template.time.dtype))
        if ctrl is not None:
            d = d.replace(ctrl=jnp.asarray(ctrl, dtype=d.ctrl.dtype).reshape(d.ctrl.shape))
        if qacc_warmstart is not None:
            d = d.replace(qacc_warmstart=jnp.asarray(qacc_warmstart, d.qacc_warmstart.dtype))
        return _forces.mjx_forward(self, t, x, d)  # mjx.forward, with the force providers at their stage

    # -- carried state ----------------------------------------------------------------------------
    @property
    def carry_spec(self) -> dict[str, tuple[int, ...]]:
        """Per-world values kept between steps, not integrated: the solver's warm start (MuJoCo's
        ``qacc_warmstart``, saved after every step by ``mj_step`` and ``mjx.step``)."""
        return {"qacc_warmstart": (self.model.nv,)}

    def init_carry(self) -> dict[str, np.ndarray]:
        """The cold carry: zeros, as in fresh ``MjData`` (and ``mjx.make_data``)."""
        return {"qacc_warmstart": np.zeros(self.model.nv)}

    def _evaluate(self, t, x, ctrl, carry, mode="forward", h=0.0, force=None):
        return self.backend_impl.evaluate(self, t, x, ctrl, warmstart(carry), mode=mode, h=h, force=force)

    @staticmethod
    def _qacc(d):
        """The acceleration an evaluation hands the integrator (host data carries the mode's own)."""
        return d.qacc_used if isinstance(d, _host.HostData) else d.qacc

    @staticmethod
    def _with_carry(out, d, carry):
        """``out``, or ``(out, proposal)`` when a carry is threaded: MuJoCo saves the forward qacc."""
        return out if carry is None else (out, {"qacc_warmstart": d.qacc})

    def _derivative(self, t, x, d, qacc):
        """Assemble the derivative buffer from forward-evaluated data ``d`` and accelerations."""
        layout = self.layout
        if self.quaternion_update == "quaternion":
            pos = [d.qvel]  # the position-derivative block is exactly qvel
        else:
            pos = qdot_positions(self.joints, x, d.qvel)  # q-dot of the stage quaternions as given (x)
        parts = pos + [qacc] + ([d.act_dot] if self.model.na else [])
        for name, (fn, _) in self._extras.items():
            r = layout[name]
            value = x[r.value_slice].reshape(r.spec.shape)
            parts.append(jnp.reshape(fn(t, value, d), (r.deriv_size,)))
        return jnp.concatenate([jnp.ravel(p) for p in parts])

    def dynamics(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None, *, carry: dict | None = None) -> Any:
        """Derivative buffer at (t, x) with controls ``ctrl`` (one world; vmap for batches).

        With ``carry`` (``{"qacc_warmstart": (nv,)}``) the solve warm-starts from it and
        ``(derivative, {"qacc_warmstart": qacc})`` is returned.
        """
        d = self._evaluate(t, x, ctrl, carry)
        return self._with_carry(self._derivative(t, x, d, self._qacc(d)), d, carry)

    def euler_dynamics(self, t: ArrayLike, x: jax.Array, h: ArrayLike, ctrl: ArrayLike | None = None, *,
                       carry: dict | None = None) -> Any:
        """Like ``dynamics``, with MuJoCo's Euler implicit joint damping at step ``h``.

        MuJoCo's Euler integrator (unless ``eulerdamp`` is disabled) solves
        (M + h diag(dof_damping)) qacc = qfrc_smooth + qfrc_constraint instead of using qacc.
        """
        d, qacc = self.backend_impl.euler(self, t, x, h, ctrl, carry)
        return self._with_carry(self._derivative(t, x, d, qacc), d, carry)

    # -- implicitfast (IMPLICIT helper) --
    def implicit_dynamics(self, t: ArrayLike, x: jax.Array, h: ArrayLike, ctrl: ArrayLike | None = None, *,
                          carry: dict | None = None) -> Any:
        """Like ``dynamics``, with MuJoCo's ``implicitfast`` velocity update at step ``h`` (``ImplicitFast``).

        qacc solves (M - h D) qacc = qfrc_smooth + qfrc_constraint, D the velocity derivative of the
        actuator and passive forces without RNE, with MuJoCo C's rules (``adapters/implicit.py``);
        FILTEREXACT activations get the rate whose Euler step is mj_advance's exact filter step.
        The carry proposal is the forward qacc, which MuJoCo saves as the next warm start.
        """
        d, qacc, act_rate = self.backend_impl.implicit(self, t, x, h, ctrl, carry)
        dx = self._derivative(t, x, d, qacc)
        if act_rate is not None:
            dx = dx.at[self.layout["act"].deriv_slice].set(act_rate)
        return self._with_carry(dx, d, carry)
    # -- end implicitfast --

    def chunk_runner(self, static: ChunkStatic, run: ChunkRun) -> Callable | None:
        """The backend's host function for whole chunks of a run (``Backend.chunk_runner``), or None."""
        return self.backend_impl.chunk_runner(self, static, run)

    def project(self, x: jax.Array) -> jax.Array:
        """After a full step: clamp limited activations to actrange, as MuJoCo's mj_advance does."""
        return _layout.clamp_activations(self.model, x, self.act_segment.start)

    # -- editing --------------------------------------------------------------------------------
    def recompile(self, new_model: Any) -> None:
        """Swap in an edited model whose state layout is identical; runtime values carry over.

        Anything else (a joint added, renamed or retyped, na changed) raises and leaves the scene
        as it was.
        """
        new_model = self.backend_impl.load(new_model)
        check_same_layout(self.registry, self._extras, new_model, self.quaternion_update)
        mjx_model = self.backend_impl.put_model(new_model, scene_info(new_model).source, self._opts)
        self._source = new_model
        self._rebuild(new_model, mjx_model)
        self.revision += 1

    # -- forces (implemented in adapters/forces.py) ------------------------------------------------
    def add_force(self, fn: Callable, name: str | None = None, params: dict | None = None,
                  param_units: dict | None = None) -> _forces.ForceProvider:
        """Add a force provider ``fn(t, x, data)`` evaluated at every stage: world-frame wrenches (nbody, 6) at each
        body's centre of mass (as ``xfrc_applied``), or ``{"qfrc": (nv,)}`` (and/or ``"xfrc"``); JAX per world
        on MJX, NumPy of the whole batch on MuJoCo C (leading axis B). ``params`` ({name: number or array}): the
        provider's parameters, then ``fn(t, x, data, params)``, set per world by ``model_params`` / ``randomize``
        as ``"force:<name>.<param>"``; ``param_units`` ({param: unit}): their units in the file. See
        ``adapters/forces.py``, docs/forces.md."""
        return _forces.add_force(self, fn, name, params, param_units)

    def set_flight(self, joint: str | None = None, planet: Any = None, atmosphere: Any = None) -> Any:
        """Declare the flight frame (world = ECI): the free joint of the flying body, the ``environment.Planet``
        (default WGS-84) and the atmosphere (default US 1976 in still air), so that the flight outputs
        ``geodetic``, ``ned_velocity``, ``euler_ned``, ``body_rates``, ``airspeed``, ``mach`` and ``qbar`` can be
        recorded. See ``adapters/flight_outputs.py``, docs/environment.md."""
        from . import flight_outputs

        return flight_outputs.set_flight(self, joint, planet or flight_outputs.WGS84, atmosphere)

    @property
    def force_providers(self) -> tuple[_forces.ForceProvider, ...]:
        return _forces.scene_forces(self)

    # -- noise (stochastic scenes; implemented in adapters/noise.py) -----------------------------
    def add_joint_noise(self, joint: str, sigma: ArrayLike) -> tuple[_noise.NoiseSource, ...]:
        """Generalized-force noise σ dW on every dof of ``joint``: velocity diffusion M(q)⁻¹ b σ
        (backend='mujoco': M's factor from mj_forward, solved by mj_solveM on the host)."""
        return _noise.add_joint_noise(self, joint, sigma)

    def joint_noise_forces(self) -> np.ndarray | None:
        """(sources, nv) generalized forces per unit dW of the joint-noise sources, or None (``noise.joint_forces``)."""
        return _noise.joint_forces(self)

    def add_body_noise(self, body: str, force_sigma: ArrayLike = 0.0,
                       torque_sigma: ArrayLike = 0.0) -> tuple[_noise.NoiseSource, ...]:
        """Wrench noise on ``body``: world-axis force at its COM and world-axis torque, via J_bodyᵀ."""
        self.backend_impl.require("body_noise", f"add_body_noise({body!r})")
        return _noise.add_body_noise(self, body, force_sigma, torque_sigma)

    def diffusion(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None) -> jax.Array:
        """Packed diffusion buffer (``layout.diffusion_size``) at (t, x) (one world)."""
        return _noise.diffusion(self, t, x, ctrl)

    def drift_diffusion(self, t: ArrayLike, x: jax.Array, ctrl: ArrayLike | None = None, *,
                        carry: dict | None = None) -> Any:
        """(``dynamics``, ``diffusion``) sharing one ``mjx.forward`` (and the carry proposal, with a carry)."""
        return _noise.drift_diffusion(self, t, x, ctrl, carry=carry)

    @property
    def diffusion_time_dependent(self) -> bool:
        return _noise.time_dependent(self)

    # -- caching ---------------------------------------------------------------------------------
    def trace_key(self) -> str | None:
        """sha256 of everything a trace of this scene's dynamics closes over, or None if unknowable.

        The MuJoCo model (binary), its MJX model and data template (the constants a trace embeds),
        the state layout, the quaternion policy and the noise sources. ``None`` once user callables
        (``add_state`` derivatives or diffusions, force providers) take part: their code cannot be hashed reliably
        (the engine then reuses a compiled chunk for the same scene object only).
        Used by the rollout engine's cache of traced functions (``rollout/cache.py``).
        """
        if self._extras or _noise.scene_noise(self).extras or self.force_providers:
            return None
        h = hashlib.sha256()
        mjb = np.zeros(mujoco.mj_sizeModel(self.model), np.uint8)
        mujoco.mj_saveModel(self.model, None, mjb)
        h.update(mjb.tobytes())
        self.backend_impl.digest(h, self)
        h.update(f"{type(self).__qualname__}|{self.backend}|{self.quaternion_update}|{self.layout!r}|".encode())
        h.update(repr(_noise.scene_noise(self).sources).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        return (f"MjScene(nq={self.nq}, nv={self.nv}, nu={self.nu}, na={self.na}, states={len(self.registry.names)}, "
                f"quaternion_update={self.quaternion_update!r}, backend={self.backend.value!r})")
