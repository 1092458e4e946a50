"""Process-wide settings (scenes/settings.py): applied by ``configure()`` (explicitly, or by rollout(), the CLI and
the model constructors), never by importing mjharness."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import jax

from mjharness.scenes import settings


def _run(code: str, cwd=None, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "MJHARNESS_XLA_FLAGS", "PYTHONPATH")}
    if cwd is not None:  # a folder of stand-in modules, ahead of site-packages
        e["PYTHONPATH"] = str(cwd)
    return subprocess.run([sys.executable, "-c", code], env=dict(e, **env), capture_output=True, text=True,
                          timeout=300)


def test_float64_and_the_xla_cpu_flag_are_on_in_this_process():
    assert jax.config.jax_enable_x64
    assert settings.XLA_CPU_FLAG in os.environ.get("XLA_FLAGS", "").split()


def test_importing_mjharness_changes_no_setting_and_configure_applies_them():
    code = ("import os, jax; fd2 = os.fstat(2); import mjharness, mjharness.adapters, mjharness.rollout, "
            "mjharness.rollout.engine; print(jax.config.jax_enable_x64, os.environ.get('XLA_FLAGS'), "
            "jax.config.jax_compilation_cache_dir, os.fstat(2) == fd2)")
    p = _run(code)
    assert p.returncode == 0 and p.stdout.split()[-4:] == ["False", "None", "None", "True"], p.stdout + p.stderr
    code = ("import os, jax, mjharness.adapters as a; a.configure(); a.configure(); "
            "print(jax.config.jax_enable_x64, os.environ.get('XLA_FLAGS'))")
    p = _run(code)
    assert p.stdout.split()[-2:] == ["True", settings.XLA_CPU_FLAG], p.stdout + p.stderr
    # DESIGN.md's entry point: the top-level package names configure() and imports nothing to do it
    code = ("import sys, mjharness; print('jax' in sys.modules, 'mujoco' in sys.modules); mjharness.configure(); "
            "import jax; print(jax.config.jax_enable_x64)")
    p = _run(code)
    assert p.returncode == 0 and p.stdout.split()[-3:] == ["False", "False", "True"], p.stdout + p.stderr


def test_rollout_and_a_scene_configure_the_process():
    # MJX's import (trimesh, networkx, scipy.spatial: ~0.8 s of a process's start) only where MJX is used
    code = ("import jax, sys; from mjharness.rollout import rollout; "
            "r = rollout('box_on_plane', steps=2, batch=1, backend='mujoco', progress=False); "
            "print(jax.config.jax_enable_x64, r.x.dtype, 'mujoco.mjx' in sys.modules)")
    p = _run(code)
    assert p.returncode == 0 and p.stdout.split()[-3:] == ["True", "float64", "False"], p.stdout + p.stderr[-2000:]
    p = _run("import jax, sys; from mjharness.adapters import MjScene; s = MjScene('box_on_plane'); "
             "print(jax.config.jax_enable_x64, s.mjx_model.body_mass.dtype, 'mujoco.mjx' in sys.modules)")
    assert p.returncode == 0 and p.stdout.split()[-3:] == ["True", "float64", "True"], p.stdout + p.stderr[-2000:]
    assert "Failed to import" not in p.stdout + p.stderr  # imported quietly where first used


def test_the_flag_is_set_by_configure_and_a_users_xla_flags_win():
    code = "import os, mjharness.adapters as a; a.configure(); print(os.environ.get('XLA_FLAGS'))"
    assert _run(code).stdout.strip().splitlines()[-1] == settings.XLA_CPU_FLAG
    mine = "--xla_cpu_use_fusion_emitters=true --xla_force_host_platform_device_count=2"
    assert _run(code, XLA_FLAGS=mine).stdout.strip().splitlines()[-1] == mine
    other = "--xla_force_host_platform_device_count=2"
    assert _run(code, XLA_FLAGS=other).stdout.strip().splitlines()[-1] == f"{other} {settings.XLA_CPU_FLAG}"
    assert _run(code, MJHARNESS_XLA_FLAGS="0").stdout.strip().splitlines()[-1] == "None"


def test_configuring_after_the_backend_started_warns_and_changes_nothing():
    p = _run("import os, warnings, jax; jax.devices(); warnings.simplefilter('error'); import mjharness.adapters as a; "
             "a.configure()")
    assert p.returncode != 0 and "RuntimeWarning" in p.stderr and "XLA_FLAGS" in p.stderr


def test_the_integrators_layer_changes_no_global_setting():
    p = _run("import jax, mjharness.integrators, os; print(jax.config.jax_enable_x64, os.environ.get('XLA_FLAGS'))")
    assert p.returncode == 0 and p.stdout.split() == ["False", "None"], p.stderr[-2000:]


def test_float32_and_cache_dirs_from_the_environment(tmp_path):
    code = ("import jax, mjharness.adapters, mjharness.scenes.settings as s; s.configure(); "
            "print(jax.config.jax_enable_x64, jax.config.jax_compilation_cache_dir, s.export_dir())")
    p = _run(code, MJHARNESS_X64="0", MJHARNESS_CACHE_DIR=str(tmp_path / "c"))
    assert p.stdout.split() == ["False", str(tmp_path / "c"), str(tmp_path / "c" / "exported")], p.stderr[-2000:]
    assert (tmp_path / "c").is_dir()
    p = _run(code, MJHARNESS_CACHE_DIR="")
    assert p.stdout.split() == ["True", "None"], p.stderr[-2000:]  # cache and export cache off
    p = _run(code, MJHARNESS_CACHE_DIR=str(tmp_path / "d"), MJHARNESS_EXPORT_CACHE="0")
    assert p.stdout.split() == ["True", str(tmp_path / "d")], p.stderr[-2000:]


def test_mjx_optional_backend_notices_are_dropped_and_other_output_kept(tmp_path):
    plain = _run("import mujoco.mjx, mujoco.mjx.warp as w; print('WARP_INSTALLED', w.WARP_INSTALLED)")
    if importlib.util.find_spec("warp") is None:  # what mujoco-mjx prints by itself without warp-lang
        assert "Failed to import warp: No module named 'warp'" in plain.stdout, plain.stdout
    else:  # the [warp] extra is installed: MJX imports it silently, so there is no notice to drop
        assert plain.stdout.splitlines() == ["WARP_INSTALLED True"], plain.stdout + plain.stderr[-2000:]
    # configure() leaves MJX alone; its first use through mjharness imports it, without the notices
    first_use = ("import mjharness.adapters as a, sys; a.configure(); print('mujoco.mjx' in sys.modules); "
                 "from mjharness.scenes.settings import mjx; mjx.put_model; print('mujoco.mjx' in sys.modules)")
    ours = _run(first_use)
    assert ours.returncode == 0 and ours.stdout.splitlines() == ["False", "True"], ours.stdout + ours.stderr[-2000:]
    # A Warp that is installed but does not load is a real error: its notice stays.
    (tmp_path / "warp.py").write_text("raise ImportError('libcuda.so.1: cannot open shared object file')\n")
    broken = _run(first_use, cwd=tmp_path)
    assert "Failed to import warp: libcuda.so.1: cannot open shared object file" in broken.stdout, broken.stdout


def test_mujoco_timers_are_off_after_configure_unless_asked_and_never_before():
    code = ("import mujoco, mjharness.scenes.mujoco_timers as t; a = t.timers_on(); import mjharness; "
            "b = t.timers_on(); mjharness.configure(); print(a, b, t.timers_on())")
    p = _run(code)
    assert p.returncode == 0 and p.stdout.split()[-3:] == ["True", "True", "False"], p.stdout + p.stderr[-2000:]
    p = _run(code, MJHARNESS_MUJOCO_TIMERS="1")
    assert p.returncode == 0 and p.stdout.split()[-3:] == ["True", "True", "True"], p.stdout + p.stderr[-2000:]


def test_mujoco_timers_change_no_bit_and_a_users_timer_is_kept():
    import mujoco
    import numpy as np

    from mjharness.scenes import mujoco_timers as t

    assert t.timer_slot() is not None, "libmujoco's mjcb_time not found"
    m = mujoco.MjModel.from_xml_string(
        "<mujoco><option integrator='RK4'/><worldbody><geom type='plane' size='1 1 .1'/>"
        "<body pos='0 0 .3'><freejoint/><geom size='.1'/></body></worldbody></mujoco>")
    d = mujoco.MjData(m)
    d.qvel[:] = [0.3, -0.2, 0.0, 1.0, 2.0, -0.5]
    start = d.qvel.copy()

    def run():
        mujoco.mj_resetData(m, d)
        d.qvel[:] = start
        for _ in range(200):  # falls and rolls on the plane: contacts and the constraint solver timed too
            mujoco.mj_step(m, d)
        step = d.timer[int(mujoco.mjtTimer.mjTIMER_STEP)]
        return np.concatenate([d.qpos, d.qvel, d.qacc_warmstart]), step.number, step.duration

    assert not t.timers_on()  # configure() ran in this process (conftest)
    x_off, n_off, dur_off = run()
    assert n_off == 200 and dur_off == 0.0 and d.ncon > 0
    try:
        assert t.set_timers(True) and t.timers_on()
        x_on, n_on, dur_on = run()
        assert n_on == 200 and dur_on > 0.0
        np.testing.assert_array_equal(x_on, x_off)  # the same bits
        mine = mujoco.set_mjcb_time(lambda: 1.0) or mujoco.get_mjcb_time()
        assert not t.set_timers(False)  # the user's timer stays
        assert mujoco.get_mjcb_time() is mine and t.timers_on()
    finally:
        mujoco.set_mjcb_time(None)
        assert t.set_timers(False) and not t.timers_on()
