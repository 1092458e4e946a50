"""CF (Climate and Forecast) conventions: what a generic reader needs to understand each variable.

Every dataset gets ``long_name`` and ``units`` (SI, as MuJoCo's model implies them: a hinge's position in
rad, a slide's in m, a free joint's quaternion dimensionless), codes get ``flag_values``/``flag_meanings``,
and the root gets ``Conventions``, ``title``, ``history`` (the command line or API call) and ``source``
(package and dependency versions, the project's git revision when it runs from a checkout). CF's
``units`` is one string per variable; ``x``, ``qpos`` and ``qvel`` mix joints of different kinds, so
their per-component units are a coordinate (``state_units``, ...) beside the labels, and the
variable's ``units`` is the common one or says where to look.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shlex
import subprocess
import sys

import mujoco
import numpy as np

CONVENTIONS = "CF-1.10"
MIXED = "mixed: per component in {}"

# Units of one qpos / qvel component by joint type (MuJoCo: hinge angles in rad, slides in m, quaternions
# dimensionless, a free joint's linear velocity in world axes m/s, angular ones rad/s).
_QPOS_UNITS = {mujoco.mjtJoint.mjJNT_FREE: ("m",) * 3 + ("1",) * 4, mujoco.mjtJoint.mjJNT_BALL: ("1",) * 4,
               mujoco.mjtJoint.mjJNT_SLIDE: ("m",), mujoco.mjtJoint.mjJNT_HINGE: ("rad",)}
_QVEL_UNITS = {mujoco.mjtJoint.mjJNT_FREE: ("m/s",) * 3 + ("rad/s",) * 3, mujoco.mjtJoint.mjJNT_BALL: ("rad/s",) * 3,
               mujoco.mjtJoint.mjJNT_SLIDE: ("m/s",), mujoco.mjtJoint.mjJNT_HINGE: ("rad/s",)}
# A joint-space quantity's unit from its position unit: velocity, acceleration, generalized force.
_PER_SECOND = {"m": "m/s", "rad": "rad/s", "1": "1/s"}
_PER_SECOND2 = {"m/s": "m/s2", "rad/s": "rad/s2"}
_FORCE = {"m": "N", "rad": "N m"}

# Sensor units by MuJoCo sensor type (mjtSensor, lower-case without mjSENS_); joint/tendon/actuator sensors
# take the unit of what they measure (``sensor_units``).
SENSOR_UNITS = {
    "touch": "N", "accelerometer": "m/s2", "velocimeter": "m/s", "gyro": "rad/s", "force": "N", "torque": "N m",
    "magnetometer": "T", "rangefinder": "m", "camprojection": "pixel", "ballquat": "1", "ballangvel": "rad/s",
    "framepos": "m", "framequat": "1", "framexaxis": "1", "frameyaxis": "1", "framezaxis": "1",
    "framelinvel": "m/s", "frameangvel": "rad/s", "framelinacc": "m/s2", "frameangacc": "rad/s2",
    "subtreecom": "m", "subtreelinvel": "m/s", "subtreeangmom": "kg m2/s", "clock": "s", "e_potential": "J",
    "e_kinetic": "J", "geomdist": "m", "geomnormal": "1", "geomfromto": "m", "insidesite": "1", "contact": "1",
    "tendonpos": "m", "tendonvel": "m/s", "tendonactfrc": "N", "tendonlimitpos": "m", "tendonlimitvel": "m/s",
    "tendonlimitfrc": "N", "tactile": "N",
}


def joint_units(model: mujoco.MjModel) -> tuple[list[str], list[str]]:
    """(units of each qpos component, units of each qvel component) of ``model``."""
    qpos: list[str] = []
    qvel: list[str] = []
    for j in range(model.njnt):
        t = mujoco.mjtJoint(int(model.jnt_type[j]))
        qpos += _QPOS_UNITS[t]
        qvel += _QVEL_UNITS[t]
    return qpos, qvel


def state_units(model: mujoco.MjModel | None, n: int, qpos: slice | None, qvel: slice | None) -> list[str]:
    """The unit of each of x's ``n`` components: qpos and qvel from the joints, activations and anything
    else a model registers "1" for actuator activations, "unknown" where the model does not say."""
    out = ["unknown"] * n
    if model is None:
        return out
    qu, vu = joint_units(model)
    for seg, units in ((qpos, qu), (qvel, vu)):
        if seg is not None and seg.stop - seg.start == len(units):
            out[seg] = units
    if qvel is not None and model.na and qvel.stop + model.na <= n:
        out[qvel.stop:qvel.stop + model.na] = ["1"] * model.na  # MuJoCo's act follows qvel in x
    return out


def carry_units(model: mujoco.MjModel | None, carry_layout, reward_units: str = "1") -> list[str]:
    """The unit of each carry component: the solver's warm start (joint accelerations), a step size (s),
    applied controls (the actuators' input: N or N m for motors), episode bookkeeping (counts, "1"), a reward
    and its episode sum (``reward_units``)."""
    vu = joint_units(model)[1] if model is not None else []
    known = {"qacc_warmstart": [_PER_SECOND2.get(u, "unknown") for u in vu], "h": ["s"], "dt": ["s"],
             "episode": ["1"], "episode_start": ["1"], "terminated": ["1"],
             "reward": [reward_units], "episode_return": [reward_units]}
    if model is not None:
        known["ctrl"] = [actuator_units(model, i) for i in range(model.nu)]
    out = []
    for name, shape in carry_layout:
        size = int(np.prod(shape, dtype=np.int64))
        units = known.get(name, [])
        out += list(units) if len(units) == size else ["unknown"] * size
    return out


def actuator_units(model: mujoco.MjModel, i: int) -> str:
    """The unit of actuator ``i``'s force (N on slides, tendons and sites' translation; N m on hinges)."""
    trn = mujoco.mjtTrn(int(model.actuator_trntype[i]))
    if trn in (mujoco.mjtTrn.mjTRN_JOINT, mujoco.mjtTrn.mjTRN_JOINTINPARENT):
        j = int(model.actuator_trnid[i, 0])
        return "N" if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_SLIDE else "N m"
    return "N" if trn in (mujoco.mjtTrn.mjTRN_TENDON, mujoco.mjtTrn.mjTRN_SLIDERCRANK) else "N or N m"


def sensor_units(model: mujoco.MjModel | None, row: dict) -> str:
    """The unit of one ``/sensors/table`` row: by type, or for joint/actuator sensors by what they measure."""
    typ = str(row["type"])
    if typ in SENSOR_UNITS:
        return SENSOR_UNITS[typ]
    kind, _, obj = str(row["object"]).partition(":")
    if model is None:
        return "unknown"
    if kind == "joint" and typ.startswith("joint"):
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, obj)
        pos = "m" if j >= 0 and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_SLIDE else "rad"
        return {"jointpos": pos, "jointvel": _PER_SECOND[pos], "jointlimitpos": pos,
                "jointlimitvel": _PER_SECOND[pos]}.get(typ, _FORCE[pos])
    if kind == "actuator":
        i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, obj)
        force = actuator_units(model, i) if i >= 0 else "N or N m"
        pos = {"N": "m", "N m": "rad"}.get(force, "m or rad")
        return {"actuatorpos": pos, "actuatorvel": _PER_SECOND.get(pos, "m/s or rad/s")}.get(typ, force)
    return "unknown"


# Units of the model fields a run may vary per world (model_params, randomize); joint-space ones depend on the
# joint's kind, so they name both.
MODEL_FIELD_UNITS = {
    "body_mass": "kg", "body_subtreemass": "kg", "body_inertia": "kg m2", "body_pos": "m", "body_ipos": "m",
    "body_quat": "1", "body_iquat": "1", "geom_friction": "1", "geom_size": "m", "geom_pos": "m",
    "geom_solref": "s | 1", "geom_solimp": "1", "geom_margin": "m", "geom_gap": "m", "geom_rgba": "1",
    "dof_damping": "N s/m or N m s/rad", "dof_armature": "kg or kg m2", "dof_frictionloss": "N or N m",
    "dof_invweight0": "1/kg or 1/(kg m2)", "jnt_stiffness": "N/m or N m/rad", "qpos0": "m or rad or 1",
    "qpos_spring": "m or rad or 1", "actuator_gear": "1", "actuator_gainprm": "1", "actuator_biasprm": "1",
    "actuator_ctrlrange": "actuator units", "opt.gravity": "m/s2", "opt.timestep": "s", "opt.wind": "m/s",
    "opt.density": "kg/m3", "opt.viscosity": "Pa s", "body_invweight0": "1/kg | 1/(kg m2)",
    "tendon_stiffness": "N/m", "tendon_damping": "N s/m", "tendon_lengthspring": "m",
}


def model_field_units(field: str) -> str:
    """The unit of a per-world model field (``/model_params/<field>``), "unknown" for fields not listed."""
    return MODEL_FIELD_UNITS.get(field, "unknown")


def model_param_long_name(field: str) -> str:
    """The ``long_name`` of ``/model_params/<field>``: a model field's, or a force provider parameter's
    (``"force:drag.CD"`` -> "force provider drag parameter CD, per world"; its units are what the provider declared,
    set by the run through the field's attributes)."""
    if field.startswith("force:"):
        provider, _, param = field[len("force:"):].partition(".")
        return f"force provider {provider} parameter {param}, per world"
    return f"per-world model field {field}"


def common_units(units, where: str) -> str:
    """One ``units`` attribute for components ``units``: their unit when they share one, else where to look."""
    kinds = set(units)
    return kinds.pop() if len(kinds) == 1 else MIXED.format(where)


# -- variables ---------------------------------------------------------------------------------------

def status_flags() -> dict:
    """``flag_values``/``flag_meanings`` of ``/status`` (CF: meanings are blank-separated words)."""
    from mjharness.integrators.status import STATUS_NAMES

    codes = sorted(STATUS_NAMES)
    return dict(flag_values=np.array(codes, dtype=np.int8),
                flag_meanings=" ".join(STATUS_NAMES[c].replace(" ", "_").replace("-", "_") for c in codes))


# long_name and units of the datasets every file has (by path); the rest are set where they are made.
VARIABLES = {
    "time": ("time of the recorded sample (after its step)", "s"),
    "x0": ("initial state of each world", None),
    "x": ("state of each world (joint positions, velocities, activations, ...)", None),
    "qpos": ("joint positions (MuJoCo qpos), a view of x", None),
    "qvel": ("joint velocities (MuJoCo qvel), a view of x", None),
    "carry0": ("initial carry of each world (solver warm start, step size, controller state)", None),
    "carry": ("carry after each sample's step (solver warm start, step size, controller state)", None),
    "status": ("why the world stopped (0: it did not)", "1"),
    "status_step": ("step at which the world stopped (-1: it did not)", "1"),
    "progress": ("samples flushed and whether the run completed (the file's SWMR-safe truth)", "1"),
    "world": ("world index in the batch", "1"),
    "world_index": ("global world index of each world", "1"),
    "state": ("label of each component of x", "1"),
    "state_units": ("unit of each component of x", "1"),
    "qpos_index": ("label of each qpos component", "1"),
    "qvel_index": ("label of each qvel component", "1"),
    "carry_index": ("label of each carry component", "1"),
    "carry_units": ("unit of each carry component", "1"),
    "progress_field": ("meaning of each /progress entry", "1"),
    "ctrl": ("controls applied during the sample's step (a view of the carry)", None),
    "episode": ("episode index of the sample (a view of the carry)", "1"),
    "reward": ("reward of the last control period ended at or before the sample (a view of the carry)", None),
    "model/mjcf": ("the model as MuJoCo saves it (MJCF)", "1"),
    "model/source_xml": ("the MJCF the model was compiled from, includes resolved", "1"),
    "model/mjb": ("the compiled model as MuJoCo's binary model (mj_saveModel bytes)", "1"),
    "model/mjb_byte": ("byte offset into the binary model", "1"),
    "model/compat_log": ("MJX compatibility changes applied to the model (JSON)", "1"),
}


def describe(ds, long_name: str, units: str | None) -> None:
    """Set ``long_name`` and ``units`` on ``ds`` (units None: leave them to the caller)."""
    ds.attrs["long_name"] = long_name
    if units is not None:
        ds.attrs["units"] = units


def label_attrs(path: str) -> tuple[str, str | None]:
    """(long_name, units) of a label or axis dataset made by the writer."""
    return VARIABLES.get(path, (f"label of each {path.rsplit('/', 1)[-1].strip('_').replace('_', ' ')}", "1"))


# -- global attributes -------------------------------------------------------------------------------

_DEPENDENCIES = ("mujoco", "mujoco-mjx", "jax", "jaxlib", "numpy", "h5py")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def git_revision() -> str | None:
    """The project's git revision (``describe --always --dirty``) when it runs from a checkout, else None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # rollout/h5/cf.py

    def git(*args) -> str | None:
        try:
            out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() or None if out.returncode == 0 else None

    # Only this project's own checkout: an installed copy inside some other repository has no revision of ours.
    top = git("rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(root):
        return None
    return git("describe", "--always", "--dirty", "--abbrev=12")


@functools.cache
def source() -> str:
    """CF ``source``: the program and the versions that wrote the file."""
    import h5py

    rev = git_revision()
    head = f"mjharness {_version('mjharness')}" + (f" (git {rev})" if rev else "")
    deps = ", ".join(f"{d} {_version(d)}" for d in _DEPENDENCIES)
    return f"{head}; {deps}; HDF5 {h5py.version.hdf5_version}; Python {sys.version.split()[0]}"


def command_line() -> str | None:
    """The ``mjharness`` command line that runs this process, or None when called from Python."""
    argv0 = (sys.argv[0] if sys.argv else "").replace(os.sep, "/")
    # the console script, or `python -m mjharness.rollout.cli` (how multi-process workers are started)
    if os.path.basename(argv0).startswith("mjharness") or argv0.endswith("rollout/cli/__main__.py"):
        return shlex.join(["mjharness", *sys.argv[1:]])
    return None


# The run settings an API call is summarized by (root attributes, in this order).
_CALL_KEYS = ("scene", "integrator_name", "dt", "steps", "batch", "seed", "record_every", "outputs", "backend",
              "randomize", "controller", "terminate", "on_terminate")


def api_call(attrs: dict) -> str:
    """``rollout(...)`` as the file's settings describe the call (the scene by its source)."""
    import json

    a = dict(attrs)
    try:
        a["integrator_name"] = json.loads(a.get("integrator") or "{}").get("name")
    except (TypeError, ValueError):
        a["integrator_name"] = None
    args = ", ".join(f"{k.replace('integrator_name', 'integrator')}={a[k]!r}" for k in _CALL_KEYS
                     if a.get(k) not in (None, "", "none"))
    return f"mjharness.rollout.rollout({args})"


def history_line(created: str, attrs: dict, given: str | None = None) -> str:
    """One CF ``history`` line: ``<ISO time> <command line or API call>``."""
    return f"{created} {given or command_line() or api_call(attrs)}"


def title(attrs: dict) -> str:
    """CF ``title``: what was rolled out, how many worlds and steps."""
    return f"mjharness rollout of {attrs.get('scene') or 'a model'}: {attrs.get('batch', '?')} worlds, " \
           f"{attrs.get('steps', '?')} steps of {attrs.get('dt', '?')} s"


def global_attrs(attrs: dict, history: str | None = None) -> dict:
    """The CF root attributes of a new file."""
    created = str(attrs.get("created") or "")
    return dict(Conventions=CONVENTIONS, title=title(attrs), history=history_line(created, attrs, history),
                source=source(), comment="layout and conventions: mjharness docs/files.md")
