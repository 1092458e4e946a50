"""What ``mjharness run`` loads from the files and texts its flags name: controls (``--ctrl``), parameter sweeps
(``--param``), distributions (``--randomize``), a controller or termination rule from a Python file
(``--controller``, ``--terminate``, or a bundled example)."""

from __future__ import annotations

import os
import sys

from .errors import CliError

# -- controls and parameter sweeps from the command line ---------------------------------------------------

def load_ctrl(arg: str, model, batch: int, steps: int):
    """``--ctrl``: (batch, steps, nu) controls from a file of (steps, nu) or (batch, steps, nu), or a keyframe."""
    import numpy as np

    nu = model.nu
    if nu == 0:
        raise CliError(f"--ctrl {arg}: the scene has no actuators (nu=0)")
    if arg.startswith("key:"):
        import mujoco

        k = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, arg[4:])
        if k < 0:
            raise CliError(f"--ctrl {arg}: no keyframe named {arg[4:]!r} ({model.nkey} keyframes)")
        return np.broadcast_to(model.key_ctrl[k], (batch, steps, nu)).copy()
    if not os.path.isfile(arg):
        raise CliError(f"--ctrl {arg}: no such file")
    try:
        if arg.endswith(".npz"):
            with np.load(arg) as z:
                names = list(z.files)
                if "ctrl" not in names and len(names) != 1:
                    raise CliError(f"--ctrl {arg}: an .npz needs one array or one named 'ctrl' (has {names})")
                a = z["ctrl" if "ctrl" in names else names[0]]
        elif arg.endswith(".npy"):
            a = np.load(arg)
        else:
            a = np.loadtxt(arg, delimiter=",", ndmin=2)
    except (OSError, ValueError) as e:
        raise CliError(f"--ctrl {arg}: cannot read it ({e})") from None
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1 and nu == 1:
        a = a[:, None]
    if a.ndim == 2 and a.shape == (steps, nu):
        return np.broadcast_to(a, (batch, steps, nu)).copy()
    if a.shape != (batch, steps, nu):
        raise CliError(f"--ctrl {arg}: shape {a.shape}; expected (steps, nu) = {(steps, nu)} or (batch, steps, nu) = "
                       f"{(batch, steps, nu)}")
    return a


def parse_randomize(items) -> dict | None:
    """``--randomize KEY=DIST ...`` -> {KEY: DIST} (the distributions are checked by the run specification)."""
    out = {}
    for item in items or ():
        key, eq, dist = item.partition("=")
        if not eq or not key.strip() or not dist.strip():
            raise CliError(f"--randomize {item!r}: give KEY=DIST, e.g. 'body_mass:torso=*uniform(0.8, 1.2)'")
        if key.strip() in out:
            raise CliError(f"--randomize {item!r}: {key.strip()!r} is given twice")
        out[key.strip()] = dist.strip()
    return out or None


def parse_params(specs) -> tuple[list[tuple[str, list[float]]], int]:
    """``--param`` values -> ([(field[:name], values)], number of worlds); checked before anything loads."""
    out, n = [], None
    for spec in specs or ():
        key, eq, vals = spec.partition("=")
        try:
            values = [float(v) for v in vals.split(",")] if eq and vals else None
        except ValueError:
            values = None
        if not key or values is None:
            raise CliError(f"--param {spec!r}: give FIELD[:NAME]=V1,V2,... (numbers)")
        if n is not None and len(values) != n:
            raise CliError(f"--param {spec!r}: {len(values)} values, the other --param have {n} (they zip: one world "
                           f"per value)")
        n = len(values)
        out.append((key, values))
    return out, n or 0


def param_arrays(params, scene) -> dict:
    """model_params (B, *field shape) from the nominal values with each ``--param`` index set per world."""
    import numpy as np

    from mjharness.rollout.engine.params import field_value, resolve_param
    from mjharness.rollout.engine.plan import backend_model

    arrays: dict[str, np.ndarray] = {}
    for key, values in params:
        field, idx = resolve_param(scene.model, scene.mjx_model, key)
        base = arrays.get(field)
        if base is None:
            nominal = np.asarray(field_value(backend_model(scene), field), np.float64)
            base = arrays[field] = np.broadcast_to(nominal, (len(values),) + nominal.shape).copy()
        for w, v in enumerate(values):
            at = (w, *idx)
            base[at] = v
    return arrays



# -- a controller / termination rule from a Python file (--controller, --terminate) -------------------------

def bundled_example(name: str) -> str | None:
    """The file of bundled example ``name`` (``arm_reach``), or None: a name without a folder or ``.py``."""
    if os.sep in name or "/" in name or name.endswith(".py"):
        return None
    from importlib import resources

    try:
        path = resources.files("mjharness.examples") / f"{name}.py"
    except ModuleNotFoundError:
        return None
    return str(path) if path.is_file() else None


def bundled_examples() -> dict[str, str]:
    """name -> file of every example that ships with the package (``mjharness examples``)."""
    from importlib import resources

    try:
        root = resources.files("mjharness.examples")
    except ModuleNotFoundError:  # an install from before the examples shipped (editable: its path map is old)
        raise CliError("the bundled examples are not installed with this mjharness: reinstall it "
                       "(pip install -e . in a checkout)") from None
    return {p.name[:-3]: str(p) for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".py") and not p.name.startswith("_")}


def object_path(arg: str, flag: str) -> str:
    """The file of ``FILE.py:NAME`` or of a bundled example ``EXAMPLE:NAME`` (as given: not resolved)."""
    path, sep, name = arg.rpartition(":")
    if not sep or not path or not name:
        raise CliError(f"{flag} {arg}: expected FILE.py:NAME or EXAMPLE:NAME (a bundled example: `mjharness "
                       f"examples`)")
    return path


def load_object(arg: str, flag: str):
    """The object ``NAME`` of ``FILE.py:NAME`` (or of a bundled example, ``arm_reach:make``), the file imported as
    module ``mjharness_user.<stem>`` (a stable name: a resumed run's file attributes name the same function)."""
    import importlib.util

    path, name = object_path(arg, flag), arg.rpartition(":")[2]
    path = bundled_example(path) or path
    if not os.path.isfile(path):
        raise CliError(f"{flag} {arg}: no such file {path!r}")
    mod_name = f"mjharness_user.{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"{flag} {arg}: {path!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # so dataclasses and pickling inside it find their module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - a user's file: say which and why
        raise CliError(f"{flag} {arg}: importing {path!r} failed: {type(e).__name__}: {e}") from None
    if not hasattr(module, name):
        public = sorted(k for k in vars(module) if not k.startswith("_"))
        raise CliError(f"{flag} {arg}: {path!r} has no {name!r} (it defines {public})")
    return getattr(module, name)


def load_controller(arg: str, model):
    """``--controller FILE.py:NAME``: a ``Controller``, or what ``NAME()`` / ``NAME(model)`` returns."""
    import inspect

    from mjharness.rollout.engine import Controller

    obj = load_object(arg, "--controller")
    if not isinstance(obj, Controller) and callable(obj):
        try:
            takes = len(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            takes = 0
        obj = obj(model) if takes else obj()
    if not isinstance(obj, Controller):
        raise CliError(f"--controller {arg}: expected a Controller (or a function returning one), got "
                       f"{type(obj).__name__}")
    return obj


def load_reward(arg: str):
    """``--reward FILE.py:NAME``: the reward ``NAME`` (a function fn(t, x[, sensordata]) -> float or a Reward)."""
    from mjharness.rollout.engine import Reward

    obj = load_object(arg, "--reward")
    if not (isinstance(obj, Reward) or callable(obj)):
        raise CliError(f"--reward {arg}: expected a function fn(t, x) -> float or a Reward, got {type(obj).__name__}")
    return obj


def load_terminate(arg: str):
    """``--terminate FILE.py:NAME``: the rule ``NAME`` (a function fn(t, x[, sensordata]) -> bool or a Termination)."""
    from mjharness.rollout.engine import Termination

    obj = load_object(arg, "--terminate")
    if not (isinstance(obj, Termination) or callable(obj)):
        raise CliError(f"--terminate {arg}: expected a function fn(t, x) -> bool or a Termination, got "
                       f"{type(obj).__name__}")
    return obj
