"""A fit on a backend without gradients (MuJoCo C): residuals by ``rollout`` with each world's fields as
``model_params``, the Jacobian by central differences (one pair of runs per parameter element)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import fit_sensors


def exact(scene) -> bool:
    """Whether the scene's backend differentiates (MJX: exact Jacobians) or not (MuJoCo C: finite differences)."""
    return bool(scene.backend_impl.caps.differentiable)


def _multiprocess() -> bool:
    import jax

    return jax.process_count() > 1


def host_residual(sc, integ, dt, steps, R, t0, first, resolved, shapes, sizes, per_element, per_world, spec,
                  dims) -> Callable:
    """``residual(z, data)`` by ``rollout`` on a backend without gradients (MuJoCo C): each world's fields set as
    ``model_params``, the recorded quantity from the in-memory result. ``z`` (K,) gives the residuals (M,); ``z``
    (K, c), c points as columns, gives (M, c) from ONE run of c copies of the batch (a Jacobian's differences
    cost one call, not one per point)."""
    plans: dict = {}  # copies of the batch -> (the run's Plan, made by the first call; the data's x0 and ctrl)

    def run(c, fields, data):
        """``rollout`` of c copies of the batch with per-world ``fields``: the first call of a shape plans the run
        (every input checked), later calls run that plan with their own fields (checked), the same bits as
        ``rollout`` (a test checks it) without re-planning: ~5 ms of Python a call."""
        import dataclasses

        from .engine.inputs import check_model_params
        from .engine.plan import make_plan
        from .engine.run import execute
        from .engine.spec import RunSpec

        u = data.get("ctrl")
        if _multiprocess():  # (each process its share of the worlds: rollout's own distributed path)
            from . import rollout

            return rollout(sc, integ, dt=dt, steps=steps, x0=np.tile(data["x0"], (c, 1)), t0=t0, record_every=R,
                           ctrl=None if u is None else np.tile(u, (c, 1, 1)), model_params=fields,
                           outputs=None if spec is None else [spec.name], progress=False)
        got = plans.get(c)
        if got is None or got[1] is not data["x0"] or got[2] is not u:
            if len(plans) >= 4:  # (a trial point's, a Jacobian's, both, a stencil's)
                plans.pop(next(iter(plans)))
            opts = dict(dt=dt, steps=steps, x0=np.tile(data["x0"], (c, 1)), t0=t0, record_every=R,
                        ctrl=None if u is None else np.tile(u, (c, 1, 1)), model_params=fields,
                        outputs=None if spec is None else [spec.name], progress=False)
            plan = make_plan(sc, integ, RunSpec.from_options(**opts))
            plans[c] = (plan, data["x0"], u)  # (the data held: what the plan copied from)
            return execute(plan)
        plan = got[0]
        fields = check_model_params(plan.physics.scene, fields, plan.start.x0.shape[0])
        return execute(dataclasses.replace(plan, params=dataclasses.replace(plan.params, fields=fields)))

    def fields_of(z, data):
        fields = {k: np.array(v, np.float64) for k, v in data["base"].items()}
        sensors = []
        for (fld, idx), s, part, shape in zip(resolved, data["s0"], np.split(z, np.cumsum(sizes)[:-1]), shapes):
            part = part.reshape(shape)
            if fld in fit_sensors.SENSOR_FIELDS:
                sensors.append((fld, idx, part))
            else:
                fields[fld][idx] = s * part if per_element else part
        return fields, sensors

    def residual(z, data):
        z = np.asarray(z, np.float64)
        cols = z[:, None] if z.ndim == 1 else z
        B, c = data["x0"].shape[0], cols.shape[1]
        per_col = [fields_of(cols[:, j], data) for j in range(c)]
        names = list(per_col[0][0])
        fields = {k: np.concatenate([f[k] if per_world else np.broadcast_to(f[k], (B,) + f[k].shape)
                                     for f, _ in per_col]) for k in names}
        r = run(c, fields, data)
        xs_all = np.asarray(r.x if spec is None else r.outputs[spec.name], np.float64)
        out = np.empty((data["goal"].size, c))
        for j, (_, sensors) in enumerate(per_col):
            xs = xs_all[:, j * B:(j + 1) * B]
            if sensors:  # (fit_sensors works on JAX arrays: the exact path traces it)
                import jax.numpy as jnp

                xs = np.asarray(fit_sensors.apply(jnp.asarray(xs), jnp.asarray(r.time), sensors, dims), np.float64)
            out[:, j] = ((xs[first:] - data["goal"]) / data["weight"]).ravel()
        return out[:, 0] if z.ndim == 1 else out

    return residual


def stencil(residual: Callable, z: np.ndarray, h: np.ndarray, lo: np.ndarray | None = None,
            hi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Central differences of ``residual`` (columns in, columns out) at ``z`` with steps ``h`` per element, all 2K
    points in ONE call: (Jacobian (M, K), the points (K, 2K): z + h_i e_i then z - h_i e_i, each clipped to the
    bounds, and their residuals (M, 2K)). A point at a bound makes its column one-sided over the part inside."""
    z = np.asarray(z, np.float64)
    lo = np.full(z.size, -np.inf) if lo is None else np.asarray(lo, np.float64)
    hi = np.full(z.size, np.inf) if hi is None else np.asarray(hi, np.float64)
    up, down = np.minimum(z + h, hi), np.maximum(z - h, lo)
    pts = np.tile(z[:, None], 2 * z.size)
    k = np.arange(z.size)
    pts[k, k], pts[k, z.size + k] = up, down
    r = residual(pts)
    return (r[:, :z.size] - r[:, z.size:]) / (up - down), pts, r


def differences(residual: Callable) -> Callable:
    """``jacobian(z, data, r0=None, central=False, lo=None, hi=None)`` of ``residual`` by finite differences, all
    points in one call of ``residual`` (columns): forward differences (steps sqrt(eps) relative, at least that)
    from ``r0`` = residual(z) when the solver has it (a solver iteration: K runs, as ``mujoco.minimize`` spends),
    else with z in the same call (``with_r=True``: (residual(z), Jacobian), e.g. a solver's trial point and its
    Jacobian in one call); ``central=True``: central differences (steps cbrt(eps), or ``step`` per
    element; 2K runs, ``stencil``). Every point stays inside the bounds ``lo``/``hi``: a step that would leave them
    goes the other way (forward) or stops at the bound (central: then one-sided over the part inside), so a mass
    or damping fitted to 0 is never simulated negative (which MuJoCo refuses)."""
    def jacobian(z, data, r0=None, central=False, lo=None, hi=None, step=None, with_r=False):
        z = np.asarray(z, np.float64)
        lo = np.full(z.size, -np.inf) if lo is None else np.asarray(lo, np.float64)
        hi = np.full(z.size, np.inf) if hi is None else np.asarray(hi, np.float64)
        scale = np.maximum(np.abs(z), 1.0)
        if central:
            h = np.cbrt(np.finfo(np.float64).eps) * scale if step is None else np.asarray(step, np.float64)
            return stencil(lambda pts: residual(pts, data), z, h, lo, hi)[0]
        h = np.sqrt(np.finfo(np.float64).eps) * scale
        h = np.where(z + h > hi, -h, h)  # at the upper bound: backward
        pts = np.tile(z[:, None], z.size)
        np.fill_diagonal(pts, z + h)
        h = np.diagonal(pts) - z  # the step as rounded
        if r0 is None:
            r = residual(np.concatenate([pts, z[:, None]], axis=1), data)
            r0, r = r[:, -1], r[:, :-1]
        else:
            r = residual(pts, data)
        jac = (r - np.asarray(r0, np.float64)[:, None]) / h
        return (np.asarray(r0, np.float64), jac) if with_r else jac

    return jacobian


def switching(m, params=()) -> list[str]:
    """What in the MuJoCo model ``m`` (fitting ``params``) switches constraints on and off along a rollout, which
    makes the rollout only piecewise smooth in the parameters: geoms of different bodies that can collide (by
    contype/conaffinity; not parent and child, the world excepted, unless that filter is off; not both fixed to
    the world; or an explicit <pair>), limited joints or tendons, friction loss (a dof's or tendon's, or a fitted
    one). Empty: the rollout is smooth (as far as its constraints go)."""
    import mujoco

    off = int(m.opt.disableflags)
    flag = mujoco.mjtDisableBit
    if off & int(flag.mjDSBL_CONSTRAINT):
        return []
    fitted = {p.partition(":")[0] for p in params}
    out = []
    if not off & int(flag.mjDSBL_CONTACT):
        if m.npair:
            out.append("contact pairs")
        else:
            b, w = np.asarray(m.geom_bodyid), np.asarray(m.body_weldid)[np.asarray(m.geom_bodyid)]
            bits = ((m.geom_contype[:, None] & m.geom_conaffinity[None, :]) != 0) | \
                ((m.geom_contype[None, :] & m.geom_conaffinity[:, None]) != 0)
            bits &= w[:, None] != w[None, :]
            bits &= ~((w[:, None] == 0) & (w[None, :] == 0))
            if not off & int(flag.mjDSBL_FILTERPARENT):
                parent = np.asarray(m.body_parentid)
                wb = np.asarray(m.body_weldid)
                pw = wb[parent[wb[b]]]  # the weld of each geom's weld body's parent
                related = (pw[:, None] == w[None, :]) | (pw[None, :] == w[:, None])
                bits &= ~(related & (w[:, None] != 0) & (w[None, :] != 0))  # (the world is no one's parent here)
            if bits.any():
                out.append("contacts")
    if not off & int(flag.mjDSBL_LIMIT) and (np.any(m.jnt_limited) or (m.ntendon and np.any(m.tendon_limited))):
        out.append("limits")
    if not off & int(flag.mjDSBL_FRICTIONLOSS) and (
            np.any(m.dof_frictionloss > 0) or (m.ntendon and np.any(m.tendon_frictionloss > 0))
            or fitted & {"dof_frictionloss", "tendon_frictionloss"}):
        out.append("friction loss")
    return out
