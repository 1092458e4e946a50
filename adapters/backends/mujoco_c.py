"""MuJoCo C backend: stage evaluations by ``mj_forward`` / ``mj_Euler`` / ``mj_implicit`` on native threads
(``adapters/mujoco_backend.py``: one batched host call per stage). Runs every model MuJoCo compiles."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.integrators.names import BackendName
from mjharness.scenes import load_native

from . import host as _host
from . import host_chunk as _host_chunk
from . import providers as _providers
from .base import Backend, Capabilities, check_naconmax, warmstart


@dataclass(frozen=True, eq=False)
class HostState:
    """MuJoCo C's state of one scene (``MjScene.backend_state``).

    Attributes:
        pool: the scene's ``host.HostPool`` (one MjData per thread, copies of the scene's runtime values).
        fns: the host functions made for this pool, by key (shared by the scene's copies).
        world_fields: one world's model fields ``{path: value}`` (``with_params``): the pool writes them into a
            thread's model copy before the world's evaluation; None for the scene's own model.
    """

    pool: _host.HostPool
    fns: dict
    world_fields: dict | None = None


class MujocoBackend(Backend):
    name = BackendName.MUJOCO
    summary = "MuJoCo C on CPU threads: runs models MJX refuses; the fastest on CPU; not differentiable"
    caps = Capabilities(mjx_data=False, differentiable=False, per_world_params=True, extra_states=False,
                        body_noise=False, joint_noise=True, outputs=True, callable_outputs=False, float64=True,
                        per_world_outputs=True, batch_invariant=True)
    unroll_stages = True  # a stage is one host call: nothing to gain from tracing it once in a loop

    def check_options(self, *, threads, naconmax):
        check_naconmax(naconmax, self.name, owner=False)  # threads: HostPool checks them

    def load(self, src, **mjx_options):
        return load_native(src)  # MuJoCo C runs what MuJoCo compiles: no MJX adaptation

    def scene_state(self, model, data, opts):
        return HostState(_host.HostPool(model, data, opts.get("threads")), {})

    def threads(self, state):
        return state.pool.threads

    def evaluate(self, scene, t, x, ctrl, ws, *, mode="forward", h=0.0, force=None):
        """MuJoCo C at this stage (one world; vmap makes it one batched host call): ``HostData``.
        ``force`` (k, nv) constant: ``HostData.minv_f`` holds M(q)^-1 of its rows (joint-noise diffusion)."""
        key = mode if force is None else (mode, np.asarray(force, np.float64).tobytes())
        state = scene.backend_state
        if state.world_fields:
            return self._evaluate_fields(scene, state.world_fields, key, t, x, ctrl, ws, mode, h, force)
        forces = self._forces(scene, None)
        fn = state.fns.get((key, id(forces)))
        if fn is None:
            fn = state.fns[(key, id(forces))] = _host.make_evaluator(state.pool, mode, force, forces)
        m = scene.model
        ctrl = scene.data.ctrl if ctrl is None else ctrl
        ws = np.zeros(m.nv) if ws is None else ws
        f64 = jax.dtypes.canonicalize_dtype(jnp.float64)  # float32 in a float32 run
        out = fn(jnp.asarray(t, f64), jnp.asarray(x, f64)[:m.nq + m.nv + m.na],
                 jnp.reshape(jnp.asarray(ctrl, f64), (m.nu,)), jnp.asarray(ws, f64), jnp.asarray(h, f64))
        return _host.HostData(out, m.nv, m.na)

    # -- per-world model fields --
    def with_params(self, scene, params):
        """``scene`` evaluating with one world's model fields: the pool writes them into a thread's model copy
        before the world's evaluation (``host.WorldFields``)."""
        twin = copy.copy(scene)
        twin.backend_state = dataclasses.replace(scene.backend_state, world_fields=dict(params))
        return twin

    def _evaluate_fields(self, scene, fields, key, t, x, ctrl, ws, mode, h, force):
        layout, state = self._layout(fields), scene.backend_state
        forces = self._forces(scene, layout)
        fn = state.fns.get(("fields", key, layout, id(forces)))
        if fn is None:
            fn = state.fns[("fields", key, layout, id(forces))] = _host.make_field_evaluator(state.pool, mode, force,
                                                                                             layout, forces)
        m, f64 = scene.model, jax.dtypes.canonicalize_dtype(jnp.float64)  # float32 in a float32 run
        ctrl = scene.data.ctrl if ctrl is None else ctrl
        ws = np.zeros(m.nv) if ws is None else ws
        p = self._flat(fields, f64)
        out = fn(jnp.asarray(t, f64), jnp.asarray(x, f64)[:m.nq + m.nv + m.na],
                 jnp.reshape(jnp.asarray(ctrl, f64), (m.nu,)), jnp.asarray(ws, f64), jnp.asarray(h, f64), p)
        return _host.HostData(out, m.nv, m.na)

    def euler(self, scene, t, x, h, ctrl, carry):
        d = self.evaluate(scene, t, x, ctrl, warmstart(carry), mode="euler", h=h)  # mj_Euler's own damped solve
        return d, d.qacc_used

    def implicit(self, scene, t, x, h, ctrl, carry):
        # mj_implicit's factorisation and act update
        d = self.evaluate(scene, t, x, ctrl, warmstart(carry), mode="implicit", h=h)
        return d, d.qacc_used, None

    def noise_data(self, scene, t, x, ctrl, carry):
        # With the joint-noise forces, HostData.minv_f holds M(q)^-1 of them (mj_solveM).
        return self.evaluate(scene, t, x, ctrl, warmstart(carry), force=scene.joint_noise_forces())

    def outputs(self, scene, specs, t, x, ctrl, ws):
        from ..outputs import needs_rne, split_row

        state = scene.backend_state
        fields = state.world_fields  # each world's own model fields
        layout = self._layout(fields) if fields else None
        forces = self._forces(scene, layout)
        key = ("outputs", tuple(specs), bool(needs_rne(specs)), layout, id(forces))
        fn = state.fns.get(key)
        if fn is None:
            fn = state.fns[key] = _host.make_output_evaluator(
                _host.HostOutputs(state.pool, specs, needs_rne(specs), layout, forces))
        m, f64 = scene.model, jax.dtypes.canonicalize_dtype(jnp.float64)  # float32 in a float32 run
        ctrl = scene.data.ctrl if ctrl is None else ctrl
        ws = np.zeros(m.nv) if ws is None else ws
        p = () if layout is None else (self._flat(fields, f64),)
        flat = fn(jnp.asarray(t, f64), jnp.asarray(x, f64)[:m.nq + m.nv + m.na],
                  jnp.reshape(jnp.asarray(ctrl, f64), (m.nu,)), jnp.reshape(jnp.asarray(ws, f64), (m.nv,)), *p)
        return split_row(specs, flat)

    @staticmethod
    def _forces(scene, layout: tuple | None):
        """The pool's ``providers.HostForces`` of the scene's force providers (None without): refused here, at the
        trace, for per-world fields a Batch cannot hold."""
        return _providers.forces_caller(scene.backend_state.pool, scene.force_providers, layout)

    def check_forces(self, scene):
        # A provider is a NumPy function of the whole batch: called once, on one world at the scene's default state.
        x = np.concatenate([scene.data.qpos, scene.data.qvel, scene.data.act])[None]
        self._forces(scene, None)(np.full(1, scene.data.time), x, scene.data.ctrl[None])

    @staticmethod
    def _layout(fields: dict) -> tuple:
        return tuple((path, int(np.prod(jnp.shape(v), dtype=np.int64))) for path, v in fields.items())

    @staticmethod
    def _flat(fields: dict, dtype):
        return jnp.concatenate([jnp.reshape(jnp.asarray(v, dtype), (-1,)) for v in fields.values()])

    def chunk_runner(self, scene, static, run):
        # MuJoCo's own scheme and nothing per stage in JAX: one batched mj_step call per chunk (host_chunk.py).
        if _host_chunk.why_not(scene, static, run):
            return None
        if run.loop is not None:  # a closed loop between whole segments of steps (host_closed.py)
            from .host_closed import ClosedLoopRunner

            return ClosedLoopRunner(scene, static, run)
        return _host_chunk.ChunkRunner(scene, static, run)

    def digest(self, h, scene):
        # The host evaluation reads the scene's data (applied forces, mocap) copied into its pool.
        for f in ("ctrl", "qfrc_applied", "xfrc_applied", "mocap_pos", "mocap_quat", "userdata"):
            h.update(np.ascontiguousarray(getattr(scene.data, f)).tobytes())
        # a compiled chunk calls this scene's own pool
        h.update(f"threads={scene.backend_state.pool.threads}|".encode())


MUJOCO = MujocoBackend()
