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
import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from mjharness.integrators import ContractError, StateError, StateLayout, StateRegistry, StateSpec
from mjharness.integrators.digest import tree_digest
from mjharness.integrators.policies import quat_dot
from mjharness.integrators.state import canonical_update
from mjharness.scenes import SceneError, compat, load_scene, parse_spec, scene_info

from . import mujoco_backend as _host
from . import noise as _noise

QUATERNION_UPDATES = ("quaternion", "quaternion_qdot")
BACKENDS = ("mjx", "mujoco", "warp")
# MuJoCo's <option integrator> -> the registry name of ours that reproduces it.
SCENE_INTEGRATORS = {int(mujoco.mjtIntegrator.mjINT_EULER): "semi_implicit_euler",
                     int(mujoco.mjtIntegrator.mjINT_RK4): "rk4",
                     int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicit_fast"}

_JNT = mujoco.mjtJoint


@dataclass(frozen=True)
class JointStates:
    """How one MuJoCo joint maps onto registry states."""

    name: str
    id: int
    type: int
    qposadr: int
    dofadr: int
    nq: int
    nv: int
    positions: tuple[str, ...]
    velocities: tuple[str, ...]


def model_name(model: mujoco.MjModel) -> str:
    """The MJCF ``<mujoco model="...">`` name (the first entry of MuJoCo's names buffer)."""
    return bytes(model.names).split(b"\0", 1)[0].decode() or "mujoco"


def joint_name(model: mujoco.MjModel, j: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"


def joint_states(model: mujoco.MjModel) -> tuple[JointStates, ...]:
    out = []
    for j in range(model.njnt):
        name, t = joint_name(model, j), int(model.jnt_type[j])
        if t == _JNT.mjJNT_FREE:
            pos, vel, nq, nv = (f"{name}/pos", f"{name}/quat"), (f"{name}/vel", f"{name}/angvel"), 7, 6
        elif t == _JNT.mjJNT_BALL:
            pos, vel, nq, nv = (f"{name}/qpos",), (f"{name}/qvel",), 4, 3
        else:
            pos, vel, nq, nv = (f"{name}/qpos",), (f"{name}/qvel",), 1, 1
        out.append(JointStates(name, j, t, int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j]), nq, nv,
                               pos, vel))
    return tuple(out)


def _mujoco_specs(model: mujoco.MjModel, quaternion_update: str) -> list[tuple[str, StateSpec]]:
    """(name, spec) of every MuJoCo state, positions first, velocities second, then act."""
    quat = StateSpec((4,), update=quaternion_update)
    pos, vel = [], []
    for js in joint_states(model):
        if js.type == _JNT.mjJNT_FREE:
            pos += [(js.positions[0], StateSpec((3,))), (js.positions[1], quat)]
            vel += [(js.velocities[0], StateSpec((3,))), (js.velocities[1], StateSpec((3,)))]
        elif js.type == _JNT.mjJNT_BALL:
            pos.append((js.positions[0], quat))
            vel.append((js.velocities[0], StateSpec((3,))))
        else:
            pos.append((js.positions[0], StateSpec((1,))))
            vel.append((js.velocities[0], StateSpec((1,))))
    act = [("act", StateSpec((model.na,)))] if model.na > 0 else []
    return pos + vel + act


def _load_native(src) -> mujoco.MjModel:
    """Compile for MuJoCo C as given: no MJX checks, no adaptation (MuJoCo C runs what it compiles)."""
    if isinstance(src, mujoco.MjModel):
        return src
    spec, source = parse_spec(src)
    try:
        return spec.compile()
    except Exception as e:
        raise SceneError(source, str(e).strip(), codes=("MJCF_COMPILE_FAILED",)) from None


@jax.custom_jvp
def _warp_input(x):
    """Identity on the state entering MJWarp, whose FFI kernels have no derivative: a clear refusal."""
    return x


@_warp_input.defjvp
def _warp_no_jvp(primals, tangents):
    raise _host.BackendError("MjScene backend='warp' runs MJWarp's FFI kernels, which JAX cannot differentiate "
                             "(jax.grad / jax.jvp); use backend='mjx' to differentiate")


def _put_model(model: mujoco.MjModel, source: str, backend: str = "mjx"):
    if backend == "mujoco":
        return None  # MuJoCo C evaluates: no MJX model, no MJX trace check
    if backend == "warp":
        # MJX runs its own vendored MJWarp (mujoco.mjx.third_party.mujoco_warp) and needs only warp-lang;
        # mujoco.mjx.warp.WARP_INSTALLED is MJX's own verdict on `import warp` (it printed why not).
        from mujoco.mjx import warp as _mjx_warp
        if not _mjx_warp.WARP_INSTALLED or _mjx_warp.mujoco_warp is None:
            raise _host.BackendError("backend='warp' needs the warp-lang package (MJX could not import warp "
                                     "or its MJWarp): pip install 'mjharness[warp]'")
        try:
            return mjx.put_model(model, device=jax.local_devices()[0], impl="warp")
        except (NotImplementedError, ValueError) as e:
            raise SceneError(source, f"MJX (impl='warp') cannot run this model: {e}") from None
    # Our own checks first, so a model that skipped load_scene still gets every reason at once.
    compat.require_mjx_compatible(model, source)
    # A raw MjModel skipped load_scene's abstract trace of mjx.forward; one that came through it has its
    # verdict cached. Refuse (SceneError with a code), do not adapt: self.model serves MuJoCo C as well.
    compat.check_mjx_trace(model, source, adapt=False)
    try:
        # This process's device: after jax.distributed.initialize, jax.devices()[0] (MJX's default) is process 0's.
        return mjx.put_model(model, device=jax.local_devices()[0])
    except NotImplementedError as e:  # MJX names only the first problem; load_scene checks all first
        raise SceneError(source, f"MJX cannot run this model: {e}") from None


class MjScene:
    """A MuJoCo model registered as named states (see module docstring).

    ``model``: an ``MjModel`` or anything ``load_scene`` accepts. ``quaternion_update`` picks the
    policy of every ball/free attitude: ``"quaternion"`` (3-component exp map: MuJoCo C's Euler, and
    with our multi-stage RK methods Runge-Kutta-Munthe-Kaas stages, which is what MuJoCo C 4.0's RK4
    does to 1e-14) or ``"quaternion_qdot"`` (4-component q-dot integrated as a vector, normalised
    after the step; agrees with C's RK4 only to O(h^5 w^5) per step).
    The layout is finalized on first use of ``layout``; ``add_state`` must come before that.
    """

    def __init__(self, model, quaternion_update: str = "quaternion", backend: str = "mjx", threads: int | None = None,
                 naconmax: int | None = None):
        quaternion_update = canonical_update(quaternion_update)
        if quaternion_update not in QUATERNION_UPDATES:
            raise StateError(f"quaternion_update must be one of {QUATERNION_UPDATES}, got {quaternion_update!r}")
        if backend not in BACKENDS:
            raise _host.BackendError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if threads is not None and backend != "mujoco":
            raise _host.BackendError(f"threads= applies to backend='mujoco' only (backend is {backend!r})")
        if naconmax is not None and (backend != "warp" or not isinstance(naconmax, int) or naconmax < 1):
            raise _host.BackendError(f"naconmax= is a positive int for backend='warp' only; got {naconmax!r} "
                                     f"with backend={backend!r}")
        self.backend = backend
        # MJWarp's contact arena is ONE buffer shared by every vmapped world; MJX's default (48) drops
        # contacts beyond a few worlds with only a printed overflow. 48 per world for 1024 worlds.
        self._naconmax = (naconmax or 48 * 1024) if backend == "warp" else None
        if backend == "mujoco":
            self.model = _load_native(model)
        else:
            self.model = load_scene(model) if not isinstance(model, mujoco.MjModel) else model
        self.quaternion_update = quaternion_update
        self.mjx_model = _put_model(self.model, scene_info(self.model).source, backend)
        self.data = mujoco.MjData(self.model)  # runtime values: the default state and controls
        self.joints = joint_states(self.model)
        # The registry groups states by model (noise slots, tolerance overrides): the MuJoCo states
        # form the model named after the MJCF <mujoco model="...">; extra states group by prefix.
        self.name = model_name(self.model)
        self.registry = StateRegistry()
        for name, spec in _mujoco_specs(self.model, quaternion_update):
            self.registry.register(name, spec, model=self.name)
        self._extras: dict[str, tuple[Callable, np.ndarray]] = {}
        # Built eagerly: created lazily inside a jit/vmap trace it would leak tracers.
        self._template = self._put_data(self.model, self.data)
        self._host = _host.HostPool(self.model, self.data, threads) if backend == "mujoco" else None
        self._host_fns = {}

    def _put_data(self, model, data):
        """The MJX data template (None on backend='mujoco'); warp data with its contact arena."""
        if self.backend == "mujoco":
            return None
        kw = {"impl": "warp", "naconmax": self._naconmax} if self.backend == "warp" else {}
        return mjx.put_data(model, data, device=jax.local_devices()[0], **kw)

    # -- registration ---------------------------------------------------------------------------
    def add_state(self, prefix: str, name: str, spec: StateSpec, derivative_fn: Callable,
                  initial=None, diffusion_fn: Callable | None = None) -> str:
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

    @property
    def layout(self) -> StateLayout:
        return self.registry.finalize()

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

    def reset(self, values=None, keyframe: str | int | None = None, batch: int | None = None) -> np.ndarray:
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
        if self.backend == "mujoco":
            raise _host.BackendError(f"{what} needs MJX data; this MjScene has backend='mujoco' (MuJoCo C): "
                                     f"use backend='mjx'")

    def to_mjx(self, x, data=None):
        """Write a (batched) value buffer into MJX data (qpos, qvel, act)."""
        self._require_mjx("to_mjx")
        data = self._template if data is None else data
        x = jnp.asarray(x)  # a NumPy buffer works outside jit too
        if self.backend == "warp":  # MJWarp's kernels are float32 only and refuse float64 input
            x = _warp_input(x).astype(data.qpos.dtype)
        upd = dict(qpos=x[..., self.qpos_segment], qvel=x[..., self.qvel_segment])
        if self.model.na:
            upd["act"] = x[..., self.act_segment]
        return data.replace(**upd)

    def from_mjx(self, data, x=None):
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
    def with_model(self, mjx_model) -> MjScene:
        """Shallow copy evaluating with another MJX model (e.g. one world's randomized parameters)."""
        self._require_mjx("with_model (per-world model parameters)")
        other = copy.copy(self)
        other.mjx_model = mjx_model
        return other

    def forward(self, t, x, ctrl=None, qacc_warmstart=None):
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
        return mjx.forward(self.mjx_model, d)

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
        ws = None if carry is None else carry["qacc_warmstart"]
        if self.backend == "mujoco":
            return self._host_evaluate(mode, t, x, ctrl, ws, h, force)
        return self.forward(t, x, ctrl, qacc_warmstart=ws)

    def _host_evaluate(self, mode, t, x, ctrl, ws, h, force=None):
        """MuJoCo C at this stage (one world; vmap makes it one batched host call): ``HostData``.
        ``force`` (k, nv) constant: ``HostData.minv_f`` holds M(q)^-1 of its rows (joint-noise diffusion)."""
        key = mode if force is None else (mode, np.asarray(force, np.float64).tobytes())
        fn = self._host_fns.get(key)
        if fn is None:
            fn = self._host_fns[key] = _host.make_evaluator(self._host, mode, force)
        m = self.model
        ctrl = self.data.ctrl if ctrl is None else ctrl
        ws = np.zeros(m.nv) if ws is None else ws
        f64 = jnp.float64
        out = fn(jnp.asarray(t, f64), jnp.asarray(x, f64)[:m.nq + m.nv + m.na],
                 jnp.reshape(jnp.asarray(ctrl, f64), (m.nu,)), jnp.asarray(ws, f64), jnp.asarray(h, f64))
        return _host.HostData(out, m.nv, m.na)

    def host_outputs(self, specs, t, x, ctrl=None, qacc_warmstart=None, rne=False):
        """Recorded outputs ``specs`` of one world through MuJoCo C (backend='mujoco'; vmap makes it one
        batched host call): the flat (width,) row, specs in order (``adapters/outputs.py`` splits it)."""
        if self.backend != "mujoco":
            raise _host.BackendError(f"host_outputs is backend='mujoco' only (backend is {self.backend!r})")
        key = ("outputs", tuple(specs), bool(rne))
        fn = self._host_fns.get(key)
        if fn is None:
            fn = self._host_fns[key] = _host.make_output_evaluator(_host.HostOutputs(self._host, specs, rne))
        m, f64 = self.model, jnp.float64
        ctrl = self.data.ctrl if ctrl is None else ctrl
        ws = np.zeros(m.nv) if qacc_warmstart is None else qacc_warmstart
        return fn(jnp.asarray(t, f64), jnp.asarray(x, f64)[:m.nq + m.nv + m.na],
                  jnp.reshape(jnp.asarray(ctrl, f64), (m.nu,)), jnp.reshape(jnp.asarray(ws, f64), (m.nv,)))

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
            # q-dot from the stage quaternion as given (x), not from d.qpos, which mjx.forward
            # normalises: MuJoCo C's RK4 differentiates the unnormalised stage value.
            pos = []
            for js in self.joints:
                v = d.qvel[js.dofadr:js.dofadr + js.nv]
                if js.type == _JNT.mjJNT_FREE:
                    q = x[js.qposadr + 3:js.qposadr + 7]
                    pos += [v[:3], quat_dot(q, v[3:])]
                elif js.type == _JNT.mjJNT_BALL:
                    pos.append(quat_dot(x[js.qposadr:js.qposadr + 4], v))
                else:
                    pos.append(v)
        parts = pos + [qacc] + ([d.act_dot] if self.model.na else [])
        for name, (fn, _) in self._extras.items():
            r = layout[name]
            value = x[r.value_slice].reshape(r.spec.shape)
            parts.append(jnp.reshape(fn(t, value, d), (r.deriv_size,)))
        return jnp.concatenate([jnp.ravel(p) for p in parts])

    def dynamics(self, t, x, ctrl=None, *, carry=None):
        """Derivative buffer at (t, x) with controls ``ctrl`` (one world; vmap for batches).

        With ``carry`` (``{"qacc_warmstart": (nv,)}``) the solve warm-starts from it and
        ``(derivative, {"qacc_warmstart": qacc})`` is returned.
        """
        d = self._evaluate(t, x, ctrl, carry)
        return self._with_carry(self._derivative(t, x, d, self._qacc(d)), d, carry)

    def euler_dynamics(self, t, x, h, ctrl=None, *, carry=None):
        """Like ``dynamics``, with MuJoCo's Euler implicit joint damping at step ``h``.

        MuJoCo's Euler integrator (unless ``eulerdamp`` is disabled) solves
        (M + h diag(dof_damping)) qacc = qfrc_smooth + qfrc_constraint instead of using qacc.
        """
        if self.backend == "mujoco":  # mj_Euler's own damped solve
            d = self._evaluate(t, x, ctrl, carry, mode="euler", h=h)
            return self._with_carry(self._derivative(t, x, d, d.qacc_used), d, carry)
        d = self._evaluate(t, x, ctrl, carry)
        qacc = d.qacc
        if not (self.model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_EULERDAMP) and np.any(
                self.model.dof_damping > 0):
            from mujoco.mjx._src import smooth, support  # MJX's own factor/solve of M

            m = self.mjx_model
            # As mjx.forward.euler (MJX 3.17): the inertia matrix lives in d._impl.M.
            if support.is_sparse(m):
                M = d._impl.M.at[m.M_rowadr + m.M_rownnz - 1].add(h * m.dof_damping)
            else:
                M = d._impl.M + jnp.diag(h * m.dof_damping)
            dh = smooth.factor_m(m, d.tree_replace({"_impl.M": M}))
            qacc = smooth.solve_m(m, dh, d.qfrc_smooth + d.qfrc_constraint)
        return self._with_carry(self._derivative(t, x, d, qacc), d, carry)

    # -- implicitfast (IMPLICIT helper) --
    def implicit_dynamics(self, t, x, h, ctrl=None, *, carry=None):
        """Like ``dynamics``, with MuJoCo's ``implicitfast`` velocity update at step ``h`` (``ImplicitFast``).

        qacc solves (M - h D) qacc = qfrc_smooth + qfrc_constraint, D the velocity derivative of the
        actuator and passive forces without RNE, with MuJoCo C's rules (``adapters/implicit.py``);
        FILTEREXACT activations get the rate whose Euler step is mj_advance's exact filter step.
        The carry proposal is the forward qacc, which MuJoCo saves as the next warm start.
        """
        if self.backend == "mujoco":  # mj_implicit's own factorisation and activation update
            d = self._evaluate(t, x, ctrl, carry, mode="implicit", h=h)
            return self._with_carry(self._derivative(t, x, d, d.qacc_used), d, carry)
        from . import implicit as _implicit  # MJX internals: only scenes stepped implicitly need them

        why = _implicit.unsupported(self.mjx_model)
        if why:
            raise SceneError(scene_info(self.model).source, f"cannot step with implicit_fast: {why}")
        d = self._evaluate(t, x, ctrl, carry)
        dx = self._derivative(t, x, d, _implicit.implicitfast_qacc(self.mjx_model, d, h))
        if self.model.na:
            dx = dx.at[self.layout["act"].deriv_slice].set(_implicit.act_rate(self.mjx_model, d.act_dot, h))
        return self._with_carry(dx, d, carry)
    # -- end implicitfast --

    def project(self, x):
        """After a full step: clamp limited activations to actrange, as MuJoCo's mj_advance does."""
        if not self.model.na:
            return x
        lim = [(int(self.model.actuator_actadr[i]), int(self.model.actuator_actnum[i]), self.model.actuator_actrange[i])
               for i in range(self.model.nu)
               if self.model.actuator_actadr[i] >= 0 and self.model.actuator_actlimited[i]]
        if not lim:
            return x
        o = self.act_segment.start
        for adr, num, (lo, hi) in lim:
            sl = slice(o + adr, o + adr + num)
            x = x.at[sl].set(jnp.clip(x[sl], lo, hi))
        return x

    # -- editing --------------------------------------------------------------------------------
    def recompile(self, new_model) -> None:
        """Swap in an edited model whose state layout is identical; runtime values carry over.

        Anything else (a joint added, renamed or retyped, na changed) raises and leaves the scene
        as it was.
        """
        new_model = load_scene(new_model) if not isinstance(new_model, mujoco.MjModel) else new_model
        # Noise sources are not part of the MuJoCo layout (they survive a recompile).
        old = [(n, dataclasses.replace(self.registry.spec(n), noise_count=0))
               for n in self.registry.names if n not in self._extras]
        new = _mujoco_specs(new_model, self.quaternion_update)
        if old != new:
            diff = next(((a, b) for a, b in zip(old, new) if a != b), None)
            detail = (f"first difference: {diff[0][0]!r} {diff[0][1].shape}/{diff[0][1].update} vs "
                      f"{diff[1][0]!r} {diff[1][1].shape}/{diff[1][1].update}" if diff else
                      f"{len(old)} states before, {len(new)} after")
            raise StateError(f"recompile: the new model's state layout differs ({detail})")
        mjx_model = _put_model(new_model, scene_info(new_model).source, self.backend)
        data = mujoco.MjData(new_model)
        for f in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart", "mocap_pos", "mocap_quat", "userdata"):
            src, dst = getattr(self.data, f), getattr(data, f)
            if src.shape == dst.shape:
                dst[:] = src
        data.time = self.data.time
        mujoco.mj_forward(new_model, data)
        template = self._put_data(new_model, data)
        self.model, self.mjx_model, self.data, self._template = new_model, mjx_model, data, template
        if self.backend == "mujoco":
            self._host = _host.HostPool(new_model, data, self._host.threads)
            self._host_fns = {}
        self.joints = joint_states(new_model)

    # -- noise (stochastic scenes; implemented in adapters/noise.py) -----------------------------
    def add_joint_noise(self, joint: str, sigma):
        """Generalized-force noise σ dW on every dof of ``joint``: velocity diffusion M(q)⁻¹ b σ
        (backend='mujoco': M's factor from mj_forward, solved by mj_solveM on the host)."""
        return _noise.add_joint_noise(self, joint, sigma)

    def add_body_noise(self, body: str, force_sigma=0.0, torque_sigma=0.0):
        """Wrench noise on ``body``: world-axis force at its COM and world-axis torque, via J_bodyᵀ."""
        self._require_mjx("add_body_noise")
        return _noise.add_body_noise(self, body, force_sigma, torque_sigma)

    def diffusion(self, t, x, ctrl=None):
        """Packed diffusion buffer (``layout.diffusion_size``) at (t, x) (one world)."""
        return _noise.diffusion(self, t, x, ctrl)

    def drift_diffusion(self, t, x, ctrl=None, *, carry=None):
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
        (``add_state`` derivatives or diffusions) take part: their code cannot be hashed reliably.
        Used by the rollout engine's cache of traced functions (``rollout/aot.py``).
        """
        if self._extras or _noise.scene_noise(self).extras:
            return None
        h = hashlib.sha256()
        mjb = np.zeros(mujoco.mj_sizeModel(self.model), np.uint8)
        mujoco.mj_saveModel(self.model, None, mjb)
        h.update(mjb.tobytes())
        if self.backend != "mujoco":
            tree_digest(h, self.mjx_model)
            tree_digest(h, self._template)
        else:  # the host evaluation reads the scene's data (applied forces, mocap) copied into its pool
            for f in ("ctrl", "qfrc_applied", "xfrc_applied", "mocap_pos", "mocap_quat", "userdata"):
                h.update(np.ascontiguousarray(getattr(self.data, f)).tobytes())
            h.update(f"threads={self._host.threads}|".encode())  # a compiled chunk calls this scene's own pool
        h.update(f"{type(self).__qualname__}|{self.backend}|{self.quaternion_update}|{self.layout!r}|".encode())
        h.update(repr(_noise.scene_noise(self).sources).encode())
        return h.hexdigest()

    def __repr__(self):
        return (f"MjScene(nq={self.nq}, nv={self.nv}, nu={self.nu}, na={self.na}, states={len(self.registry.names)}, "
                f"quaternion_update={self.quaternion_update!r}, backend={self.backend!r})")
