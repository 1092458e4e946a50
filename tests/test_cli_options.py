"""One run specification (issue 27): every ``mjharness run`` option reaches a multi-process worker with
the same value, the CLI's rollout keywords are ``rollout()``'s, and ``rollout()``'s keywords are the
run specification's fields; a two-process C-backend run with outputs equals the single-process run."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

from mjharness.adapters.backends import AUTO, BACKEND_NAMES
from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.cli.app import build_parser
from mjharness.rollout.cli.launch import child_argv
from mjharness.rollout.cli.options import DEFAULTS, OPTIONS, RUN_OPTIONS, fresh_settings, rollout_kwargs
from mjharness.rollout.engine import RunSpec, check_spec
from mjharness.rollout.engine import spec as _spec
from mjharness.rollout.engine.spec import OPTION_GROUP

LAUNCHER_ONLY = {"local_processes", "distributed", "list_integrators"}


def _value(o):
    """A value for option ``o`` that differs from its default."""
    kw = o.kwargs
    if kw.get("action") == "store_true":
        return True
    if "choices" in kw:
        return next(c for c in reversed(kw["choices"]) if c != kw.get("default"))
    if kw.get("nargs") == "+":
        return ["xpos", "qacc"]
    if kw.get("action") == "append":
        return ["body_mass:a=1,2", "dof_damping:b=0.5,0.25"]
    t = kw.get("type", str)
    return {int: 7, float: 0.1 + 1e-17 * 3}.get(t, f"value-of-{o.dest}")  # an inexact float must round-trip


def _argv(values):
    argv = ["run", "box_on_plane"]
    for dest, v in values.items():
        o = OPTIONS[dest]
        if v is True:
            argv.append(o.flag)
        elif o.kwargs.get("action") == "append":
            argv += [tok for item in v for tok in (o.flag, item)]
        elif isinstance(v, list):
            argv += [o.flag, *v]
        else:
            argv += [o.flag, str(v) if not isinstance(v, float) else repr(v)]
    return argv


def test_every_run_option_is_forwarded_or_launcher_only():
    assert {o.dest for o in RUN_OPTIONS if not o.forward} == LAUNCHER_ONLY


def test_every_run_option_reaches_a_worker_with_the_same_value():
    values = {o.dest: _value(o) for o in RUN_OPTIONS if o.forward}
    parser = build_parser()
    args = parser.parse_args(_argv(values) + ["--local-processes", "2"])
    for dest, v in values.items():
        assert getattr(args, dest) == v, dest
    child = child_argv(args)
    assert child[:4] == [sys.executable, "-m", "mjharness.rollout.cli", "run"] and "--distributed" in child
    worker = parser.parse_args(child[3:])
    assert worker.distributed and worker.local_processes is None and worker.scene == "box_on_plane"
    for o in RUN_OPTIONS:
        if o.forward:
            assert getattr(worker, o.dest) == getattr(args, o.dest), o.flag


def test_cli_rollout_keywords_are_rollout_keywords_and_spec_fields():
    params = set(inspect.signature(rollout).parameters) - {"scene", "integrator"}
    assert params == set(OPTION_GROUP), "rollout()'s keywords and RunSpec's fields drifted apart"
    assert {o.rollout for o in RUN_OPTIONS if o.rollout} <= params
    args = build_parser().parse_args(["run", "--out", "x.h5", "--backend", "mujoco", "--perturb-qpos", "0.02"])
    kw = rollout_kwargs(args, fresh_settings(args))
    assert set(kw) <= params and kw["backend"] == "mujoco" and kw["perturb_qpos"] == 0.02
    spec = check_spec(RunSpec.from_options(**kw))
    assert spec.execution.backend == "mujoco" and spec.start.perturb_qpos == 0.02
    assert spec.steps == DEFAULTS["steps"] and spec.recording.record_every == DEFAULTS["record_every"]
    assert RunSpec.from_options(**spec.options()) == spec


def test_backend_choices_come_from_the_table():
    # every flag's argparse default is None (not given: a resume takes the file's); rollout()'s default is auto
    assert OPTIONS["backend"].kwargs["choices"] == BACKEND_NAMES and OPTIONS["backend"].kwargs["default"] is None
    assert _spec.DEFAULTS["backend"] == AUTO


@pytest.mark.parametrize("bad, match", [(dict(steps=0), "steps"), (dict(steps=5, record_every=6), "record_every"),
                                        (dict(steps=5, t0=float("nan")), "t0"), (dict(steps=5, dt=-1.0), "dt"),
                                        (dict(steps=5, perturb_qpos=-1.0), "perturb_qpos"),
                                        (dict(steps=5, backend="cuda"), "backend"),
                                        (dict(steps=5, output_semantics="now"), "output_semantics"),
                                        (dict(steps=5, keep=False), "keep=False"), (dict(steps=5, colour=1), "colour")])
def test_spec_refuses_bad_values_before_anything_loads(bad, match):
    from mjharness.rollout import RolloutError

    with pytest.raises(RolloutError, match=match):
        check_spec(RunSpec.from_options(**bad))


def _cli(*argv, cwd):
    return subprocess.Popen([sys.executable, "-m", "mjharness.rollout.cli", "run", *argv], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.timeout(600)
def test_two_processes_with_outputs_on_mujoco_equal_one_process(tmp_path):
    """The issue's bar: outputs and backend reach the workers; the joined file equals one process bit for bit."""
    flags = ["--batch", "4", "--steps", "100", "--outputs", "xpos", "--backend", "mujoco", "--no-progress"]
    two = _cli("box_on_plane", "--local-processes", "2", *flags, "--out", "two.h5", cwd=tmp_path)
    default = _cli("--local-processes", "2", "--batch", "2", "--steps", "20", "--no-progress", "--out", "d.h5",
                   cwd=tmp_path)
    one = _cli("box_on_plane", *flags, "--out", "one.h5", cwd=tmp_path)
    logs = [p.communicate(timeout=500)[0] for p in (two, default, one)]
    assert [p.returncode for p in (two, default, one)] == [0, 0, 0], "\n".join(logs)
    with open_rollout(tmp_path / "two.h5") as f2, open_rollout(tmp_path / "one.h5") as f1:
        assert f2.complete and f2.attrs["backend"] == "mujoco" and f1.attrs["backend"] == "mujoco"
        assert "outputs" in f2.h5 and f2.h5["outputs/xpos"].shape == f1.h5["outputs/xpos"].shape
        assert np.array_equal(f2.x, f1.x)
        assert np.array_equal(f2.h5["outputs/xpos"][()], f1.h5["outputs/xpos"][()])
    with open_rollout(tmp_path / "d.h5") as f:  # no scene: the bundled default, on the auto backend
        assert f.complete and f.batch == 2 and f.attrs["scene"].endswith("'box_on_plane'")
        assert f.attrs["backend"] == "mujoco"
    assert os.path.isfile(tmp_path / "d.h5.p1-of-2.h5")


def test_ctrl_from_a_file_drives_the_motors(tmp_path):
    from mjharness.rollout.cli.app import main

    u = np.random.default_rng(1).normal(size=(40, 4)) * 0.2  # (steps, nu) of the bundled arm
    np.save(tmp_path / "u.npy", u)
    np.savetxt(tmp_path / "u.csv", u, delimiter=",")
    for name in ("u.npy", "u.csv"):
        out = tmp_path / f"{name}.h5"
        assert main(["run", "arm", "--ctrl", str(tmp_path / name), "--steps", "40", "--batch", "2", "--record-every",
                     "10", "--no-progress", "--out", str(out)]) == 0
        ref = rollout("arm", steps=40, batch=2, record_every=10, ctrl=np.broadcast_to(u, (2, 40, 4)), progress=False)
        with open_rollout(out) as f:
            assert np.array_equal(f.x, ref.x) and str(f.attrs["ctrl"]).startswith("array sha256:")
        assert np.max(np.abs(ref.x[-1] - rollout("arm", steps=40, batch=2, record_every=10, progress=False).x[-1])) > 0


def test_ctrl_and_param_errors_are_one_line(tmp_path, capsys):
    from mjharness.rollout.cli.app import main
    from mjharness.rollout.cli.errors import CliError
    from mjharness.rollout.cli.loaders import load_ctrl, parse_params

    np.save(tmp_path / "bad.npy", np.zeros((3, 5)))
    assert main(["run", "arm", "--ctrl", str(tmp_path / "bad.npy"), "--steps", "40", "--no-progress",
                 "--out", str(tmp_path / "x.h5")]) == 2
    assert "--ctrl" in capsys.readouterr().err and not (tmp_path / "x.h5").exists()
    with pytest.raises(CliError, match="same count|the other --param"):
        parse_params(["body_mass:upper_arm=1,2", "dof_damping:shoulder=0.1"])
    with pytest.raises(CliError, match="V1,V2"):
        parse_params(["body_mass:upper_arm"])
    from mjharness.adapters import MjScene

    m = MjScene("arm", backend="mujoco").model
    with pytest.raises(CliError, match="keyframe"):
        load_ctrl("key:nope", m, 2, 10)


def test_param_sweep_is_one_world_per_value(tmp_path):
    from mjharness.rollout.cli.app import main

    out = tmp_path / "sweep.h5"
    assert main(["run", "double_pendulum", "--param", "dof_damping:shoulder=0.1,0.5,1.0", "--steps", "20",
                 "--record-every", "10", "--no-progress", "--out", str(out)]) == 0
    with open_rollout(out) as f:
        assert f.batch == 3
        np.testing.assert_array_equal(f.model_params["dof_damping"][:, 0], [0.1, 0.5, 1.0])
        assert np.all(f.model_params["dof_damping"][:, 1] == 0)  # the other dof keeps its nominal value


def test_dtype_float32_runs_and_files_in_float32_and_resume_keeps_it(tmp_path):
    """--dtype float32 (in a subprocess: it switches JAX's float width for the whole process)."""
    out = tmp_path / "f32.h5"
    args = ["double_pendulum", "--steps", "40", "--record-every", "10", "--batch", "2", "--outputs", "qacc"]
    p = _cli(*args, "--dtype", "float32", "--out", "f32.h5", cwd=tmp_path)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0 and "Warning" not in log, log
    # a stage-by-stage integrator on MuJoCo C (host callbacks) and on MJX, in float32 too
    for backend in ("mujoco", "mjx"):
        q = _cli(*args, "--dtype", "float32", "--integrator", "heun", "--backend", backend, "--out", f"h{backend}.h5",
                 cwd=tmp_path)
        log = q.communicate(timeout=300)[0]
        assert q.returncode == 0 and "Warning" not in log, log
    ref = rollout("double_pendulum", steps=40, record_every=10, batch=2, progress=False)
    with open_rollout(out) as f:
        assert f.attrs["x64"] is False or f.attrs["x64"] == 0
        assert f.x.dtype == np.float32 and f.qpos.dtype == np.float32 and f.h5["outputs/qacc"].dtype == np.float32
        np.testing.assert_allclose(f.x, ref.x, rtol=0, atol=1e-4)  # float32 round-off, same run
    p = _cli("--resume", "f32.h5", "--steps", "80", "--no-progress", cwd=tmp_path)  # the file's width by default
    assert p.wait(300) == 0, p.communicate()[0]
    with open_rollout(out) as f:
        assert f.complete and f.samples == 8 and f.x.dtype == np.float32


def test_long_phases_are_announced_before_the_progress_bar(tmp_path):
    """Loading and compiling say so at once, with the cache source, before the bar (order, not timing)."""
    xml = tmp_path / "new.xml"
    xml.write_text('<mujoco model="fresh"><worldbody><body><joint name="j" axis="0 1 0"/>'
                   '<geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/></body></worldbody></mujoco>')
    env = dict(os.environ, MJHARNESS_CACHE_DIR=str(tmp_path / "cache"))  # cold: nothing cached
    for backend, phase in (("mjx", "rollout: compiling the chunk function (mjx"), ("mujoco", "rollout: ")):
        p = subprocess.run([sys.executable, "-m", "mjharness.rollout.cli", "run", str(xml), "--backend", backend,
                            "--steps", "20", "--batch", "2", "--out", str(tmp_path / f"{backend}.h5")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        err = p.stderr
        bar = err.index("0/20")
        assert err.index("mjharness run: loading") < err.index(phase) < bar, err
        if backend == "mjx":
            assert "compiled in" in err[:bar] and "traced here" in err[:bar], err
