"""Recorded outputs: MuJoCo quantities (sensors, poses, forces, energy) evaluated at recorded rows.

An output is named like the MuJoCo ``mjData`` field it records (``xpos``, ``site_xpos``,
``cfrc_ext``, ...), or ``sensordata`` (every sensor), ``sensor:<name>`` (one MJCF sensor),
``energy``, ``contact_force``, ``contacts`` (every contact of a world in K slots, ``contacts:K``; see
``adapters/contacts.py``), ``applied_wrench`` (the force providers' wrench sums, ``adapters/forces.py``) and the
flight outputs ``geodetic``, ``ned_velocity``, ``euler_ned``, ... of a scene with a flight frame
(``adapters/flight_outputs.py``: functions of (t, x), computed in JAX on every backend);
or it is a user function ``fn(scene, t, x, data) -> array`` (or a ``(name, fn)`` pair) of the MJX data after the
forward pass (diffrax's ``SaveAt(fn=...)`` idea).

Each kind is one entry of the registry ``KINDS`` (``OutputKind``: how a name parses into an
``OutputSpec`` row, how the value is read off MJX data, how off MuJoCo C's ``MjData``); plain
``mjData`` fields are the table ``FIELDS``. ``parse_outputs`` checks the names against the model;
``evaluate_outputs`` is a pure function of one world that asks the scene's backend: MJX runs
``mjx.forward`` (plus ``rne_postconstraint`` where MuJoCo needs it) and reads each row's kind;
MuJoCo C evaluates one batched host call per recorded row (``backends/host.HostOutputs``:
mj_setState + mj_forward, plus mj_rnePostConstraint, mj_energyPos/Vel and mj_contactForce where
needed), so its values are MuJoCo C's own.

Semantics: ``live`` = evaluated at the recorded state and time (after the step), consistent with
``/x`` at the same row; ``sampled`` = evaluated at the state before the last step of the sample
(what ``mj_step`` leaves in ``mjData``). Both cost one forward evaluation per recorded row and world.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from mjharness.integrators.names import OutputSemantics

from .backends.host import WRENCH
from .flight_outputs import FIELD as FLIGHT
from .flight_outputs import OUTPUTS as FLIGHT_OUTPUTS
from .flight_outputs import evaluate_flight, parse_flight
from .forces import mjx_wrench
from .output_eval import (  # noqa: E402 - the evaluators of each kind
    OutputError,
    _contact_force,
    _energy,
    _get,
    _host_contact_counts,
    _host_contact_force,
    _host_contacts,
    _host_energy,
    _host_field,
    _host_sensors,
    _mjx_contact_counts,
    _mjx_contacts,
    _mjx_sensors,
    _no_host,
)

SEMANTICS = OutputSemantics.values()
_OBJ = mujoco.mjtObj


@dataclass(frozen=True)
class OutputSpec:
    """One recorded output: what it reads, its per-world shape and its metadata (all hashable)."""

    name: str                 # as the user wrote it (dataset name under /outputs)
    field: str                # MuJoCo field it reads ("sensordata", "xpos", ..., "energy", "contact_force", "callable")
    shape: tuple              # per world
    index: tuple = ()         # sensor:<name>: (adr, dim) into sensordata
    units: str = ""
    frame: str = ""
    labels: tuple = ()        # names along the first per-world axis
    comps: tuple = ()         # names along the last per-world axis
    extra: tuple = ()         # ((attr, value), ...) e.g. contact_force's pair ids
    fn: object = None         # a user output function (kind "callable")

    @property
    def kind(self) -> OutputKind:
        return KIND_OF_FIELD.get(self.field, FIELD_KIND)


# field -> (object type for the row labels or None, components, units, frame, needs rne_postconstraint)
FIELDS: dict[str, tuple[Any, ...]] = {
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


def _parse_sensors(m: mujoco.MjModel, name: str) -> OutputSpec | None:
    if name == "sensordata":
        if m.nsensordata == 0:
            raise OutputError("output 'sensordata': the model has no sensors")
        if m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_SENSOR:
            raise OutputError("output 'sensordata': the model's sensors are switched off (the 'sensor' disable flag; "
                              "load_scene switches them off when MJX cannot trace them unless need_sensors=True)")
        comps = tuple(f"{r['name']}[{k}]" if r["dim"] > 1 else r["name"]
                      for r in sensor_table(m) for k in range(r["dim"]))
        return OutputSpec(name, "sensordata", (m.nsensordata,), units="per sensor (see /sensors)", frame="per sensor",
                          comps=comps)
    if not name.startswith("sensor:"):
        return None
    sname = name[7:]
    i = mujoco.mj_name2id(m, _OBJ.mjOBJ_SENSOR, sname)
    if i < 0:
        known = [r["name"] for r in sensor_table(m)]
        raise OutputError(f"output {name!r}: no sensor named {sname!r} in the model (sensors: {known})")
    if m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_SENSOR:
        raise OutputError(f"output {name!r}: the model's sensors are switched off (the 'sensor' disable flag)")
    adr, dim = int(m.sensor_adr[i]), int(m.sensor_dim[i])
    typ = mujoco.mjtSensor(int(m.sensor_type[i])).name[7:].lower()
    return OutputSpec(name, "sensordata", (dim,), index=(adr, dim), units=f"MuJoCo {typ} sensor units (SI)",
                      frame="sensor's (MuJoCo convention)", comps=tuple(str(k) for k in range(dim)))


def _parse_energy(m: mujoco.MjModel, name: str) -> OutputSpec | None:
    if name != "energy":
        return None
    _check_energy(m)
    return OutputSpec(name, "energy", (2,), units="J", frame="world", comps=("potential", "kinetic"))


def _parse_contact_force(m: mujoco.MjModel, name: str) -> OutputSpec | None:
    if name != "contact_force":
        return None
    pairs = _contact_pairs(m)
    if len(pairs) == 0:
        raise OutputError("output 'contact_force': the model has no geom pair that can collide")
    geoms = _names(m, _OBJ.mjOBJ_GEOM, m.ngeom)  # generic readers label the pairs by name; ids stay in pair_geom
    return OutputSpec(name, "contact_force", (len(pairs),), units="N", frame="contact normal (sum over the pair's "
                      "contacts)", labels=tuple(f"{geoms[a]}-{geoms[b]}" for a, b in pairs),
                      extra=(("pair_geom", tuple(map(tuple, pairs.tolist()))),))


def _parse_contacts(m: mujoco.MjModel, name: str) -> tuple[OutputSpec, OutputSpec] | None:
    """``contacts`` or ``contacts:K``: the slots (K, len(COLUMNS)) and the counts ``<name>_ncon`` (3,)."""
    from . import contacts as C

    if name != "contacts" and not name.startswith("contacts:"):
        return None
    pairs = _contact_pairs(m)
    if len(pairs) == 0 or m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT:
        raise OutputError(f"output {name!r}: the model has no geom pair that can collide (or contacts are disabled)")
    k = name[len("contacts:"):] if ":" in name else str(C.default_slots(m, pairs))
    if not k.isdigit() or int(k) < 1:
        raise OutputError(f"output {name!r}: K in 'contacts:K' is a positive number of slots per world, got {k!r}")
    K = int(k)
    about = (("capacity", K), ("model_contact_bound", C.model_contact_bound(m, pairs)),
             ("order", "valid slots by (geom1, geom2), ties in MuJoCo's own contact order; then empty slots "
                       "(geom1 = geom2 = id = -1, valid = 0, the rest 0)"), ("counts", f"{name}_ncon"))
    slots = OutputSpec(name, "contacts", (K, len(C.COLUMNS)), units="geom id | m | 1 | m | N, N m",
                       frame="world (pos, frame rows: normal, tangent1, tangent2); force in the contact frame "
                       "(mj_contactForce)", labels=tuple(f"slot{i}" for i in range(K)), comps=C.COLUMNS,
                       extra=about)  # every axis labelled: xarray/h5netcdf refuse a dataset with a bare one
    bits = "; ".join(f"{b}: {t}" for b, t in C.OVERFLOW.items())
    counts = OutputSpec(f"{name}_ncon", "contacts_ncon", (len(C.COUNT_COLUMNS),), units="1",
                        frame="per world", comps=C.COUNT_COLUMNS,
                        extra=(("capacity", K), ("overflow_bits", bits), ("slots", name)))
    return slots, counts


def _parse_applied_wrench(m: mujoco.MjModel, name: str) -> OutputSpec | None:
    if name != WRENCH:
        return None
    return OutputSpec(name, WRENCH, (m.nbody, 6), units="N | N m", labels=_names(m, _OBJ.mjOBJ_BODY, m.nbody),
                      frame="world: force at the body's centre of mass (xipos), torque about it (as xfrc_applied); "
                            "the sum of the scene's force providers (add_force), zeros without",
                      comps=("fx", "fy", "fz", "tx", "ty", "tz"))


def _host_wrench(m, d, s):
    zeros = np.zeros(int(np.prod(s.shape)))
    return lambda: zeros  # host.HostOutputs writes the providers' sums of the whole batch into these columns


def _parse_field(m: mujoco.MjModel, name: str) -> OutputSpec | None:
    if name not in FIELDS:
        return None
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


def parse_outputs(m: mujoco.MjModel, outputs, scene=None) -> tuple[OutputSpec, ...]:
    """Check outputs against the model; () for None. A name is parsed by the first kind of ``KINDS`` that
    knows it; a callable (or ``(name, fn)``) needs ``scene`` (its shape is traced abstractly, nothing
    compiles). Raises ``OutputError`` naming the bad one."""
    if outputs is None:
        return ()
    if isinstance(outputs, str) or callable(outputs):
        outputs = (outputs,)
    specs: list[OutputSpec] = []
    seen: set[str] = set()
    for item in outputs:
        flight = None if _is_callable_output(item) else parse_flight(scene, item)
        spec = (_callable_spec(item, scene) if _is_callable_output(item)
                else OutputSpec(**flight) if flight is not None else _parse_name(m, item))
        for s in spec if isinstance(spec, tuple) else (spec,):  # one name may record several datasets
            if s.name in seen or (s.field == "contacts" and any(o.field == "contacts" for o in specs)):
                raise OutputError(f"output {s.name!r} is asked twice")
            seen.add(s.name)
            specs.append(s)
    return tuple(specs)


def _parse_name(m: mujoco.MjModel, name) -> OutputSpec | tuple:
    if not isinstance(name, str) or not name:
        raise OutputError(f"output names must be non-empty strings or functions fn(scene, t, x, data), got {name!r}")
    for kind in KINDS:
        spec = kind.parse(m, name)
        if spec is not None:
            return spec
    raise OutputError(f"unknown output {name!r}: use 'sensordata', 'sensor:<name>', 'energy', 'contact_force', "
                      f"'contacts' ('contacts:K'), 'applied_wrench', the flight outputs (scene.set_flight) "
                      f"{sorted(FLIGHT_OUTPUTS)}, "
                      f"a function fn(scene, t, x, data), or one of the MuJoCo fields {sorted(FIELDS)}")


def _is_callable_output(item) -> bool:
    return callable(item) or (isinstance(item, tuple) and len(item) == 2 and callable(item[1]))


def has_callables(outputs) -> bool:
    """Whether ``outputs`` (as given to ``rollout``) holds a user function (MJX data: an MJX backend)."""
    if outputs is None or isinstance(outputs, str):
        return False
    return callable(outputs) or any(_is_callable_output(o) for o in outputs)


def _callable_spec(item, scene) -> OutputSpec:

    name, fn = item if isinstance(item, tuple) else (getattr(item, "__name__", ""), item)
    if not isinstance(name, str) or not name or name == "<lambda>":
        raise OutputError(f"output function {fn!r} needs a name: pass (name, fn)")
    if scene is None or not hasattr(scene, "forward"):
        raise OutputError(f"output {name!r}: a function output needs an MjScene on an MJX backend")
    n = scene.layout.size
    try:
        out = jax.eval_shape(lambda t, x: fn(scene, t, x, scene.forward(t, x)),
                             jax.ShapeDtypeStruct((), jnp.float64), jax.ShapeDtypeStruct((n,), jnp.float64))
    except Exception as e:
        raise OutputError(f"output {name!r}: fn(scene, t, x, data) could not be traced with t () and x ({n},): "
                          f"{type(e).__name__}: {e}") from e
    if not isinstance(out, jax.ShapeDtypeStruct):
        raise OutputError(f"output {name!r}: fn must return one array, returned {out!r}")
    qual = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return OutputSpec(name, "callable", tuple(out.shape), units="user", frame="user function",
                      extra=(("function", qual),), fn=fn)


def needs_rne(specs) -> bool:
    return any(s.kind.needs_rne(s) for s in specs)


def evaluate_outputs(scene, specs, t, x, ctrl=None, carry=None) -> dict:
    """Outputs of one world at (t, x) with ``ctrl`` and the solver warm start in ``carry`` (pure), by the
    scene's backend (MJX data, or MuJoCo C on the host)."""
    ws = None if not carry else carry.get("qacc_warmstart")
    # flight outputs are functions of (t, x) alone: JAX on every backend (adapters/flight_outputs.py)
    flight = [s for s in specs if s.field == FLIGHT]
    rest = tuple(s for s in specs if s.field != FLIGHT)
    got = {**(scene.backend_impl.outputs(scene, rest, t, x, ctrl, ws) if rest else {}),
           **evaluate_flight(scene, flight, t, x)}
    return {s.name: got[s.name] for s in specs}


def mjx_outputs(scene, specs, t, x, ctrl, ws) -> dict:
    """Outputs of one world from ``mjx.forward`` (the MJX backends)."""
    from mjharness.scenes.settings import mjx

    d = scene.forward(t, x, ctrl, qacc_warmstart=ws)
    if needs_rne(specs):
        d = mjx.rne_postconstraint(scene.mjx_model, d)
    f = jnp.result_type(float)  # the run's float width: float64, or float32 in a float32 run
    return {s.name: jnp.reshape(jnp.asarray(s.kind.mjx(scene, t, x, d, s), f), s.shape) for s in specs}


def flagged_rows(specs, outputs: dict) -> dict:
    """{output name: (..., ) bool} for the outputs whose kind flags rows (contact overflow), from recorded values."""
    return {s.name: s.kind.flags(s, outputs[s.name]) for s in specs if s.kind.flags is not None and s.name in outputs}


def split_row(specs, flat) -> dict:
    """The flat row of a host evaluation (specs in order) -> {name: value of the spec's shape}."""
    out, o = {}, 0
    for s in specs:
        w = int(np.prod(s.shape, dtype=np.int64))
        out[s.name] = jnp.reshape(flat[..., o:o + w], flat.shape[:-1] + s.shape)
        o += w
    return out


def output_attrs(s: OutputSpec, semantics: OutputSemantics) -> dict:
    """The HDF5 attributes of ``/outputs/<name>``."""
    a: dict[str, Any]
    a = dict(semantics=OutputSemantics(semantics).value, units=s.units, frame=s.frame, mujoco_field=s.field,
             cost="computed in JAX from the recorded time and state" if s.field == FLIGHT else
             "one forward evaluation per recorded row and world (mjx.forward, or mj_forward on MuJoCo C)",
             stage="post-step (recorded state)" if semantics == OutputSemantics.LIVE
             else "pre-step (state before the last step)")
    if s.index:
        a["sensordata_columns"] = f"{s.index[0]}:{s.index[0] + s.index[1]}"
    for k, v in s.extra:
        a[k] = v if isinstance(v, str) else np.asarray(v)
    return a


# -- the registry: one entry per kind of output ---------------------------------------------------

@dataclass(frozen=True)
class OutputKind:
    """One kind of recorded output.

    Attributes:
        name: the kind (``OutputSpec.field`` of its rows; plain mjData fields share the kind "field").
        parse: ``(model, name) -> OutputSpec`` for the names of this kind, None for other names.
        mjx: ``(scene, t, x, data, spec) -> array`` read off MJX data after the forward pass.
        host: ``(model, data, spec) -> read()`` for MuJoCo C: ``read()`` returns the flat values after
            ``mj_forward`` (views and buffers set up once per MjData).
        needs_rne: ``spec -> bool``: whether the values need ``rne_postconstraint`` first.
        flags: ``(spec, values (..., *shape)) -> (...) bool``: rows a run must report (contact overflow), or None.
        field: ``(model, spec) -> (MjData field, its flat columns)`` where the values are that field as
            ``mj_forward`` leaves it (MuJoCo C then reads a whole batch off one ``mujoco.batch.Batch``), else None.
    """

    name: str
    parse: Callable[..., Any]
    mjx: Callable[..., Any]
    host: Callable[..., Any]
    needs_rne: Callable[..., bool] = lambda s: False
    flags: Callable[..., Any] | None = None
    field: Callable[..., Any] = lambda m, s: None


FIELD_KIND = OutputKind("field", _parse_field, lambda scene, t, x, d, s: _get(d, s.field), _host_field,
                        lambda s: FIELDS[s.field][4],
                        field=lambda m, s: None if FIELDS[s.field][4] else (s.field, slice(None)))
KINDS = (
    OutputKind("sensordata", _parse_sensors, _mjx_sensors, _host_sensors,
               field=lambda m, s: ("sensordata", slice(s.index[0], s.index[0] + s.index[1]) if s.index
                                   else slice(None))),
    OutputKind("energy", _parse_energy, lambda scene, t, x, d, s: _energy(scene.mjx_model, d), _host_energy),
    OutputKind("contact_force", _parse_contact_force,
               lambda scene, t, x, d, s: _contact_force(scene.mjx_model, d,
                                                        np.array(dict(s.extra)["pair_geom"], dtype=np.int64)),
               _host_contact_force),
    OutputKind("contacts", _parse_contacts, _mjx_contacts, _host_contacts),
    OutputKind("contacts_ncon", lambda m, name: None, _mjx_contact_counts, _host_contact_counts,
               flags=lambda s, v: np.asarray(v)[..., 2] != 0),
    OutputKind(WRENCH, _parse_applied_wrench, lambda scene, t, x, d, s: mjx_wrench(scene, t, x, d), _host_wrench),
    # flight outputs: parsed with the scene (parse_flight) and computed from (t, x) by evaluate_outputs
    OutputKind(FLIGHT, lambda m, name: None, lambda scene, t, x, d, s: evaluate_flight(scene, (s,), t, x)[s.name],
               _no_host),
    FIELD_KIND,
    OutputKind("callable", lambda m, name: None, lambda scene, t, x, d, s: s.fn(scene, t, x, d), _no_host),
)
KIND_OF_FIELD = {k.name: k for k in KINDS if k is not FIELD_KIND}
