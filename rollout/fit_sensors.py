"""Sensor parameters of a fit: gain, bias and delay of a named sensor, fitted with the model's parameters.

A recorded sensor reads y(t) = gain * s(t - delay) + bias, s the model's noiseless sensordata. Named
``sensor_gain:NAME``, ``sensor_bias:NAME`` (one value per component of the sensor) and ``sensor_delay:NAME`` (one
value, seconds, >= 0), with NAME a sensor of the model; only with ``target="outputs:sensordata"``. The delay is a
linear interpolation between the recorded samples (held at the first sample before it), so it is continuous and
differentiable in the delay, exact for delays that are multiples of the recording interval.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .errors import RolloutError

# field -> starting value (the sensor as modelled)
SENSOR_FIELDS = {"sensor_gain": 1.0, "sensor_bias": 0.0, "sensor_delay": 0.0}


def is_sensor_param(spec: str) -> bool:
    return spec.partition(":")[0] in SENSOR_FIELDS


def resolve_sensor(model: mujoco.MjModel, spec: str, target: str) -> tuple[str, tuple[int, int]]:
    """``sensor_<kind>:NAME`` -> (field, (sensordata address, size)); the size is 1 for a delay."""
    field, _, name = spec.partition(":")
    if target != "outputs:sensordata":
        raise RolloutError(f"{spec!r}: sensor parameters need target='outputs:sensordata', not {target!r}")
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name) if name else -1
    if i < 0:
        names = [model.sensor(k).name for k in range(model.nsensor)]
        raise RolloutError(f"{spec!r}: no sensor named {name!r}; named sensors: {[n for n in names if n] or 'none'}")
    adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
    return field, (adr, 1 if field == "sensor_delay" else dim)


def start_value(field: str, size: int) -> np.ndarray:
    return np.full(() if field == "sensor_delay" else (size,), SENSOR_FIELDS[field])


def apply(ys, t, params: list[tuple[str, tuple[int, int], object]], dims: dict[int, int]):
    """``ys`` (T, B, nsensordata) over times ``t`` (T,) with each sensor's (field, (adr, size), value) applied:
    delay first, then gain and bias. ``dims``: sensor address -> its number of components."""
    import jax
    import jax.numpy as jnp

    order = {"sensor_delay": 0, "sensor_gain": 1, "sensor_bias": 2}
    for field, (adr, _), value in sorted(params, key=lambda p: order[p[0]]):
        cols = slice(adr, adr + dims[adr])
        block = ys[:, :, cols]
        if field == "sensor_delay":
            flat = block.reshape(block.shape[0], -1)
            query = t - value
            shifted = jax.vmap(lambda col, q=query: jnp.interp(q, t, col), in_axes=1, out_axes=1)(flat)
            block = shifted.reshape(block.shape)
        elif field == "sensor_gain":
            block = block * value
        else:
            block = block + value
        ys = ys.at[:, :, cols].set(block)
    return ys
