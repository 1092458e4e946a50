"""A fit on a backend without gradients (MuJoCo C): residuals by ``rollout`` with each world's fields as
``model_params``, the Jacobian by central differences (one pair of runs per parameter element)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import fit_sensors


def exact(scene) -> bool:
    """Whether the scene's backend differentiates (MJX: exact Jacobians) or not (MuJoCo C: finite differences)."""
    return bool(scene.backend_impl.caps.differentiable)


def host_residual(sc, integ, dt, steps, R, t0, first, resolved, shapes, sizes, per_element, per_world, spec,
                  dims) -> Callable:
    """``residual(z, data)`` by ``rollout`` on a backend without gradients (MuJoCo C): each world's fields set as
    ``model_params``, the recorded quantity from the in-memory result. ``z`` (K,) gives the residuals (M,); ``z``
    (K, c), c points as columns, gives (M, c) from ONE run of c copies of the batch (a Jacobian's differences
    cost one call, not one per point)."""
    from . import rollout

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
        u = data.get("ctrl")
        r = rollout(sc, integ, dt=dt, steps=steps, x0=np.tile(data["x0"], (c, 1)), t0=t0, record_every=R,
                    ctrl=None if u is None else np.tile(u, (c, 1, 1)),
                    model_params=fields, outputs=None if spec is None else [spec.name], progress=False)
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


def differences(residual: Callable) -> Callable:
    """``jacobian(z, data, r0=None, central=False, lo=None, hi=None)`` of ``residual`` by finite differences, all
    points in one call of ``residual`` (columns): forward differences (steps sqrt(eps) relative, at least that)
    from ``r0`` = residual(z) when the solver has it (a solver iteration: K runs, as ``mujoco.minimize`` spends),
    else with z in the same call; ``central=True``: central differences (steps cbrt(eps), or ``step`` per
    element; 2K runs), for the intervals at the solution. Every point stays inside the bounds ``lo``/``hi``: a
    step that would leave them goes the other way (forward) or stops at the bound (central: then one-sided over
    the part inside), so a mass or damping fitted to 0 is never simulated negative (which MuJoCo refuses)."""
    def jacobian(z, data, r0=None, central=False, lo=None, hi=None, step=None):
        z = np.asarray(z, np.float64)
        lo = np.full(z.size, -np.inf) if lo is None else np.asarray(lo, np.float64)
        hi = np.full(z.size, np.inf) if hi is None else np.asarray(hi, np.float64)
        scale = np.maximum(np.abs(z), 1.0)
        if central:
            h = np.cbrt(np.finfo(np.float64).eps) * scale if step is None else np.asarray(step, np.float64)
            up, down = np.minimum(z + h, hi), np.maximum(z - h, lo)
            pts_up, pts_down = np.tile(z[:, None], z.size), np.tile(z[:, None], z.size)
            np.fill_diagonal(pts_up, up)
            np.fill_diagonal(pts_down, down)
            r = residual(np.concatenate([pts_up, pts_down], axis=1), data)
            return (r[:, :z.size] - r[:, z.size:]) / (up - down)
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
        return (r - np.asarray(r0, np.float64)[:, None]) / h

    return jacobian
