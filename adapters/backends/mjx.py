"""MJX (JAX) backend: ``mjx.forward`` per stage; differentiable; the GPU/TPU path."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators.digest import tree_digest
from mjharness.integrators.names import BackendName
from mjharness.scenes import SceneError, compat, load_scene, scene_info
from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from .base import Backend, Capabilities, warmstart
from .versions import require_tested_versions


@dataclass(frozen=True, eq=False)
class MjxState:
    """MJX's state of one scene (``MjScene.backend_state``): ``template``, MJX data of the scene's runtime values
    (applied forces, mocap, controls), into which ``MjScene.to_mjx`` writes each state."""

    template: mjx.Data


class MjxBackend(Backend):
    name = BackendName.MJX
    summary = "MJX (JAX): differentiable, per-world parameters; the GPU/TPU path"
    caps = Capabilities(mjx_data=True, differentiable=True, per_world_params=True, extra_states=True,
                        body_noise=True, joint_noise=True, outputs=True, callable_outputs=True, float64=True)

    def load(self, src, *, mjx: str = "adapt", unsupported_contacts: str = "refuse", need_sensors: bool = False):
        return load_scene(src, mjx=mjx, unsupported_contacts=unsupported_contacts, need_sensors=need_sensors)

    def put_model(self, model, source, opts):
        require_tested_versions()  # MJX's internals (mjx_private.py) are read for the tested releases only
        # Our own checks first, so a model that skipped load_scene still gets every reason at once.
        compat.require_mjx_compatible(model, source)
        # A raw MjModel skipped load_scene's abstract trace of mjx.forward; one that came through it has its
        # verdict cached. Refuse (SceneError with a code), do not adapt: the model serves MuJoCo C as well.
        compat.check_mjx_trace(model, source, adapt=False)
        try:
            # This process's device: after jax.distributed.initialize, jax.devices()[0] (MJX's default) is
            # process 0's.
            return mjx.put_model(model, device=jax.local_devices()[0])
        except NotImplementedError as e:  # MJX names only the first problem; load_scene checks all first
            raise SceneError(source, f"MJX cannot run this model: {e}") from None

    def put_data(self, model, data, opts):
        return mjx.put_data(model, data, device=jax.local_devices()[0])

    def scene_state(self, model, data, opts):
        return MjxState(self.put_data(model, data, opts))

    def data_template(self, state):
        return state.template

    def evaluate(self, scene, t, x, ctrl, ws, *, mode="forward", h=0.0, force=None):
        return scene.forward(t, x, ctrl, qacc_warmstart=ws)

    def euler(self, scene, t, x, h, ctrl, carry):
        d = self.evaluate(scene, t, x, ctrl, warmstart(carry))
        model = scene.model
        damping = scene.mjx_model.dof_damping  # a tracer when set per world (nominal zeros may be randomized)
        if (model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_EULERDAMP) or (
                not isinstance(damping, jax.core.Tracer) and not np.any(np.asarray(damping) > 0)):
            return d, d.qacc
        from mujoco.mjx._src import smooth, support  # MJX's own factor/solve of M

        m = scene.mjx_model
        # As mjx.forward.euler (MJX 3.17): the inertia matrix lives in d._impl.M.
        if support.is_sparse(m):
            M = d._impl.M.at[m.M_rowadr + m.M_rownnz - 1].add(h * m.dof_damping)
        else:
            M = d._impl.M + jnp.diag(h * m.dof_damping)
        dh = smooth.factor_m(m, d.tree_replace({"_impl.M": M}))
        return d, smooth.solve_m(m, dh, d.qfrc_smooth + d.qfrc_constraint)

    def implicit(self, scene, t, x, h, ctrl, carry):
        from .. import implicit as _implicit  # MJX internals: only scenes stepped implicitly need them

        why = _implicit.unsupported(scene.mjx_model)
        if why:
            raise SceneError(scene_info(scene.model).source, f"cannot step with implicit_fast: {why}")
        d = self.evaluate(scene, t, x, ctrl, warmstart(carry))
        rate = _implicit.act_rate(scene.mjx_model, d.act_dot, h) if scene.model.na else None
        return d, _implicit.implicitfast_qacc(scene.mjx_model, d, h), rate

    def outputs(self, scene, specs, t, x, ctrl, ws):
        from ..outputs import mjx_outputs

        return mjx_outputs(scene, specs, t, x, ctrl, ws)

    def check_forces(self, scene):
        from ..forces import mjx_check  # the providers traced abstractly on one world

        mjx_check(scene)

    def digest(self, h, scene):
        # A model read back from a file (MJB) has signature 0, the same model otherwise; MJX's dynamics never read
        # the signature (only spec lookups do), so it stays out of the key and a resume reuses the cached trace.
        tree_digest(h, scene.mjx_model.replace(signature=0))
        tree_digest(h, scene.backend_state.template)


MJX = MjxBackend()
