"""The ``mjharness`` CLI: the README command (no arguments), SIGKILL mid-run + --resume, show, inspect,
bad input, and the subcommand registry.

One cold compile: ``mjharness run`` with no arguments (bundled default scene). The killed run and its
resume use configuration A of the rollout tests (double pendulum), compared with it in this process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import mujoco
import numpy as np
import pytest
from rollout_common import INTEG, A, cached_scene

from mjharness.rollout import cli, open_rollout, rollout
from mjharness.scenes import scene_path


def _cmd():
    exe = shutil.which("mjharness")
    return [exe] if exe else [sys.executable, "-m", "mjharness.rollout.cli"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`mjharness run` with no arguments in a fresh directory (the README's first command)."""
    d = tmp_path_factory.mktemp("cli")
    p = subprocess.run(_cmd() + ["run"], cwd=d, capture_output=True, text=True, timeout=900)
    return d, p


def test_run_without_arguments_works(default_run):
    d, p = default_run
    assert p.returncode == 0, p.stderr[-3000:]
    path = d / cli.DEFAULT_OUT
    assert cli.DEFAULT_OUT in os.listdir(d)
    with open_rollout(path) as f:
        a = f.attrs
        assert f.complete and f.samples == 100 and f.x.shape == (100, 16, 13)
        assert a["scene"] == f"bundled scene {cli.DEFAULT_SCENE!r}" and a["integrator"]["name"] == "rk4"
        assert (a["steps"], a["batch"], a["record_every"], a["seed"]) == (1000, 16, 10, 0)
        assert a["dt"] == mujoco.MjModel.from_xml_string(f.mjcf).opt.timestep
        assert np.all(f.status == 0) and np.all(np.isfinite(f.x))
        # boxes dropped from a perturbed height settle on the plane: z near the half size 0.1
        assert np.all(np.abs(f.state("box/pos")[-1, :, 2] - 0.1) < 0.01)
    out = p.stdout
    assert "worlds: 16/16 ok, 0 failed" in out
    for word in ("compile", "steps/s", "world-steps/s", "KiB", str(path.name)):
        assert word in out, out
    assert "step" in p.stderr  # tqdm's bar (steps/s) goes to stderr


def _samples(path):
    try:
        with h5py.File(path, "r", locking=False) as f:
            return int(f.attrs["samples"])
    except (OSError, KeyError):  # not created yet, or caught mid-write: look again
        return -1


def test_sigkill_leaves_a_readable_partial_file_and_resume_completes_it(tmp_path):
    """Configuration A of the rollout tests, 6000 steps, through the CLI: killed, read, resumed."""
    steps = 6000
    path = tmp_path / "killed.h5"
    args = ["run", "double_pendulum", "--integrator", INTEG.name, "--dt", str(A["dt"]), "--batch", str(A["batch"]),
            "--chunk", str(A["chunk"]), "--record-every", str(A["record_every"]), "--seed", str(A["seed"]),
            "--steps", str(steps)]
    proc = subprocess.Popen(_cmd() + args + ["--out", str(path), "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 600
        while _samples(path) < 6 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    # the uninterrupted run, in this process (the compiled function of configuration A)
    full = rollout(cached_scene("double_pendulum"), INTEG, progress=False, **dict(A, steps=steps)).x
    with open_rollout(path) as f:
        assert not f.complete
        n = f.samples
        assert 6 <= n < steps // 10 and n % 6 == 0  # whole chunks of 60 steps / 10 per sample
        assert np.array_equal(f.x, full[:n])  # every flushed chunk, exactly
    r = subprocess.run(_cmd() + ["run", "--resume", str(path), "--no-progress"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "worlds: 8/8 ok" in r.stdout
    with open_rollout(path) as f:
        assert f.complete and f.samples == steps // 10
        assert np.array_equal(f.x, full)  # resumed == uninterrupted, bit for bit
        assert np.array_equal(f.qpos, full[..., :2])


def test_show_prints_layout_and_plots(default_run, tmp_path, capsys):
    d, _ = default_run
    png = tmp_path / "plot.png"
    assert cli.main(["show", str(d / cli.DEFAULT_OUT), "--plot", "box/pos", "qvel", "--world", "0", "3",
                     "--png", str(png)]) == 0
    out = capsys.readouterr().out
    for word in ("complete", "format_version", "mujoco_version", "model_sha256", "/x ", "virtual", "box/quat",
                 "quaternion", "16/16 ok"):
        assert word in out, out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert cli.main(["show", str(d / cli.DEFAULT_OUT), "--plot", "no/such", "--png", str(png)]) == 2
    assert "no state named 'no/such'" in capsys.readouterr().err


def test_inspect_prints_the_layout_and_totals(capsys):
    assert cli.main(["inspect", "brick"]) == 0
    out = capsys.readouterr().out
    m = mujoco.MjModel.from_xml_path(scene_path("brick"))
    assert f"nq={m.nq} nv={m.nv} nu={m.nu} na={m.na}" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  brick/")}
    assert rows["brick/pos"][1:] == ["euclidean", "0+3", "0+3", "brick"]
    assert rows["brick/quat"][1:] == ["quaternion", "3+4", "3+3", "brick"]
    assert rows["brick/vel"][1:] == ["euclidean", "7+3", "6+3", "brick"]
    assert rows["brick/angvel"][1:] == ["euclidean", "10+3", "9+3", "brick"]
    assert "MJX compatibility log" in out


@pytest.mark.parametrize("args, message", [
    (["--integrator", "no_such"], "unknown integrator 'no_such'"),
    (["--dt", "-0.001"], "--dt must be > 0"),
    (["--dt", "0"], "--dt must be > 0"),
    (["--steps", "0"], "steps must be an int >= 1"),
    (["--batch", "0"], "batch must be an int >= 1"),
    (["--out", "/nonexistent-dir/r.h5"], "does not exist"),
])
def test_run_refuses_bad_input_with_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("mjharness.rollout.engine._compiled", lambda *a, **k: pytest.fail("compiled"))
    argv = ["run", "double_pendulum", "--no-progress"] + args
    if "--out" not in args:
        argv += ["--out", "r.h5"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mjharness: error:") and message in last, err
    assert os.listdir(tmp_path) == []


def test_run_refuses_an_existing_out_without_overwrite(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("mjharness.rollout.engine._compiled", lambda *a, **k: pytest.fail("compiled"))
    out = tmp_path / "r.h5"
    out.write_bytes(b"precious")
    assert cli.main(["run", "double_pendulum", "--out", str(out), "--no-progress"]) == 2
    assert "exists; pass overwrite=True (CLI: --overwrite)" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    assert cli.main(["show", str(tmp_path / "missing.h5")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_default_out_is_numbered_when_taken(tmp_path):
    base = str(tmp_path / "rollout.h5")
    assert cli._next_free(base) == base
    open(base, "w").close()
    assert cli._next_free(base) == str(tmp_path / "rollout-1.h5")
    open(tmp_path / "rollout-1.h5", "w").close()
    assert cli._next_free(base) == str(tmp_path / "rollout-2.h5")


def test_subcommand_registry_survives_missing_and_broken_modules(tmp_path, monkeypatch, capsys):
    (tmp_path / "mjh_broken_sub.py").write_text("raise RuntimeError('half-written module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "SUBCOMMANDS", dict(cli.SUBCOMMANDS, gone="mjh_no_such_module_xyz",
                                                 broken="mjh_broken_sub"))
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert {"run", "show", "inspect", "broken"} <= set(choices) and "gone" not in choices
    assert cli.main(["broken", "anything"]) == 2
    assert "half-written module" in capsys.readouterr().err
    assert cli.main(["inspect", "double_pendulum"]) == 0  # the rest still works
