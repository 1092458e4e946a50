"""The Python API is as quiet as the CLI (issue 29, item 6): importing ``mjharness.rollout`` installs the filter
of XLA's known-false log lines (``scenes/xla_log.py``), so a rollout whose executables come from the persistent
cache writes no XLA line to stderr, while a real XLA error line still shows. The rollout runs on MJX, whose
compile is long enough for JAX's persistent cache (MuJoCo C's chunk compiles too fast to be cached).

The false lines are real on this kind of machine: on AVX-512 hosts every cached executable's load logs
``E... cpu_aot_loader.cc ... SIGILL``, and on any host ``W... pjrt_executable.cc ... Assume version
compatibility``; the unfiltered run (``MJHARNESS_XLA_LOG=all``) shows they are there to be filtered. The real
error is written from C level (``os.write`` on file descriptor 2, where XLA's absl logging writes)."""

import os
import re
import subprocess
import sys

import pytest

# A line as absl/TSL logging prints it: severity, date, time, thread, file:line.
XLA_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\]", re.M)
REAL_ERROR = "E1204 12:00:44.000001    9546 pjrt_stream_executor_client.cc:3045] Execution failed: INTERNAL: boom"

PROBE = f"""
import os, sys
from mjharness.adapters import MjScene
from mjharness.rollout import rollout
r = rollout(MjScene("bench_pendulum", backend="mjx"), steps=4, batch=2, progress=False)
assert r.ok.all()
print("python says hello", file=sys.stderr)
if len(sys.argv) > 1:
    os.write(2, b"{REAL_ERROR}\\n")
"""


def _run(cache, *args, **env):
    p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, MJHARNESS_CACHE_DIR=str(cache), **env))
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr


def _avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512" in f.read()
    except OSError:
        return False


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A compile cache filled by one cold run, so the runs below load their executables from it."""
    path = tmp_path_factory.mktemp("jaxcache")
    _run(path)
    return path


def test_cached_rollout_writes_no_xla_line(cache):
    for _ in range(2):
        err = _run(cache)
        assert not XLA_LINE.findall(err), err[-3000:]
        assert "python says hello" in err


def test_unfiltered_run_shows_the_false_lines(cache):
    err = _run(cache, MJHARNESS_XLA_LOG="all")
    assert "pjrt_executable.cc" in err and "Assume version compatibility" in err, err[-3000:]
    if _avx512():
        assert "cpu_aot_loader.cc" in err and "SIGILL" in err, err[-3000:]


def test_real_xla_error_still_shows(cache):
    err = _run(cache, "--with-error")
    assert XLA_LINE.findall(err) == [REAL_ERROR[:REAL_ERROR.index("]") + 1]], err[-3000:]
    assert "python says hello" in err
