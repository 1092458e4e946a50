"""load_scene: every kind of source, and one SceneError per kind of failure."""

from __future__ import annotations

import os

import mujoco
import pytest

from mjharness.scenes import LOAD_CODES, SceneError, list_scenes, load_scene, scene_info, scene_path

REQUIRED = {"brick", "double_pendulum", "ball_chain", "arm", "box_on_plane", "mixed"}
HINGE = """<mujoco model="one">
  <worldbody><body><joint name="j" type="hinge"/><geom size=".1" mass="1"/></body></worldbody>
</mujoco>"""


def test_bundled_scenes_present_and_compile():
    names = list_scenes()
    assert REQUIRED <= set(names)
    for name in names:
        m = load_scene(name)
        assert isinstance(m, mujoco.MjModel) and m.nq > 0
        assert os.path.isfile(scene_path(name))
        assert scene_info(m).source == f"bundled scene {name!r}"
        assert "<mujoco" in scene_info(m).xml


def test_bundled_scene_features():
    jt = mujoco.mjtJoint
    types = lambda name: {int(t) for t in load_scene(name).jnt_type}  # noqa: E731
    brick = load_scene("brick")
    assert list(brick.jnt_type) == [jt.mjJNT_FREE] and not brick.opt.gravity.any()
    assert brick.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    inertia = sorted(brick.body_inertia[1])
    assert inertia[0] < inertia[1] < inertia[2]  # asymmetric
    assert types("double_pendulum") == {jt.mjJNT_HINGE}
    assert types("ball_chain") == {jt.mjJNT_BALL}
    arm = load_scene("arm")
    assert arm.nu > 0 and arm.na > 0
    plane = load_scene("box_on_plane")
    assert int(mujoco.mjtGeom.mjGEOM_PLANE) in {int(t) for t in plane.geom_type}
    assert not plane.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    assert types("mixed") == {jt.mjJNT_FREE, jt.mjJNT_BALL, jt.mjJNT_HINGE, jt.mjJNT_SLIDE}


def test_sources_path_string_model(tmp_path):
    p = tmp_path / "one.xml"
    p.write_text(HINGE)
    for src in (str(p), p, HINGE):
        m = load_scene(src)
        assert m.nq == 1 and mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, 0) == "j"
    assert scene_info(load_scene(str(p))).source == f"file {str(p)!r}"
    m = mujoco.MjModel.from_xml_string(HINGE)
    assert load_scene(m) is m


def test_file_with_relative_include(tmp_path):
    (tmp_path / "body.xml").write_text('<mujoco><worldbody><body><joint type="slide"/>'
                                       '<geom size=".1" mass="1"/></body></worldbody></mujoco>')
    (tmp_path / "main.xml").write_text('<mujoco><include file="body.xml"/></mujoco>')
    assert load_scene(str(tmp_path / "main.xml")).nq == 1


def test_malformed_xml_names_source_and_line():
    bad = "<mujoco>\n<worldbody>\n<body>\n<joint type='hing'/><geom size='.1'/></body></worldbody></mujoco>"
    with pytest.raises(SceneError) as e:
        load_scene(bad)
    assert "XML string" in str(e.value) and "invalid keyword: 'hing'" in str(e.value) and "line 4" in str(e.value)
    assert e.value.codes == ("MJCF_PARSE_FAILED",)
    # One line in the user's terms: the line number, the element and the line's text (not tinyxml's two lines).
    assert "element 'joint'" in str(e.value) and "at: <joint type='hing'/>" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(SceneError, match=r"XML string .*: line 1: malformed XML \(mismatched element\)") as e:
        load_scene("<mujoco><worldbody></mujoco>")
    assert "ErrorID" not in str(e.value) and "\n" not in str(e.value)


def test_malformed_file_names_file(tmp_path):
    p = tmp_path / "broken.xml"
    p.write_text("<mujoco>\n  <worldbody>\n    <geom type='box' size='a b c'/>\n  </worldbody>\n</mujoco>")
    with pytest.raises(SceneError) as e:
        load_scene(str(p))
    assert str(p) in str(e.value) and "line 3" in str(e.value) and e.value.codes == ("MJCF_PARSE_FAILED",)


def test_missing_file_and_unknown_name():
    with pytest.raises(SceneError, match=r"file '/no/such/scene.xml': no such file") as e:
        load_scene("/no/such/scene.xml")
    assert e.value.codes == ("SCENE_NOT_FOUND",)
    with pytest.raises(SceneError, match=r"bundled scene 'brik': no such bundled scene .*brick") as e:
        load_scene("brik")
    assert e.value.codes == ("SCENE_NOT_FOUND",)
    with pytest.raises(SceneError, match="expected a path") as e:
        load_scene(42)
    assert e.value.codes == ("SCENE_SOURCE_INVALID",)
    with pytest.raises(SceneError) as e:
        scene_path("brik")
    assert e.value.codes == ("SCENE_NOT_FOUND",)


def test_mujoco_rejects_compiled_model():
    massless = "<mujoco><worldbody><body name='b'><joint type='hinge'/></body></worldbody></mujoco>"
    with pytest.raises(SceneError, match=r"XML string.*mass and inertia of moving bodies") as e:
        load_scene(massless)
    assert isinstance(e.value, ValueError) and e.value.source.startswith("XML string")
    assert e.value.codes == ("MJCF_COMPILE_FAILED",)


def test_every_code_raised_is_documented():
    """Each code literal a SceneError is raised with in scenes/ is in LOAD_CODES or compat.CODES (stable, listed)."""
    import re

    from mjharness.scenes import compat

    src = os.path.dirname(compat.__file__)
    raised = set()
    for name in os.listdir(src):
        if name.endswith(".py"):
            with open(os.path.join(src, name)) as f:
                raised |= set(re.findall(r'codes=\(\s*"([A-Z_]+)"', f.read()))
    assert {"SCENE_NOT_FOUND", "MJCF_PARSE_FAILED", "MJCF_COMPILE_FAILED", "SCENE_OPTION_INVALID"} <= raised
    assert raised <= set(LOAD_CODES) | set(compat.CODES), raised - set(LOAD_CODES) - set(compat.CODES)
    assert not set(LOAD_CODES) & set(compat.CODES)
