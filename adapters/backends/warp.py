"""MuJoCo Warp through MJX (``put_model(impl="warp")``): MJWarp's float32 kernels; needs ``mjharness[warp]``."""

from __future__ import annotations

import functools

import jax

from mjharness.integrators.names import BackendName
from mjharness.scenes import SceneError
from mjharness.scenes.settings import mjx  # mujoco.mjx, imported on first use

from .base import BackendError, Capabilities, check_naconmax
from .mjx import MjxBackend
from .versions import require_tested_versions

# MJWarp's contact arena is ONE buffer shared by every vmapped world; MJX's default (48) drops contacts
# beyond a few worlds with only a printed overflow. The default is the model's: ``warp_buffers`` (the most
# contacts a world can hold, adapters/contacts.py, for DEFAULT_WARP_WORLDS worlds; njmax per world to match);
# `mjharness probe` measures the real peaks and prints the sizes to pass as naconmax=.


def default_buffers(model) -> dict:
    """{"naconmax", "njmax"} for ``model`` from its geom pairs (no probe: nothing is simulated)."""
    from ..contacts import warp_buffers
    from ..outputs import _contact_pairs

    return warp_buffers(model, _contact_pairs(model))


@jax.custom_jvp
def _warp_input(x):
    """Identity on the state entering MJWarp, whose FFI kernels have no derivative: a clear refusal."""
    return x


@_warp_input.defjvp
def _warp_no_jvp(primals, tangents):
    raise BackendError("MjScene backend='warp' runs MJWarp's FFI kernels, which JAX cannot differentiate "
                       "(jax.grad / jax.jvp); use backend='mjx' to differentiate")


class WarpBackend(MjxBackend):
    name = BackendName.WARP
    summary = "MJX impl='warp' (MuJoCo Warp kernels, float32; needs mjharness[warp])"
    caps = Capabilities(mjx_data=True, differentiable=False, per_world_params=True, extra_states=True,
                        body_noise=True, joint_noise=True, outputs=True, callable_outputs=True, float64=False,
                        force_providers=False)  # MJWarp's forward has no hook between its stages

    def check_options(self, *, threads, naconmax):
        if threads is not None:
            raise BackendError(f"threads= applies to backend='mujoco' only (backend is {self.name.value!r})")
        check_naconmax(naconmax, self.name, owner=True)

    def put_model(self, model, source, opts):
        # MJX runs its own vendored MJWarp (mujoco.mjx.third_party.mujoco_warp) and needs only warp-lang;
        # mujoco.mjx.warp.WARP_INSTALLED is MJX's own verdict on `import warp` (it printed why not).
        from mujoco.mjx import warp as _mjx_warp

        require_tested_versions()  # MJX's internals are read for the tested releases only (versions.py)
        if not _mjx_warp.WARP_INSTALLED or _mjx_warp.mujoco_warp is None:
            raise BackendError("backend='warp' needs the warp-lang package (MJX could not import warp "
                               "or its MJWarp): pip install 'mjharness[warp]'")
        try:
            return mjx.put_model(model, device=jax.local_devices()[0], impl="warp")
        except (NotImplementedError, ValueError) as e:
            raise SceneError(source, f"MJX (impl='warp') cannot run this model: {e}") from None

    def put_data(self, model, data, opts):
        sizes = default_buffers(model)
        if opts.get("naconmax"):  # the user's (e.g. from `mjharness probe`); njmax stays the model's
            sizes["naconmax"] = opts["naconmax"]
        return mjx.put_data(model, data, device=jax.local_devices()[0], impl="warp", **sizes)

    def with_params(self, scene, params: dict):
        # MJWarp's kernels take float32 model fields only: per-world values (drawn in float64) are cast to the field's.
        def field(path):
            return functools.reduce(getattr, path.split("."), scene.mjx_model)

        return super().with_params(scene, {k: jax.numpy.asarray(v, field(k).dtype) for k, v in params.items()})

    def cast_input(self, x, dtype):
        return _warp_input(x).astype(dtype)  # MJWarp's kernels are float32 only and refuse float64 input


WARP = WarpBackend()
