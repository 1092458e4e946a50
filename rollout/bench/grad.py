"""The cost of a gradient through ``simulate``: time and peak memory of ``jax.grad`` vs the forward run.

    mjharness bench --grad [SCENE] --batch 64 --steps 1000

Both programs are jitted, compiled apart (compile time reported apart) and timed interleaved after one
warm-up call. The forward run is ``simulate`` (the recorded states); the gradient is ``jax.grad`` of the
mean squared recorded state with respect to ``x0`` and the scene's ``dof_damping`` (one value per world).
Peak memory is XLA's plan for one call of each compiled program (arguments + outputs + temporaries -
donated aliases, ``timing.xla_peak``); ``device_peak`` is added on accelerators. The issue's bar:
gradient <= 5x the forward time and <= 4x its peak memory.
"""

from __future__ import annotations

import time
from typing import Any

from .peers import BenchError
from .report import format_bytes
from .timing import compile_timed, device_peak, xla_peak

__all__ = ["grad_cost", "format_grad", "GRAD_BAR"]

GRAD_BAR = {"time_x": 5.0, "memory_x": 4.0}  # gradient / forward (docs/gradients.md)


def grad_cost(scene="double_pendulum", integrator="rk4", *, batch: int = 64, steps: int = 1000,
              record_every: int = 10, chunk: int | None = None, repeats: int = 3, min_time: float = 0.5,
              log=None) -> dict:
    """Time and peak memory of the forward ``simulate`` and of ``jax.grad`` of a loss over it."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from mjharness.rollout.engine.plan import initial_states, resolve_scene, scene_integrator
    from mjharness.rollout.engine.simulate import default_chunk, simulate

    jax.config.update("jax_enable_x64", True)
    from mjharness.adapters import MjScene

    sc = resolve_scene(scene, needs={"differentiable": "bench --grad"})
    if not isinstance(sc, MjScene):
        raise BenchError(f"bench --grad: {scene!r} is not a MuJoCo scene (it times an MjScene's forward and gradient)")
    integ = scene_integrator(sc, integrator)
    name = scene if isinstance(scene, str) else getattr(sc, "name", type(sc).__name__)
    dt = float(sc.model.opt.timestep)
    x0 = jnp.asarray(initial_states(sc, batch, 0, 0.1))
    damp = jnp.asarray(np.tile(np.asarray(sc.model.dof_damping, np.float64) + 0.1, (batch, 1)))
    kw = dict(dt=dt, steps=steps, record_every=record_every, chunk=chunk)

    def forward(x, p):
        return simulate(sc, integ, x, model_params={"dof_damping": p}, **kw)[1]

    def loss(x, p):
        return jnp.mean(forward(x, p) ** 2)

    progs = {"forward": jax.jit(forward), "grad": jax.jit(jax.grad(loss, argnums=(0, 1)))}
    rows = {}
    for key, fn in progs.items():
        if log:
            log(f"grad bench: compiling {key} ({name}, {type(integ).__name__}, batch {batch}, {steps} steps) ...")
        compiled, compile_s, cache = compile_timed(fn, x0, damp)
        jax.block_until_ready(compiled(x0, damp))  # warm-up
        rows[key] = {"compiled": compiled, "compile_s": compile_s, "compile_cache": cache, "times": [],
                     "xla_peak_bytes": xla_peak(compiled)}
    t_end = time.perf_counter() + min_time
    while min(len(r["times"]) for r in rows.values()) < repeats or time.perf_counter() < t_end:
        for r in rows.values():  # interleaved: load on the machine hits both alike
            t = time.perf_counter()
            jax.block_until_ready(r["compiled"](x0, damp))
            r["times"].append(time.perf_counter() - t)
    out: dict[str, Any] = {"scene": name, "integrator": type(integ).__name__, "batch": batch, "steps": steps,
           "record_every": record_every, "chunk": default_chunk(steps, record_every) if chunk is None else chunk,
           "backend": jax.default_backend(), "device_peak_bytes": device_peak()}
    for key, r in rows.items():
        r.pop("compiled")
        r["run_s"] = float(np.median(r["times"]))
        out[key] = r
    f, g = out["forward"], out["grad"]
    out["time_x"] = g["run_s"] / f["run_s"]
    out["memory_x"] = (g["xla_peak_bytes"] / f["xla_peak_bytes"]
                       if g["xla_peak_bytes"] and f["xla_peak_bytes"] else None)
    out["within_bar"] = bool(out["time_x"] <= GRAD_BAR["time_x"]
                             and (out["memory_x"] is None or out["memory_x"] <= GRAD_BAR["memory_x"]))
    return out


def format_grad(rep: dict) -> str:
    """The grad figure as text lines."""
    mem = "-" if rep["memory_x"] is None else f"{rep['memory_x']:.2f}x"
    lines = [f"gradient cost: {rep['scene']} {rep['integrator']} batch {rep['batch']}, {rep['steps']} steps "
             f"(record_every {rep['record_every']}, checkpoint chunk {rep['chunk']}, {rep['backend']})",
             f"  {'':8s} {'run s':>9s} {'compile s':>10s} {'peak (XLA)':>12s}"]
    for key in ("forward", "grad"):
        r = rep[key]
        lines.append(f"  {key:8s} {r['run_s']:9.4f} {r['compile_s']:10.1f} {format_bytes(r['xla_peak_bytes']):>12s}")
    lines.append(f"  grad / forward: time {rep['time_x']:.2f}x (bar {GRAD_BAR['time_x']:g}x), peak memory {mem} "
                 f"(bar {GRAD_BAR['memory_x']:g}x): {'within' if rep['within_bar'] else 'OUTSIDE'} the bar")
    return "\n".join(lines)
