"""The dynamics-backend bench peers: ``rollout()`` on the same scene rebuilt with another backend.

- ``backend_mujoco``: ``MjScene(model, backend="mujoco")`` (MuJoCo C ``mj_forward`` on native threads,
  one batched host call per stage), stepped by the scene's own integrator (SemiImplicitEuler when the
  model names none we register), one chunk per call, timed by the engine's ``run_s`` as the integrator
  peers are; its figure against ``mujoco_rollout`` is the host-callback backend's price.
- ``backend_mujoco_rk4``: the same stepping ``rk4`` (MuJoCo C's own RK4, whole chunks in C), beside the
  ``mujoco_rollout_rk4`` peer.
- ``backend_warp``: the same with ``backend="warp"`` (MJX's MuJoCo Warp path; needs mujoco-warp).
- ``backend_mujoco_closed_loop``: ``backend_mujoco`` with a gym-style decimated closed loop (``closed_loop``): a
  NumPy policy ``u = tanh(W x)`` every 4 steps, a NumPy rule every 4 steps (a joint more than 0.5 from its
  initial position) and resets to the world's start; its figure against ``backend_mujoco`` is what the closed
  loop costs.
- ``backend_mujoco_randomized`` / ``backend_mujoco_rk4_randomized``: ``backend_mujoco`` / ``backend_mujoco_rk4``
  with domain randomization (``RANDOMIZE``: every body's mass, every geom's friction, every dof's damping drawn
  per world, derived constants recomputed); their figure against the un-randomized peer is what per-world models
  cost (they step other physics, so they are not held to mujoco.rollout's final states).

The rebuilt scene has the same state layout, so the peer starts from the same rows of ``x0``.
"""

from __future__ import annotations

from .engine_peer import engine_peer, scene_scheme

# The constructor options of each backend peer (``threads``: MuJoCo C's thread pool, as mujoco.rollout's).
_C = lambda nthread: {"threads": nthread}  # noqa: E731
PEER_OPTIONS = {"backend_mujoco": _C, "backend_mujoco_rk4": _C, "backend_warp": lambda nthread: {},
                "backend_mujoco_randomized": _C, "backend_mujoco_rk4_randomized": _C, "backend_mujoco_closed_loop": _C}
# The peer's own integrator, where it is not the scene's.
PEER_SCHEME = {"backend_mujoco_rk4": "rk4", "backend_mujoco_rk4_randomized": "rk4"}
# What the randomized peers draw per world (the fields domain randomization usually touches).
RANDOMIZE = {"body_mass": "*uniform(0.9, 1.1)", "geom_friction": "*uniform(0.8, 1.2)",
             "dof_damping": "*uniform(0.8, 1.2)"}
# Peer -> the same peer without randomization / without its closed loop.
RANDOMIZED_PAIRS = (("backend_mujoco_randomized", "backend_mujoco"),
                    ("backend_mujoco_rk4_randomized", "backend_mujoco_rk4"))
CLOSED_LOOP_PAIRS = (("backend_mujoco_closed_loop", "backend_mujoco"),)
EVERY = 4  # the closed-loop peer's decimation (gym's frame_skip for its locomotion tasks)


def closed_loop(scene, n: int):
    """(Controller or None, Termination) of the closed-loop peer: NumPy (host) functions, any scene of state width n."""
    import numpy as np

    from mjharness.rollout import Controller, Termination

    m = scene.model
    W = np.random.default_rng(0).uniform(-0.1, 0.1, (m.nu, n))
    qpos0 = np.array(m.qpos0)

    def init(x0):
        return {"steps": np.zeros(())}

    def step(t, x, c):
        return np.tanh(W @ np.asarray(x)), {"steps": c["steps"] + 1}

    def strayed(t, x):
        return bool(np.abs(np.asarray(x)[:m.nq] - qpos0).max() > 0.5)

    # A scene without actuators: the rule and the resets only.
    return (Controller(init, step, every=EVERY) if m.nu else None), Termination(strayed, every=EVERY)


def backend_scene(scene, name, nthread=None):
    """``scene``'s model as an MjScene with the backend the peer ``name`` names."""
    from mjharness.adapters import MjScene

    backend = name.removeprefix("backend_").split("_")[0]  # backend_mujoco_rk4_randomized -> mujoco
    return MjScene(scene.model, quaternion_update=getattr(scene, "quaternion_update", "quaternion"),
                   backend=backend, **PEER_OPTIONS[name](nthread))


def setup_backend_peer(name, scene, x0, *, steps, dt, nthread=None):
    other = backend_scene(scene, name, nthread)
    integ = PEER_SCHEME.get(name) or scene_scheme(other) or "semi_implicit_euler"
    threads = other.threads
    randomize = RANDOMIZE if name.endswith("_randomized") else None
    loop = {}
    if name.endswith("_closed_loop"):
        ctrl, term = closed_loop(other, x0.shape[1])
        loop = dict(ctrl=ctrl, terminate=term, on_terminate="reset")
    return engine_peer(name, other, x0, integ=integ, dt=dt, steps=steps, record_every=steps, chunk=steps,
                        sample=0, chained=True, clock="run_s", randomize=randomize, **loop,
                        extra=lambda stats: dict(backend=other.backend, scheme=integ, threads=threads,
                                                 randomize=randomize, trace_cache=stats[-1]["trace_cache"]))
