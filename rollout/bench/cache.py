"""The persistent compile cache, measured: the same rollout in two fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .report import load_average

__all__ = ["cache_check"]

# One rollout() in a fresh process, as a user's script starts: import, load, run; the figures as JSON.
_PROBE = """
import json, sys, time
t = time.perf_counter()
from mjharness.rollout import rollout
from mjharness.adapters import MjScene
from mjharness.scenes import load_scene
scene = MjScene(load_scene(sys.argv[1]), backend="mjx")  # the export cache serves the MJX path
t_ready = time.perf_counter()
r = rollout(scene, sys.argv[2] or None, steps=int(sys.argv[3]), batch=int(sys.argv[4]), record_every=int(sys.argv[3]),
            progress=False)
import hashlib, jax
print(json.dumps(dict(integrator=getattr(r.integrator, "name", type(r.integrator).__name__),
                      compile_s=r.stats["compile_s"], trace_s=r.stats["trace_s"],
                      trace_cache=r.stats["trace_cache"],
                      run_s=r.stats["run_s"], import_and_load_s=t_ready - t, to_first_result_s=time.perf_counter() - t,
                      cache_dir=jax.config.jax_compilation_cache_dir,
                      x_sha256=hashlib.sha256(r.x.tobytes()).hexdigest())))
"""


def cache_check(scene: str = "bench_pendulum", *, integrator: str | None = None, steps: int = 100,
                batch: int = 8, timeout: float = 900.0) -> dict:
    """Run the same rollout in two fresh processes sharing an empty temporary compile cache.

    ``integrator``: a registry name; None, the scene's own (``rollout(scene, None)``) at its timestep.

    The target: the second process starts its rollout (trace + lower + compile, i.e. the engine's
    ``compile_s``) in at most 30 % of the first's. The second process should take the traced chunk
    function from the disk (``trace_cache == "exported"``, the engine's disk cache) and the executable
    from JAX's persistent cache; ``same_result`` says its trajectory equals the first's bitwise.
    """
    with tempfile.TemporaryDirectory(prefix="mjharness-cache-") as cache:
        env = dict(os.environ, MJHARNESS_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", _PROBE, scene, integrator or "", str(steps), str(batch)], env=env,
                               capture_output=True, text=True, timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"cache probe failed (exit {p.returncode}): {p.stderr[-2000:]}")
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        entries = sum(len(fs) for _, _, fs in os.walk(cache))
    first, second = runs
    ratio = second["compile_s"] / first["compile_s"]
    return dict(scene=scene, integrator=first["integrator"], steps=steps, batch=batch, first=first, second=second,
                first_compile_s=first["compile_s"], second_compile_s=second["compile_s"], ratio=ratio,
                met=ratio <= 0.30, cache_entries=entries, second_trace_cache=second["trace_cache"],
                same_result=first["x_sha256"] == second["x_sha256"], load_average=load_average())
