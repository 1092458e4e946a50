"""Bench plans: which (scene, batch, steps per call, peers) cells to measure, and running them."""

from __future__ import annotations

from typing import Any

from .cell import bench_cell
from .peers import DEFAULT_PEERS, BenchError
from .report import load_average, machine_info, targets, write_json

__all__ = ["DEFAULT_SCENES", "SCALING", "FULL_PLAN", "plan_cells", "run_bench"]

# Scene size from 1 to 27 dof: a pendulum, a 12-hinge chain (deep body tree, no contact), a humanoid
# with contacts. (The chain needs scenes/settings.XLA_CPU_FLAG: XLA:CPU's newer fusion emitters
# make MJX kinematics exponential in tree depth, 10-25 s per step of one 12-hinge world.)
DEFAULT_SCENES = ("bench_pendulum", "bench_chain12", "humanoid")

# The measurement of the README: every peer where the targets are checked (batch 64), the scaling
# with batch on the cheap peers (raw MJX, ours, MuJoCo C), scene size from pendulum to humanoid.
# Each (scene, batch) compiles its own functions, so the plan keeps compiles few; steps per call are
# sized for about a second per timed call on a 2-core CPU (min_time repeats calls when shorter).
SCALING = ("mjx_step", "semi_implicit_euler", "mujoco_rollout")
FULL_PLAN = (
    ("bench_pendulum", 64, 1000, DEFAULT_PEERS),
    ("bench_pendulum", 1, 1000, SCALING),
    ("bench_pendulum", 1024, 1000, SCALING),
    ("bench_pendulum", 8192, 200, SCALING),
    ("bench_chain12", 64, 500, DEFAULT_PEERS),
    ("bench_chain12", 1, 1000, SCALING),
    ("bench_chain12", 1024, 50, SCALING),
    ("humanoid", 64, 200, DEFAULT_PEERS),
    ("humanoid", 1024, 20, SCALING),
    ("humanoid", 1, 200, SCALING),
    ("humanoid", 8192, 5, SCALING),
)


def plan_cells(scenes=DEFAULT_SCENES, batches=(64,), steps=1000, peers=DEFAULT_PEERS) -> list[tuple]:
    """(scene, batch, steps, peers) for every scene x batch."""
    return [(s, b, steps, tuple(peers)) for s in scenes for b in batches]


def run_bench(cells, *, log=None, json_path: str | None = None, **kw) -> dict:
    """The bench report: machine info, one entry per (scene, batch, steps, peers) cell, the targets.

    ``kw`` goes to ``bench_cell``. A cell that fails (out of memory, say) records its error and the
    rest go on. With ``json_path`` the report is rewritten after every cell, so a killed run keeps
    what it measured.
    """
    from mjharness.rollout.engine import resolve_scene

    say = log or (lambda s: None)
    report: dict[str, Any] = dict(machine=machine_info(), cells=[], errors=[], targets=[])
    scenes = {}
    for s, b, n, peers in cells:
        if s not in scenes:  # one MjScene per scene: the engine's compile cache is per scene object
            scenes[s] = resolve_scene(s, backend="mjx")
        say(f"{s}, batch {b}, {n} steps/call, peers {' '.join(peers)} (load {load_average()})")
        try:
            report["cells"].append(bench_cell(scenes[s], batch=b, steps=n, peers=peers, log=log, **kw))
        except BenchError:
            raise
        except Exception as e:  # noqa: BLE001 - one failed cell must not lose the others
            report["errors"].append(dict(scene=s, batch=b, error=f"{type(e).__name__}: {e}"))
            say(f"  failed: {type(e).__name__}: {e}")
        report["targets"] = targets(report["cells"])
        report["load_average_end"] = load_average()
        if json_path:
            write_json(report, json_path)
    return report
