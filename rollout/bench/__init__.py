"""``mjharness bench``: our integrators side by side with the peers a user would pick instead.

    mjharness bench [SCENE ...] --batch 1 64 1024 --steps 1000 [--json out.json]
    mjharness bench --cache-check [SCENE]       # second process vs first: persistent compile cache
    mjharness bench --full --json bench.json    # FULL_PLAN: the README's measurement

One process, one scene, one batch, one dtype per *cell*; in it every *peer* (``peers``: raw MJX,
MuJoCo C, and our integrators and engine through ``rollout()``, the entry point users call) is
compiled and warmed up, then timed interleaved with the others (``timing``); ``cell`` derives the
ratios and checks that the peers stepping the scene's own scheme did the same work; ``plan`` holds
the plans and runs them; ``report`` the targets, the table and the JSON; ``cache`` the two-process
check of the persistent compile cache; ``command`` the plain-argument entry of the CLI command
(``mjharness.rollout.cli.bench`` holds its argparse).

Compile time is reported apart, with ``compile_cache`` saying what answered it (``hit``: JAX's
persistent cache, the figure is a cache load; ``miss``: a real compile; ``in-process``: the engine
reused this process's compiled function). Peak memory is XLA's own account of a raw peer's compiled
function (arguments + outputs + temporaries - donated aliases); ``rss_peak`` is the process's peak
resident set.
"""

from .cache import cache_check
from .cell import bench_cell, engine_steps
from .command import bench_report
from .peers import DEFAULT_PEERS, ENGINE_PEERS, RAW_PEERS, BenchError, peer_names, scene_scheme
from .plan import DEFAULT_SCENES, FULL_PLAN, plan_cells, run_bench
from .report import TARGETS, format_table, machine_info, targets, write_json

__all__ = ["DEFAULT_PEERS", "RAW_PEERS", "ENGINE_PEERS", "DEFAULT_SCENES", "FULL_PLAN", "TARGETS",
           "BenchError", "peer_names", "scene_scheme", "bench_cell", "engine_steps", "plan_cells", "run_bench",
           "bench_report", "targets", "format_table", "write_json", "machine_info", "cache_check"]
