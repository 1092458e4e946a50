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
    ``model_params``, the recorded quantity from the in-memory result."""
    from . import rollout

    def residual(z, data):
        z = np.asarray(z, np.float64)
        B = data["x0"].shape[0]
        fields = {k: np.array(v, np.float64) for k, v in data["base"].items()}
        sensors = []
        for (fld, idx), s, part, shape in zip(resolved, data["s0"], np.split(z, np.cumsum(sizes)[:-1]), shapes):
            part = part.reshape(shape)
            if fld in fit_sensors.SENSOR_FIELDS:
                sensors.append((fld, idx, part))
            else:
                fields[fld][idx] = s * part if per_element else part
        fields = {k: v if per_world else np.broadcast_to(v, (B,) + v.shape).copy() for k, v in fields.items()}
        r = rollout(sc, integ, dt=dt, steps=steps, x0=data["x0"], t0=t0, record_every=R, model_params=fields,
                    outputs=None if spec is None else [spec.name], progress=False)
        xs = np.asarray(r.x if spec is None else r.outputs[spec.name], np.float64)
        if sensors:
            xs = np.asarray(fit_sensors.apply(xs, np.asarray(r.time), sensors, dims), np.float64)
        return ((xs[first:] - data["goal"]) / data["weight"]).ravel()

    return residual


def central_differences(residual: Callable) -> Callable:
    """``jacobian(z, data)`` of ``residual`` by central differences, steps of cbrt(eps) relative (at least that)."""
    def jacobian(z, data):
        z = np.asarray(z, np.float64)
        h = np.cbrt(np.finfo(np.float64).eps) * np.maximum(np.abs(z), 1.0)
        cols = []
        for j in range(z.size):
            e = np.zeros_like(z)
            e[j] = h[j]
            cols.append((residual(z + e, data) - residual(z - e, data)) / (2 * h[j]))
        return np.stack(cols, axis=1)

    return jacobian
