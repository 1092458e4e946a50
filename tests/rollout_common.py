"""Shared pieces of the rollout tests: the reference run (compiled once per session), a cheap toy model
and small integrator doubles used where the dynamics do not matter (memory, PRNG, status codes)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.integrators import Integrator, IntegratorKind, StateRegistry, StateSpec

try:
    from mjharness.integrators import SemiImplicitEuler
except ImportError:  # until the integrators land: the same scheme for hinge-only scenes without damping
    @dataclass(frozen=True)
    class SemiImplicitEuler:
        name = "semi_implicit_euler"

        def step(self, scene, t, x, h, ctrl=None):
            dx = scene.dynamics(t, x, ctrl)
            nq, nv = scene.nq, scene.nv
            v = x[nq:nq + nv] + h * dx[nq:nq + nv]
            return x.at[nq:nq + nv].set(v).at[:nq].add(h * v)

        def config(self):
            return {"name": self.name}

from conftest import cached_scene  # noqa: E402

# The reference configuration "A": every test that can shares this compiled function.
A = dict(dt=0.001, steps=200, batch=8, record_every=10, chunk=60, seed=0)
INTEG = SemiImplicitEuler()
_TMP = tempfile.mkdtemp(prefix="mjharness-rollout-tests-")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def tmpdir() -> str:
    return _TMP


@functools.cache
def run_a():
    """(RolloutResult of configuration A written to a file, the integrator); compiled once per session."""
    from mjharness.rollout import rollout

    path = f"{_TMP}/a.h5"
    return rollout(cached_scene("double_pendulum"), INTEG, out=path, progress=False, **A), INTEG


# -- a cheap non-MuJoCo model -----------------------------------------------------------------------

class Oscillator:
    """k independent unit-mass springs, x = [q (k), v (k)], one force input per spring (nu = k)."""

    def __init__(self, k: int = 3, omega: float = 2.0):
        reg = StateRegistry()
        reg.register("osc/q", StateSpec((k,)), model="osc")
        reg.register("osc/v", StateSpec((k,)), model="osc")
        self.layout = reg.finalize()
        self.k, self.omega, self.nu = k, omega, k

    def dynamics(self, t, x, ctrl=None):
        q, v = x[:self.k], x[self.k:]
        a = -self.omega ** 2 * q + (0.0 if ctrl is None else ctrl)
        return jnp.concatenate([v, a])

    def x0(self):
        return np.concatenate([np.ones(self.k), np.zeros(self.k)])


@dataclass(frozen=True)
class ExplicitEulerDouble(Integrator):
    """x + h f(t, x): trivial to replay in numpy. A user's integrator: one ``step`` (integrators/base.py)."""

    name = "explicit_euler_double"

    def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
        return x + h * model.dynamics(t0, x, ctrl), carry, jnp.int32(0)


@dataclass(frozen=True)
class NoiseDouble(Integrator):
    """A stochastic double: x + sqrt(h) N(0, 1) drawn from the key the engine passes."""

    name = "noise_double"
    kind = IntegratorKind.STOCHASTIC

    def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
        return x + jnp.sqrt(h) * jax.random.normal(key, x.shape, x.dtype), carry, jnp.int32(0)


@dataclass(frozen=True)
class UnderflowDouble(Integrator):
    """An adaptive double whose step size 'underflows' (status 2) once q[0] exceeds ``limit``."""

    limit: float = 1.5
    name = "underflow_double"
    kind = IntegratorKind.ADAPTIVE

    def integrate(self, model, t0, h, x, ctrl=None, carry=None, key=None):
        xn = x + h * model.dynamics(t0, x, ctrl)
        return xn, carry, jnp.where(xn[0] > self.limit, 2, 0)


# -- a CLI run killed mid-way (tests of resume) -------------------------------------------------------------------

def mjharness_cmd() -> list[str]:
    """The installed ``mjharness`` command (or the module, where the script is not on PATH)."""
    import sys

    exe = shutil.which("mjharness")
    return [exe] if exe else [sys.executable, "-m", "mjharness.rollout.cli"]


def flushed_samples(path) -> int:
    """The samples a live SWMR reader sees in ``path`` so far; -1 while it is not created or not readable yet."""
    from mjharness.rollout import open_rollout

    try:
        with open_rollout(path) as f:
            return f.samples
    except (OSError, KeyError, ValueError):
        return -1


def run_and_signal(argv: list, cwd, *, sig, samples: int | None = None, phase: str | None = None,
                   limit_s: float = 600) -> tuple[int, str]:
    """Start ``mjharness argv`` and send it ``sig`` once its file (``--out`` of argv, relative to ``cwd``) holds
    ``samples`` flushed samples, or once its stderr shows ``phase`` (no timing guess: it waits for that state, up
    to ``limit_s``). Returns (returncode, stderr); -sig when the signal killed it."""
    import os
    import subprocess
    import time

    proc = subprocess.Popen(mjharness_cmd() + argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    err = []
    try:
        deadline = time.monotonic() + limit_s
        if phase is not None:
            for line in proc.stderr:  # the phase lines come before anything is written
                err.append(line)
                if phase in line or time.monotonic() > deadline:
                    break
        else:
            path = os.path.join(cwd, argv[argv.index("--out") + 1])
            while flushed_samples(path) < samples and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(sig)
        err.append(proc.stderr.read())
        proc.wait(timeout=limit_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(err)


def run_and_kill(argv: list, cwd, samples: int, limit_s: float = 600) -> tuple[int, str]:
    """``run_and_signal`` with SIGKILL: a run killed once ``samples`` are flushed."""
    import signal

    return run_and_signal(argv, cwd, sig=signal.SIGKILL, samples=samples, limit_s=limit_s)
