"""MJCF reader for the reference model: the inertia of one body from its geoms, by our own formulas.

``mujoco.MjSpec`` parses the file (it resolves defaults/classes, ``childclass`` and ``<frame>``
nesting into plain attributes); everything after that is ours: orientation conventions, ``fromto``,
per-geom volume, mass and inertia (solid or ``shellinertia``), the parallel-axis combination and the
compiler options that change a body's inertia. MuJoCo's compiled ``body_mass``/``body_ipos``/
``body_inertia``/``body_iquat`` are only used by the tests, as the independent reference.

Rules, as MuJoCo's compiler applies them:
- ``inertiafromgeom="auto"`` (default): an explicit ``<inertial>`` wins, otherwise the geoms;
  ``"true"``: always the geoms; ``"false"``: only ``<inertial>``.
- geoms whose ``group`` is outside ``inertiagrouprange`` contribute nothing; a geom with explicit
  ``mass`` uses density = mass / volume; ``mass="0"`` or ``density="0"`` contributes nothing.
- supported geom types: sphere, capsule (hemispherical caps), cylinder, ellipsoid, box.
  A contributing mesh, hfield, plane or sdf geom (or a primitive fitted to a mesh) is an error that
  names the geom and its type — never silently skipped.
- ``boundmass``, ``boundinertia`` and ``balanceinertia`` are applied to the body; ``settotalmass``
  (a scale over every body) and ``alignfree`` (moves the body frame) are refused with a clear error.
"""

from __future__ import annotations

import os

import mujoco
import numpy as np

from mjharness.integrators.errors import UserError
from mjharness.integrators.rotations import quat_to_mat, rot
from mjharness.scenes import _parse as _parse_scene
from mjharness.scenes import scene_info

from .reference import InertiaError, RigidBody, SpatialInertia

__all__ = ["rigid_body_from_mjcf", "spatial_inertia_from_mjcf", "geom_mass_inertia", "geom_volume",
           "MjcfInertiaError", "UnsupportedGeomError"]

_G = mujoco.mjtGeom
SUPPORTED = {_G.mjGEOM_SPHERE: "sphere", _G.mjGEOM_CAPSULE: "capsule", _G.mjGEOM_CYLINDER: "cylinder",
             _G.mjGEOM_ELLIPSOID: "ellipsoid", _G.mjGEOM_BOX: "box"}
_FROMTO_TYPES = (_G.mjGEOM_CAPSULE, _G.mjGEOM_CYLINDER, _G.mjGEOM_ELLIPSOID, _G.mjGEOM_BOX)


class MjcfInertiaError(UserError, ValueError):
    """The inertia of an MJCF body could not be computed (names the source, body and geom)."""


class UnsupportedGeomError(MjcfInertiaError):
    """A geom that contributes mass has a type whose inertia this reader does not compute."""


# ----------------------------------------------------------------------------------------------------
# per-geom formulas (geom frame, about the geom centre; sizes are MuJoCo half-sizes/radii)

def geom_volume(kind: str, size, shell: bool = False) -> float:
    """Volume (or surface area when ``shell``) of a primitive geom, as MuJoCo defines the shapes."""
    s = np.asarray(size, dtype=np.float64)
    pi = np.pi
    if kind == "sphere":
        r = s[0]
        return 4 * pi * r * r if shell else 4 * pi * r ** 3 / 3
    if kind == "capsule":
        r, h = s[0], 2 * s[1]
        return 4 * pi * r * r + 2 * pi * r * h if shell else pi * (r * r * h + 4 * r ** 3 / 3)
    if kind == "cylinder":
        r, h = s[0], 2 * s[1]
        return 2 * pi * r * r + 2 * pi * r * h if shell else pi * r * r * h
    if kind == "ellipsoid":
        a, b, c = s[:3]
        if shell:  # Knud Thomsen's approximation of the ellipsoid surface, as MuJoCo uses
            p = 1.6075
            return 4 * pi * (((a * b) ** p + (b * c) ** p + (c * a) ** p) / 3) ** (1 / p)
        return 4 * pi * a * b * c / 3
    if kind == "box":
        a, b, c = s[:3]
        return 8 * (a * b + b * c + c * a) if shell else 8 * a * b * c
    raise ValueError(f"no volume formula for geom type {kind!r}")


def _capsule_inertia(s: np.ndarray, m: float, shell: bool) -> np.ndarray:
    r, hh = s[0], s[1]
    h = 2 * hh
    if shell:
        a_sph, a_cyl = 4 * np.pi * r * r, 2 * np.pi * r * h
        m_sph = m * a_sph / (a_sph + a_cyl)
        m_cyl = m - m_sph
        ixx = m_cyl * (6 * r * r + h * h) / 12
        izz = m_cyl * r * r
        i_sph = 2 * m_sph * r * r / 3
        com, pos = r / 2, hh + r / 2  # hemispherical shell: COM r/2 from the flat face
        ixx += i_sph + m_sph * (pos * pos - com * com)
    else:
        m_sph = m * 4 * r / (4 * r + 3 * h)
        m_cyl = m - m_sph
        ixx = m_cyl * (3 * r * r + h * h) / 12
        izz = m_cyl * r * r / 2
        i_sph = 2 * m_sph * r * r / 5
        # two hemispheres: 2/5 m r^2 - m (3r/8)^2 + m (h/2 + 3r/8)^2 = 2/5 m r^2 + m h (3r + 2h) / 8
        ixx += i_sph + m_sph * h * (3 * r + 2 * h) / 8
    return np.array([ixx, ixx, izz + i_sph])


def _cylinder_inertia(s: np.ndarray, m: float, shell: bool) -> np.ndarray:
    r, hh = s[0], s[1]
    h = 2 * hh
    if shell:
        a_disk, a_side = np.pi * r * r, 2 * np.pi * r * h
        m_disk = m * a_disk / (2 * a_disk + a_side)
        m_side = m - 2 * m_disk
        ixx = m_side * (6 * r * r + h * h) / 12 + 2 * (m_disk * r * r / 4 + m_disk * hh * hh)
        izz = m_side * r * r + 2 * (m_disk * r * r / 2)
        return np.array([ixx, ixx, izz])
    ixx = m * (3 * r * r + h * h) / 12
    return np.array([ixx, ixx, m * r * r / 2])


def _ellipsoid_inertia(s: np.ndarray, m: float, shell: bool) -> np.ndarray:
    a, b, c = s[:3]
    if shell:
        eps = 1e-6
        va = 4 * np.pi * a * b * c / 3
        ae, be, ce = a + eps, b + eps, c + eps
        vb = 4 * np.pi * ae * be * ce / 3
        rho = m / (vb - va)
        ma, mb = va * rho, vb * rho
        ia = np.array([ma * (b * b + c * c), ma * (a * a + c * c), ma * (a * a + b * b)]) / 5
        ib = np.array([mb * (be * be + ce * ce), mb * (ae * ae + ce * ce), mb * (ae * ae + be * be)]) / 5
        return ib - ia
    return m * np.array([b * b + c * c, a * a + c * c, a * a + b * b]) / 5


def _box_inertia(s: np.ndarray, m: float, shell: bool) -> np.ndarray:
    a, b, c = s[:3]
    if shell:  # six plates: the two of each pair at distance ±half-size
        lx, ly, lz = 2 * a, 2 * b, 2 * c
        A0, A1, A2 = lx * ly, ly * lz, lz * lx
        tot = 2 * (A0 + A1 + A2)
        m0, m1, m2 = m * A0 / tot, m * A1 / tot, m * A2 / tot
        ixx = 2 * (m0 * c * c + m2 * b * b + m0 * ly * ly / 12 + m1 * (ly * ly + lz * lz) / 12
                   + m2 * lz * lz / 12)
        iyy = 2 * (m0 * c * c + m1 * a * a + m0 * lx * lx / 12 + m1 * lz * lz / 12
                   + m2 * (lx * lx + lz * lz) / 12)
        izz = 2 * (m1 * a * a + m2 * b * b + m0 * (lx * lx + ly * ly) / 12 + m1 * ly * ly / 12
                   + m2 * lx * lx / 12)
        return np.array([ixx, iyy, izz])
    return m * np.array([b * b + c * c, a * a + c * c, a * a + b * b]) / 3


_GEOM_INERTIA = {"capsule": _capsule_inertia, "cylinder": _cylinder_inertia, "ellipsoid": _ellipsoid_inertia,
                 "box": _box_inertia}


def geom_mass_inertia(kind: str, size, mass: float, shell: bool = False) -> np.ndarray:
    """Principal moments (3,) about the centre, geom axes, of a geom of ``mass``.

    Solid: the textbook formulas; the capsule is a cylinder of length 2*size[1] plus two solid
    hemispheres (mass split by volume, each shifted by the parallel-axis theorem from its own COM,
    3r/8 from its flat face). Shell (mass on the surface): the same split by area, thin-walled parts;
    the ellipsoid shell is the difference of two solids 1e-6 apart, as MuJoCo computes it.
    """
    s = np.asarray(size, dtype=np.float64)
    m = float(mass)
    if kind == "sphere":
        r2 = s[0] * s[0]
        return np.full(3, (2 * m * r2 / 3) if shell else (2 * m * r2 / 5))
    formula = _GEOM_INERTIA.get(kind) if isinstance(kind, str) else None
    if formula is not None:
        return formula(s, m, shell)
    raise ValueError(f"no inertia formula for geom type {kind!r}")


# ----------------------------------------------------------------------------------------------------
# poses

def _z2mat(vec) -> np.ndarray:
    """Minimal rotation taking +z to ``vec`` (MuJoCo's z2quat; 180° about x when vec ∥ -z)."""
    v = np.asarray(vec, dtype=np.float64)
    v = v / np.linalg.norm(v)
    axis = np.cross([0.0, 0.0, 1.0], v)
    s = float(np.linalg.norm(axis))
    if s < 1e-10:
        axis, s = np.array([1.0, 0.0, 0.0]), 0.0
    else:
        axis = axis / s
    return np.asarray(rot(axis, np.arctan2(s, v[2])))


def _orientation(spec, quat, alt) -> np.ndarray:
    """Rotation of an element: ``quat`` unless an alternative (euler/axisangle/xyaxes/zaxis) was given."""
    if alt.type != mujoco.mjtOrientation.mjORIENTATION_QUAT:
        # MjSpec's resolver applies the compiler's angle unit and euler sequence to the alternative.
        quat = spec.resolve_orientation(spec.compiler.degree, spec.compiler.eulerseq, alt)
    return np.asarray(quat_to_mat(np.asarray(quat, dtype=np.float64)))


def _frame_pose(spec, frame):
    """(R, p) of a <frame> chain in its body's coordinates."""
    R, p = np.eye(3), np.zeros(3)
    while frame is not None:
        Rf = _orientation(spec, frame.quat, frame.alt)
        R, p = Rf @ R, Rf @ p + np.asarray(frame.pos, dtype=np.float64)
        frame = frame.frame
    return R, p


# ----------------------------------------------------------------------------------------------------
# body

def _geom_label(g, k: int) -> str:
    return f"geom {g.name!r}" if g.name else f"geom #{k} (unnamed)"


def _geom_contribution(spec, g, k: int, where: str):
    """(mass, com (3,), inertia about its com (3, 3)) of one geom in body coordinates, or None."""
    label = _geom_label(g, k)
    mass_given = not np.isnan(g.mass)
    if (mass_given and g.mass == 0) or (not mass_given and g.density == 0):
        return None  # contributes exactly nothing, whatever its shape
    if g.type not in SUPPORTED:
        tname = str(g.type).split("_")[-1].lower()
        raise UnsupportedGeomError(f"{where}: {label} has type {tname!r}, whose inertia is not computed by "
                                   f"this reader (supported: {', '.join(SUPPORTED.values())}); give the body "
                                   f"an explicit <inertial> or set the geom's mass to 0")
    if g.meshname:
        raise UnsupportedGeomError(f"{where}: {label} ({SUPPORTED[g.type]}) is fitted to mesh "
                                   f"{g.meshname!r}; its size comes from the mesh, which this reader does not "
                                   f"process; give the body an explicit <inertial>")
    kind = SUPPORTED[g.type]
    size = np.array(g.size, dtype=np.float64)
    fromto = np.asarray(g.fromto, dtype=np.float64)
    if not np.isnan(fromto[0]) and g.type in _FROMTO_TYPES:
        a, b = fromto[:3], fromto[3:]
        vec = a - b
        length = np.linalg.norm(vec)
        if not length > 0:
            raise MjcfInertiaError(f"{where}: {label} has a zero-length fromto {fromto.tolist()}")
        if kind in ("box", "ellipsoid"):
            size = np.array([size[0], size[0], length / 2])
        else:
            size[1] = length / 2
        R, p = _z2mat(vec), (a + b) / 2
    else:
        R, p = _orientation(spec, g.quat, g.alt), np.asarray(g.pos, dtype=np.float64)
    shell = g.typeinertia == mujoco.mjtGeomInertia.mjINERTIA_SHELL
    vol = geom_volume(kind, size, shell)
    if mass_given:
        if not vol > 0:
            raise MjcfInertiaError(f"{where}: {label} ({kind}, size {size.tolist()}) has no volume for its "
                                   f"mass {g.mass}")
        mass = float(g.mass)
    else:
        mass = float(g.density) * vol
    diag = geom_mass_inertia(kind, size, mass, shell)
    Rf, pf = _frame_pose(spec, g.frame)
    R, p = Rf @ R, Rf @ p + pf
    return mass, p, R @ np.diag(diag) @ R.T


def _combine(parts):
    m = sum(pm for pm, _, _ in parts)
    com = sum(pm * pc for pm, pc, _ in parts) / m
    I = np.zeros((3, 3))
    for pm, pc, pI in parts:
        d = pc - com
        I += pI + pm * (d @ d * np.eye(3) - np.outer(d, d))
    return m, com, I


def _apply_bounds(spec, mass, I):
    c = spec.compiler
    if c.boundmass > 0:
        mass = max(mass, c.boundmass)
    if c.boundinertia > 0 or c.balanceinertia:
        w, V = np.linalg.eigh(I)
        if c.boundinertia > 0:
            w = np.maximum(w, c.boundinertia)
        if c.balanceinertia and (w[0] + w[1] < w[2] or w[0] + w[2] < w[1] or w[1] + w[2] < w[0]):
            w = np.full(3, w.mean())
        I = V @ np.diag(w) @ V.T
    return mass, I


def _load_spec(src):
    """(MjSpec, source description) from what ``load_scene`` accepts, an MjModel or an MjSpec."""
    if isinstance(src, mujoco.MjSpec):
        return src, "MjSpec"
    if isinstance(src, mujoco.MjModel):
        info = scene_info(src)
        if not info.xml:
            raise MjcfInertiaError("MjModel: its MJCF is not available (load it with mjharness.scenes."
                                   "load_scene, or pass the path or XML instead)")
        return _parse_scene(info.xml)[0], info.source
    if isinstance(src, os.PathLike):
        src = os.fspath(src)
    # Parsed only, not compiled: every number below is ours, and our own checks (SpatialInertia)
    # name the body and the defect more precisely than the compiler would.
    return _parse_scene(src)


def _spatial_inertia(spec, source: str, body: str):
    if not isinstance(body, str):
        raise TypeError(f"body must be a body name, got {type(body).__name__}")
    names = [b.name for b in spec.bodies if b.name and b.name != "world"]
    b = spec.body(body) if body != "world" else None
    if b is None:
        raise MjcfInertiaError(f"{source}: no body {body!r} (the world body has no inertia); bodies: "
                               f"{', '.join(map(repr, names)) or 'none'}")
    where = f"{source}, body {body!r}"
    c = spec.compiler
    if c.settotalmass > 0:
        raise MjcfInertiaError(f"{where}: compiler settotalmass={c.settotalmass} rescales every body of the "
                               f"model; not supported by this reader")
    if c.alignfree and any(j.type == mujoco.mjtJoint.mjJNT_FREE for j in b.joints):
        raise MjcfInertiaError(f"{where}: compiler alignfree='true' moves a free body's frame to MuJoCo's "
                               f"principal axes; not supported by this reader")
    mode = c.inertiafromgeom
    use_inertial = (mode == mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
                    or (mode == mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_AUTO and b.explicitinertial))
    if use_inertial:
        if not b.explicitinertial:
            raise MjcfInertiaError(f"{where}: compiler inertiafromgeom='false' but the body has no <inertial>")
        Ri = _orientation(spec, b.iquat, b.ialt)
        full = np.asarray(b.fullinertia, dtype=np.float64)
        if not np.isnan(full[0]):
            xx, yy, zz, xy, xz, yz = full
            tensor = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
        else:
            tensor = np.diag(np.asarray(b.inertia, dtype=np.float64))
        mass, com, I = float(b.mass), np.asarray(b.ipos, dtype=np.float64), Ri @ tensor @ Ri.T
    else:
        lo, hi = c.inertiagrouprange
        parts = []
        for k, g in enumerate(b.geoms):
            if not lo <= g.group <= hi:
                continue  # outside inertiagrouprange: not part of the body's inertia (MuJoCo's rule)
            part = _geom_contribution(spec, g, k, where)
            if part is not None:
                parts.append(part)
        if not parts:
            raise MjcfInertiaError(f"{where}: no <inertial> and no geom with mass; the body has no inertia")
        mass, com, I = _combine(parts)
    mass, I = _apply_bounds(spec, mass, I)
    try:
        return SpatialInertia(mass, com, I), b
    except InertiaError as e:
        raise type(e)(f"{where}: {e}") from None


def spatial_inertia_from_mjcf(src, body: str) -> SpatialInertia:
    """``SpatialInertia`` (body frame, about the COM) of ``body`` computed from the MJCF ``src``."""
    spec, source = _load_spec(src)
    return _spatial_inertia(spec, source, body)[0]


def rigid_body_from_mjcf(src: str | os.PathLike[str] | mujoco.MjModel, body: str) -> RigidBody:
    """Reference ``RigidBody`` of ``body`` in the MJCF ``src`` (path, XML string, bundled name,
    MjModel from ``load_scene``, or MjSpec).

    Inertia: computed from the body's geoms (or its ``<inertial>``) by this module's formulas, in
    the body frame as authored (the frame MuJoCo's free joint uses). Gravity: the model's
    ``option/gravity`` (zero when ``<flag gravity="disable"/>``), scaled by ``1 - gravcomp`` of the
    body. The dynamics are those of a free body, whatever joint the body has in the scene.
    """
    spec, source = _load_spec(src)
    si, b = _spatial_inertia(spec, source, body)
    g = np.asarray(spec.option.gravity, dtype=np.float64)
    if spec.option.disableflags & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY):
        g = np.zeros(3)
    return RigidBody(si, g * (1.0 - float(b.gravcomp)))
