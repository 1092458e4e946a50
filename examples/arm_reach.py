r"""A PD controller with an integral term driving the bundled ``arm`` to a different target per world.

    mjharness run arm --controller arm_reach:make --steps 2000 --batch 8
    mjharness run arm --controller arm_reach:make --terminate arm_reach:reached --steps 2000 --batch 8
    mjharness run arm --controller arm_reach:make --terminate arm_reach:reached --on-terminate reset \
        --reward arm_reach:distance --steps 2000 --batch 8

(``arm_reach:make`` names this bundled file; in a checkout ``examples/arm_reach.py:make`` is the same.) Every
world settles on its target within about 0.03 rad in 2 s; with ``reached`` all 8 worlds terminate (status
terminated) in the 2000 steps (4 s), each when its hand comes to rest.

The controller state (``Controller``, docs/episodes.md) is the integral of the error and the world's target;
it travels in the run's carry, so it is saved with every sample and a resumed run continues it. The
functions are plain JAX: they are traced into the compiled chunk on every backend.
"""

import jax.numpy as jnp

from mjharness.rollout import Controller

NQ = 4                                     # yaw, shoulder, elbow, slide
KP, KD, KI = 10.0, 2.0, 2.0                # gains of u = KP e - KD qdot + KI integral(e): settles in ~1 s
DT = 0.002                                 # the arm's timestep: the integral's step
TARGET0 = jnp.array([0.4, -0.3, 0.5, 0.0])  # world 0's target; world w's is scaled by 1 - 0.1 w


def init(x0, world):
    """Controller state of a world starting at x0: no integral yet, and the world's own target."""
    return {"integral": jnp.zeros(NQ, x0.dtype), "target": TARGET0 * (1.0 - 0.1 * world)}


def step(t, x, c):
    """The controls (one per actuator: yaw, shoulder, elbow, slide) and the next controller state."""
    q, qdot = x[:NQ], x[NQ:2 * NQ]
    e = c["target"] - q
    integral = c["integral"] + e * DT
    u = KP * e - KD * qdot + KI * integral
    return u, {"integral": integral, "target": c["target"]}


def make():
    """``--controller arm_reach:make``."""
    return Controller(init=init, step=step, every=1)


REST = 0.01  # rad/s (m/s for the slide): a joint slower than this is at rest


def reached(t, x):
    """``--terminate arm_reach:reached``: the hand has come to rest (every joint slower than ``REST``) after the
    first 0.5 s (the start, when the arm is still, does not count)."""
    return (t > 0.5) & jnp.all(jnp.abs(x[NQ:2 * NQ]) < REST)


def distance(t, x, world):
    """``--reward arm_reach:distance``: minus the distance of the joints from the world's target (rad, and m for the
    slide, summed as one vector), evaluated after each control period."""
    return -jnp.linalg.norm(x[:NQ] - TARGET0 * (1.0 - 0.1 * world))
