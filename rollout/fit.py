"""System identification: fit named model parameters to a rollout HDF5 file with optax.

Parameters are named ``field:name`` (``body_mass:link1``, ``dof_damping:shoulder``, ``geom_friction:floor``,
``actuator_gear:motor``) or a bare field (``opt.gravity``): the name is looked up among the MuJoCo
model's bodies, joints (``jnt_*`` and, through ``jnt_dofadr``, ``dof_*``), geoms, sites and actuators.
Each parameter is a positive scale on its file value (``value = start * exp(z)``, Adam on ``z``); the
loss is the mean squared difference (scaled by the target's std per component) between ``simulate`` from
the file's x0 and the file's states (``target="x"``) or one of its recorded outputs
(``target="outputs:<name>"``, e.g. ``outputs:sensordata`` or ``outputs:xpos``: the output evaluated on the
simulated states, live semantics), over the full horizon and all worlds at once.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .engine.plan import RolloutError, _field
from .engine.simulate import check_param_fields, simulate

_OBJ = (("body_", mujoco.mjtObj.mjOBJ_BODY), ("jnt_", mujoco.mjtObj.mjOBJ_JOINT), ("geom_", mujoco.mjtObj.mjOBJ_GEOM),
        ("site_", mujoco.mjtObj.mjOBJ_SITE), ("actuator_", mujoco.mjtObj.mjOBJ_ACTUATOR))


def resolve_param(model: mujoco.MjModel, mjx_model, spec: str):
    """``field:name`` -> (field path, index tuple into the field). Raises RolloutError naming the problem."""
    field, _, name = spec.partition(":")
    ref = np.asarray(_field(mjx_model, field))
    if not np.issubdtype(ref.dtype, np.floating):
        raise RolloutError(f"--params {spec!r}: {field} is {ref.dtype}, not a floating field")
    if not name:
        return field, ()
    if field.startswith("dof_"):
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            raise RolloutError(f"--params {spec!r}: no joint named {name!r} (dof fields are named by their joint)")
        adr = int(model.jnt_dofadr[j])
        nd = {0: 6, 1: 3}.get(int(model.jnt_type[j]), 1)
        return field, (slice(adr, adr + nd),)
    for prefix, obj in _OBJ:
        if field.startswith(prefix):
            i = mujoco.mj_name2id(model, obj, name)
            if i < 0:
                raise RolloutError(f"--params {spec!r}: no {prefix.rstrip('_')} named {name!r}")
            return field, (i,)
    raise RolloutError(f"--params {spec!r}: {field} is not indexed by a named object; give the bare field")


def _output_target(f, scene, target: str):
    """(recorded output (T, B, ...), OutputSpec) of ``target`` = ``outputs:<name>``, checked."""
    from mjharness.adapters.outputs import OutputError, parse_outputs

    name = target.partition(":")[2]
    have = list(f.h5["outputs"]) if "outputs" in f.h5 else []
    have = [k for k in have if not k.startswith("_")]
    if name not in have:
        raise RolloutError(f"target={target!r}: the file records no output {name!r} (it has {have or 'none'})")
    ds = f.h5["outputs"][name]
    sem = ds.attrs.get("semantics", "live")
    sem = sem.decode() if isinstance(sem, bytes) else str(sem)
    if sem != "live":
        raise RolloutError(f"target={target!r}: the output was recorded with {sem!r} semantics; fit supports 'live'")
    try:
        (spec,) = parse_outputs(scene.model, [name])
    except OutputError as e:
        raise RolloutError(f"target={target!r}: {e}") from None
    return np.asarray(ds[: f.samples], np.float64), spec


def fit(path, params, *, scene=None, integrator=None, iterations: int = 200, lr: float = 0.05, start=None,
        callback=None, target: str = "x") -> dict:
    """Fit ``params`` (list of ``field:name``) to the states (``target="x"``) or a recorded output
    (``target="outputs:<name>"``) of the rollout file ``path``.

    start: {spec: starting value} (default: the file's model values). Returns {spec: estimate}
    (float or list) and, under ``"history"``, the loss and estimates per iteration.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from .engine.plan import resolve_scene, scene_integrator
    from .h5 import open_rollout

    if target != "x" and not (isinstance(target, str) and target.startswith("outputs:")):
        raise RolloutError(f"target must be 'x' or 'outputs:<name>', got {target!r}")
    with open_rollout(path) as f:
        xs_file, x0, attrs = np.asarray(f.x), np.asarray(f.x0), dict(f.attrs)
        model = f.model()
        scene = resolve_scene(model if scene is None else scene, needs={"differentiable": "fit (gradients)"})
        out_file, spec = _output_target(f, scene, target) if target != "x" else (None, None)
    own = attrs.get("integrator")
    own = own.get("name") if isinstance(own, dict) else own
    integ = scene_integrator(scene, integrator if integrator is not None else own)
    dt, R, t0 = float(attrs["dt"]), int(attrs["record_every"]), float(attrs.get("t0", 0.0))
    steps = xs_file.shape[0] * R
    resolved = [resolve_param(scene.model, scene.mjx_model, p) for p in params]
    base = {field: np.asarray(_field(scene.mjx_model, field), np.float64) for field, _ in resolved}
    s0 = []
    for p, (field, idx) in zip(params, resolved):
        v = np.asarray(base[field][idx] if start is None or p not in start else start[p], np.float64)
        s0.append(v)
    check_param_fields(scene, {k: v for k, v in base.items()}, x0.shape[0])  # shapes/dtypes before compile
    goal = jnp.asarray(xs_file if out_file is None else out_file)
    scale = jnp.maximum(jnp.std(goal, axis=(0, 1)), 1e-6)

    def values(z):
        fields = {k: jnp.asarray(v) for k, v in base.items()}
        for (field, idx), s, zi in zip(resolved, s0, z):
            fields[field] = fields[field].at[idx].set(s * jnp.exp(zi))
        return fields

    def loss(z):
        fields = values(z)
        t, xs = simulate(scene, integ, x0, dt=dt, steps=steps, record_every=R, model_params=fields, t0=t0)
        if spec is not None:
            from mjharness.adapters.outputs import evaluate_outputs

            sc = scene.with_model(scene.mjx_model.tree_replace(fields))
            one = lambda t, x: evaluate_outputs(sc, (spec,), t, x)[spec.name]  # noqa: E731
            xs = jax.vmap(jax.vmap(one, in_axes=(None, 0)))(t, xs)
        return jnp.mean(((xs - goal) / scale) ** 2)

    opt = optax.adam(lr)
    z = [jnp.zeros_like(jnp.asarray(s)) for s in s0]
    state = opt.init(z)

    @jax.jit
    def step(z, state):
        v, g = jax.value_and_grad(loss)(z)
        upd, state = opt.update(g, state, z)
        return optax.apply_updates(z, upd), state, v

    history = []
    prev = [np.asarray(s) for s in s0]
    for it in range(iterations):
        z, state, v = step(z, state)
        est = [np.asarray(s * np.exp(np.asarray(zi))) for s, zi in zip(s0, z)]
        rec = {"iteration": it + 1, "loss": float(v),
               "estimates": {p: e.tolist() for p, e in zip(params, est)},
               "change": {p: (e - q).tolist() for p, e, q in zip(params, est, prev)}}
        history.append(rec)
        prev = est
        if callback is not None:
            callback(rec)
    return {"params": {p: e.tolist() for p, e in zip(params, prev)}, "history": history}
