"""The bench machinery on a tiny scene (functional, not timed): fields, ratios, agreement of the peers.

No assertion here is about speed: the figures of a 2-world, 20-step run on a shared machine mean
nothing. What is checked: every peer ran and did the same work (final states equal MuJoCo C's
``mujoco.rollout`` from the same initial states), the ratios and targets follow from the recorded
throughputs, and the CLI writes a JSON report with machine, versions and every figure.
"""

from __future__ import annotations

import json
import math

import mujoco
import numpy as np
import pytest

from mjharness.rollout import bench
from mjharness.rollout.cli import main as cli_main
from mjharness.scenes import load_scene

PEERS = ("mjx_step", "semi_implicit_euler", "mujoco_rollout", "rollout", "rollout_h5")
B, STEPS, EVERY = 2, 20, 5


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    return bench.bench_cell("bench_pendulum", batch=B, steps=STEPS, peers=PEERS, record_every=EVERY, repeats=1,
                            min_time=0.0, perturb=0.3, tmpdir=str(tmp_path_factory.mktemp("bench")))


def test_cell_fields_and_throughput(cell):
    assert [r["peer"] for r in cell["results"]] == list(PEERS)
    assert (cell["batch"], cell["steps"], cell["record_every"]) == (B, STEPS, EVERY)
    assert cell["dt"] == load_scene("bench_pendulum").opt.timestep
    for r in cell["results"]:
        assert r["calls"] == len(r["call_s"]) >= 1
        assert r["timed_s"] == pytest.approx(sum(r["call_s"]), rel=1e-5, abs=1e-5)
        assert r["steps_per_call"] == STEPS  # min_time=0: engine calls are not lengthened
        assert r["world_steps_per_s"] == pytest.approx(B * STEPS * r["calls"] / r["timed_s"], rel=1e-12)
        assert r["compile_s"] >= 0 and r["rss_peak"] > 0 and r["finite"]
    by = {r["peer"]: r for r in cell["results"]}
    # XLA's plan holds at least the donated state: (B, nq + nv) doubles for ours.
    assert by["semi_implicit_euler"]["peak_bytes"] >= B * 2 * 8
    assert by["mujoco_rollout"]["nthread"] >= 1
    assert by["rollout_h5"]["file_bytes"] > 0 and by["rollout"]["file_bytes"] == 0
    # The h5 peer runs the function the plain engine peer compiled: its compile is a reuse, not a figure.
    assert (by["rollout_h5"]["compile_cache"], by["rollout_h5"]["compile_s"]) == ("in-process", 0.0)


def test_ratios_follow_from_throughput(cell):
    by = {r["peer"]: r for r in cell["results"]}
    ref, nat = by["mjx_step"]["world_steps_per_s"], by["mujoco_rollout"]["world_steps_per_s"]
    for r in cell["results"]:
        assert r["x_mjx"] == pytest.approx(ref / r["world_steps_per_s"], rel=1e-12)
        assert r["x_native"] == pytest.approx(nat / r["world_steps_per_s"], rel=1e-12)
    assert by["mjx_step"]["x_mjx"] == 1.0 and by["mujoco_rollout"]["x_native"] == 1.0
    assert by["rollout_h5"]["x_rollout"] == pytest.approx(
        by["rollout"]["world_steps_per_s"] / by["rollout_h5"]["world_steps_per_s"], rel=1e-12)
    # Targets: only the ones this cell measures (batch 2 < 64: no SemiImplicitEuler target).
    t = bench.targets([cell])
    assert [x["target"] for x in t] == ["rollout_h5 / rollout wall"]
    assert t[0]["value"] == by["rollout_h5"]["x_rollout"] and t[0]["met"] == (t[0]["value"] <= 1.10)


def test_peers_do_the_same_work(cell):
    """Every Euler-scheme peer ends where MuJoCo C ends, and MuJoCo C is checked against mj_step here."""
    model = load_scene("bench_pendulum")
    from mjharness.adapters import MjScene
    from mjharness.rollout.engine import initial_states

    x0 = initial_states(MjScene(model), B, 0, 0.3)
    d = mujoco.MjData(model)
    want = []
    for x in x0:
        mujoco.mj_resetData(model, d)
        d.qpos[:], d.qvel[:] = x[:1], x[1:2]
        for _ in range(STEPS):
            mujoco.mj_step(model, d)
        want.append(d.qpos[0])
    moved = np.abs(np.array(want) - x0[:, 0])
    assert np.all(moved > 1e-4)  # the worlds really moved: agreement below is not trivial
    for r in cell["results"]:
        assert r["agrees_with"] == "mujoco_rollout"
        assert r["max_dqpos"] < 1e-10 and r["max_dqvel"] < 1e-9, r["peer"]
    # The native peer itself against plain mj_step (the independent reference).
    report = bench._native_states(MjScene(model), x0)
    assert report.shape == (B, mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    np.testing.assert_array_equal(report[:, 1], x0[:, 0])


def test_cli_json_and_table(tmp_path, capsys):
    out = tmp_path / "b.json"
    rc = cli_main(["bench", "bench_pendulum", "--peers", "mujoco_rollout", "--batch", "1", "3", "--steps", "10",
                   "--repeats", "2", "--min-time", "0", "--json", str(out), "--quiet"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "mujoco_rollout" in text and "world-steps/s" in text
    rep = json.loads(out.read_text())
    m = rep["machine"]
    for k in ("date", "cpu", "cpu_count", "load_average", "backend", "devices", "device_kind", "x64", "versions"):
        assert k in m, k
    assert m["versions"]["mujoco"] == mujoco.__version__
    assert [c["batch"] for c in rep["cells"]] == [1, 3]
    for c in rep["cells"]:
        (r,) = c["results"]
        assert r["calls"] >= 2 and r["x_native"] == 1.0 and r["x_mjx"] is None
        assert math.isfinite(r["world_steps_per_s"]) and r["world_steps_per_s"] > 0
    assert rep["errors"] == [] and rep["targets"] == []


def test_engine_steps_lengthen_short_calls():
    assert bench.engine_steps(0.3, 100, 1.0) == 400  # ceil(1.0 / 0.3) = 4 calls' worth
    assert bench.engine_steps(0.3, 100, 0.2) == 100
    assert bench.engine_steps(0.3, 100, 1e6) == 100 * 50  # capped
    assert bench.engine_steps(None, 100, 1.0) == 100


def test_bad_input_is_a_clear_error(capsys):
    with pytest.raises(bench.BenchError, match="unknown peer"):
        bench.bench_cell("bench_pendulum", batch=1, steps=10, peers=("mjx_steps",))
    with pytest.raises(bench.BenchError, match="multiple of record_every"):
        bench.bench_cell("bench_pendulum", batch=1, steps=15, peers=("rollout",), record_every=10)
    rc = cli_main(["bench", "bench_pendulum", "--batch", "0", "--quiet"])
    assert rc == 2 and "--batch 0" in capsys.readouterr().err


def test_peers_are_timed_interleaved_and_chained():
    order = []

    def peer(name):
        def call(state):
            order.append(name)
            return state + 1  # chained: each call starts where the last ended
        return bench._Peer(name, call, 0, 0.0, (), lambda times, state: None)

    a, b = peer("a"), peer("b")
    times = bench._time_interleaved([a, b], repeats=3, min_time=0.0)
    assert order == ["a", "b"] * 3
    assert [len(times["a"]), len(times["b"])] == [3, 3] and (a.state, b.state) == (3, 3)
