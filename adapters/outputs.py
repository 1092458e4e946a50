"""Recorded outputs: MuJoCo quantities (sensors, poses, forces, energy) evaluated at recorded rows.

An output is named like the MuJoCo ``mjData`` field it records (``xpos``, ``site_xpos``,
``cfrc_ext``, ...), or ``sensordata`` (every sensor), ``sensor:<name>`` (one MJCF sensor),
``energy`` and ``contact_force``. ``parse_outputs`` checks the names against the model and returns
a table of ``OutputSpec`` rows (data); ``evaluate_outputs`` is a pure function of one world that
runs ``mjx.forward`` (plus MJX's ``rne_postconstraint`` where MuJoCo needs it) and reads them off.

On ``MjScene(backend="mujoco")`` the same outputs come from MuJoCo C instead: one batched host call
per recorded row (``mujoco_backend.HostOutputs``: mj_setState + mj_forward, plus mj_rnePostConstraint,
mj_energyPos/Vel and mj_contactForce where needed), so they are MuJoCo C's own values.

Semantics: ``live`` = evaluated at the recorded state and time (after the step), consistent with
``/x`` at the same row; ``sampled`` = evaluated at the state before the last step of the sample
(what ``mj_step`` leaves in ``mjData``). Both cost one forward evaluation per recorded row and world.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators.errors import UserError

SEMANTICS = ("live", "sampled")
_OBJ = mujoco.mjtObj


class OutputError(UserError, ValueError):
    """A bad output name or semantics; names the offending output."""


@dataclass(frozen=True)
class OutputSpec:
    """One recorded output: what it reads, its per-world shape and its metadata (all hashable)."""

    name: str                 # as the user wrote it (dataset name under /outputs)
    field: str                # MuJoCo field it reads ("sensordata", "xpos", ..., "energy", "contact_force")
    shape: tuple              # per world
    index: tuple = ()         # sensor:<name>: (adr, dim) into sensordata
    units: str = ""
    frame: str = ""
    labels: tuple = ()        # names along the first per-world axis
    comps: tuple = ()         # names along the last per-world axis
    extra: tuple = ()         # ((attr, value), ...) e.g. contact_force's pair ids


# field -> (object type for the row labels or None, components, units, frame, needs rne_postconstraint)
FIELDS = {
    "xpos": (_OBJ.mjOBJ_BODY, ("x", "y", "z"), "m", "world", False),
    "xquat": (_OBJ.mjOBJ_BODY, ("w", "x", "y", "z"), "1", "world (body to world rotation)", False),
    "xipos": (_OBJ.mjOBJ_BODY, ("x", "y", "z"), "m", "world (body center of mass)", False),
    "site_xpos": (_OBJ.mjOBJ_SITE, ("x", "y", "z"), "m", "world", False),
    "site_xmat": (_OBJ.mjOBJ_SITE, tuple(f"r{i}{j}" for i in range(3) for j in range(3)), "1",
                  "world (site to world rotation, row-major)", False),
    "subtree_com": (_OBJ.mjOBJ_BODY, ("x", "y", "z"), "m", "world", False),
    "cfrc_ext": (_OBJ.mjOBJ_BODY, ("rx", "ry", "rz", "fx", "fy", "fz"), "N m | N",
                 "com-based: world axes, about the subtree com of the body's root (MuJoCo cfrc_ext)", True),
    "qfrc_actuator": (None, None, "N | N m (per dof)", "generalized (dof)", False),
    "actuator_force": (_OBJ.mjOBJ_ACTUATOR, None, "N | N m (per actuator)", "actuator", False),
    "ctrl": (_OBJ.mjOBJ_ACTUATOR, None, "actuator units", "actuator", False),
    "qacc": (None, None, "m/s^2 | rad/s^2 (per dof)", "generalized (dof)", False),
}


def _names(m: mujoco.MjModel, obj, n: int) -> tuple:
    return tuple(mujoco.mj_id2name(m, obj, i) or f"{obj.name[6:].lower()}{i}" for i in range(n))


def sensor_table(m: mujoco.MjModel) -> list[dict]:
    """One row per sensor: name, type, object, adr, dim, cutoff, noise (MuJoCo's sensor fields)."""
    rows = []
    for i in range(m.nsensor):
        objtype = mujoco.mjtObj(int(m.sensor_objtype[i]))
        obj = mujoco.mj_id2name(m, objtype, int(m.sensor_objid[i])) if m.sensor_objid[i] >= 0 else ""
        rows.append(dict(name=mujoco.mj_id2name(m, _OBJ.mjOBJ_SENSOR, i) or f"sensor{i}",
                         type=mujoco.mjtSensor(int(m.sensor_type[i])).name[7:].lower(),
                         object=f"{objtype.name[6:].lower()}:{obj or int(m.sensor_objid[i])}",
                         adr=int(m.sensor_adr[i]), dim=int(m.sensor_dim[i]),
                         cutoff=float(m.sensor_cutoff[i]), noise=float(m.sensor_noise[i])))
    return rows


def _contact_pairs(m: mujoco.MjModel) -> np.ndarray:
    """(npair, 2) geom ids of every geom pair that can collide (explicit pairs and filtered auto pairs)."""
    pairs = {tuple(sorted((int(a), int(b)))) for a, b in zip(m.pair_geom1, m.pair_geom2)}
    body_root = m.body_rootid
    for g1 in range(m.ngeom):
        for g2 in range(g1 + 1, m.ngeom):
            b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
            can = m.geom_contype[g1] & m.geom_conaffinity[g2] or m.geom_contype[g2] & m.geom_conaffinity[g1]
            if b1 == b2 or not can:
                continue
            if b1 == 0 and b2 == 0 or (m.body_weldid[b1] == m.body_weldid[b2]):
                continue
            pa, pb = m.body_parentid[m.body_weldid[b1]], m.body_parentid[m.body_weldid[b2]]
            filt = not (m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT)
            if filt and (m.body_weldid[pa] == m.body_weldid[b2] or m.body_weldid[pb] == m.body_weldid[b1]) \
                    and body_root[b1] == body_root[b2] and m.body_weldid[b1] != 0 and m.body_weldid[b2] != 0:
                continue
            pairs.add((g1, g2))
    return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)


def _one(m: mujoco.MjModel, name: str) -> OutputSpec:
    if not isinstance(name, str) or not name:
        raise OutputError(f"output names must be non-empty strings, got {name!r}")
    if name == "sensordata":
        if m.nsensordata == 0:
            raise OutputError("output 'sensordata': the model has no sensors")
        comps = tuple(f"{r['name']}[{k}]" if r["dim"] > 1 else r["name"]
                      for r in sensor_table(m) for k in range(r["dim"]))
        return OutputSpec(name, "sensordata", (m.nsensordata,), units="per sensor (see /sensors)", frame="per sensor",
                          comps=comps)
    if name.startswith("sensor:"):
        sname = name[7:]
        i = mujoco.mj_name2id(m, _OBJ.mjOBJ_SENSOR, sname)
        if i < 0:
            known = [r["name"] for r in sensor_table(m)]
            raise OutputError(f"output {name!r}: no sensor named {sname!r} in the model (sensors: {known})")
        adr, dim = int(m.sensor_adr[i]), int(m.sensor_dim[i])
        typ = mujoco.mjtSensor(int(m.sensor_type[i])).name[7:].lower()
        return OutputSpec(name, "sensordata", (dim,), index=(adr, dim), units=f"MuJoCo {typ} sensor units (SI)",
                          frame="sensor's (MuJoCo convention)", comps=tuple(str(k) for k in range(dim)))
    if name == "energy":
        _check_energy(m)
        return OutputSpec(name, "energy", (2,), units="J", frame="world", comps=("potential", "kinetic"))
    if name == "contact_force":
        pairs = _contact_pairs(m)
        if len(pairs) == 0:
            raise OutputError("output 'contact_force': the model has no geom pair that can collide")
        return OutputSpec(name, "contact_force", (len(pairs),), units="N", frame="contact normal (sum over the pair's "
                          "contacts)", labels=tuple(f"{a}-{b}" for a, b in pairs),
                          extra=(("pair_geom", tuple(map(tuple, pairs.tolist()))),))
    if name not in FIELDS:
        raise OutputError(f"unknown output {name!r}: use 'sensordata', 'sensor:<name>', 'energy', 'contact_force' "
                          f"or one of the MuJoCo fields {sorted(FIELDS)}")
    obj, comps, units, frame, _ = FIELDS[name]
    n = {"qfrc_actuator": m.nv, "qacc": m.nv, "actuator_force": m.nu, "ctrl": m.nu}.get(name)
    if n is not None:
        if n == 0:
            raise OutputError(f"output {name!r}: the model has {'no actuators' if obj else 'no dofs'}")
        labels = _names(m, obj, n) if obj is not None else ()
        return OutputSpec(name, name, (n,), units=units, frame=frame, comps=labels)
    count = m.nbody if obj == _OBJ.mjOBJ_BODY else m.nsite
    if count == 0:
        raise OutputError(f"output {name!r}: the model has no sites")
    return OutputSpec(name, name, (count, len(comps)), units=units, frame=frame, labels=_names(m, obj, count),
                      comps=comps)


def _check_energy(m: mujoco.MjModel) -> None:
    # Computed here (MJX has no energy): gravity + hinge/slide springs + 0.5 v'Mv. Others are refused.
    bad = [_names(m, _OBJ.mjOBJ_JOINT, m.njnt)[j] for j in range(m.njnt)
           if m.jnt_stiffness[j] != 0 and m.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL)]
    if bad or (m.ntendon and np.any(m.tendon_stiffness != 0)):
        raise OutputError(f"output 'energy': spring energy of ball/free joints {bad} or tendons is not computed; "
                          f"remove their stiffness or drop the output")


def parse_outputs(m: mujoco.MjModel, outputs) -> tuple[OutputSpec, ...]:
    """Check output names against the model; () for None. Raises ``OutputError`` naming the bad one."""
    if outputs is None:
        return ()
    if isinstance(outputs, str):
        outputs = (outputs,)
    specs, seen = [], set()
    for name in outputs:
        if name in seen:
            raise OutputError(f"output {name!r} is asked twice")
        seen.add(name)
        specs.append(_one(m, name))
    return tuple(specs)


def needs_rne(specs) -> bool:
    return any(s.field in FIELDS and FIELDS[s.field][4] for s in specs)


def _energy(mx, d) -> jnp.ndarray:
    from mujoco.mjx._src import support

    pot = -jnp.sum(mx.body_mass[1:] * (d.xipos[1:] @ mx.opt.gravity))
    slide_hinge = (mx.jnt_type == int(mujoco.mjtJoint.mjJNT_SLIDE)) | (mx.jnt_type == int(mujoco.mjtJoint.mjJNT_HINGE))
    qadr = mx.jnt_qposadr
    dq = d.qpos[qadr] - mx.qpos_spring[qadr]
    pot = pot + 0.5 * jnp.sum(jnp.where(slide_hinge, mx.jnt_stiffness * dq * dq, 0.0))
    kin = 0.5 * jnp.dot(d.qvel, support.mul_m(mx, d, d.qvel))
    return jnp.stack([pot, kin])


def _get(d, name: str):
    """``d.<name>``; fields MJX moved to ``d._impl`` (contact, cfrc_ext, ...) are read there."""
    impl = getattr(d, "_impl", None)
    return getattr(impl, name) if impl is not None and hasattr(impl, name) else getattr(d, name)


def _contact_force(mx, d, pairs: np.ndarray) -> jnp.ndarray:
    from mujoco.mjx._src import support

    contact = _get(d, "contact")
    ncon = contact.geom.shape[0]
    if ncon == 0:
        return jnp.zeros(len(pairs))
    normal = jnp.stack([support.contact_force(mx, d, i)[0] for i in range(ncon)])
    active = contact.dist <= 0.0 if not hasattr(contact, "efc_address") else contact.efc_address >= 0
    g = jnp.sort(contact.geom, axis=-1)
    match = (g[None, :, 0] == pairs[:, None, 0]) & (g[None, :, 1] == pairs[:, None, 1]) & active[None, :]
    return jnp.sum(jnp.where(match, normal[None, :], 0.0), axis=1)


def evaluate_outputs(scene, specs, t, x, ctrl=None, carry=None) -> dict:
    """Outputs of one world at (t, x) with ``ctrl`` and the solver warm start in ``carry`` (pure)."""
    ws = None if not carry else carry.get("qacc_warmstart")
    if getattr(scene, "backend", "mjx") == "mujoco":
        return _split(specs, scene.host_outputs(specs, t, x, ctrl, ws, rne=needs_rne(specs)))
    from mujoco.mjx._src import smooth

    d = scene.forward(t, x, ctrl, qacc_warmstart=ws)
    if needs_rne(specs):
        d = smooth.rne_postconstraint(scene.mjx_model, d)
    out = {}
    for s in specs:
        if s.field == "sensordata":
            v = d.sensordata if not s.index else d.sensordata[s.index[0]:s.index[0] + s.index[1]]
        elif s.field == "energy":
            v = _energy(scene.mjx_model, d)
        elif s.field == "contact_force":
            v = _contact_force(scene.mjx_model, d, np.array(dict(s.extra)["pair_geom"], dtype=np.int64))
        else:
            v = _get(d, s.field)
        out[s.name] = jnp.reshape(jnp.asarray(v, jnp.float64), s.shape)
    return out


def _split(specs, flat) -> dict:
    """The flat row of a host evaluation (specs in order) -> {name: value of the spec's shape}."""
    out, o = {}, 0
    for s in specs:
        w = int(np.prod(s.shape, dtype=np.int64))
        out[s.name] = jnp.reshape(flat[..., o:o + w], flat.shape[:-1] + s.shape)
        o += w
    return out


def output_attrs(s: OutputSpec, semantics: str) -> dict:
    """The HDF5 attributes of ``/outputs/<name>``."""
    a = dict(semantics=semantics, units=s.units, frame=s.frame, mujoco_field=s.field,
             cost="one forward evaluation per recorded row and world (mjx.forward; backend='mujoco': mj_forward)",
             stage="post-step (recorded state)" if semantics == "live" else "pre-step (state before the last step)")
    if s.index:
        a["sensordata_columns"] = f"{s.index[0]}:{s.index[0] + s.index[1]}"
    for k, v in s.extra:
        a[k] = np.asarray(v)
    return a
