"""Process-wide settings applied on import (integrators/_config.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax

from mjharness.integrators import _config


def _run(code: str, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "MJHARNESS_XLA_FLAGS")}
    return subprocess.run([sys.executable, "-c", code], env=dict(e, **env), capture_output=True, text=True,
                          timeout=300)


def test_float64_and_the_xla_cpu_flag_are_on_in_this_process():
    assert jax.config.jax_enable_x64
    assert _config.XLA_CPU_FLAG in os.environ.get("XLA_FLAGS", "").split()


def test_the_flag_is_set_on_import_and_a_users_xla_flags_win():
    code = "import os, mjharness.integrators; print(os.environ.get('XLA_FLAGS'))"
    assert _run(code).stdout.strip().splitlines()[-1] == _config.XLA_CPU_FLAG
    mine = "--xla_cpu_use_fusion_emitters=true --xla_force_host_platform_device_count=2"
    assert _run(code, XLA_FLAGS=mine).stdout.strip().splitlines()[-1] == mine
    other = "--xla_force_host_platform_device_count=2"
    assert _run(code, XLA_FLAGS=other).stdout.strip().splitlines()[-1] == f"{other} {_config.XLA_CPU_FLAG}"
    assert _run(code, MJHARNESS_XLA_FLAGS="0").stdout.strip().splitlines()[-1] == "None"


def test_importing_after_the_backend_started_warns_and_changes_nothing():
    p = _run("import os, warnings, jax; jax.devices(); warnings.simplefilter('error'); import mjharness.integrators")
    assert p.returncode != 0 and "RuntimeWarning" in p.stderr and "XLA_FLAGS" in p.stderr
