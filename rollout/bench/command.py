"""``mjharness bench`` from plain arguments: validated, measured, reported (the CLI prints and exits)."""

from __future__ import annotations

from typing import Any

from .cache import cache_check as _cache_check
from .peers import DEFAULT_PEERS, check_counts, check_peers
from .plan import DEFAULT_SCENES, FULL_PLAN, plan_cells, run_bench
from .report import write_json

__all__ = ["bench_report", "grad_report"]


def bench_report(*, scenes=(), batches=(64,), steps: int = 1000, peers=DEFAULT_PEERS, repeats: int = 2,
                 min_time: float = 1.0, record_every: int = 10, nthread: int | None = None, full: bool = False,
                 cache_check: bool = False, json_path: str | None = None, log=None) -> dict:
    """What ``mjharness bench`` measures: the report of ``run_bench`` (+ ``cache_check`` per scene).

    ``scenes`` (default ``DEFAULT_SCENES``) x ``batches`` at ``steps`` per call with ``peers``, or
    ``FULL_PLAN`` when ``full``. Bad arguments raise ``BenchError`` before anything runs. With
    ``json_path`` the report is written after every cell and at the end. The caller prints
    ``format_table(report)``; a report with ``errors`` is a failed bench (exit status 1).
    """
    for b in batches:
        check_counts(batch=b)
    check_counts(steps=steps, repeats=repeats, record_every=record_every)
    if not full:
        check_peers(peers)
    scenes = list(scenes) or list(DEFAULT_SCENES)
    cells = list(FULL_PLAN) if full else plan_cells(scenes, batches, steps, peers)
    report = run_bench(cells, repeats=repeats, min_time=min_time, record_every=record_every, nthread=nthread,
                       log=log, json_path=json_path)
    if cache_check:
        if log:
            log("compile cache check: two fresh processes ...")
        report["cache_check"] = [_cache_check(s) for s in scenes]
    if json_path:
        write_json(report, json_path)
    return report


def grad_report(*, scenes=(), batches=(64,), steps: int = 1000, record_every: int = 10, repeats: int = 2,
                min_time: float = 1.0, json_path: str | None = None, log=None) -> dict:
    """``mjharness bench --grad``: ``grad.grad_cost`` per scene (default double_pendulum) x batch, RK4.

    A report with ``grad`` rows (gradient vs forward time and peak memory) and ``errors`` (cells that failed).
    """
    from .grad import grad_cost
    from .report import machine_info

    for b in batches:
        check_counts(batch=b)
    check_counts(steps=steps, repeats=repeats, record_every=record_every)
    report: dict[str, Any] = {"machine": machine_info(), "grad": [], "errors": []}
    for scene in list(scenes) or ["double_pendulum"]:
        for b in batches:
            try:
                report["grad"].append(grad_cost(scene, "rk4", batch=b, steps=steps, record_every=record_every,
                                                repeats=repeats, min_time=min_time, log=log))
            except Exception as e:  # one failed cell does not lose the others
                report["errors"].append({"scene": str(scene), "batch": b, "error": f"{type(e).__name__}: {e}"})
    if json_path:
        write_json(report, json_path)
    return report
