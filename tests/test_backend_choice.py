"""Backends behind one declared interface and ``backend="auto"`` (issue 27).

The choice is made once, when a run knows what it needs: MuJoCo C on CPU unless the run needs a
capability only MJX has, an explicit backend always wins (and is refused at resolution when it lacks
a need), the choice is recorded in the file and kept by a resume. Tests that mean MJX name it.
"""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjharness.adapters import MjScene
from mjharness.adapters.backends import BACKENDS, CAPABILITIES, BackendError, choose
from mjharness.integrators import StateSpec
from mjharness.integrators.errors import MjHarnessError
from mjharness.rollout import RolloutError, open_rollout, rollout, simulate
from mjharness.scenes import SceneError

ROOT = pathlib.Path(__file__).resolve().parent.parent
QUIET = dict(progress=False)


def test_auto_on_cpu_is_mujoco_c_for_the_humanoid(tmp_path):
    """The issue's bar: no backend argument on this CPU records MuJoCo C."""
    r = rollout("humanoid", steps=500, batch=64, out=tmp_path / "h.h5", keep=False, **QUIET)
    assert r.stats["backend"] == "mujoco" and "CPU" in r.stats["backend_reason"]
    with open_rollout(tmp_path / "h.h5") as f:
        assert f.attrs["backend"] == "mujoco" and f.complete


def test_explicit_mjx_still_runs_mjx():
    r = rollout("double_pendulum", steps=4, batch=2, backend="mjx", **QUIET)
    assert r.stats["backend"] == "mjx" and r.stats["backend_reason"] == "asked for"
    r = rollout(MjScene("double_pendulum", backend="mjx"), steps=4, batch=2, **QUIET)
    assert r.stats["backend"] == "mjx"


def test_auto_takes_mjx_when_the_run_needs_it():
    scene = MjScene("box_on_plane")  # auto
    assert scene.backend == "mjx" and scene.requested_backend == "auto"  # direct use is MJX (jit, grad)
    scene.add_body_noise("box", force_sigma=0.1)
    r = rollout(scene, "euler_maruyama", steps=2, batch=2, **QUIET)
    assert r.stats["backend"] == "mjx" and "body noise" in r.stats["backend_reason"]
    r = rollout("double_pendulum", steps=2, batch=2, outputs=[("q2", lambda scene, t, x, d: 2 * d.qpos)], **QUIET)
    assert r.stats["backend"] == "mjx" and "output function" in r.stats["backend_reason"]
    ext = MjScene("double_pendulum")
    ext.add_state("filter", "y", StateSpec((1,)), lambda t, v, d: -v)
    assert rollout(ext, "rk4", dt=0.01, steps=2, batch=1, **QUIET).stats["backend"] == "mjx"


def test_auto_on_an_accelerator_is_mjx():
    assert choose("auto", {}, platform="gpu")[0] == "mjx"
    assert choose("auto", {}, platform="cpu")[0] == "mujoco"
    assert choose("auto", {"differentiable": "x"}, platform="cpu")[0] == "mjx"


def test_an_explicit_backend_lacking_a_need_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "never.h5"
    noisy = MjScene("box_on_plane")
    noisy.add_body_noise("box", force_sigma=0.1)
    with pytest.raises(BackendError, match=r"add_body_noise.*backend='mujoco'"):
        rollout(noisy, "euler_maruyama", steps=2, batch=2, backend="mujoco", out=out, **QUIET)
    with pytest.raises(BackendError, match=r"has backend='mujoco' but the run asks for 'mjx'"):
        rollout(MjScene("double_pendulum", backend="mujoco"), steps=2, batch=2, backend="mjx", out=out, **QUIET)
    with pytest.raises(BackendError, match="output function"):
        rollout("double_pendulum", steps=2, batch=2, backend="mujoco", out=out,
                outputs=[("q2", lambda scene, t, x, d: 2 * d.qpos)], **QUIET)
    assert not out.exists()


def test_resume_keeps_the_file_backend_and_refuses_another(tmp_path):
    path = tmp_path / "r.h5"
    rollout("double_pendulum", steps=20, batch=2, record_every=5, out=path, **QUIET)
    with pytest.raises(BackendError, match="resume=.*has backend='mujoco' but the run asks for 'mjx'"):
        rollout("double_pendulum", steps=40, record_every=5, resume=path, backend="mjx", **QUIET)
    r = rollout("double_pendulum", steps=40, record_every=5, resume=path, **QUIET)
    whole = rollout("double_pendulum", steps=40, batch=2, record_every=5, **QUIET)
    assert r.stats["backend"] == "mujoco" and np.array_equal(r.x, whole.x)


def test_output_function_is_recorded_like_the_others(tmp_path):
    def twice_qpos(scene, t, x, d):
        return 2.0 * d.qpos

    r = rollout("double_pendulum", steps=10, batch=2, record_every=5, outputs=["qacc", twice_qpos],
                out=tmp_path / "o.h5", **QUIET)
    assert r.stats["backend"] == "mjx"  # MJX data: auto takes MJX
    np.testing.assert_array_equal(r.outputs["twice_qpos"], 2.0 * r.qpos)
    with open_rollout(tmp_path / "o.h5") as f:
        ds = f.h5["outputs/twice_qpos"]
        np.testing.assert_array_equal(ds[()], 2.0 * r.qpos)
        assert ds.attrs["mujoco_field"] == "callable" and "twice_qpos" in str(ds.attrs["function"])


def test_sensordata_of_a_model_without_live_sensors_is_refused():
    xml = """<mujoco><option><flag sensor="disable"/></option><worldbody><body><joint name="h" type="hinge"/>
             <geom size="0.1" mass="1"/></body></worldbody><sensor><jointpos joint="h"/></sensor></mujoco>"""
    with pytest.raises(RolloutError, match="sensors are switched off"):
        rollout(xml, steps=2, batch=1, outputs=["sensordata"], **QUIET)


def test_simulate_on_an_auto_scene_differentiates_through_mjx():
    scene = MjScene("double_pendulum")
    x0 = jnp.asarray(scene.reset({"hinge1/qvel": [0.3]} if "hinge1/qvel" in scene.layout.names else {},
                                 batch=1)) + 0.1

    def loss(x):
        _, xs = simulate(scene, "rk4", x, dt=0.01, steps=5)
        return jnp.sum(xs[-1] ** 2)

    g = jax.grad(loss)(x0)
    assert g.shape == x0.shape and np.all(np.isfinite(g)) and np.any(g != 0)


def test_auto_runs_the_model_as_compiled_on_mujoco_c():
    pgs = """<mujoco><option solver="PGS"/><worldbody><geom type="plane" size="1 1 .1"/>
             <body pos="0 0 .1"><freejoint/><geom type="box" size=".05 .05 .05"/></body></worldbody></mujoco>"""
    assert MjScene(pgs, backend="mjx").model.opt.solver != 0  # adapt: PGS -> Newton for MJX
    r = rollout(pgs, steps=2, batch=1, out=None, **QUIET)  # auto on CPU: C runs the model as compiled (PGS)
    assert r.stats["backend"] == "mujoco"


ELLIPSOID_BOX = """<mujoco><worldbody><geom name="floor" type="plane" size="2 2 .1"/>
  <body name="a" pos="0 0 1"><freejoint/><geom name="ga" type="ellipsoid" size=".1 .08 .06"/></body>
  <body name="b" pos="0 0 1.3"><freejoint/><geom name="gb" type="box" size=".1 .08 .06"/></body>
</worldbody></mujoco>"""


def test_a_model_mjx_refuses_makes_an_auto_scene_mujoco_c():
    with pytest.raises(SceneError):
        MjScene(ELLIPSOID_BOX, backend="mjx")
    scene = MjScene(ELLIPSOID_BOX)  # auto
    assert scene.backend == "mujoco" and "MJX cannot run this model" in scene.backend_note
    r = rollout(scene, steps=3, batch=2, **QUIET)
    assert r.stats["backend"] == "mujoco" and "MJX cannot run" in r.stats["backend_reason"]
    with pytest.raises(SceneError, match="MJX"):  # simulate needs MJX, which cannot run this model
        simulate(scene, "semi_implicit_euler", scene.reset(batch=1), dt=0.002, steps=2)


def test_errors_share_one_base_class():
    for cls in (SceneError, RolloutError, BackendError):
        assert issubclass(cls, MjHarnessError), cls


def test_every_backend_declares_every_capability():
    for name, b in BACKENDS.items():
        assert b.name == name
        assert {c for c in CAPABILITIES if b.caps.has(c)} | {c for c in CAPABILITIES if not b.caps.has(c)} \
            == set(CAPABILITIES)


def test_no_backend_name_comparison_outside_the_backend_modules():
    pattern = re.compile(r"""(backend\w*\s*(==|!=|\bin\b|\bnot in\b))|((==|!=)\s*["'](mjx|mujoco|warp|auto)["'])"""
                         r"""|(["'](mjx|mujoco|warp|auto)["']\s*(==|!=|\bin\b))|((==|!=)\s*AUTO\b)""")
    bad = []
    for folder in ("scenes", "adapters", "rollout"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            if p.parent.name == "backends" and p.parent.parent.name == "adapters":
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                # other vocabularies that share the words: a crosscheck reference, an error's origin or module root
                if pattern.search(code) and not any(w in code for w in ("reference", "kind ==", "root")):
                    bad.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_every_exception_class_of_ours_derives_from_the_base():
    import importlib
    import inspect as _inspect
    import pkgutil

    import mjharness

    missing = []
    for info in pkgutil.walk_packages(mjharness.__path__, "mjharness."):
        if ".rendering" in info.name or info.name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except Exception:  # optional extras (warp) or GL: not importable here
            continue
        for name, cls in vars(mod).items():
            if (_inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__ == info.name
                    and not issubclass(cls, MjHarnessError)):
                missing.append(f"{info.name}.{name}")
    assert not missing, missing


def test_the_docs_capability_table_is_the_code_s():
    """docs/run.md's table of what each backend can do is generated from the declarations (no drift)."""
    rows = [f"| `{c}`: {what} | " + " | ".join("yes" if b.caps.has(c) else "no" for b in BACKENDS.values()) + " |"
            for c, what in CAPABILITIES.items()]
    text = (ROOT / "docs" / "run.md").read_text()
    missing = [r for r in rows if r not in text]
    assert not missing, "docs/run.md's capability table differs from adapters/backends:\n" + "\n".join(missing)
