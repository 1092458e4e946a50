"""The ``rollout_outputs`` bench peer: ``rollout()`` as the ``rollout`` peer, recording outputs.

Same call as the ``rollout`` peer (the scene's own integrator, a whole run from the initial states
in memory, wall time) with ``outputs=("sensordata", "xpos")``; its time over the ``rollout`` peer's
is the price of the outputs: one ``mjx.forward`` per recorded row and world, plus their transfer.
"""

from __future__ import annotations

from .engine_peer import engine_peer

BENCH_OUTPUTS = ("sensordata", "xpos")


def outputs_for(scene) -> tuple:
    """The bench's outputs that ``scene`` has ("sensordata" needs a sensor)."""
    m = scene.model
    return tuple(o for o in BENCH_OUTPUTS if o != "sensordata" or m.nsensordata)


def setup_outputs_peer(name, scene, x0, *, steps, dt, record_every, run_steps):
    outs = outputs_for(scene)

    def extra(stats):
        return dict(record_every=record_every, chunk=stats[0]["chunk"], outputs=list(outs),
                    engine_run_s=[s["run_s"] for s in stats[1:]])

    return engine_peer(name, scene, x0, integ=None, dt=dt, steps=run_steps, record_every=record_every,
                        sample=steps // record_every - 1, chained=False, clock="wall", extra=extra, outputs=outs)
