"""The second hour of the CLI (issue 40): interrupts end cleanly at any batch and moment, start-up and argument
errors without JAX, messages in the user's terms, `check`'s default reference, bundled examples, closed pipes,
progress of long work from Python.

Signals are sent at observable states (a file holding N samples, a phase line on stderr), never after a sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from rollout_common import mjharness_cmd, run_and_signal

from mjharness.integrators import STATUS_TERMINATED
from mjharness.rollout import open_rollout, rollout
from mjharness.rollout.cli import main
from mjharness.rollout.cli.common import BACKEND_NAMES, BACKEND_SUMMARIES
from mjharness.rollout.cli.options import cli_spelling

DP = ["run", "double_pendulum", "--integrator", "rk4", "--dt", "0.001"]


def _clean_exit(rc, err, sig):
    assert rc == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], err[-3000:]
    assert "Traceback" not in err and "Segmentation" not in err and "Exception ignored" not in err, err[-3000:]
    what = "interrupted" if sig == signal.SIGINT else "terminated (SIGTERM)"
    assert sum(what in line for line in err.splitlines()) == 1, err[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_on_mujoco_c_batch_256_exits_cleanly_and_resumes_bit_identically(tmp_path, sig):
    """Batch 256 on MuJoCo C used to segfault at exit (the watchdog's worker still inside MuJoCo C)."""
    argv = DP + ["--steps", "1200", "--batch", "256", "--backend", "mujoco", "--out", "s.h5", "--no-progress"]
    rc, err = run_and_signal(argv, tmp_path, sig=sig, samples=20)
    _clean_exit(rc, err, sig)
    with open_rollout(tmp_path / "s.h5") as f:
        held = f.samples
        assert not f.complete and held >= 20
    assert f"s.h5 holds {held} of 120 samples" in err
    assert main(["verify", str(tmp_path / "s.h5")]) == 0
    assert main(["run", "--resume", str(tmp_path / "s.h5"), "--no-progress"]) == 0
    ref = rollout("double_pendulum", "rk4", dt=0.001, steps=1200, batch=256, record_every=10, backend="mujoco",
                  progress=False, seed=0, perturb=0.01)
    with open_rollout(tmp_path / "s.h5") as f:
        assert f.complete and np.array_equal(f.x, ref.x)


@pytest.mark.slow
def test_sigterm_while_mjx_compiles_and_sigint_mid_run_on_mjx(tmp_path):
    """MJX, batch 256: SIGTERM during the compile (nothing written), then SIGINT mid-run (the file resumable)."""
    argv = DP + ["--steps", "4000", "--batch", "256", "--backend", "mjx", "--out", "m.h5"]
    rc, err = run_and_signal(argv, tmp_path, sig=signal.SIGTERM, phase="compiling the chunk function")
    _clean_exit(rc, err, signal.SIGTERM)
    rc, err = run_and_signal(argv + ["--overwrite", "--no-progress"], tmp_path, sig=signal.SIGINT, samples=20)
    _clean_exit(rc, err, signal.SIGINT)
    assert main(["verify", str(tmp_path / "m.h5")]) == 0


def test_sigint_during_imports_is_one_line(tmp_path):
    """The entry point handles signals before it imports the CLI (a signal during import used to print a
    traceback of whatever was being imported)."""
    code = ("import os, signal; from mjharness.rollout.cli import entry; import sys; sys.argv = ['mjharness', "
            "'--help']; import builtins; real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'argparse': os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\nsys.exit(entry.main())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == ["mjharness: interrupted"]


# -- start-up and argument errors without JAX -------------------------------------------------------------------

_BAD = [
    ["run", "--batch", "-4"],
    ["run", "--steps", "0"],
    ["run", "--randomize", "body_mass:torso=*unifrom(0.8, 1.2)"],
    ["run", "--randomize", "body_mass:torso[x]=uniform(1, 2)"],
    ["run", "--out", "nodir/x.h5"],
    ["run", "--out", "x.txt"],
    ["run", "--param", "body_mass:torso=1,x"],
    ["run", "--controller", "nofile.py:make"],
    ["run", "--on-terminate", "reset"],
    ["run", "--reset-to", "somewhere"],
    ["render", "IN.h5", "--out", "nodir/v.mp4"],
    ["render", "IN.h5", "--out", "v.avi"],
    ["show", "IN.h5", "--plot", "bogus"],
]


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "small.h5"
    rollout("double_pendulum", "rk4", dt=0.01, steps=20, batch=2, record_every=1, out=path, backend="mujoco",
            progress=False)
    return path


def _in_subprocess(argv, cwd):
    """(exit status, stdout, stderr, whether jax / mujoco.mjx were imported) of main(argv) in a fresh Python."""
    code = ("import sys\nfrom mjharness.rollout.cli.app import main\ntry:\n    rc = main(sys.argv[1:])\n"
            "except SystemExit as e:  # --help\n    rc = e.code\n"
            "print('IMPORTED', 'jax' in sys.modules, 'mujoco.mjx' in sys.modules)\nsys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, cwd=cwd)
    out, _, flags = p.stdout.rpartition("IMPORTED ")
    return p.returncode, out, p.stderr, flags.split()


def test_help_imports_no_jax(tmp_path):
    rc, out, err, flags = _in_subprocess(["--help"], tmp_path)
    assert rc == 0 and "run" in out and flags == ["False", "False"], (err, flags)


@pytest.mark.parametrize("argv", _BAD, ids=[" ".join(a) for a in _BAD])
def test_bad_invocations_fail_in_one_line_before_anything_loads(tmp_path, small_file, argv):
    argv = [str(small_file) if a == "IN.h5" else a for a in argv]
    rc, out, err, flags = _in_subprocess(argv, tmp_path)
    assert rc == 2 and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"mjharness {argv[0]}: error: "), err
    assert flags == ["False", "False"], f"{argv}: JAX imported before the error ({err})"
    assert os.listdir(tmp_path) == []  # nothing written


def test_plot_error_names_states_and_outputs_before_printing(small_file, capsys):
    assert main(["show", str(small_file), "--plot", "bogus"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "states: " in cap.err and "qpos" in cap.err


def test_cli_copies_agree_with_their_sources():
    from mjharness.rollout.cli import xla_log
    from mjharness.scenes import xla_log as source

    assert xla_log.ENV_VAR == source.ENV_VAR
    from mjharness.rollout import rendering
    from mjharness.rollout.cli.common import RENDER_DEFAULTS
    from mjharness.rollout.rendering.options import OUTPUTS

    assert RENDER_DEFAULTS == dict(size=rendering.DEFAULT_SIZE, fps=rendering.DEFAULT_FPS,
                                   sheet_times=rendering.DEFAULT_SHEET_TIMES, layouts=rendering.LAYOUTS,
                                   outputs=tuple(OUTPUTS))


def test_cli_backend_table_is_the_backends_own():
    from mjharness.adapters.backends import AUTO, BACKENDS
    from mjharness.adapters.backends import BACKEND_NAMES as NAMES

    assert BACKEND_NAMES == NAMES and BACKEND_NAMES[0] == AUTO
    assert BACKEND_SUMMARIES == {name: b.summary for name, b in BACKENDS.items()}


# -- messages in the user's terms ------------------------------------------------------------------------------

def test_cli_spelling_of_run_messages():
    assert cli_spelling("resume='/tmp/r.h5' was planned for steps=1000; steps=200 would leave it") == \
        "--resume /tmp/r.h5 was planned for --steps 1000; --steps 200 would leave it"
    assert cli_spelling("pass overwrite=True (CLI: --overwrite) to replace it, or resume='d.h5'") == \
        "pass --overwrite to replace it, or --resume d.h5"
    assert cli_spelling("record_every=10 and batch_size=3, a == b") == "--record-every 10 and batch_size=3, a == b"


def test_cli_records_the_auto_reason_and_resume_names_integrators(tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert main(["run", "box_on_plane", "--steps", "40", "--batch", "2", "--out", str(out), "--no-progress"]) == 0
    with open_rollout(out) as f:
        assert f.attrs["backend_reason"].startswith("auto: "), f.attrs["backend_reason"]
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--integrator", "rk4", "--steps", "80", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "integrator: file 'semi_implicit_euler', now 'rk4'" in err and "tableau" not in err and "--resume" in err


def test_existing_out_is_refused_in_cli_words(tmp_path, small_file, capsys):
    assert main(["run", "--out", str(small_file)]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "overwrite=True" not in err and f"--resume {small_file}" in err


def test_closed_stdout_is_quiet(small_file):
    p = subprocess.run(" ".join(mjharness_cmd() + ["show", str(small_file)]) + " | head -1", shell=True,
                       capture_output=True, text=True, timeout=300, executable="/bin/bash")
    assert p.stdout.startswith(str(small_file)) and p.stderr == "", p.stderr
    p = subprocess.run(["bash", "-c", " ".join(mjharness_cmd() + ["show", str(small_file)])
                        + " | head -1 >/dev/null; echo ${PIPESTATUS[0]}"], capture_output=True, text=True, timeout=300)
    assert p.stdout.strip() in ("0", "141") and "Traceback" not in p.stderr, p


# -- check's default reference, examples ------------------------------------------------------------------------

def test_check_picks_an_applicable_reference_and_says_which(tmp_path, small_file, capsys):
    out = tmp_path / "box.h5"
    assert main(["run", "box_on_plane", "--steps", "40", "--batch", "2", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["check", str(out), "--no-plot"]) == 0
    assert capsys.readouterr().out.startswith("reference: MuJoCo C (--reference mujoco)")
    brick = tmp_path / "brick.h5"
    assert main(["run", "brick", "--steps", "20", "--batch", "2", "--out", str(brick), "--no-progress"]) == 0
    capsys.readouterr()
    main(["check", str(brick), "--no-plot"])
    assert capsys.readouterr().out.startswith("reference: the independent rigid-body model")


def test_examples_are_bundled_and_resolve_by_name(tmp_path, capsys):
    assert main(["examples"]) == 0
    listed = capsys.readouterr().out
    assert "arm_reach:" in listed and "humanoid_fall:" in listed and "--controller arm_reach:make" in listed
    out = tmp_path / "arm.h5"
    assert main(["run", "arm", "--controller", "arm_reach:make", "--terminate", "arm_reach:reached", "--steps", "2000",
                 "--batch", "8", "--out", str(out), "--no-progress"]) == 0
    with open_rollout(out) as f:  # the README's command terminates every world in the steps it runs
        assert np.all(f.status == STATUS_TERMINATED)


# -- progress of long work from Python ---------------------------------------------------------------------------

def test_compiles_announce_themselves(monkeypatch, capsys):
    import jax
    import jax.numpy as jnp

    from mjharness.rollout.engine import announce

    monkeypatch.setattr(announce, "MIN_S", 0.0)
    announce.compiling("my work")
    jax.jit(lambda x: jnp.sin(x) * 3.25 + 0.125)(jnp.arange(7.0)).block_until_ready()
    err = capsys.readouterr().err
    assert "my work: traced; compiling" in err and ("my work: compiled in" in err or "my work: loaded" in err), err
    announce.compiling("quiet", progress=False)
    assert capsys.readouterr().err == ""


def test_lazy_package_keeps_a_function_named_like_its_submodule():
    """engine.simulate (the function) lives in engine/simulate.py: importing the submodule first must not leave
    the package's name bound to the module (the lazy packages load names on first use)."""
    import importlib

    importlib.import_module("mjharness.rollout.engine.simulate")
    from mjharness.rollout import engine, simulate

    assert callable(simulate) and callable(engine.simulate) and simulate is engine.simulate
