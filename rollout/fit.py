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

import numpy as np

from mjharness.scenes.settings import configure

from .engine.params import field_value, resolve_param
from .engine.simulate import check_param_fields, simulate
from .errors import RolloutError
from .h5.format import is_output


def _output_target(f, scene, target: str):
    """(recorded output (T, B, ...), OutputSpec) of ``target`` = ``outputs:<name>``, checked."""
    from mjharness.adapters.outputs import OutputError, parse_outputs

    name = target.partition(":")[2]
    have = [n for n in f.h5["outputs"] if is_output(n)] if "outputs" in f.h5 else []  # not the axis datasets
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
        callback=None, target: str = "x", progress: bool = True) -> dict:
    """Fit ``params`` (list of ``field:name``) to the states (``target="x"``) or a recorded output
    (``target="outputs:<name>"``) of the rollout file ``path``.

    start: {spec: starting value} (default: the file's model values), or ``"file"``: each world starts from its
    own recorded value (``/model_params``, e.g. drawn by ``randomize``) and the fit estimates one common scale,
    so each estimate is per world (B, ...). A file with per-world model fields is simulated with them (each
    world as it ran: its draws and derived constants). Returns {spec: estimate} (float or list) and, under
    ``"history"``, the loss and estimates per iteration. ``progress``: say when the gradient compiles and, without a
    ``callback``, show the iterations (loss) on stderr.
    """
    configure()  # float64 before the first array (idempotent)
    import jax
    import jax.numpy as jnp
    import optax

    from .engine.announce import compiling
    from .engine.plan import resolve_scene, scene_integrator
    from .h5 import open_rollout

    if target != "x" and not (isinstance(target, str) and target.startswith("outputs:")):
        raise RolloutError(f"target must be 'x' or 'outputs:<name>', got {target!r}")
    with open_rollout(path) as f:
        xs_file, x0, attrs, file_params = np.asarray(f.x), np.asarray(f.x0), dict(f.attrs), f.model_params
        model = f.model()
        scene = resolve_scene(model if scene is None else scene, needs={"differentiable": "fit (gradients)"})
        out_file, spec = _output_target(f, scene, target) if target != "x" else (None, None)
    own = attrs.get("integrator")
    own = own.get("name") if isinstance(own, dict) else own
    integ = scene_integrator(scene, integrator if integrator is not None else own)
    dt, R, t0 = float(attrs["dt"]), int(attrs["record_every"]), float(attrs.get("t0", 0.0))
    steps = xs_file.shape[0] * R
    resolved = [resolve_param(scene.model, scene.mjx_model, p) for p in params]
    base = {field: np.asarray(field_value(scene.mjx_model, field), np.float64) for field, _ in resolved}
    if start == "file" and not file_params:
        raise RolloutError(f"start='file': {path} records no per-world model fields (/model_params)")
    per_world = bool(file_params)
    if per_world:  # every world as it ran: the nominal fields broadcast, the file's per-world fields over them
        B = x0.shape[0]
        base = {k: np.broadcast_to(v, (B,) + v.shape).copy() for k, v in base.items()}
        base.update({k: np.asarray(v, np.float64) for k, v in file_params.items()})
        resolved = [(field, (slice(None),) + idx) for field, idx in resolved]
    s0 = []
    for p, (field, idx) in zip(params, resolved):
        mine = start is None or start == "file" or p not in start
        v = np.asarray(base[field][idx] if mine else start[p], np.float64)
        if per_world and start != "file" and mine:
            v = v[0]  # one starting value: world 0's (the nominal one unless the file varies it)
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

            def world(fw, xw):  # one world's outputs over time, on its own model fields
                sc = scene.with_model(scene.mjx_model.tree_replace(fw))
                return jax.vmap(lambda tt, x: evaluate_outputs(sc, (spec,), tt, x)[spec.name])(t, xw)

            xs = jax.vmap(world, in_axes=(0 if per_world else None, 1), out_axes=1)(fields, xs)
        return jnp.mean(((xs - goal) / scale) ** 2)

    opt = optax.adam(lr)
    # start="file": each world starts from its own value, and one scale per element (shared by the worlds) is fitted
    z = [jnp.zeros(np.shape(s)[1:] if start == "file" else np.shape(s)) for s in s0]
    state = opt.init(z)

    @jax.jit
    def step(z, state):
        v, g = jax.value_and_grad(loss)(z)
        upd, state = opt.update(g, state, z)
        return optax.apply_updates(z, upd), state, v

    history = []
    prev = [np.asarray(s) for s in s0]
    compiling(f"fit: the gradient of the loss over {', '.join(params)}", progress)
    bar = None
    if progress and callback is None:  # a callback reports the iterations itself (the CLI prints them)
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, unit="it", desc="fit", dynamic_ncols=True)
    for it in range(iterations):
        z, state, v = step(z, state)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"loss {float(v):.3g}", refresh=False)
        est = [np.asarray(s * np.exp(np.asarray(zi))) for s, zi in zip(s0, z)]
        rec = {"iteration": it + 1, "loss": float(v),
               "estimates": {p: e.tolist() for p, e in zip(params, est)},
               "change": {p: (e - q).tolist() for p, e, q in zip(params, est, prev)}}
        history.append(rec)
        prev = est
        if callback is not None:
            callback(rec)
    if bar is not None:
        bar.close()
    return {"params": {p: e.tolist() for p, e in zip(params, prev)}, "history": history}
