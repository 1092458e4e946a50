"""The dynamics-backend bench peers: ``rollout()`` on the same scene rebuilt with another backend.

- ``backend_mujoco``: ``MjScene(model, backend="mujoco")`` (MuJoCo C ``mj_forward`` on native threads,
  one batched host call per stage), stepped by the scene's own integrator (SemiImplicitEuler when the
  model names none we register), one chunk per call, timed by the engine's ``run_s`` as the integrator
  peers are; its figure against ``mujoco_rollout`` is the host-callback backend's price.
- ``backend_mujoco_rk4``: the same stepping ``rk4`` (MuJoCo C's own RK4, whole chunks in C), beside the
  ``mujoco_rollout_rk4`` peer.
- ``backend_warp``: the same with ``backend="warp"`` (MJX's MuJoCo Warp path; needs mujoco-warp).

The rebuilt scene has the same state layout, so the peer starts from the same rows of ``x0``.
"""

from __future__ import annotations

from .engine_peer import engine_peer, scene_scheme

# The constructor options of each backend peer (``threads``: MuJoCo C's thread pool, as mujoco.rollout's).
PEER_OPTIONS = {"backend_mujoco": lambda nthread: {"threads": nthread},
                "backend_mujoco_rk4": lambda nthread: {"threads": nthread}, "backend_warp": lambda nthread: {}}
# The peer's own integrator, where it is not the scene's.
PEER_SCHEME = {"backend_mujoco_rk4": "rk4"}


def backend_scene(scene, name, nthread=None):
    """``scene``'s model as an MjScene with the backend the peer ``name`` names."""
    from mjharness.adapters import MjScene

    backend = name.removeprefix("backend_").removesuffix("_rk4")
    return MjScene(scene.model, quaternion_update=getattr(scene, "quaternion_update", "quaternion"),
                   backend=backend, **PEER_OPTIONS[name](nthread))


def setup_backend_peer(name, scene, x0, *, steps, dt, nthread=None):
    other = backend_scene(scene, name, nthread)
    integ = PEER_SCHEME.get(name) or scene_scheme(other) or "semi_implicit_euler"
    threads = getattr(getattr(other, "_host", None), "threads", None)
    return engine_peer(name, other, x0, integ=integ, dt=dt, steps=steps, record_every=steps, chunk=steps,
                        sample=0, chained=True, clock="run_s",
                        extra=lambda stats: dict(backend=other.backend, scheme=integ, threads=threads))
