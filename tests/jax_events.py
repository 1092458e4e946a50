"""Per-test JAX trace/lower/compile seconds and persistent-cache misses (``conftest.py``; MJHARNESS_JAX_EVENTS)."""

from __future__ import annotations

import json
import logging
import os
import time

import jax.monitoring
import pytest

KINDS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
         "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
         "/jax/core/compile/backend_compile_duration": "compile"}  # the compile span includes cache reads
MISS = "/jax/compilation_cache/cache_misses"  # JAX records it when it writes a new entry


def union(intervals) -> float:
    """Seconds covered by the (start, end) ``intervals``."""
    total, last = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > last:
            total += e - max(s, last)
            last = e
    return total


class _Recorder:
    def __init__(self, out_dir: str):
        self.spans: list = []
        self.misses = 0
        self.path = os.path.join(out_dir, os.environ.get("PYTEST_XDIST_WORKER", "main"))

    def span(self, event, start, end, **kw):
        kind = KINDS.get(event)
        if kind:
            self.spans.append((kind, start, end, str(kw.get("fun_name", ""))))

    def event(self, event, **kw):
        self.misses += event == MISS

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.spans, self.misses = [], 0
        logging.getLogger("jax._src.compiler").debug("TEST %s", item.nodeid)
        t = time.time()
        yield
        row: dict = {"test": item.nodeid, "wall": round(time.time() - t, 3), "cache_misses": self.misses}
        for kind in ("trace", "lower", "compile"):
            row[kind] = round(union([(s, e) for k, s, e, _ in self.spans if k == kind]), 3)
        traced: dict = {}
        for k, s, e, name in self.spans:
            if k == "trace":
                traced[name] = traced.get(name, 0.0) + (e - s)
        row["traced"] = sorted(((round(v, 2), n) for n, v in traced.items()), reverse=True)[:5]
        with open(self.path + ".jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def plugin(out_dir: str, keylog: bool) -> _Recorder:
    """The pytest plugin recording into ``out_dir`` (JAX's listeners registered; ``keylog``: JAX's cache-key log)."""
    os.makedirs(out_dir, exist_ok=True)
    rec = _Recorder(out_dir)
    if keylog:
        handler = logging.FileHandler(rec.path + ".keys")
        for name in ("jax._src.cache_key", "jax._src.compiler", "jax._src.compilation_cache"):
            logging.getLogger(name).setLevel(logging.DEBUG)
            logging.getLogger(name).addHandler(handler)
    jax.monitoring.register_event_time_span_listener(rec.span)
    jax.monitoring.register_event_listener(rec.event)
    return rec
