"""An option is added in one file: a dummy option written into a copy of ``rollout/engine/spec.py`` (and nowhere
else) reaches ``mjharness run --help``, the workers of a ``--local-processes 2`` run, ``rollout()``'s keywords and
the file's root attributes; a resume takes it from the file. Pass-through options are named in <= 3 modules."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import h5py
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("adapters", "integrators", "scenes", "rollout")
DUMMY = '''
    dummy_note: str = option(
        "", Pattern(regex=r"[a-z]*", text="lowercase letters"), "a dummy option (tests/test_dummy_option.py)",
        attr="always", resume=Resume.FILE)
'''


def _mirror(src: pathlib.Path, dst: pathlib.Path, replace: dict) -> None:
    """``dst`` mirrors ``src`` by symlinks, but for the files in ``replace`` (relative path -> text)."""
    dst.mkdir()
    for entry in src.iterdir():
        rel = [k for k in replace if pathlib.Path(k).parts[0] == entry.name]
        if not rel:
            (dst / entry.name).symlink_to(entry)
        elif entry.is_dir():
            _mirror(entry, dst / entry.name, {str(pathlib.Path(*pathlib.Path(k).parts[1:])): replace[k] for k in rel})
        else:
            (dst / entry.name).write_text(replace[rel[0]])


@pytest.fixture(scope="module")
def dummy_env(tmp_path_factory):
    spec = (ROOT / "rollout" / "engine" / "spec.py").read_text()
    anchor = 'class Recording:\n    """What is kept."""\n'
    assert anchor in spec
    root = tmp_path_factory.mktemp("dummy")
    _mirror(ROOT, root / "mjharness", {"rollout/engine/spec.py": spec.replace(anchor, anchor + DUMMY)})
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return root, env


def _run(env, *argv, cwd, timeout=400):
    r = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_the_copy_is_the_package_with_one_file_changed(dummy_env):
    root, env = dummy_env
    r = _run(env, "-c", "import mjharness.rollout.engine.spec as s; print(s.__file__, 'dummy_note' in s.OPTIONS)",
             cwd=root)
    assert r.stdout.split() == [str(root / "mjharness/rollout/engine/spec.py"), "True"]
    here = _run(os.environ, "-c", "import mjharness.rollout.engine.spec as s; print('dummy_note' in s.OPTIONS)",
                cwd=ROOT)
    assert here.stdout.strip() == "False"


def test_a_dummy_option_reaches_help_workers_rollout_and_the_file(dummy_env, tmp_path):
    root, env = dummy_env
    cli = ["-m", "mjharness.rollout.cli", "run"]
    assert "--dummy-note" in _run(env, *cli, "--help", cwd=tmp_path).stdout
    bad = subprocess.run([sys.executable, *cli, "--dummy-note", "UPPER", "--steps", "10"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=200)
    assert bad.returncode != 0 and "--dummy-note" in bad.stderr and "lowercase letters" in bad.stderr
    common = ["box_on_plane", "--steps", "20", "--record-every", "10", "--batch", "4", "--chunk", "10",
              "--backend", "mujoco", "--no-progress"]
    _run(env, *cli, *common, "--dummy-note", "workers", "--local-processes", "2", "--out", "two.h5", cwd=tmp_path)
    with h5py.File(tmp_path / "two.h5", "r") as f:
        assert f.attrs["dummy_note"] == "workers" and int(f.attrs["batch"]) == 4
    # rollout()'s keyword, and a resume that takes it from the file
    code = ("from mjharness.rollout import rollout; import inspect; "
            "assert inspect.signature(rollout).parameters['dummy_note'].default == ''; "
            "rollout('box_on_plane', steps=10, batch=2, backend='mujoco', dummy_note='call', out='one.h5', "
            "progress=False); "
            "rollout('box_on_plane', steps=20, resume='one.h5', progress=False)")
    _run(env, "-c", code, cwd=tmp_path)
    with h5py.File(tmp_path / "one.h5", "r") as f:
        assert f.attrs["dummy_note"] == "call" and int(f.attrs["steps"]) == 20


@pytest.mark.parametrize("name", ["watchdog_s", "require_space"])
def test_a_pass_through_option_is_named_in_at_most_three_modules(name):
    import re

    word = re.compile(rf"\b{name}\b")
    files = [p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py") if word.search(p.read_text())]
    assert len(files) <= 3, [str(p.relative_to(ROOT)) for p in files]
