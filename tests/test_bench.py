"""The bench machinery on a tiny scene (functional, not timed): fields, ratios, agreement of the peers.

No assertion here is about speed: the figures of a 2-world, 20-step run on a shared machine mean
nothing. What is checked: every peer ran and did the same work (final states equal MuJoCo C's
``mujoco.rollout`` from the same initial states), our integrators ran through ``rollout()`` (the
entry point users call) and are timed by its ``run_s``, the ratios and targets follow from the
recorded throughputs, and the CLI writes a JSON report with machine, versions and every figure.
"""

from __future__ import annotations

import json
import math

import mujoco
import numpy as np
import pytest

import mjharness.rollout as mjrollout
from mjharness.integrators import INTEGRATORS
from mjharness.rollout import bench, initial_states
from mjharness.rollout.bench.peers import native_states
from mjharness.rollout.bench.timing import Peer, time_interleaved
from mjharness.rollout.cli import main as cli_main
from mjharness.scenes import load_scene

PEERS = ("mjx_step", "semi_implicit_euler", "mujoco_rollout", "rollout", "rollout_h5", "rollout_h5_nocheck",
         "rollout_h5_nohash")
B, STEPS, EVERY = 2, 20, 5


@pytest.fixture(scope="module")
def scene(scene_cache):
    return scene_cache("bench_pendulum")


@pytest.fixture(scope="module")
def cell(scene, tmp_path_factory):
    return bench.bench_cell(scene, batch=B, steps=STEPS, peers=PEERS, record_every=EVERY, repeats=1, min_time=0.0,
                            perturb=0.3, tmpdir=str(tmp_path_factory.mktemp("bench")))


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
    # XLA's plan of raw MJX holds at least the donated state: (B, nq + nv) doubles.
    assert by["mjx_step"]["peak_bytes"] >= B * 2 * 8
    assert by["mujoco_rollout"]["nthread"] >= 1
    assert by["rollout_h5"]["file_bytes"] > 0 and by["rollout"]["file_bytes"] == 0
    # The h5 peer runs the function the plain engine peer compiled: its compile is a reuse, not a figure (or, on
    # MuJoCo C stepping its own scheme, nothing is compiled: "host", issue 30).
    assert (by["rollout_h5"]["compile_cache"], by["rollout_h5"]["compile_s"]) in (("in-process", 0.0), ("host", 0.0))
    # The engine peers run the scene's own integrator (the pendulum says Euler): the integrator peer's.
    for p in ("rollout", "rollout_h5"):
        assert by[p]["integrator"] == by["semi_implicit_euler"]["integrator"]
    assert by["semi_implicit_euler"]["integrator"]["name"] == "semi_implicit_euler"


def test_ratios_follow_from_throughput(cell):
    by = {r["peer"]: r for r in cell["results"]}
    ref, nat = by["mjx_step"]["world_steps_per_s"], by["mujoco_rollout"]["world_steps_per_s"]
    for r in cell["results"]:
        assert r["x_mjx"] == pytest.approx(ref / r["world_steps_per_s"], rel=1e-12)
        assert r["x_native"] == pytest.approx(nat / r["world_steps_per_s"], rel=1e-12)
    assert by["mjx_step"]["x_mjx"] == 1.0 and by["mujoco_rollout"]["x_native"] == 1.0
    assert by["rollout_h5"]["x_rollout"] == pytest.approx(
        by["rollout"]["world_steps_per_s"] / by["rollout_h5"]["world_steps_per_s"], rel=1e-12)
    # Issue 28: the chunk checksums' cost, the checksummed file against the same run without them.
    assert by["rollout_h5"]["checksum_cost"] == pytest.approx(
        by["rollout_h5_nocheck"]["world_steps_per_s"] / by["rollout_h5"]["world_steps_per_s"] - 1.0, rel=1e-12)
    assert by["rollout_h5_nocheck"]["file_bytes"] > 0
    # Issue 39: the content hashes' cost alone (the same file with checksums, without hashes).
    assert by["rollout_h5"]["hash_cost"] == pytest.approx(
        by["rollout_h5_nohash"]["world_steps_per_s"] / by["rollout_h5"]["world_steps_per_s"] - 1.0, rel=1e-12)
    # Targets: only the ones this cell measures (batch 2 < 64: no SemiImplicitEuler target).
    t = bench.targets([cell])
    assert [x["target"] for x in t] == ["rollout_h5 / rollout wall", "rollout_h5 / rollout_h5_nocheck wall",
                                        "rollout_h5 / rollout_h5_nohash wall"]
    assert t[0]["value"] == by["rollout_h5"]["x_rollout"] and t[0]["met"] == (t[0]["value"] <= 1.10)
    assert t[0]["note"] == f"HDF5 export at record_every={EVERY}"
    assert t[1]["value"] == pytest.approx(1.0 + by["rollout_h5"]["checksum_cost"], rel=1e-12)


def test_files_have_chunk_checksums_unless_the_bench_measures_without(tmp_path):
    import h5py

    from mjharness.rollout import rollout
    from mjharness.rollout.h5.format import without_checksums

    rollout("bench_pendulum", steps=4, batch=1, out=tmp_path / "a.h5", progress=False)
    with without_checksums():
        rollout("bench_pendulum", steps=4, batch=1, out=tmp_path / "b.h5", progress=False)
    rollout("bench_pendulum", steps=4, batch=1, out=tmp_path / "c.h5", progress=False)  # back on after the block
    for name, want in (("a.h5", True), ("b.h5", False), ("c.h5", True)):
        with h5py.File(tmp_path / name, "r") as f:
            assert f["x"].fletcher32 is want, name


def test_peers_do_the_same_work(cell, scene):
    """Every peer of the scene's own scheme ends where MuJoCo C ends, and MuJoCo C is checked against
    mj_step here."""
    model = load_scene("bench_pendulum")
    x0 = initial_states(scene, B, 0, 0.3)
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
    assert bench.scene_scheme(scene) == "semi_implicit_euler"
    for r in cell["results"]:
        assert r["agrees_with"] == "mujoco_rollout"
        assert r["max_dqpos"] < 1e-10 and r["max_dqvel"] < 1e-9, r["peer"]
    # The native peer's initial states: the rows of x0 (the independent reference is mj_step above).
    states = native_states(scene, x0)
    assert states.shape == (B, mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    np.testing.assert_array_equal(states[:, 1], x0[:, 0])


def test_integrator_peers_run_through_rollout(cell, scene, monkeypatch):
    """An integrator peer's call is one rollout() of the cell's steps, chained (each call starts where
    the last ended, time included), and its timed seconds are that call's ``stats["run_s"]``. Same scene
    object and shapes as the module's cell: the engine reuses its compiled function (no new compile)."""
    calls = []

    def spy(*args, **kw):
        r = rollout(*args, **kw)
        calls.append((kw, r))
        return r

    rollout = mjrollout.rollout
    monkeypatch.setattr(mjrollout, "rollout", spy)
    c = bench.bench_cell(scene, batch=B, steps=STEPS, peers=("semi_implicit_euler",), repeats=3, min_time=0.0,
                         perturb=0.3)
    (row,) = c["results"]
    assert len(calls) == 1 + row["calls"] == 4  # the warm-up, then the timed calls
    assert row["compile_cache"] in ("in-process", "host") and row["compile_s"] == 0.0  # host: whole chunks in C
    assert row["call_s"] == [round(r.stats["run_s"], 6) for _, r in calls[1:]]
    for (kw, r), (kw_next, _) in zip(calls, calls[1:]):
        assert (kw["steps"], kw["record_every"], kw["chunk"]) == (STEPS, STEPS, STEPS)
        assert kw["out"] is None and kw["progress"] is False
        np.testing.assert_array_equal(kw_next["x0"], r.x[-1])
        assert kw_next["t0"] == pytest.approx(kw["t0"] + STEPS * c["dt"], rel=1e-12)
    np.testing.assert_array_equal(calls[0][0]["x0"], initial_states(scene, B, 0, 0.3))


def test_peer_names_come_from_the_registry():
    names = bench.peer_names()
    assert set(INTEGRATORS) <= set(names) and len(set(names)) == len(names)
    assert names[:len(bench.RAW_PEERS + bench.ENGINE_PEERS)] == bench.RAW_PEERS + bench.ENGINE_PEERS
    assert set(bench.DEFAULT_PEERS) <= set(names)


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
    assert m["mujoco_timers"] is False and "mujoco timers off" in text  # configure() ran: every peer without them
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
    with pytest.raises(bench.BenchError, match="unknown peer.*'rk5'"):
        bench.bench_report(scenes=["bench_pendulum"], peers=("rk5",))
    rc = cli_main(["bench", "bench_pendulum", "--batch", "0", "--quiet"])
    assert rc == 2 and "batch must be an int >= 1, got 0" in capsys.readouterr().err


def test_peers_are_timed_interleaved_and_chained():
    order = []

    def peer(name):
        def call(state):
            order.append(name)
            return state + 1, 0.5  # chained: each call starts where the last ended
        return Peer(name, call, 0, 0.0, (), lambda times, state: None)

    a, b = peer("a"), peer("b")
    times = time_interleaved([a, b], repeats=3, min_time=0.0)
    assert order == ["a", "b"] * 3
    assert times == {"a": [0.5] * 3, "b": [0.5] * 3} and (a.state, b.state) == (3, 3)


def test_backend_peer_runs_mujoco_c_stages_and_agrees_with_mujoco_rollout(scene):
    """The backend peer: the same scene rebuilt with backend='mujoco', stepped by the scene's own scheme
    through rollout(); it does the work mujoco.rollout does (same final states) and says what it ran."""
    assert "backend_mujoco" in bench.peer_names() and "backend_warp" in bench.peer_names()
    c = bench.bench_cell(scene, batch=B, steps=STEPS, peers=("mujoco_rollout", "backend_mujoco"), repeats=1,
                         min_time=0.0, perturb=0.3, nthread=2)
    by = {r["peer"]: r for r in c["results"]}
    row = by["backend_mujoco"]
    assert (row["backend"], row["scheme"], row["threads"]) == ("mujoco", "semi_implicit_euler", 2)
    assert row["agrees_with"] == "mujoco_rollout"
    assert row["max_dqpos"] < 1e-12 and row["max_dqvel"] < 1e-12
    assert row["world_steps_per_s"] > 0 and row["x_native"] == pytest.approx(
        by["mujoco_rollout"]["world_steps_per_s"] / row["world_steps_per_s"], rel=1e-12)
