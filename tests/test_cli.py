"""The ``mjharness`` CLI: the README command (no arguments) cold and cached and quiet, SIGKILL mid-run +
--resume, show, inspect, bad input, errors from MJX/XLA as one paragraph, and the XLA log filter.

Compiles: ``mjharness run`` with no arguments (bundled default scene) against a fresh compile cache,
then twice from that cache. The killed run and its resume use configuration A of the rollout tests
(double pendulum), compared with it in this process; the forced-failure runs reuse configuration A's
executable or fail while tracing, before any compile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import traceback

import jax
import mujoco
import numpy as np
import pytest
from rollout_common import INTEG, A, cached_scene, run_and_kill

from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.cli import build_parser, errors, main, xla_log
from mjharness.rollout.cli.common import DEFAULT_SCENE
from mjharness.rollout.cli.options import DEFAULT_OUT, next_free
from mjharness.scenes import scene_path

XLA_LOG_LINE = re.compile(r"^[EWIF]\d", re.M)  # absl/TSL prefix: severity letter + MMDD


def _cmd():
    exe = shutil.which("mjharness")
    return [exe] if exe else [sys.executable, "-m", "mjharness.rollout.cli"]


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """`mjharness run` with no arguments in fresh directories, sharing a fresh compile cache: the first
    run compiles (cold), the second loads everything from the cache, the third is the second with
    ``--debug`` (no log filter). On this CPU the default backend is MuJoCo C; the same three with
    ``--backend mjx`` load MJX executables from the cache (where XLA logs its false lines)."""
    cache = tmp_path_factory.mktemp("cache")
    env = dict(os.environ, MJHARNESS_CACHE_DIR=str(cache))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # XLA's default log level, as a user has it
    runs = []
    mjx = ["--backend", "mjx"]
    for argv in (["run"], ["run"], ["--debug", "run"], ["run", *mjx], ["run", *mjx], ["--debug", "run", *mjx]):
        d = tmp_path_factory.mktemp("cli")
        runs.append((d, subprocess.run(_cmd() + argv, cwd=d, env=env, capture_output=True, text=True, timeout=900)))
    return runs


def test_run_without_arguments_works(default_runs):
    d, p = default_runs[0]
    assert p.returncode == 0, p.stderr[-3000:]
    path = d / DEFAULT_OUT
    assert os.listdir(d) == [DEFAULT_OUT]
    with open_rollout(path) as f:
        a = f.attrs
        model = f.model()
        assert f.complete and f.samples == 100 and f.x.shape == (100, 16, 13)
        assert a["scene"] == f"bundled scene {DEFAULT_SCENE!r}"
        # no --integrator, no --dt: the scene's own (box_on_plane names none: MuJoCo's Euler) and its step
        assert a["integrator"]["name"] == cached_scene(DEFAULT_SCENE).default_integrator == "semi_implicit_euler"
        assert a["dt"] == model.opt.timestep == mujoco.MjModel.from_xml_path(scene_path(DEFAULT_SCENE)).opt.timestep
        assert (a["steps"], a["batch"], a["record_every"], a["seed"]) == (1000, 16, 10, 0)
        assert np.all(f.status == 0) and np.all(np.isfinite(f.x))
        # the default perturbation moves velocities only: every world starts at the model's resting qpos
        assert np.array_equal(f.x0[:, :model.nq], np.broadcast_to(model.qpos0, (16, model.nq)))
        assert np.ptp(f.x0[:, model.nq:model.nq + model.nv], axis=0).min() > 0  # velocities differ per world
        # the boxes settle on the plane: z near the half size 0.1
        assert np.all(np.abs(f.state("box/pos")[-1, :, 2] - 0.1) < 0.01)
    out = p.stdout
    assert "worlds: 16/16 ok, 0 failed" in out
    for word in ("compile", "steps/s", "world-steps/s", "KiB", str(path.name)):
        assert word in out, out
    assert "semi_implicit_euler (the scene's), dt=0.002 (the scene's)" in p.stderr
    assert "step" in p.stderr  # tqdm's bar (steps/s) goes to stderr


@pytest.mark.parametrize("backend, first", [("mujoco", 0), ("mjx", 3)])
def test_cold_and_cached_runs_print_only_our_lines(default_runs, backend, first):
    (d1, cold), (d2, cached), (_, unfiltered) = default_runs[first:first + 3]
    for p in (cold, cached, unfiltered):
        assert p.returncode == 0, p.stderr[-3000:]
        assert f"backend {backend} (" in p.stderr  # the header names the backend and why
    with open_rollout(d1 / DEFAULT_OUT) as f1, open_rollout(d2 / DEFAULT_OUT) as f2:
        assert np.array_equal(f1.x, f2.x)  # the cached executable computes the same run
        assert f1.attrs["backend"] == f2.attrs["backend"] == backend
    for p in (cold, cached):
        text = p.stdout + p.stderr
        assert not XLA_LOG_LINE.search(text), text[-3000:]
        assert "Failed to import" not in text, text[-3000:]
    if backend == "mjx":  # without the filter a cached MJX load shows what was dropped: XLA's loaded-executable line
        assert "pjrt_executable.cc" in unfiltered.stderr and XLA_LOG_LINE.search(unfiltered.stderr)


# -- the XLA log filter -------------------------------------------------------------------------------------

_FEATURES = "+64bit,+avx512f,+prefer-no-gather,+prefer-no-scatter,+sse4.2"
_HOST = "64bit,avx512f,sse4.2"


def _aot_line(feature: str) -> bytes:
    # The text of xla/service/cpu/cpu_aot_loader.cc's LOG(ERROR), as jaxlib 0.9 prints it.
    return (f"E1203 12:00:43.127184    9546 cpu_aot_loader.cc:176] Loading XLA:CPU AOT result. Target machine "
            f"feature {feature} is not  supported on the host machine. Machine type used for XLA:CPU compilation "
            f"doesn't match the machine type for execution. Compile machine features: [{_FEATURES}] vs host "
            f"machine features: [{_HOST}]. This could lead to execution errors such as SIGILL.").encode()


_PJRT = (b"W1203 12:00:43.127184    9546 pjrt_executable.cc:642] Assume version compatibility. PjRt-IFRT does "
         b"not track XLA executable versions.")
_REAL_ERROR = b"E1203 12:00:44.000001    9546 pjrt_stream_executor_client.cc:3045] Execution failed: INTERNAL: boom"


@pytest.mark.parametrize("line, benign", [
    (_aot_line("+prefer-no-gather"), True),
    (_aot_line("+prefer-no-scatter"), True),
    (_aot_line("+avx512f"), False),                     # a real instruction-set mismatch
    (_PJRT, True),
    (_PJRT.replace(b"W1203", b"E1203"), False),          # not at the severity XLA logs it
    (_PJRT + b" And something else.", False),
    (_REAL_ERROR, False),
    (b"mjharness run: box_on_plane", False),
])
def test_benign_lines_are_exactly_the_known_ones(line, benign):
    assert xla_log.is_benign(line) is benign
    assert xla_log.is_benign(line + b"\n") is benign


def test_drop_benign_keeps_order_and_the_partial_tail():
    data = b"a\n" + _aot_line("+prefer-no-gather") + b"\n" + _REAL_ERROR + b"\n" + _PJRT + b"\npartial"
    assert xla_log.drop_benign(data) == (b"a\n" + _REAL_ERROR + b"\n", b"partial")


_FILTER_PROBE = """
import os, sys
from mjharness.rollout.cli import xla_log
assert xla_log.install()
os.write(2, sys.argv[1].encode() + b"\\n" + sys.argv[2].encode() + b"\\n" + sys.argv[3].encode() + b"\\n")
print("from python", file=sys.stderr)
import jax
jax.devices()  # XLA's own C++ I-lines (TF_CPP_MIN_LOG_LEVEL=0) through the filter
os.write(2, b"no newline at exit")
"""


def test_the_fd2_filter_drops_benign_lines_and_passes_real_xla_output():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    args = [_aot_line("+prefer-no-gather").decode(), _REAL_ERROR.decode(), _PJRT.decode()]
    p = subprocess.run([sys.executable, "-c", _FILTER_PROBE, *args], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    err = p.stderr
    assert "cpu_aot_loader.cc" not in err and "pjrt_executable.cc" not in err
    assert _REAL_ERROR.decode() in err and "from python" in err
    assert re.search(r"^I\d{4} .*pjrt_client\.cc:\d+\] PjRt-IFRT device count", err, re.M), err[-3000:]
    assert err.endswith("no newline at exit")
    off = subprocess.run([sys.executable, "-c", _FILTER_PROBE.replace("assert xla_log", "xla_log"), *args],
                         env=dict(env, MJHARNESS_XLA_LOG="all"), capture_output=True, text=True, timeout=300)
    assert "cpu_aot_loader.cc" in off.stderr and "pjrt_executable.cc" in off.stderr


# -- kill, resume, show, inspect -------------------------------------------------------------------------------

def _config_a(steps):
    return ["run", "double_pendulum", "--integrator", INTEG.name, "--dt", str(A["dt"]), "--batch", str(A["batch"]),
            "--chunk", str(A["chunk"]), "--record-every", str(A["record_every"]), "--seed", str(A["seed"]),
            "--steps", str(steps), "--no-progress"]


def test_sigkill_leaves_a_readable_partial_file_and_resume_completes_it(tmp_path):
    """Configuration A of the rollout tests through the CLI on MJX: killed once its first chunk is flushed, read,
    resumed (on the file's backend). On a fast quiet machine 6000 steps can all be written before the kill lands
    (the run then ends complete): the run is repeated 10x and 100x longer until the kill finds it mid-run, so the
    outcome does not depend on the machine's speed."""
    for steps in (6000, 60000, 600000):
        path = tmp_path / f"killed{steps}.h5"
        rc, err = run_and_kill(_config_a(steps) + ["--backend", "mjx", "--out", str(path)], tmp_path, 6)
        assert rc == -signal.SIGKILL, err[-2000:]
        with open_rollout(path) as f:
            if not f.complete:
                break
    # the uninterrupted run, in this process (the compiled function of configuration A)
    full = rollout(cached_scene("double_pendulum"), INTEG, progress=False, backend="mjx", **dict(A, steps=steps)).x
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


def test_show_prints_layout_and_plots(default_runs, tmp_path, capsys):
    d, _ = default_runs[0]
    png = tmp_path / "plot.png"
    assert main(["show", str(d / DEFAULT_OUT), "--plot", "box/pos", "qvel", "--world", "0", "3",
                 "--png", str(png)]) == 0
    out = capsys.readouterr().out
    for word in ("complete", "format_version", "mujoco_version", "model_sha256", "/x ", "virtual", "box/quat",
                 "quaternion", "16/16 ok"):
        assert word in out, out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert main(["show", str(d / DEFAULT_OUT), "--plot", "no/such", "--png", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mjharness show: error: --plot 'no/such': "), err
    assert "states: box/pos" in err and "segments: qpos, qvel, x" in err, err


def test_inspect_prints_the_layout_and_totals(capsys):
    assert main(["inspect", "brick"]) == 0
    out = capsys.readouterr().out
    m = mujoco.MjModel.from_xml_path(scene_path("brick"))
    assert f"nq={m.nq} nv={m.nv} nu={m.nu} na={m.na}" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  brick/")}
    assert rows["brick/pos"][1:] == ["euclidean", "0+3", "0+3", "brick"]
    assert rows["brick/quat"][1:] == ["quaternion", "3+4", "3+3", "brick"]
    assert rows["brick/vel"][1:] == ["euclidean", "7+3", "6+3", "brick"]
    assert rows["brick/angvel"][1:] == ["euclidean", "10+3", "9+3", "brick"]
    assert f"integrator the scene names: {cached_scene('brick').default_integrator}, timestep {m.opt.timestep:g}" in out
    assert "MJX compatibility log" in out


_PROBE_XML = """<mujoco model="cli_probe"><worldbody><body name="probe" pos="0 0 0.37">
<joint name="slide" type="slide" axis="0 0 1"/><geom type="sphere" size="0.05" mass="0.3"/></body></worldbody>
</mujoco>"""


# -- user errors --------------------------------------------------------------------------------------------

@pytest.fixture
def no_compile(monkeypatch):
    """User errors are refused before anything is compiled."""
    monkeypatch.setattr(jax.stages.Lowered, "compile", lambda *a, **k: pytest.fail("compiled"))


@pytest.mark.parametrize("args, message", [
    (["--integrator", "no_such"], "unknown integrator 'no_such'"),
    (["--dt", "-0.001"], "--dt must be > 0"),
    (["--dt", "0"], "--dt must be > 0"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--batch", "0"], "--batch must be >= 1, got 0"),
    (["--out", "/nonexistent-dir/r.h5"], "does not exist"),
])
def test_run_refuses_bad_input_with_exit_2(tmp_path, capsys, monkeypatch, no_compile, args, message):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "double_pendulum", "--no-progress"] + args
    if "--out" not in args:
        argv += ["--out", "r.h5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mjharness run: error:") and message in last, err
    assert os.listdir(tmp_path) == []


def test_run_refuses_an_existing_out_without_overwrite(tmp_path, capsys, no_compile):
    out = tmp_path / "r.h5"
    out.write_bytes(b"precious")
    assert main(["run", "double_pendulum", "--out", str(out), "--no-progress"]) == 2
    assert "exists: add --overwrite to replace it" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    assert main(["show", str(tmp_path / "missing.h5")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_missing_scene_and_a_model_mjx_refuses_are_one_message(tmp_path, capsys, no_compile):
    missing = tmp_path / "nope.xml"
    assert main(["run", str(missing), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mjharness run: error:") and str(missing) in err and "no such file" in err, err
    pgs = tmp_path / "pgs.xml"
    pgs.write_text(_PROBE_XML.replace("<worldbody>", '<option solver="PGS"/><worldbody>'))  # MJX: CG, Newton
    assert main(["run", str(pgs), "--backend", "mjx", "--mjx", "strict", "--no-progress", "--out",
                 str(tmp_path / "r.h5")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mjharness run: error:") and "MJX_SOLVER_UNSUPPORTED" in err and "Traceback" not in err
    assert not (tmp_path / "r.h5").exists()


def test_default_out_is_numbered_when_taken(tmp_path):
    base = str(tmp_path / "rollout.h5")
    assert next_free(base) == base
    open(base, "w").close()
    assert next_free(base) == str(tmp_path / "rollout-1.h5")
    open(tmp_path / "rollout-1.h5", "w").close()
    assert next_free(base) == str(tmp_path / "rollout-2.h5")


# -- failures inside MJX / XLA: one paragraph, --debug for the traceback ------------------------------------------

def _paragraph(err: str) -> str:
    """The error: one paragraph that ends stderr; before it only our own lines (the run's header)."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    first = next(i for i, line in enumerate(lines) if ": error: " in line)
    assert all(line.startswith("mjharness ") for line in lines[:first]), err
    assert all(line.strip() for line in lines[first:]), err
    return " ".join(" ".join(lines[first:]).split())


def test_a_failure_inside_mjx_is_one_paragraph_naming_scene_and_place(tmp_path, capsys, monkeypatch):
    from mujoco.mjx._src import sensor

    real = sensor.sensor_pos
    scenes_dir = os.path.dirname(sys.modules["mjharness.scenes"].__file__)

    def broken(m, d):
        # Past the scene loader's own trace check (it would refuse the model): fail in the run's trace only.
        if any(f.filename.startswith(scenes_dir) for f in traceback.extract_stack()):
            return real(m, d)
        raise ValueError("Need at least one array to concatenate")

    monkeypatch.setattr(sensor, "sensor_pos", broken)  # MJX's forward calls it while the chunk is traced
    # A fresh cache: trace here, not from the disk cache, and remember no verdict about this model.
    monkeypatch.setenv("MJHARNESS_CACHE_DIR", str(tmp_path / "cache"))
    scene = tmp_path / "probe.xml"
    scene.write_text(_PROBE_XML)
    argv = ["run", str(scene), "--backend", "mjx", "--steps", "4", "--batch", "2", "--record-every", "2",
            "--no-progress", "--out", str(tmp_path / "r.h5")]
    assert main(argv) == 2
    text = _paragraph(capsys.readouterr().err)
    for part in (f"mjharness run: error: MJX failed on scene {str(scene)!r}",
                 "ValueError: Need at least one array to concatenate", "raised in forward.py:",
                 "mjharness inspect SCENE", "--mjx strict", "mjharness --debug run"):
        assert part in text, text
    assert main(argv[:1] + ["--debug"] + argv[1:]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "Need at least one array" in err


def test_an_xla_runtime_error_in_a_run_is_one_paragraph_with_advice(tmp_path, capsys, monkeypatch):
    def out_of_memory(self, *args, **kwargs):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4096 bytes.")

    monkeypatch.setattr(jax.stages.Compiled, "__call__", out_of_memory)  # an XLA executable: the MJX path
    assert main(_config_a(A["steps"]) + ["--backend", "mjx", "--out", str(tmp_path / "r.h5")]) == 2
    text = _paragraph(capsys.readouterr().err)
    for part in ("mjharness run: error: XLA failed on scene 'double_pendulum'", "JaxRuntimeError: RESOURCE_EXHAUSTED",
                 "ran out of memory", "smaller --batch", "mjharness --debug run"):
        assert part in text, text


def test_a_bug_of_ours_is_reported_as_one(capsys, monkeypatch):
    def bug(args):
        return {}["missing"]

    monkeypatch.setattr("mjharness.rollout.cli.inspect.command", bug)
    assert main(["inspect", "brick"]) == 2
    text = _paragraph(capsys.readouterr().err)
    assert text.startswith("mjharness inspect: error: mjharness failed on scene 'brick': KeyError: 'missing'")
    assert "bug in mjharness" in text


def test_error_origin_of_a_plain_exception_is_ours():
    try:
        [][1]
    except IndexError as e:
        assert errors.origin(e)[0] == "ours" and not errors.is_user_error(e)


# -- the parser ---------------------------------------------------------------------------------------------

def test_every_command_is_there_and_debug_goes_either_side(capsys):
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert set(choices) == {"run", "show", "inspect", "check", "cases", "bench", "hangrepro", "fit", "render", "verify",
                            "probe", "rerun", "examples", "export", "replay"}
    assert parser.parse_args(["--debug", "inspect"]).debug and parser.parse_args(["inspect", "--debug"]).debug
    assert not parser.parse_args(["inspect"]).debug
    for name in choices:
        with pytest.raises(SystemExit) as info:
            parser.parse_args([name, "--help"])
        assert info.value.code == 0
        assert "--debug" in capsys.readouterr().out


# -- inspect: what a scene holds, and the exit run would give (issue 29, item 7) -------------------------------

_INSPECT_XML = """<mujoco model="inspect_probe"><worldbody>
<geom name="floor" type="plane" size="1 1 .1"/>
<camera name="overview" pos="0 -2 1" xyaxes="1 0 0 0 1 2"/>
<body name="arm" pos="0 0 .5"><joint name="elbow" axis="0 1 0"/>
  <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/><site name="tip" pos=".3 0 0"/>
  <camera name="wrist" pos=".3 0 0" mode="track"/></body></worldbody>
<actuator><motor name="m" joint="elbow" ctrlrange="-2 2"/><position name="p" joint="elbow" kp="5"/></actuator>
<sensor><accelerometer name="acc" site="tip"/><jointpos name="q" joint="elbow"/><touch name="pad" site="tip"/></sensor>
</mujoco>"""


def _rows(out: str, header: str) -> list:
    """The element rows (split on whitespace) of one block of inspect's listing."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 2  # header, column names
    rows = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return rows


def test_inspect_lists_sensors_actuators_sites_cameras(tmp_path, capsys):
    path = tmp_path / "probe.xml"
    path.write_text(_INSPECT_XML)
    m = mujoco.MjModel.from_xml_string(_INSPECT_XML)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert _rows(out, "sensors (3)") == [["acc", "accelerometer", "site:tip", "0", "3"],
                                         ["q", "jointpos", "joint:elbow", "3", "1"],
                                         ["pad", "touch", "site:tip", "4", "1"]]
    assert _rows(out, "actuators (2)") == [["m", "joint:elbow", "none", "fixed", "none", "[-2.0,", "2.0]"],
                                           ["p", "joint:elbow", "none", "fixed", "affine", "-"]]
    assert _rows(out, "sites (1)") == [["tip", "arm", "sphere"]]
    assert _rows(out, "cameras (2)") == [["overview", "world", "fixed"], ["wrist", "arm", "track"]]
    assert main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["adr"], s["dim"]) for s in data["sensors"]] == \
        [(m.sensor(i).name, int(m.sensor_adr[i]), int(m.sensor_dim[i])) for i in range(m.nsensor)]
    assert [a["name"] for a in data["actuators"]] == ["m", "p"] and data["actuators"][0]["ctrlrange"] == [-2.0, 2.0]
    assert [c["name"] for c in data["cameras"]] == ["overview", "wrist"] and data["refused"] is None


def _error(err: str) -> str:
    """The message of the error paragraph, without the command's prefix."""
    return _paragraph(err).split(": error: ", 1)[1]


@pytest.mark.parametrize("xml, args", [
    # MJX refuses PGS: run --backend mjx --mjx strict refuses it, and so does inspect, with the same message
    ('<mujoco><option solver="PGS"/><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>',
     ["--backend", "mjx", "--mjx", "strict"]),
    # MuJoCo cannot compile it
    ('<mujoco><worldbody><body><geom type="bogus"/></body></worldbody></mujoco>', []),
])
def test_inspect_exits_like_run(xml, args, tmp_path, capsys):
    path = tmp_path / "refused.xml"
    path.write_text(xml)
    assert main(["run", str(path), *args, "--steps", "10", "--batch", "1", "--out", str(tmp_path / "r.h5")]) == 2
    run_message = _error(capsys.readouterr().err)
    assert main(["inspect", str(path), *args]) == 2
    assert _error(capsys.readouterr().err) == run_message
    assert not (tmp_path / "r.h5").exists()


def test_inspect_lists_what_mujoco_compiles_before_an_mjx_refusal(tmp_path, capsys):
    path = tmp_path / "pgs.xml"
    path.write_text('<mujoco><option solver="PGS"/><worldbody><body name="b"><freejoint/><geom size=".1"/>'
                    '<site name="s"/></body></worldbody><sensor><gyro name="g" site="s"/></sensor></mujoco>')
    assert main(["inspect", str(path)]) == 0  # the default backend on CPU (MuJoCo C) runs PGS: so would run
    capsys.readouterr()
    assert main(["inspect", str(path), "--backend", "mjx", "--mjx", "strict"]) == 2
    out, err = capsys.readouterr()
    assert _rows(out, "sensors (1)") == [["g", "gyro", "site:s", "0", "3"]]
    assert "MJX_SOLVER_UNSUPPORTED" in err
