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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from mjharness.integrators.names import OutputSemantics
from mjharness.scenes.settings import configure

from .engine.params import field_value, resolve_param
from .engine.simulate import check_param_fields, simulate
from .errors import RolloutError
from .h5.format import is_output

if TYPE_CHECKING:
    from mjharness.adapters import MjScene
    from mjharness.adapters.outputs import OutputSpec

    from .engine.arguments import IntegratorLike, PathLike, SceneLike

# fit's ``start``: {parameter: starting value}, "file" (each world's recorded value), or None (the file's model's)
Start: TypeAlias = "Mapping[str, ArrayLike] | Literal['file'] | None"


def _output_target(f, scene, target: str):
    """(recorded output (T, B, ...), OutputSpec) of ``target`` = ``outputs:<name>``, checked."""
    from mjharness.adapters.outputs import OutputError, parse_outputs

    name = target.partition(":")[2]
    have = [n for n in f.h5["outputs"] if is_output(n)] if "outputs" in f.h5 else []  # not the axis datasets
    have = [k for k in have if not k.startswith("_")]
    if name not in have:
        raise RolloutError(f"target={target!r}: the file records no output {name!r} (it has {have or 'none'})")
    ds = f.h5["outputs"][name]
    sem = ds.attrs.get("semantics", OutputSemantics.LIVE.value)
    sem = sem.decode() if isinstance(sem, bytes) else str(sem)
    if sem != OutputSemantics.LIVE:
        raise RolloutError(f"target={target!r}: the output was recorded with {sem!r} semantics; fit supports 'live'")
    try:
        (spec,) = parse_outputs(scene.model, [name])
    except OutputError as e:
        raise RolloutError(f"target={target!r}: {e}") from None
    return np.asarray(ds[: f.samples], np.float64), spec


def _read(path: PathLike, scene: SceneLike | None, target: str) -> tuple[np.ndarray, np.ndarray, dict, dict, MjScene,
                                                                        np.ndarray | None, OutputSpec | None]:
    """(states (T, B, n), x0 (B, n), root attributes, per-world model fields, the scene resolved for gradients
    (default: the file's model), the recorded output ``target`` or None for ``"x"``, its OutputSpec or None)."""
    from mjharness.adapters import MjScene

    from .engine.plan import resolve_scene
    from .h5 import open_rollout

    with open_rollout(path) as f:
        xs_file, x0, attrs, file_params = np.asarray(f.x), np.asarray(f.x0), dict(f.attrs), f.model_params
        model = f.model()
        sc = resolve_scene(model if scene is None else scene, needs={"differentiable": "fit (gradients)"})
        if not isinstance(sc, MjScene):
            raise RolloutError(f"fit: the scene must be a MuJoCo scene (an MjScene), not a {type(sc).__name__}")
        out_file, spec = _output_target(f, sc, target) if target != "x" else (None, None)
    return xs_file, x0, attrs, file_params, sc, out_file, spec


def _starting_values(path: PathLike, scene: MjScene, params: Sequence[str], start: Start, file_params: dict,
                     B: int) -> tuple[dict[str, np.ndarray], list[tuple[str, tuple]], list[np.ndarray], bool]:
    """(every fitted field's values, each parameter's (field, index), its starting value, whether the fields
    are per world)."""
    resolved = [resolve_param(scene.model, scene.mjx_model, p) for p in params]
    base = {field: np.asarray(field_value(scene.mjx_model, field), np.float64) for field, _ in resolved}
    if start == "file" and not file_params:
        raise RolloutError(f"start='file': {path} records no per-world model fields (/model_params)")
    per_world = bool(file_params)
    if per_world:  # every world as it ran: the nominal fields broadcast, the file's per-world fields over them
        base = {k: np.broadcast_to(v, (B,) + v.shape).copy() for k, v in base.items()}
        base.update({k: np.asarray(v, np.float64) for k, v in file_params.items()})
        resolved = [(field, (slice(None),) + idx) for field, idx in resolved]
    given: Mapping[str, ArrayLike] = start if isinstance(start, Mapping) else {}
    s0 = []
    for p, (field, idx) in zip(params, resolved):
        mine = start is None or start == "file" or p not in start
        v = np.asarray(base[field][idx] if mine else given[p], np.float64)
        if per_world and start != "file" and mine:
            v = v[0]  # one starting value: world 0's (the nominal one unless the file varies it)
        s0.append(v)
    return base, resolved, s0, per_world


def _optimize(loss: Callable, opt: Any, s0: list[np.ndarray], params: Sequence[str], *, per_element: bool,
              iterations: int, callback: Callable[[dict], object] | None,
              progress: bool) -> tuple[list[np.ndarray], list[dict]]:
    """Adam on the log-scales ``z`` (value = s0 * exp(z)): (the last estimates, one record per iteration).
    ``per_element``: start="file", one scale per element shared by the worlds."""
    import jax
    import jax.numpy as jnp
    import optax

    from .engine.announce import compiling

    # start="file": each world starts from its own value, and one scale per element (shared by the worlds) is fitted
    z = [jnp.zeros(np.shape(s)[1:] if per_element else np.shape(s)) for s in s0]
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
    return prev, history


def fit(path: PathLike, params: Sequence[str], *, scene: SceneLike | None = None, integrator: IntegratorLike = None,
        iterations: int = 200, lr: float = 0.05, start: Start = None, callback: Callable[[dict], object] | None = None,
        target: str = "x", progress: bool = True) -> dict:
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

    from .engine.plan import scene_integrator

    if target != "x" and not (isinstance(target, str) and target.startswith("outputs:")):
        raise RolloutError(f"target must be 'x' or 'outputs:<name>', got {target!r}")
    xs_file, x0, attrs, file_params, sc, out_file, spec = _read(path, scene, target)
    own = attrs.get("integrator")
    own = own.get("name") if isinstance(own, dict) else own
    integ = scene_integrator(sc, integrator if integrator is not None else own)
    dt, R, t0 = float(attrs["dt"]), int(attrs["record_every"]), float(attrs.get("t0", 0.0))
    steps = xs_file.shape[0] * R
    base, resolved, s0, per_world = _starting_values(path, sc, params, start, file_params, x0.shape[0])
    check_param_fields(sc, {k: v for k, v in base.items()}, x0.shape[0])  # shapes/dtypes before compile
    goal = jnp.asarray(xs_file if out_file is None else out_file)
    scale = jnp.maximum(jnp.std(goal, axis=(0, 1)), 1e-6)

    def values(z):
        fields = {k: jnp.asarray(v) for k, v in base.items()}
        for (field, idx), s, zi in zip(resolved, s0, z):
            fields[field] = fields[field].at[idx].set(s * jnp.exp(zi))
        return fields

    def loss(z):
        fields = values(z)
        t, xs = simulate(sc, integ, x0, dt=dt, steps=steps, record_every=R, model_params=fields, t0=t0)
        if spec is not None:
            from mjharness.adapters.outputs import evaluate_outputs

            def world(fw, xw):  # one world's outputs over time, on its own model fields
                sw = sc.with_model(sc.mjx_model.tree_replace(fw))
                return jax.vmap(lambda tt, x: evaluate_outputs(sw, (spec,), tt, x)[spec.name])(t, xw)

            xs = jax.vmap(world, in_axes=(0 if per_world else None, 1), out_axes=1)(fields, xs)
        return jnp.mean(((xs - goal) / scale) ** 2)

    prev, history = _optimize(loss, optax.adam(lr), s0, params, per_element=start == "file", iterations=iterations,
                              callback=callback, progress=progress)
    return {"params": {p: e.tolist() for p, e in zip(params, prev)}, "history": history}
