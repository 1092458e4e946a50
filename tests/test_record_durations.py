"""scripts/record_test_durations.py reads pytest's JUnit report into per-file and slowest-test figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    path = ROOT / "scripts" / "record_test_durations.py"
    spec = importlib.util.spec_from_file_location("record_test_durations", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_pytest(rec, monkeypatch) -> list:
    """Replace the script's pytest run by one writing a one-test JUnit report; returns the list of the
    environments it was called with."""
    seen = []

    def call(cmd, cwd, env):
        seen.append(env)
        junit = next(a for a in cmd if a.startswith("--junitxml="))[len("--junitxml="):]
        Path(junit).write_text('<testsuites><testsuite name="p"><testcase classname="tests.test_a" name="t" '
                               'time="1"/></testsuite></testsuites>')
        return 0

    monkeypatch.setattr(rec.subprocess, "call", call)
    return seen


def test_junit_report_becomes_per_file_totals_and_the_slowest_tests(tmp_path):
    rec = _script()
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_a" name="test_one" time="2.5"/>'
                     '<testcase classname="tests.test_a" name="test_two" time="1.0"/>'
                     '<testcase classname="tests.test_b" name="test_x[p]" time="7.25"/>'
                     '</testsuite></testsuites>')
    cases = rec.durations(str(junit))
    assert cases == [("tests.test_a::test_one", 2.5), ("tests.test_a::test_two", 1.0),
                     ("tests.test_b::test_x[p]", 7.25)]
    s = rec.summary(cases, wall_s=12.34, load=(0.1, 0.2, 0.3), returncode=0)
    assert s["files"] == {"tests/test_b.py": 7.2, "tests/test_a.py": 3.5}  # rounded to 0.1 s, longest first
    assert s["slowest"][0] == ["tests.test_b::test_x[p]", 7.25] and s["tests"] == 3 and s["wall_s"] == 12.3


def test_cold_runs_pytest_on_an_empty_cache_and_says_so(tmp_path, monkeypatch):
    rec = _script()
    seen = _fake_pytest(rec, monkeypatch)
    out = tmp_path / "d.json"
    assert rec.main(["--cold", "--out", str(out)]) == 0
    cache = seen[0]["MJHARNESS_CACHE_DIR"]
    assert not Path(cache).exists() and "cold" in __import__("json").loads(out.read_text())["cache"]
    assert rec.main(["--out", str(out)]) == 0 and seen[1] is None  # warm: the environment as it is


def test_jax_events_are_summed_per_file_and_the_run_gets_the_folder(tmp_path, monkeypatch):
    import json

    rec = _script()
    folder = tmp_path / "ev"
    folder.mkdir()
    rows = [{"test": "tests/test_a.py::t1", "trace": 1.0, "lower": 0.5, "compile": 2.0, "cache_misses": 1},
            {"test": "tests/test_a.py::t2", "trace": 0.25, "lower": 0.0, "compile": 0.0, "cache_misses": 0},
            {"test": "tests/test_b.py::t", "trace": 9.0, "lower": 1.0, "compile": 0.0, "cache_misses": 0}]
    (folder / "gw0.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    (folder / "gw1.jsonl").write_text(json.dumps(rows[2]) + "\n")
    got = rec.jax_events(str(folder))
    assert list(got) == ["tests/test_b.py", "tests/test_a.py"]  # most JAX time first
    assert got["tests/test_a.py"] == dict(trace=1.2, lower=0.5, compile=2.0, cache_misses=1, tests=2)
    assert rec.jax_events(str(tmp_path / "none")) == {}
    seen = _fake_pytest(rec, monkeypatch)
    out = tmp_path / "d.json"
    assert rec.main(["--jax-events", "--out", str(out)]) == 0
    assert seen[0]["MJHARNESS_JAX_EVENTS"] and json.loads(out.read_text())["jax_events"] == {}
