"""MJX compatibility (issue 8): our checks agree with what mjx.put_model/make_data accept; strict lists every
reason; adapt applies only the documented substitutions; opted-in exclusion drops exactly the unsupported pairs.

Trace-time failures (issue 21): models put_model accepts but mjx.forward cannot trace adapt or refuse with a code.

No JIT except one small mjx.forward: put_model, make_data and abstract traces are the references."""

from __future__ import annotations

import copy
import glob
import json
import os

import mujoco
import numpy as np
import pytest
from mujoco import mjx
from mujoco.mjx._src import collision_driver, types

from mjharness.scenes import LOAD_CODES, SceneError, compat, compat_log, list_scenes, load_scene, mjx_trace, scene_info
from mjharness.scenes.compat import (
    CODES,
    MODES,
    check_mjx,
    compat_log_from_json,
    compat_log_to_json,
    format_compat_log,
    is_refused,
    mjx_geom_pairs,
)


def mjx_refusal(m: mujoco.MjModel) -> str | None:
    """What MJX itself says: None if put_model and make_data accept ``m``, else the exception text."""
    try:
        mjx.put_model(m)
        mjx.make_data(m)
    except Exception as e:  # MJX raises NotImplementedError (and ValueError for some) with one reason
        return f"{type(e).__name__}: {e}"
    return None


def codes(entries, severity="error") -> set[str]:
    return {e["code"] for e in entries if e["severity"] == severity}


# ---- purpose-built scenes, one (at least) per code ----------------------------------------------------
_BASE = """<mujoco model="{name}"><option {opt}>{flag}</option>{asset}<worldbody>
  <geom name="floor" type="plane" size="2 2 .1"/>
  <body name="a" pos="0 0 1"><freejoint/><geom name="ga" type="{t1}" size=".1 .08 .06"/></body>
  <body name="b" pos="0 0 1.3"><freejoint/><geom name="gb" type="{t2}" size=".1 .08 .06"/></body>
  {extra}</worldbody>{post}</mujoco>"""


def scene(name, opt="", flag="", t1="sphere", t2="sphere", extra="", post="", asset=""):
    return _BASE.format(name=name, opt=opt, flag=flag, t1=t1, t2=t2, extra=extra, post=post, asset=asset)


TORUS = """<mujoco model="sdf"><extension><plugin plugin="mujoco.sdf.torus"><instance name="torus">
  <config key="radius1" value="0.35"/><config key="radius2" value="0.15"/></instance></plugin></extension>
  <asset><mesh name="torus"><plugin instance="torus"/></mesh></asset>
  <worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body name="ring" pos="0 0 1"><freejoint/><geom name="tor" type="sdf" mesh="torus"><plugin instance="torus"/></geom>
  </body></worldbody></mujoco>"""

HFIELD = """<mujoco model="terrain"><asset>
  <hfield name="h" nrow="3" ncol="3" size="1 1 .1 .1" elevation="0 0 0 0 1 0 0 0 0"/></asset>
  <worldbody><geom name="terrain" type="hfield" hfield="h"/>
  <geom name="floor" type="plane" size="2 2 .1" pos="0 0 -.005"/>
  <body name="wheel" pos="0 0 .12"><freejoint/><geom name="cyl" type="cylinder" size=".1 .05"/>
  <geom name="hub" type="sphere" size=".05"/></body></worldbody></mujoco>"""

MESH_MARGIN = """<mujoco model="meshmargin"><asset><mesh name="tet" vertex="0 0 0 .1 0 0 0 .1 0 0 0 .1"/></asset>
  <worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body name="rock" pos="0 0 1"><freejoint/><geom name="tet" type="mesh" mesh="tet" margin=".01"/></body>
  </worldbody></mujoco>"""

FLEX = """<mujoco model="cloth"><worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <flexcomp name="cloth" type="grid" count="3 3 1" spacing=".1 .1 .1" dim="2" radius=".01" pos="0 0 1">
  <edge equality="true"/></flexcomp></worldbody></mujoco>"""

ADHESION = """<mujoco model="gripper"><worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body name="pad" pos="0 0 1"><freejoint/><geom name="pad" type="box" size=".1 .1 .02"/></body></worldbody>
  <actuator><adhesion name="stick" body="pad" ctrlrange="0 1"/></actuator></mujoco>"""

SENSORS = """<mujoco model="sensed"><worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body name="arm" pos="0 0 1"><joint name="j" type="hinge" range="-1 1" limited="true"/>
  <geom name="arm" type="capsule" fromto="0 0 0 .3 0 0" size=".03"/><site name="tip" pos=".3 0 0" size=".04"/></body>
  </worldbody><sensor><jointlimitfrc name="limit" joint="j"/><contact name="by_body" body1="arm"/>
  <contact name="by_site" site="tip"/><contact name="ok" geom1="arm" geom2="floor"/></sensor></mujoco>"""

TENDON = """<mujoco model="tendon"><worldbody>
  <body name="a" pos="0 0 1"><joint name="j" type="hinge"/><geom name="ga" size=".05"/><site name="s1"/>
  <body name="b" pos=".3 0 0"><joint name="k" type="hinge"/><geom name="gb" size=".05"/><site name="s2"/></body></body>
  </worldbody><tendon><spatial name="cable"><site site="s1"/><site site="s2"/></spatial></tendon></mujoco>"""

# name -> (xml, error codes check_mjx must report, error codes adapt leaves (refused) without/with exclusion)
CASES = {
    "pgs": (scene("pgs", opt='solver="PGS"'), {"MJX_SOLVER_UNSUPPORTED"}, set(), set()),
    "energy": (scene("energy", flag='<flag energy="enable" fwdinv="enable"/>'), {"MJX_FLAG_UNSUPPORTED"},
               set(), set()),
    "override": (scene("override", flag='<flag override="enable"/>'), {"MJX_FLAG_UNSUPPORTED"},
                 {"MJX_FLAG_UNSUPPORTED"}, {"MJX_FLAG_UNSUPPORTED"}),
    "diagexact_speculative": (scene("diag", flag='<flag diagexact="enable" speculative="enable"/>'),
                              {"MJX_FLAG_UNSUPPORTED"}, {"MJX_FLAG_UNSUPPORTED"}, {"MJX_FLAG_UNSUPPORTED"}),
    "implicit": (scene("implicit", opt='integrator="implicit"'), {"MJX_INTEGRATOR_UNSUPPORTED"},
                 {"MJX_INTEGRATOR_UNSUPPORTED"}, {"MJX_INTEGRATOR_UNSUPPORTED"}),
    "implicitfast_fluid": (scene("fluid", opt='integrator="implicitfast" density="1.2"'),
                           {"MJX_OPTION_UNSUPPORTED"}, {"MJX_OPTION_UNSUPPORTED"}, {"MJX_OPTION_UNSUPPORTED"}),
    "condim1_elliptic": (scene("condim1", opt='cone="elliptic"', extra="",
                               post="").replace("<worldbody>", '<default><geom condim="1"/></default><worldbody>'),
                         {"MJX_CONDIM_UNSUPPORTED"}, set(), set()),
    "condim1_mixed": (scene("condim1mixed", opt='cone="elliptic"', t1='sphere" condim="1" priority="1'),
                      {"MJX_CONDIM_UNSUPPORTED"}, {"MJX_CONDIM_UNSUPPORTED"}, {"MJX_CONDIM_UNSUPPORTED"}),
    "ellipsoid_box": (scene("ellbox", t1="ellipsoid", t2="box"), {"MJX_COLLISION_PAIR_UNSUPPORTED"},
                      {"MJX_COLLISION_PAIR_UNSUPPORTED"}, set()),
    "ellipsoid_box_no_contacts": (scene("ellbox_off", t1="ellipsoid", t2="box", flag='<flag contact="disable"/>'),
                                  {"MJX_COLLISION_PAIR_UNSUPPORTED"}, set(), set()),
    "explicit_pair": (scene("pair", t1="cylinder", t2="box", post='<contact><exclude body1="a" body2="b"/>'
                            '<pair geom1="gb" geom2="ga"/></contact>'), {"MJX_COLLISION_PAIR_UNSUPPORTED"},
                      {"MJX_COLLISION_PAIR_UNSUPPORTED"}, set()),
    "hfield_cylinder": (HFIELD, {"MJX_COLLISION_PAIR_UNSUPPORTED"}, {"MJX_COLLISION_PAIR_UNSUPPORTED"}, set()),
    "sdf": (TORUS, {"MJX_GEOM_UNSUPPORTED"}, {"MJX_GEOM_UNSUPPORTED"}, set()),
    "mesh_margin": (MESH_MARGIN, {"MJX_MARGIN_UNSUPPORTED"}, {"MJX_MARGIN_UNSUPPORTED"}, {"MJX_MARGIN_UNSUPPORTED"}),
    "mesh_margin_no_contacts": (MESH_MARGIN.replace("<worldbody>", '<option><flag contact="disable"/></option>'
                                                    "<worldbody>"), {"MJX_MARGIN_UNSUPPORTED"}, set(), set()),
    "flex": (FLEX, *[{"MJX_FLEX_UNSUPPORTED", "MJX_EQUALITY_UNSUPPORTED"}] * 3),
    "adhesion_actuator": (ADHESION, {"MJX_ACTUATOR_UNSUPPORTED"}, {"MJX_ACTUATOR_UNSUPPORTED"},
                          {"MJX_ACTUATOR_UNSUPPORTED"}),
    "sensors": (SENSORS, {"MJX_SENSOR_UNSUPPORTED"}, {"MJX_SENSOR_UNSUPPORTED"}, {"MJX_SENSOR_UNSUPPORTED"}),
    # filters MJX applies before asking for a collider: excluded, same-weld, parent-child, contype/conaffinity
    "filtered_pairs": (scene("filtered", t1="ellipsoid", t2="box",
                             extra='<body name="c" pos="1 0 1"><freejoint/><geom name="gc" type="ellipsoid" '
                                   'size=".1 .1 .1" contype="2" conaffinity="2"/><body name="d"><joint/>'
                                   '<geom name="gd" type="box" size=".1 .1 .1" contype="2" conaffinity="2"/>'
                                   '<geom name="ge" type="ellipsoid" size=".1 .1 .1" contype="2" conaffinity="2"/>'
                                   '</body></body>',
                             post='<contact><exclude body1="a" body2="b"/></contact>'), set(), set(), set()),
    "discrete_noslip_sleep": (scene("warn", opt='integrator="discrete" noslip_iterations="3"',
                                    flag='<flag sleep="enable"/>'), set(), set(), set()),
}


def _tendon_wrap_none() -> mujoco.MjModel:
    """No MJCF makes a wrap of type NONE; check_mjx takes any MjModel, so build one and mark a wrap NONE."""
    m = mujoco.MjModel.from_xml_string(TENDON)
    m.wrap_type[0] = mujoco.mjtWrap.mjWRAP_NONE
    return m


def test_every_code_is_triggered_by_a_test_scene():
    seen = set().union(*(c[1] for c in CASES.values()))
    seen |= codes(check_mjx(_tendon_wrap_none()))
    seen |= codes(check_mjx(mujoco.MjModel.from_xml_string(CASES["discrete_noslip_sleep"][0])), "warning")
    for xml in (TOUCH, NO_DOFS):  # found by the trace, after check_mjx passes
        with pytest.raises(SceneError) as info:
            load_scene(xml, mjx="strict")
        seen |= set(info.value.codes)
    assert seen == set(CODES)


# ---- trace-time failures (issue 21): put_model accepts, mjx.forward cannot be traced -------------------
# A touch sensor on a model with constraint rows (the hinge limit) but no geom that can collide: MJX 3.17's
# sensor_acc concatenates the (empty) per-condim contact forces, as dm_control's testing cartpole.xml does.
TOUCH = """<mujoco model="touchy"><option gravity="0 0 -9.81"/><worldbody>
  <body name="arm"><joint name="j" type="hinge" axis="0 1 0" range="-30 30" limited="true" damping=".2"/>
  <geom name="rod" type="capsule" fromto="0 0 0 .3 0 0" size=".02" contype="0" conaffinity="0"/>
  <site name="pad" pos=".3 0 0" size=".03"/></body></worldbody>
  <actuator><motor name="m" joint="j" gear="2"/></actuator>
  <sensor><touch name="tip" site="pad"/><jointpos name="angle" joint="j"/></sensor></mujoco>"""

# No degrees of freedom (a static prop, as dm_control's arena.xml): MJX's kinematics scan refuses nv=0.
NO_DOFS = """<mujoco model="prop"><worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body name="block" pos="0 0 .1"><geom name="b" type="box" size=".1 .1 .1"/></body></worldbody></mujoco>"""


def test_our_tables_are_mjx_tables():
    """Our copy of what MJX implements equals MJX's own enums and collider table (fails loudly on an MJX upgrade)."""
    assert compat.COLLISION_PAIRS == {(int(a), int(b)) for a, b in collision_driver._COLLISION_FUNC}
    assert compat.COLLIDABLE_GEOMS == {int(t) for t in types.GeomType}
    assert compat.SUPPORTED_SOLVERS == {int(v) for v in types.SolverType}
    assert compat.SUPPORTED_INTEGRATORS == {int(v) for v in types.IntegratorType}
    assert compat.SUPPORTED_CONES == {int(v) for v in types.ConeType}
    assert compat.SUPPORTED_JACOBIANS == {int(v) for v in types.JacobianType}
    assert compat.SUPPORTED_ENABLEBITS == {int(v) for v in types.EnableBit}
    mjx_enum = {"actuator_trntype": types.TrnType, "actuator_dyntype": types.DynType,
                "actuator_gaintype": types.GainType, "actuator_biastype": types.BiasType, "eq_type": types.EqType,
                "wrap_type": types.WrapType, "sensor_type": types.SensorType}
    for field, enum, bad, _, _ in compat._ENUM_CHECKS:
        assert bad == {int(v) for v in enum.__members__.values()} - {int(v) for v in mjx_enum[field]}, field


def _all_models():
    out = {f"bundled:{s}": load_scene(s) for s in list_scenes()}
    out.update({k: mujoco.MjModel.from_xml_string(v[0]) for k, v in CASES.items()})
    out["tendon_wrap_none"] = _tendon_wrap_none()
    return out


@pytest.fixture(scope="module")
def models():
    return _all_models()


def test_pair_filter_is_mjx_pair_filter(models):
    for name, m in models.items():
        assert mjx_geom_pairs(m) == [tuple(map(int, p)) for p in collision_driver.geom_pairs(m)], name


def test_verdict_agrees_with_put_model(models):
    """refused by us <=> MJX raises, on every bundled scene and every purpose-built scene."""
    for name, m in models.items():
        ours, theirs = is_refused(check_mjx(m)), mjx_refusal(m)
        assert ours == (theirs is not None), f"{name}: ours={codes(check_mjx(m))} mjx={theirs}"


def test_bundled_scenes_are_clean():
    for s in list_scenes():
        m = load_scene(s, mjx="strict")
        assert compat_log(m) == [] and mjx_refusal(m) is None, s


@pytest.mark.parametrize("name", sorted(CASES))
def test_codes_strict_and_adapt(name):
    xml, expected, left_refuse, left_exclude = CASES[name]
    entries = check_mjx(mujoco.MjModel.from_xml_string(xml))
    assert codes(entries) == expected
    for e in entries:
        assert set(e) == {"severity", "code", "message", "context"} and e["code"] in CODES
        assert e["context"]["fix"]
    if expected:
        with pytest.raises(SceneError) as info:
            load_scene(xml, mjx="strict")
        assert set(info.value.codes) == expected
    else:
        assert mjx_refusal(load_scene(xml, mjx="strict")) is None
    for contacts, left in (("refuse", left_refuse), ("exclude", left_exclude)):
        if left:
            with pytest.raises(SceneError) as info:
                load_scene(xml, mjx="adapt", unsupported_contacts=contacts)
            assert set(info.value.codes) == left, contacts
        else:
            m = load_scene(xml, mjx="adapt", unsupported_contacts=contacts)
            assert mjx_refusal(m) is None, contacts
            assert not is_refused(check_mjx(m))
            assert {e["code"] for e in compat_log(m) if e["severity"] != "warning" or
                    e["code"] != "MJX_FEATURE_IGNORED"} >= expected


HFIELD_BODY = ('<geom name="terrain" type="hfield" hfield="h" pos="3 3 0"/><body name="wheel" pos="3 3 .1">'
               '<freejoint/><geom name="wheel_cyl" type="cylinder" size=".1 .05" contype="2" conaffinity="2"/></body>')
HFIELD_ASSET = '<asset><hfield name="h" nrow="3" ncol="3" size="1 1 .1 .1" elevation="0 0 0 0 1 0 0 0 0"/></asset>'


def test_strict_lists_every_reason_at_once():
    xml = scene("many", opt='solver="PGS" integrator="implicit"', flag='<flag energy="enable" override="enable"/>',
                t1="ellipsoid", t2="box", asset=HFIELD_ASSET,
                extra=HFIELD_BODY.replace('<geom name="terrain"', '<geom name="terrain" contype="2" conaffinity="2"'))
    assert mjx_refusal(mujoco.MjModel.from_xml_string(xml)) is not None  # MJX names one of them
    with pytest.raises(SceneError) as info:
        load_scene(xml, mjx="strict")
    err = info.value
    assert err.codes == ("MJX_SOLVER_UNSUPPORTED", "MJX_INTEGRATOR_UNSUPPORTED", "MJX_FLAG_UNSUPPORTED",
                         "MJX_COLLISION_PAIR_UNSUPPORTED")
    msg = str(err)
    # both flags, both pairs with geom names, types and bodies, and a fix for each of the 6 problems
    for needle in ("'energy'", "'override'", "ellipsoid-box: geom 'ga' (ellipsoid, body 'a') and geom 'gb' (box, "
                   "body 'b')", "hfield-cylinder: geom 'terrain' (hfield, body 'world') and geom 'wheel_cyl' "
                   "(cylinder, body 'wheel')", "(6 problems)"):
        assert needle in msg, needle
    assert msg.count("fix:") == 6
    # adapt reports only what it cannot fix, and says what it would fix
    with pytest.raises(SceneError) as info:
        load_scene(xml, mjx="adapt")
    assert info.value.codes == ("MJX_INTEGRATOR_UNSUPPORTED", "MJX_FLAG_UNSUPPORTED", "MJX_COLLISION_PAIR_UNSUPPORTED")
    assert "(4 problems)" in str(info.value) and "'override'" in str(info.value)
    assert "2 further problem(s) that mjx=\"adapt\" would fix: MJX_FLAG_UNSUPPORTED, MJX_SOLVER_UNSUPPORTED" \
        in str(info.value)


def test_adapt_pgs_energy_changes_only_solver_and_flags():
    xml = scene("pgs_energy", opt='solver="PGS" iterations="500" tolerance="1e-15"', t1="box",
                flag='<flag energy="enable" fwdinv="enable"/>')
    ref = mujoco.MjModel.from_xml_string(xml)
    m = load_scene(xml)
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    assert m.opt.enableflags == ref.opt.enableflags & ~(mujoco.mjtEnableBit.mjENBL_ENERGY |
                                                        mujoco.mjtEnableBit.mjENBL_FWDINV) == 0
    # nothing else moved: every option field but solver/enableflags, and the model arrays
    for f in ("timestep", "iterations", "tolerance", "ls_iterations", "cone", "jacobian", "integrator",
              "disableflags", "impratio", "noslip_iterations"):
        assert getattr(m.opt, f) == getattr(ref.opt, f), f
    for f in ("body_mass", "body_inertia", "geom_size", "geom_friction", "geom_solref", "geom_solimp", "qpos0",
              "dof_damping", "exclude_signature", "pair_geom1"):
        np.testing.assert_array_equal(getattr(m, f), getattr(ref, f), err_msg=f)
    log = compat_log(m)
    assert [(e["severity"], e["code"], e["context"].get("flag")) for e in log] == [
        ("warning", "MJX_SOLVER_UNSUPPORTED", None), ("info", "MJX_FLAG_UNSUPPORTED", "energy"),
        ("info", "MJX_FLAG_UNSUPPORTED", "fwdinv")]
    assert "not bit-identical" in log[0]["message"]
    # the saved XML (what HDF5 files store) is the adapted model
    again = mujoco.MjModel.from_xml_string(scene_info(m).xml)
    assert again.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON and again.opt.enableflags == 0
    # PGS and Newton solve the same convex problem: a tilted box on the floor (3 contacts), MuJoCo C forward
    d_ref, d = mujoco.MjData(ref), mujoco.MjData(m)
    for dd, mm in ((d_ref, ref), (d, m)):
        dd.qpos[2], dd.qpos[3:7] = 0.059, np.array([0.999, 0.03, 0.02, 0]) / np.linalg.norm([0.999, 0.03, 0.02, 0])
        mujoco.mj_forward(mm, dd)
    assert d_ref.ncon == 3
    scale = np.abs(d_ref.qacc).max()
    assert np.abs(d.qacc - d_ref.qacc).max() <= 1e-8 * scale  # measured 1.9e-7 of 155 (PGS's own convergence)


# Two bodies whose geoms all overlap, with mixed priorities/solmix/margins so the re-added <pair>s matter.
EXCLUDE = """<mujoco model="exclude"><option timestep="0.002"/><worldbody>
  <geom name="floor" type="plane" size="2 2 .1" friction=".7 .01 .001" solmix="2"/>
  <body pos="0 0 .09"><freejoint/>
    <geom type="ellipsoid" size=".1 .08 .06"/>
    <geom name="a_ball" type="sphere" size=".05" pos=".06 0 .02" priority="1" friction=".3 .02 .002" condim="4"
          margin=".002" solref=".01 .9"/>
  </body>
  <body name="B" pos=".03 0 .17"><freejoint/>
    <geom name="b_box" type="box" size=".08 .08 .04" solmix=".5" solimp=".8 .9 .01 .5 2" margin=".001" gap=".0005"/>
    <geom type="capsule" size=".03 .05" pos=".06 0 -.02" euler="0 90 0"/>
  </body></worldbody></mujoco>"""


def _contacts(m, d):
    """MuJoCo C contacts keyed by unordered geom pair, each a sorted list of parameter tuples."""
    out = {}
    for i in range(d.ncon):
        c = d.contact[i]
        key = tuple(sorted(int(g) for g in c.geom))
        row = np.concatenate([[c.dist], c.pos, c.frame, c.friction, c.solref, c.solreffriction, c.solimp,
                              [c.includemargin, c.dim]])
        out.setdefault(key, []).append(row)
    return {k: np.array(sorted(v, key=lambda r: tuple(r[1:4]))) for k, v in out.items()}


def _exclusion_is_exact(xml, qpos=None):
    ref = mujoco.MjModel.from_xml_string(xml)
    bad = {(g1, g2) for e in check_mjx(ref) if e["severity"] == "error"
           for g1, g2 in [(e["context"]["geom1"]["id"], e["context"]["geom2"]["id"])]}
    assert bad
    with pytest.raises(SceneError):
        load_scene(xml)  # not without opting in
    m = load_scene(xml, unsupported_contacts="exclude")
    assert mjx_refusal(m) is None
    # MJX's pair list lost exactly the unsupported pairs
    before = {(g1, g2) for g1, g2, _ in collision_driver.geom_pairs(ref)}
    after = {(g1, g2) for g1, g2, _ in collision_driver.geom_pairs(m)}
    assert after == before - bad
    # MuJoCo C: the same contacts as before, minus the excluded pairs, with identical parameters
    d_ref, d = mujoco.MjData(ref), mujoco.MjData(m)
    if qpos is not None:
        d_ref.qpos[:], d.qpos[:] = qpos, qpos
    mujoco.mj_forward(ref, d_ref)
    mujoco.mj_forward(m, d)
    c_ref, c = _contacts(ref, d_ref), _contacts(m, d)
    bad_sorted = {tuple(sorted(p)) for p in bad}
    assert bad_sorted <= set(c_ref), "test scene must make the unsupported pairs touch"
    assert len(set(c_ref) - bad_sorted) >= 2, "test scene must make supported pairs of the same bodies touch"
    assert set(c) == set(c_ref) - bad_sorted
    for k in c:
        np.testing.assert_allclose(c[k], c_ref[k], rtol=0, atol=1e-12, err_msg=str(k))
    # each excluded pair is logged with its geoms
    logged = {tuple(sorted((e["context"]["geom1"]["id"], e["context"]["geom2"]["id"])))
              for e in compat_log(m) if e["context"].get("action") == "exclude"}
    assert logged == bad_sorted
    return ref, m, d_ref, d


def test_exclude_drops_exactly_the_unsupported_pairs():
    ref, m, d_ref, d = _exclusion_is_exact(EXCLUDE)
    readd = [e for e in compat_log(m) if e["context"].get("action") == "readd"]
    assert len(readd) == 1 and len(readd[0]["context"]["readded_pairs"]) == 3  # ball-box, ball-capsule, ell-capsule
    assert m.nexclude == 1 and m.npair == 3


def test_exclude_hfield_cylinder_world_body():
    """The height field lives in the world body beside the floor: floor-cylinder and hfield-sphere stay."""
    _exclusion_is_exact(HFIELD, qpos=[0, 0, 0.04, 1, 0, 0, 0])


def test_exclude_explicit_pair_removes_that_pair():
    xml = CASES["explicit_pair"][0]
    m = load_scene(xml, unsupported_contacts="exclude")
    assert m.npair == 0 and m.nexclude == 1
    log = compat_log(m)
    assert [e["context"]["action"] for e in log] == ["exclude"] and "explicit <pair> #0" in log[0]["message"]


def test_contacts_disabled_adapts_without_opt_in():
    m = load_scene(CASES["ellipsoid_box_no_contacts"][0])
    (e, *_rest) = [e for e in compat_log(m) if e["context"].get("action") == "exclude"]
    assert e["severity"] == "info" and "changes nothing" in e["message"]


def test_exclusion_refused_when_a_pair_cannot_reproduce_the_contact():
    xml = EXCLUDE.replace('<geom name="b_box"', '<geom name="b_box" adhesion="1"')
    with pytest.raises(SceneError) as info:
        load_scene(xml, unsupported_contacts="exclude")
    assert info.value.codes == ("MJX_COLLISION_PAIR_UNSUPPORTED",) and "adhesion" in str(info.value)


def test_bad_arguments_change_nothing():
    with pytest.raises(SceneError, match="mjx must be one of") as info:
        load_scene("brick", mjx="lenient")
    assert info.value.codes == ("SCENE_OPTION_INVALID",)
    with pytest.raises(SceneError, match="unsupported_contacts must be one of") as info:
        load_scene("brick", unsupported_contacts="drop")
    assert info.value.codes == ("SCENE_OPTION_INVALID",)


def test_log_round_trips_through_json_and_hdf5(tmp_path):
    h5py = pytest.importorskip("h5py")
    m = load_scene(EXCLUDE, unsupported_contacts="exclude")
    log = compat_log(m)
    assert log and json.loads(json.dumps(log)) == log  # plain JSON types only
    text = compat_log_to_json(log)
    assert compat_log_from_json(text) == log
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("/model/compat_log", data=text)
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert compat_log_from_json(f["/model/compat_log"][()]) == log
    with pytest.raises(ValueError, match="not an MJX compatibility log"):
        compat_log_from_json('{"a": 1}')


def test_format_compat_log():
    m = load_scene(scene("fmt", opt='solver="PGS"', flag='<flag energy="enable"/>'))
    text = format_compat_log(compat_log(m))
    lines = text.splitlines()
    assert lines[0] == "MJX compatibility log (2 entries):"
    assert lines[1].split()[:2] == ["WARNING", "MJX_SOLVER_UNSUPPORTED:"]
    assert lines[-1].split()[:2] == ["INFO", "MJX_FLAG_UNSUPPORTED:"] and "'energy'" in lines[-1]
    assert format_compat_log([]) == "MJX compatibility: no changes, nothing to report"


def test_condim1_elliptic_to_pyramidal_keeps_the_dynamics():
    """Frictionless contacts are one normal row under either cone: MuJoCo C gives the same qacc."""
    xml = CASES["condim1_elliptic"][0]
    ref = mujoco.MjModel.from_xml_string(xml)
    m = load_scene(xml)
    assert m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL and ref.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    assert [e["context"]["action"] for e in compat_log(m)] == ["cone"]
    d_ref, d = mujoco.MjData(ref), mujoco.MjData(m)
    for dd, mm in ((d_ref, ref), (d, m)):
        dd.qpos[2], dd.qpos[9] = 0.05, 0.2  # ball a into the floor, ball b into ball a
        dd.qvel[:] = np.linspace(-1, 1, mm.nv)
        mujoco.mj_forward(mm, dd)
    assert d_ref.ncon == 2 and set(d_ref.contact.dim) == {1}
    np.testing.assert_allclose(d.qacc, d_ref.qacc, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(d.efc_force, d_ref.efc_force, rtol=1e-10, atol=1e-10)


def test_require_mjx_compatible_on_a_raw_mjmodel():
    m = mujoco.MjModel.from_xml_string(CASES["ellipsoid_box"][0].replace("<option >", '<option solver="PGS">'))
    with pytest.raises(SceneError) as info:
        compat.require_mjx_compatible(m)
    assert info.value.codes == ("MJX_SOLVER_UNSUPPORTED", "MJX_COLLISION_PAIR_UNSUPPORTED")
    assert "mjx=\"adapt\"" in str(info.value) and "geom 'ga' (ellipsoid, body 'a')" in str(info.value)
    ok = mujoco.MjModel.from_xml_string(CASES["discrete_noslip_sleep"][0])
    assert codes(compat.require_mjx_compatible(ok), "warning") == {"MJX_FEATURE_IGNORED"}


# ---- trace-time failures (issue 21) --------------------------------------------------------------------
class _Compiles:
    """Counts lowerings to XLA and XLA compiles (JAX's monitoring events) while active. Lowering comes
    before the persistent-cache lookup, so a cache hit counts too."""

    count, active = 0, False

    def __init__(self):
        from jax import monitoring

        if not getattr(_Compiles, "_registered", False):
            monitoring.register_event_duration_secs_listener(_Compiles._on_event)
            _Compiles._registered = True

    @staticmethod
    def _on_event(name, _secs, **_kw):
        if _Compiles.active and name in ("/jax/core/compile/jaxpr_to_mlir_module_duration",
                                          "/jax/core/compile/backend_compile_duration"):
            _Compiles.count += 1

    def __enter__(self):
        _Compiles.count, _Compiles.active = 0, True
        return self

    def __exit__(self, *exc):
        _Compiles.active = False


def test_touch_sensor_without_contacts_fails_to_trace_in_raw_mjx():
    m = mujoco.MjModel.from_xml_string(TOUCH)
    assert mjx_refusal(m) is None and not is_refused(check_mjx(m))  # every earlier check passes
    failure = mjx_trace.trace_forward(m)
    assert failure["stage"] == "sensor" and failure["function"] == "sensor_acc"
    assert failure["error"] == "ValueError: Need at least one array to concatenate."
    assert failure["where"].startswith("mjx/_src/sensor.py:")


def test_touch_sensor_adapts_and_keeps_the_dynamics():
    import jax

    m = load_scene(TOUCH)
    ref = mujoco.MjModel.from_xml_string(TOUCH)
    assert m.opt.disableflags == ref.opt.disableflags | mujoco.mjtDisableBit.mjDSBL_SENSOR
    (entry,) = compat_log(m)
    assert (entry["severity"], entry["code"], entry["context"]["flag"]) == ("warning", "MJX_TRACE_SENSOR", "sensor")
    assert entry["context"]["sensors"] == ["touch sensor 'tip'"] and entry["context"]["fix"]
    assert '<flag sensor="disable"/>' in scene_info(m).xml  # the saved XML compiles to the model that runs
    assert mujoco.MjModel.from_xml_string(scene_info(m).xml).opt.disableflags == m.opt.disableflags
    # MuJoCo C with sensors on (the original) and MJX on the adapted model: same qacc, at the limit, driven
    d_ref, d = mujoco.MjData(ref), mujoco.MjData(m)
    for dd, mm in ((d_ref, ref), (d, m)):
        dd.qpos[0], dd.qvel[0], dd.ctrl[0] = np.deg2rad(31), 0.7, 0.3
        mujoco.mj_forward(mm, dd)
    assert d_ref.nefc == 1 and d_ref.sensordata[1] == d_ref.qpos[0]  # the limit is active; sensors ran in C
    np.testing.assert_array_equal(d.qacc, d_ref.qacc)  # C itself: switching sensors off changes no dynamics
    mx = mjx.put_model(m)
    dx = jax.jit(mjx.forward)(mx, mjx.put_data(m, mujoco.MjData(m)).replace(
        qpos=d_ref.qpos.copy(), qvel=d_ref.qvel.copy(), ctrl=d_ref.ctrl.copy()))
    np.testing.assert_allclose(np.asarray(dx.qacc), d_ref.qacc, rtol=1e-10, atol=1e-12)
    assert not np.asarray(dx.sensordata).any()


def test_trace_failure_refuses_with_a_code_in_strict_or_when_sensors_are_needed():
    for kw, fix in ((dict(mjx="strict"), 'load with mjx="adapt"'), (dict(need_sensors=True), "sensor outputs were "
                                                                   "requested")):
        with pytest.raises(SceneError) as info:
            load_scene(TOUCH, **kw)
        assert info.value.codes == ("MJX_TRACE_SENSOR",), kw
        msg = str(info.value)
        assert msg.startswith("XML string") and "sensor_acc" in msg and "touch sensor 'tip'" in msg, msg
        assert "Need at least one array to concatenate" in msg and fix in msg and "Traceback" not in msg
    m = mujoco.MjModel.from_xml_string(TOUCH)
    with pytest.raises(SceneError) as info:  # the same check on a raw MjModel, without adapting
        compat.check_mjx_trace(m, "my model", adapt=False)
    assert info.value.codes == ("MJX_TRACE_SENSOR",) and info.value.source == "my model"
    adapted, log = compat.check_mjx_trace(m, "my model")
    assert adapted is not m and not m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_SENSOR  # caller's untouched
    assert [e["code"] for e in log] == ["MJX_TRACE_SENSOR"]


def test_trace_check_compiles_nothing_and_remembers_its_verdicts(monkeypatch, tmp_path):
    import jax

    monkeypatch.setenv("MJHARNESS_CACHE_DIR", str(tmp_path))
    m, touch = load_scene("double_pendulum"), mujoco.MjModel.from_xml_string(TOUCH)
    with _Compiles() as c:
        out, log = compat.check_mjx_trace(m, cache=False)
        with pytest.raises(SceneError):
            compat.check_mjx_trace(touch, adapt=False, cache=False)
    assert out is m and log == [] and c.count == 0
    with _Compiles() as c:  # the counter does see a compile
        jax.jit(lambda x: x * 3.0 + 1.0)(np.ones(2))
    assert c.count >= 1
    assert len(list((tmp_path / "mjx_trace").iterdir())) == 2  # both verdicts are on disk ...

    def no_trace(_model):
        raise AssertionError("traced again")

    monkeypatch.setattr(mjx_trace, "trace_forward", no_trace)
    mjx_trace._VERDICTS.clear()  # ... so a new process (empty memory) does not trace again
    assert compat.check_mjx_trace(m) == (m, [])
    with pytest.raises(SceneError) as info:
        compat.check_mjx_trace(touch, adapt=False)
    assert info.value.codes == ("MJX_TRACE_SENSOR",) and "sensor_acc" in str(info.value)
    edited = copy.copy(m)
    edited.body_mass[1] *= 2  # another model: another verdict
    with pytest.raises(AssertionError, match="traced again"):
        compat.check_mjx_trace(edited)


def test_a_trace_failure_outside_the_sensors_refuses_in_both_modes():
    for mode in MODES:
        with pytest.raises(SceneError) as info:
            load_scene(NO_DOFS, mjx=mode)
        assert info.value.codes == ("MJX_TRACE_FAILED",), mode
        msg = str(info.value)
        assert "mjx.forward -> fwd_position" in msg and "Scan across Model with zero DoFs" in msg, msg
        assert "no degrees of freedom (nv=0)" in msg and "Traceback" not in msg


# The MJCFs shipped inside the mujoco wheel (MJX's own test models, MuJoCo's testdata): each one loads, or
# refuses with exactly these codes. mjx.forward traces of the ones that load are remembered on disk, so
# only the first run on a machine pays them (about 4 min under load on 2 cores; 1 s after).
WHEEL = os.path.dirname(mujoco.__file__)
WHEEL_MJCFS = sorted(os.path.relpath(p, WHEEL) for p in glob.glob(os.path.join(WHEEL, "**", "*.xml"), recursive=True))
WHEEL_REFUSED = {
    "mjx/test_data/actuator/arm26.xml": {"MJCF_COMPILE_FAILED"},  # MuJoCo's lengthrange does not converge
    "mjx/test_data/constraints.xml": {"MJCF_COMPILE_FAILED"},  # a ball joint in a fixed tendon
    "mjx/test_data/ray.xml": {"MJX_TRACE_FAILED"},  # nv = 0
    "testdata/msh.xml": {"MJX_TRACE_FAILED"},  # nv = 0
    "testdata/model.xml": {"MJX_COLLISION_PAIR_UNSUPPORTED", "MJX_SENSOR_UNSUPPORTED"},
}


@pytest.mark.slow
@pytest.mark.parametrize("rel", WHEEL_MJCFS)
def test_wheel_mjcf_loads_or_refuses_with_a_code(rel):
    try:
        m = load_scene(os.path.join(WHEEL, rel))
    except SceneError as e:
        assert e.codes and set(e.codes) <= set(CODES) | set(LOAD_CODES), e.codes
        assert set(e.codes) == WHEEL_REFUSED.get(rel), str(e)
        return
    except Exception as e:  # anything but a SceneError is a bug: the CLI would print a raw traceback
        pytest.fail(f"{rel}: raw {type(e).__name__} from load_scene: {e}")
    assert rel not in WHEEL_REFUSED and not is_refused(compat_log(m)), rel


def test_wheel_table_names_real_files():
    assert len(WHEEL_MJCFS) >= 30 and set(WHEEL_REFUSED) < set(WHEEL_MJCFS)
