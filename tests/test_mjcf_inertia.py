"""MJCF reader: our geom formulas and combination vs MuJoCo's compiled body inertia (and quadrature)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from mjharness.adapters.mjcf_inertia import (
    MjcfInertiaError,
    UnsupportedGeomError,
    geom_mass_inertia,
    geom_volume,
    rigid_body_from_mjcf,
    spatial_inertia_from_mjcf,
)
from mjharness.adapters.reference import IndefiniteInertiaError, MassError, RigidBody, SpatialInertia
from mjharness.scenes import list_scenes, load_scene, scene_path

RTOL = 1e-10


def _compiled(src) -> mujoco.MjModel:
    return src if isinstance(src, mujoco.MjModel) else mujoco.MjSpec.from_string(src).compile() \
        if isinstance(src, str) and src.lstrip().startswith("<") else load_scene(src)


def _assert_matches_mujoco(src, body):
    """mass, COM and the full inertia tensor (from body_inertia + body_iquat) to 1e-10 relative."""
    ref = SpatialInertia.from_mujoco(_compiled(src), body)
    ours = spatial_inertia_from_mjcf(src, body)
    m_ref, c_ref, I_ref = (np.asarray(a) for a in (ref.mass, ref.com, ref.inertia))
    assert abs(float(ours.mass) - m_ref) <= RTOL * m_ref, (body, float(ours.mass), m_ref)
    # COM relative to the body's size (its radius of gyration), so a COM at the origin is fair too
    length = max(np.sqrt(np.trace(I_ref) / m_ref), np.linalg.norm(c_ref))
    assert np.abs(np.asarray(ours.com) - c_ref).max() <= RTOL * length, (body, ours.com, c_ref)
    assert np.abs(np.asarray(ours.inertia) - I_ref).max() <= RTOL * np.abs(I_ref).max(), (body, ours.inertia, I_ref)


@pytest.mark.parametrize("scene", list_scenes())
def test_bundled_scenes_every_body(scene):
    model = load_scene(scene)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(1, model.nbody)]
    for name in names:
        _assert_matches_mujoco(scene, name)


# ------------------------------------------------------------------------------ random generated bodies

_TYPES = ["sphere", "capsule", "cylinder", "ellipsoid", "box"]
_num = st.floats(min_value=-0.5, max_value=0.5, allow_nan=False).map(lambda v: round(v, 4))
_size = st.floats(min_value=0.02, max_value=0.4, allow_nan=False).map(lambda v: round(v, 4))
_vec3 = st.tuples(_num, _num, _num)


def _fmt(v):
    return " ".join(repr(float(x)) for x in v)


@st.composite
def _orientation(draw):
    kind = draw(st.sampled_from(["none", "quat", "euler", "axisangle", "xyaxes", "zaxis"]))
    if kind == "none":
        return ""
    if kind == "quat":
        q = draw(st.tuples(_num, _num, _num, _num).filter(lambda q: sum(x * x for x in q) > 0.01))
        return f' quat="{_fmt(q)}"'
    if kind == "euler":
        return f' euler="{_fmt(draw(_vec3))}"'
    if kind == "axisangle":
        ax = draw(_vec3.filter(lambda v: sum(x * x for x in v) > 0.01))
        return f' axisangle="{_fmt(ax)} {draw(_num)}"'
    if kind == "zaxis":
        return f' zaxis="{_fmt(draw(_vec3.filter(lambda v: sum(x * x for x in v) > 0.01)))}"'
    x = np.array(draw(_vec3.filter(lambda v: sum(x * x for x in v) > 0.01)))
    y = np.array(draw(_vec3))
    if np.linalg.norm(np.cross(x, y)) < 0.05 * np.linalg.norm(x) * max(np.linalg.norm(y), 1e-9):
        y = np.cross(x, [0.3, -0.7, 0.2]) + x * 0.1
    return f' xyaxes="{_fmt(x)} {_fmt(y)}"'


@st.composite
def _geom(draw):
    t = draw(st.sampled_from(_TYPES))
    attrs = f'type="{t}"'
    use_fromto = t in ("capsule", "cylinder", "box", "ellipsoid") and draw(st.booleans())
    if use_fromto:
        a = np.array(draw(_vec3))
        b = a + np.array(draw(_vec3.filter(lambda v: sum(x * x for x in v) > 0.01)))
        size = draw(_size) if t in ("capsule", "cylinder") else f"{draw(_size)} {draw(_size)}"
        attrs += f' fromto="{_fmt(a)} {_fmt(b)}" size="{size}"'
    else:
        n = {"sphere": 1, "capsule": 2, "cylinder": 2}.get(t, 3)
        attrs += f' size="{_fmt([draw(_size) for _ in range(n)])}" pos="{_fmt(draw(_vec3))}"' + draw(_orientation())
    if draw(st.booleans()):
        attrs += f' mass="{draw(st.floats(0.05, 5.0).map(lambda v: round(v, 3)))}"'
    else:
        attrs += f' density="{draw(st.floats(100.0, 3000.0).map(lambda v: round(v, 1)))}"'
    if draw(st.booleans()):
        attrs += ' shellinertia="true"'
    return f"<geom {attrs}/>"


@st.composite
def _body_xml(draw):
    geoms = draw(st.lists(_geom(), min_size=1, max_size=4))
    degree = draw(st.booleans())
    seq = draw(st.sampled_from(["xyz", "zyx", "XYZ", "zxz"]))
    # some geoms go inside a (nested) rotated <frame>
    k = draw(st.integers(0, len(geoms)))
    framed = "".join(geoms[:k])
    if framed:
        inner = f'<frame pos="{_fmt(draw(_vec3))}"{draw(_orientation())}>{framed}</frame>'
        framed = f'<frame pos="{_fmt(draw(_vec3))}"{draw(_orientation())}>{inner}</frame>'
    return f"""<mujoco><compiler angle="{'degree' if degree else 'radian'}" eulerseq="{seq}"/>
      <worldbody><body name="b" pos="0.3 0 1" euler="10 20 30"><freejoint/>{framed}{''.join(geoms[k:])}
      </body></worldbody></mujoco>"""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_body_xml())
def test_random_bodies_match_mujoco(xml):
    _assert_matches_mujoco(xml, "b")


# ------------------------------------------------------------------------------ independent of MuJoCo

def _solid_of_revolution(radius_at, z0, z1):
    """Mass (density 1), I_zz and I_xx about the origin of a solid of revolution about z."""
    vol = quad(lambda z: np.pi * radius_at(z) ** 2, z0, z1, epsabs=0, epsrel=1e-13)[0]
    izz = quad(lambda z: 0.5 * np.pi * radius_at(z) ** 4, z0, z1, epsabs=0, epsrel=1e-13)[0]
    ixx = quad(lambda z: np.pi * radius_at(z) ** 2 * (radius_at(z) ** 2 / 4 + z * z), z0, z1,
               epsabs=0, epsrel=1e-13)[0]
    return vol, izz, ixx


@pytest.mark.parametrize("r,hh", [(0.1, 0.3), (0.25, 0.05)])
def test_capsule_and_cylinder_by_quadrature(r, hh):
    def capsule(z):
        e = max(abs(z) - hh, 0.0)
        return np.sqrt(max(r * r - e * e, 0.0))

    for kind, shape, lim in (("capsule", capsule, hh + r), ("cylinder", lambda z: r, hh)):
        vol, izz, ixx = _solid_of_revolution(shape, -lim, lim)
        assert geom_volume(kind, [r, hh]) == pytest.approx(vol, rel=1e-11)
        np.testing.assert_allclose(geom_mass_inertia(kind, [r, hh], vol), [ixx, ixx, izz], rtol=1e-10)


def test_box_ellipsoid_sphere_closed_forms():
    a, b, c, m = 0.1, 0.2, 0.3, 2.0
    np.testing.assert_allclose(geom_mass_inertia("box", [a, b, c], m),
                               m / 12 * np.array([4 * (b * b + c * c), 4 * (a * a + c * c), 4 * (a * a + b * b)]))
    np.testing.assert_allclose(geom_mass_inertia("ellipsoid", [a, a, a], m), geom_mass_inertia("sphere", [a], m))
    np.testing.assert_allclose(geom_mass_inertia("sphere", [a], m, shell=True), np.full(3, 2 / 3 * m * a * a))
    assert geom_volume("ellipsoid", [a, b, c]) == pytest.approx(4 / 3 * np.pi * a * b * c, rel=1e-15)


# ------------------------------------------------------------------------------ MJCF features

DEFAULTS_XML = """
<mujoco>
  <compiler angle="radian"/>
  <default>
    <geom type="capsule" size="0.05" density="500"/>
    <default class="heavy"><geom type="box" size="0.1 0.2 0.05" density="7800"/></default>
  </default>
  <worldbody>
    <body name="b" childclass="heavy"><freejoint/>
      <geom pos="0.1 0 0" euler="0.1 0.2 0.3"/>
      <geom class="main" fromto="0 0 0 0.3 0.1 0.2"/>
      <frame pos="0 0 0.2" euler="0 1.57 0"><geom pos="0.1 0 0" type="ellipsoid" size="0.1 0.05 0.02"/></frame>
      <geom type="sphere" size="0.3" group="4" mass="100"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_defaults_childclass_frames_and_groups():
    _assert_matches_mujoco(DEFAULTS_XML, "b")
    # the group-4 sphere (inside the default inertiagrouprange 0..5) weighs 100; narrowing the
    # range leaves it out, as MuJoCo does
    narrowed = DEFAULTS_XML.replace('<compiler angle="radian"/>',
                                    '<compiler angle="radian" inertiagrouprange="0 3"/>')
    _assert_matches_mujoco(narrowed, "b")
    dm = float(spatial_inertia_from_mjcf(DEFAULTS_XML, "b").mass - spatial_inertia_from_mjcf(narrowed, "b").mass)
    assert dm == pytest.approx(100.0, rel=1e-12)


INERTIAL_XML = """
<mujoco>
  <compiler inertiafromgeom="{mode}"/>
  <worldbody>
    <body name="diag"><freejoint/>
      <inertial pos="0.1 -0.2 0.3" euler="10 20 30" mass="1.5" diaginertia="0.01 0.02 0.025"/>
      <geom type="box" size="0.1 0.1 0.1"/>
    </body>
    <body name="full" pos="1 0 0"><freejoint/>
      <inertial pos="0 0.1 0" mass="2" fullinertia="0.03 0.04 0.05 0.001 -0.002 0.003"/>
      <geom type="sphere" size="0.1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("mode", ["auto", "true"])
def test_explicit_inertial_wins_unless_inertiafromgeom_true(mode):
    xml = INERTIAL_XML.format(mode=mode)
    for body in ("diag", "full"):
        _assert_matches_mujoco(xml, body)
    expected = 1.5 if mode == "auto" else 1000 * 0.2 ** 3
    assert float(spatial_inertia_from_mjcf(xml, "diag").mass) == pytest.approx(expected, rel=1e-14)


def test_compiler_bounds_match_mujoco():
    xml = """<mujoco><compiler boundmass="3" boundinertia="0.02" balanceinertia="true"/>
      <worldbody><body name="b"><freejoint/>
        <geom type="box" size="0.01 0.3 0.02" euler="10 40 -20" density="100"/>
      </body></worldbody></mujoco>"""
    _assert_matches_mujoco(xml, "b")
    assert float(spatial_inertia_from_mjcf(xml, "b").mass) == 3.0


def test_unsupported_geoms_are_named():
    mesh = """<mujoco><asset><mesh name="tet" vertex="0 0 0  1 0 0  0 1 0  0 0 1"/></asset>
      <worldbody><body name="b"><freejoint/><geom type="box" size=".1 .1 .1"/>
        <geom name="hull" type="mesh" mesh="tet"/></body></worldbody></mujoco>"""
    with pytest.raises(UnsupportedGeomError, match=r"'hull'.*'mesh'"):
        rigid_body_from_mjcf(mesh, "b")
    # the same mesh with zero mass contributes nothing: accepted, equal to MuJoCo
    massless = mesh.replace('mesh="tet"', 'mesh="tet" mass="0"')
    _assert_matches_mujoco(massless, "b")
    # an explicit <inertial> makes the geoms irrelevant (inertiafromgeom="auto")
    inertial = mesh.replace("<freejoint/>", '<freejoint/><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>')
    assert float(spatial_inertia_from_mjcf(inertial, "b").mass) == 1.0
    fitted = """<mujoco><asset><mesh name="tet" vertex="0 0 0  1 0 0  0 1 0  0 0 1"/></asset>
      <worldbody><body name="b"><freejoint/><geom type="box" mesh="tet"/></body></worldbody></mujoco>"""
    with pytest.raises(UnsupportedGeomError, match=r"#0.*fitted to mesh 'tet'"):
        rigid_body_from_mjcf(fitted, "b")


def test_errors_name_source_and_body():
    with pytest.raises(MjcfInertiaError, match=r"no body 'nope'.*'brick'"):
        rigid_body_from_mjcf("brick", "nope")
    with pytest.raises(MjcfInertiaError, match="world"):
        rigid_body_from_mjcf("brick", "world")
    xml = """<mujoco><compiler settotalmass="3"/><worldbody><body name="b"><freejoint/>
      <geom type="sphere" size=".1"/></body></worldbody></mujoco>"""
    with pytest.raises(MjcfInertiaError, match="settotalmass"):
        rigid_body_from_mjcf(xml, "b")
    empty = """<mujoco><worldbody><body name="b"><freejoint/><geom type="sphere" size=".1" mass="0"/>
      <geom type="sphere" size=".1" pos="0 0 1" mass="0"/></body></worldbody></mujoco>"""
    with pytest.raises(MjcfInertiaError, match="no inertia"):
        rigid_body_from_mjcf(empty, "b")
    # inertial validation errors carry the body name (MjSpec input works as well)
    spec = mujoco.MjSpec.from_string("""<mujoco><worldbody><body name="b"><freejoint/>
      <inertial pos="0 0 0" mass="1" fullinertia="1 1 1 1.5 0 0"/></body></worldbody></mujoco>""")
    with pytest.raises(IndefiniteInertiaError, match="'b'"):
        rigid_body_from_mjcf(spec, "b")
    spec = mujoco.MjSpec.from_string("""<mujoco><worldbody><body name="b"><freejoint/>
      <inertial pos="0 0 0" mass="-1" diaginertia="1 1 1"/></body></worldbody></mujoco>""")
    with pytest.raises(MassError, match="'b'"):
        rigid_body_from_mjcf(spec, "b")


def test_sources_gravity_and_rigid_body():
    ref = spatial_inertia_from_mjcf("brick", "brick")
    with open(scene_path("brick")) as f:
        text = f.read()
    for src in (scene_path("brick"), text, load_scene("brick")):
        rb = rigid_body_from_mjcf(src, "brick")
        assert isinstance(rb, RigidBody)
        np.testing.assert_array_equal(rb.inertia.inertia, ref.inertia)
        np.testing.assert_array_equal(rb.gravity, [0.0, 0.0, 0.0])
    xml = """<mujoco><option gravity="0.5 0 -9"/><worldbody>
      <body name="a"><freejoint/><geom type="sphere" size=".1"/></body>
      <body name="c" gravcomp="0.25"><freejoint/><geom type="sphere" size=".1"/></body>
      </worldbody></mujoco>"""
    np.testing.assert_allclose(rigid_body_from_mjcf(xml, "a").gravity, [0.5, 0, -9])
    np.testing.assert_allclose(rigid_body_from_mjcf(xml, "c").gravity, [0.375, 0, -6.75])
    off = xml.replace("<option ", '<option><flag gravity="disable"/></option><option ')
    np.testing.assert_array_equal(rigid_body_from_mjcf(off, "a").gravity, [0.0, 0.0, 0.0])
