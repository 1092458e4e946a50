"""Dynamics backends: one module per implementation, each declaring what it can do.

An ``MjScene`` evaluates its dynamics through one backend object (``scene.backend_impl``); the rest
of the code asks that object (``require``, ``caps``) and never compares backend names. The choice is
made once, at the entry: ``MjScene(..., backend=NAME)`` or, for ``backend="auto"``, by ``choose``
when a run knows what it needs (MJX on a GPU/TPU, MuJoCo C on CPU unless the run needs a capability
only MJX has).

    mjx     MJX (JAX): differentiable, per-world model parameters, extra states, body noise
    mujoco  MuJoCo C on native threads: runs every model MuJoCo compiles; the fastest on CPU
    warp    MJX's MuJoCo Warp path (float32 kernels; needs mjharness[warp])

Adding a backend is one module with a ``Backend`` subclass and one line in ``BACKENDS``.
"""

from __future__ import annotations

from mjharness.integrators.names import BackendName

from .base import CAPABILITIES, Backend, BackendError, Capabilities, ChunkRun, ChunkStatic, CtrlMode
from .mjx import MJX
from .mujoco_c import MUJOCO
from .warp import WARP

__all__ = ["Backend", "BackendError", "Capabilities", "CAPABILITIES", "ChunkStatic", "ChunkRun", "CtrlMode",
           "BACKENDS", "BACKEND_NAMES", "BackendName", "AUTO", "get_backend", "check_name", "requested", "choose"]

AUTO = BackendName.AUTO
# The resolution's table; the names (the CLI's choices, the docs) are BackendName's, in the same order.
BACKENDS: dict[str, Backend] = {b.name: b for b in (MJX, MUJOCO, WARP)}
BACKEND_NAMES = BackendName.values()
assert BACKEND_NAMES == (AUTO,) + tuple(BACKENDS), "BackendName and BACKENDS disagree"


def get_backend(name: str) -> Backend:
    """The backend object named ``name`` (not ``"auto"``: ``choose`` resolves that)."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise BackendError(f"backend must be one of {BACKEND_NAMES}, got {name!r}") from None


def check_name(name) -> BackendName:
    """``name`` (a user's string or a member) as a ``BackendName``, or refused."""
    if name not in BACKEND_NAMES:
        raise BackendError(f"backend must be one of {BACKEND_NAMES}, got {name!r}")
    return BackendName(name)


def requested(*choices: tuple[str, str]) -> BackendName:
    """The backend asked for by ``choices`` ((name, who asks), ...): the explicit one, ``"auto"`` when all
    defer; two different explicit ones are refused, naming who asked for which."""
    explicit = [(check_name(name), who) for name, who in choices if name != AUTO]
    for name, who in explicit[1:]:
        if name != explicit[0][0]:
            raise BackendError(f"{explicit[0][1]} has backend={explicit[0][0].value!r} but {who} asks for "
                               f"{name.value!r}; give one (or 'auto')")
    return explicit[0][0] if explicit else AUTO


def initial_backend(src, backend: str, opts: dict):
    """(backend object, MjModel, MJX model or None, note) of a new MjScene asking for ``backend``."""
    from mjharness.scenes import SceneError, scene_info

    if check_name(backend) != AUTO:
        impl = get_backend(backend)
        impl.check_options(**opts)
        model = impl.load(src)
        return impl, model, impl.put_model(model, scene_info(model).source, opts), ""
    # auto: MJX for direct use (differentiable, jit-able); a model MJX refuses still runs on MuJoCo C.
    try:
        model = MJX.load(src)
        return MJX, model, MJX.put_model(model, scene_info(model).source, {}), ""
    except SceneError as e:
        model = MUJOCO.load(src)
        return MUJOCO, model, None, f"auto: MuJoCo C, since MJX cannot run this model ({e})"


def _platform() -> str:
    import jax

    return jax.default_backend()


def choose(requested: str, needs: dict[str, str], platform: str | None = None) -> tuple[BackendName, str]:
    """(backend name, why) for a run asking ``requested`` that needs the capabilities ``needs``
    ({capability: what asks for it}). An explicit backend lacking a needed capability is refused here,
    once, naming both; ``"auto"`` takes MJX on an accelerator and MuJoCo C on CPU unless a need is MJX-only."""
    if check_name(requested) != AUTO:
        backend = get_backend(requested)
        for cap, what in needs.items():
            backend.require(cap, what)
        return backend.name, "asked for"
    platform = platform or _platform()
    if platform != "cpu":
        return MJX.name, f"auto: MJX on the {platform} device"
    missing = {cap: what for cap, what in needs.items() if not MUJOCO.caps.has(cap)}
    if missing:
        cap, what = next(iter(missing.items()))
        return MJX.name, f"auto: MJX, since {what} needs {CAPABILITIES[cap]} (MuJoCo C has none)"
    return MUJOCO.name, "auto: MuJoCo C, the faster engine on CPU"
