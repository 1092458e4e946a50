"""Known MJX physics differences (scenes/mjx_physics.py): named for the geom pairs and options they concern,
measured on the scene's own state, with the fix (cone="elliptic" or backend="mujoco")."""

from __future__ import annotations

import os

import mujoco
import pytest

from mjharness.scenes import load_native
from mjharness.scenes.mjx_physics import _state_with_contact, compare_qacc, flagged_pairs, known_differences, measure

ANT = os.path.join(os.path.dirname(__file__), "data", "gymnasium_ant_v5.xml")  # gymnasium's Ant-v5, unchanged


def _codes(m) -> list[str]:
    return [e["code"] for e in known_differences(m)]


def test_ant_pyramidal_cone_is_named_with_its_fix():
    m = load_native(ANT)
    (e,) = known_differences(m)
    assert e["code"] == "MJX_PHYSICS_PYRAMIDAL_CONE" and e["severity"] == "warning"
    assert "floor" in e["message"] and "capsule" in e["message"]
    assert 'cone="elliptic"' in e["context"]["fix"] and 'backend="mujoco"' in e["context"]["fix"]
    m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    assert _codes(m) == []  # the fix removes it


def test_box_plane_and_clean_scenes():
    assert "MJX_PHYSICS_BOX_PLANE" in _codes(load_native("box_on_plane"))
    assert _codes(load_native("double_pendulum")) == []
    m = load_native("box_on_plane")
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    assert flagged_pairs(m) == {}  # no contacts, no difference


@pytest.mark.slow
def test_ant_difference_is_measured_and_elliptic_agrees():
    """Two mjx.forward compiles: the pyramidal difference is percent-sized on a state of the Ant's own fall,
    while the same state with cone="elliptic" agrees to ~1e-6 (the measured claim of the entry's fix)."""
    m = load_native(ANT)
    r = measure(m)
    assert r["ncon"] > 0 and r["relative"] > 1e-2, r
    assert "measured" in known_differences(m, r)[0]["message"]
    m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    pairs = {p for ps in flagged_pairs(load_native(ANT)).values() for p in ps}
    d, _ = _state_with_contact(m, pairs)
    _, rel = compare_qacc(m, d)
    assert rel < 1e-4, rel


def test_inspect_names_the_cone_difference_of_ant(capsys):
    from mjharness.rollout.cli import main

    assert main(["inspect", ANT, "--backend", "mjx"]) == 0
    out = capsys.readouterr().out
    assert "MJX_PHYSICS_PYRAMIDAL_CONE" in out and 'cone="elliptic"' in out and "--measure" in out
