"""Brownian increments for the stochastic integrators: sampling, Lévy areas, coarsening, the SDE update.

Increments of one step, per global noise slot (``layout.noise_slots`` of them):

- ``dW``: the Wiener increment W(t+h) - W(t) ~ N(0, h).
- ``dZ``: Kloeden–Platen's auxiliary increment I_(1,0) = ∫_t^{t+h} (W(s) - W(t)) ds, with
  Var = h³/3 and Cov(dW, dZ) = h²/2. Only methods that need it (SRA1) draw it. diffrax's
  space-time Lévy area H relates to it by dZ = h (dW / 2 + H) (see ``from_levy_area``).

The diffusion buffer ``g`` is packed by global slot (``layout.endpoints``): every (state, local
source) endpoint owns ``tangent_size`` scalars. A step's noise is a packed buffer of tangents
``g * w[slot]`` (``weight``); ``apply_sde`` scatters it onto the states through their policies with
index arrays built once per layout at trace time (no Python loop over endpoints at run time).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .policies import apply_increment, quat_exp, quat_mul
from .state import StateError, StateLayout


class Increments(NamedTuple):
    """Prescribed Brownian increments of one step (a pytree: ``jax.vmap`` batches it).

    ``dW`` (slots,); ``dZ`` (slots,) or None (I_(1,0), only needed by methods with
    ``needs_dZ``). A leading batch axis is fine outside ``step`` (vmap it away).
    """

    dW: jax.Array
    dZ: jax.Array | None = None


def sample_increments(key, h, slots: int, auxiliary: bool = False) -> Increments:
    """Draw the increments of one step from ``key`` (``integrators.prng.step_key``).

    ``dW`` comes from the first half of ``split(key)`` and does not depend on ``auxiliary``, so
    two methods given the same key see the same Brownian path whether or not they draw ``dZ``.
    """
    kw, kz = jax.random.split(key)
    u1 = jax.random.normal(kw, (slots,))
    sqh = jnp.sqrt(jnp.asarray(h, dtype=u1.dtype))
    dW = sqh * u1
    if not auxiliary:
        return Increments(dW, None)
    u2 = jax.random.normal(kz, (slots,))
    # (dW, dZ) jointly Gaussian with Var dZ = h³/3 and Cov = h²/2.
    return Increments(dW, 0.5 * sqh ** 3 * (u1 + u2 / np.sqrt(3.0)))


def from_levy_area(dW, H, h) -> Increments:
    """Increments from diffrax's (W, H) pair: dZ = h (dW / 2 + H)."""
    return Increments(dW, h * (0.5 * dW + H))


def levy_area(inc: Increments, h):
    """diffrax's space-time Lévy area H of ``inc``: H = dZ / h - dW / 2."""
    return inc.dZ / h - 0.5 * inc.dW


def coarsen(dW, dZ, h: float, factor: int, axis: int = 0) -> Increments:
    """Combine ``factor`` consecutive fine steps (step ``h``) into one: the same Brownian path.

    ``dW``/``dZ`` have the fine steps along ``axis`` (length a multiple of ``factor``); returns
    increments with that axis shortened by ``factor``. dZ adds up as
    Σ_k (dZ_k + h (W(t_k) - W(t_0))), which is exact. ``dZ`` may be None. numpy in, numpy out.
    """
    xp = np if isinstance(dW, np.ndarray) else jnp
    dW = xp.moveaxis(xp.asarray(dW), axis, 0)
    n = dW.shape[0]
    if n % factor:
        raise StateError(f"coarsen: {n} fine steps are not a multiple of factor {factor}")
    w = dW.reshape((n // factor, factor) + dW.shape[1:])
    cW = xp.moveaxis(w.sum(axis=1), 0, axis)
    if dZ is None:
        return Increments(cW, None)
    z = xp.moveaxis(xp.asarray(dZ), axis, 0).reshape(w.shape)
    before = xp.cumsum(w, axis=1) - w  # W(t_k) - W(t_0) inside each coarse step
    cZ = (z + h * before).sum(axis=1)
    return Increments(cW, xp.moveaxis(cZ, 0, axis))


def resolve(noise, h, layout: StateLayout, needs_dZ: bool, who: str) -> Increments:
    """A PRNG key -> sampled increments; ``Increments`` or a dict -> checked increments."""
    slots = layout.noise_slots
    if isinstance(noise, Mapping):
        unknown = set(noise) - {"dW", "dZ"}
        if unknown or "dW" not in noise:
            raise StateError(f"{who}: prescribed increments need keys 'dW' (and 'dZ'), got {sorted(noise)}")
        noise = Increments(noise["dW"], noise.get("dZ"))
    if not isinstance(noise, Increments):
        return sample_increments(noise, h, slots, auxiliary=needs_dZ)
    dW = jnp.asarray(noise.dW)
    if dW.shape != (slots,):
        raise StateError(f"{who}: dW must have shape ({slots},) (one per global noise slot), got {dW.shape}")
    dZ = noise.dZ
    if needs_dZ:
        if dZ is None:
            raise StateError(f"{who} needs the auxiliary increment dZ; prescribed increments have dZ=None")
        dZ = jnp.asarray(dZ)
        if dZ.shape != (slots,):
            raise StateError(f"{who}: dZ must have shape ({slots},), got {dZ.shape}")
    return Increments(dW, dZ)


# -- applying a packed diffusion buffer ------------------------------------------------------------

@dataclass(frozen=True)
class NoisePlan:
    """Index arrays of one layout (numpy, built once, used as trace-time constants)."""

    slot_of: np.ndarray  # (diffusion_size,) global slot of every packed scalar
    # (deriv_size, K): the packed scalars landing on each derivative entry of a Euclidean state, in
    # packed (slot) order, padded with diffusion_size (an appended zero). Summing the K columns one
    # after the other fixes the order of the additions: a scatter-add over repeated indices may
    # sum in an order that depends on the batch shape XLA compiles for, which breaks bitwise
    # chunking invariance.
    eu_gather: np.ndarray
    # (record, (n_local, 3) packed positions in state-local order) per quaternion state with noise
    quat: tuple
    quat_high: tuple


@functools.lru_cache(maxsize=64)
def plan(layout: StateLayout) -> NoisePlan:
    slot_of = np.zeros(layout.diffusion_size, dtype=np.int32)
    into: list[list[int]] = [[] for _ in range(layout.deriv_size)]
    for ep in layout.endpoints:  # packed order
        block = np.arange(ep.diffusion_offset, ep.diffusion_offset + ep.tangent_size)
        slot_of[block] = ep.slot
        if layout[ep.state].update == "euclidean":
            for i in range(ep.tangent_size):
                into[ep.deriv_offset + i].append(ep.diffusion_offset + i)
    k = max((len(c) for c in into), default=0)
    eu_gather = np.full((layout.deriv_size, k), layout.diffusion_size, dtype=np.int32)
    for d, c in enumerate(into):
        eu_gather[d, :len(c)] = c
    quat: list[tuple] = []
    quat_high: list[tuple] = []
    for r in layout.special:
        if r.spec.noise_count:
            pos = np.array([np.arange(o, o + 3) for o in r.diffusion_offsets], dtype=np.int32)
            (quat if r.update == "quaternion" else quat_high).append((r, pos))
    return NoisePlan(slot_of, eu_gather, tuple(quat), tuple(quat_high))


def check_diffusion(layout: StateLayout, g, who: str = "diffusion"):
    shape = getattr(g, "shape", None)
    if shape != (layout.diffusion_size,):
        raise StateError(f"{who} must return the packed diffusion buffer of shape ({layout.diffusion_size},) "
                         f"(layout.diffusion_size), got {shape}")
    return g


def weight(layout: StateLayout, g, w):
    """Packed noise tangents ``g * w[slot]`` for per-slot weights ``w`` (slots,)."""
    return g * jnp.asarray(w)[plan(layout).slot_of]


def apply_sde(layout: StateLayout, x, drift_dx, noise):
    """Move ``x`` by the drift increment ``drift_dx`` (derivative space, already times h) and the
    packed noise tangents ``noise`` (``weight``), every state through its policy.

    Euclidean: x + drift + Σ noise (gathers from index arrays, summed in packed order).
    ``quaternion``: q ⊗ exp(drift), then ⊗ exp(δ_k) for each local source k in state-local order
    (rotations do not commute, so the order is part of the method). ``quaternion_qdot``: the
    3-vector tangent sum δ becomes the 4-component ½ q ⊗ [0, δ] added to the drift (q the value
    being moved); the step's final ``project`` normalises it.
    """
    p = plan(layout)
    dx = drift_dx
    if p.eu_gather.shape[1]:
        padded = jnp.concatenate([noise, jnp.zeros(1, noise.dtype)])
        acc = padded[p.eu_gather[:, 0]]
        for k in range(1, p.eu_gather.shape[1]):  # trace time: fixed order of additions
            acc = acc + padded[p.eu_gather[:, k]]
        dx = dx + acc
    for r, pos in p.quat_high:
        tangents = noise[pos]
        delta = tangents[0]
        for k in range(1, pos.shape[0]):  # trace time, state-local order
            delta = delta + tangents[k]
        q = x[r.value_slice]
        dx = dx.at[r.deriv_slice].add(0.5 * quat_mul(q, jnp.concatenate([jnp.zeros(1, delta.dtype), delta])))
    out = apply_increment(layout, x, dx)
    for r, pos in p.quat:
        q = out[r.value_slice]
        tangents = noise[pos]
        for k in range(pos.shape[0]):  # trace time: the state's local sources, in order
            q = quat_mul(q, quat_exp(tangents[k]))
        out = out.at[r.value_slice].set(q)
    return out
