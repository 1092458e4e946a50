"""A PD controller with an integral term driving the bundled ``arm`` to a different target per world.

    mjharness run arm --controller examples/arm_reach.py:make --steps 2000 --batch 8
    mjharness run arm --controller examples/arm_reach.py:make --terminate examples/arm_reach.py:reached

The controller state (``Controller``, docs/episodes.md) is the integral of the error and the world's target;
it travels in the run's carry, so it is saved with every sample and a resumed run continues it. The
functions are plain JAX: they are traced into the compiled chunk on every backend.
"""

import jax.numpy as jnp

from mjharness.rollout import Controller

NQ = 4                                     # yaw, shoulder, elbow, slide
KP, KD, KI = 2.0, 0.2, 0.5                 # gains of u = KP e - KD qdot + KI integral(e)
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
    """``--controller examples/arm_reach.py:make``."""
    return Controller(init=init, step=step, every=1)


def reached(t, x):
    """``--terminate examples/arm_reach.py:reached``: the hand is still (every joint slower than 1e-3 rad/s) after
    the first 0.1 s."""
    return (t > 0.1) & jnp.all(jnp.abs(x[NQ:2 * NQ]) < 1e-3)
