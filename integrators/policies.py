"""Update policies: how an increment in derivative (tangent) space moves a state.

- ``euclidean``: x + dx, fused over each contiguous run of Euclidean states.
- ``quaternion``: 4 stored, 3-component increment applied as q <- normalize(q) * exp(dx) (body
  frame), exactly MuJoCo's ``mju_quatIntegrate``; stays unit without renormalisation drift.
- ``quaternion_qdot``: 4-component increment added as an ordinary vector (stage values are
  not normalised); ``project`` normalises after the step.

Multi-stage methods on ``quaternion`` states feed the tableau dexp^-1-corrected stage derivatives
(RKMK, ``lie.py``); that, not the quaternion_qdot policy, is what MuJoCo C 4.0's RK4 does.

All functions take flat ``(n,)`` buffers (vmap for batches) and a static ``StateLayout``; the
loops below run over layout records at trace time only.
"""

from __future__ import annotations

import jax

# The quaternion math lives in ``rotations``; these names stay importable from here.
from .rotations import dexpinv, quat_dot, quat_exp, quat_integrate, quat_mul, quat_normalize  # noqa: F401
from .state import StateLayout


def apply_increment(layout: StateLayout, x, dx):
    """Move ``x`` by the derivative-space increment ``dx`` (already scaled by the step)."""
    pieces = []
    out = x
    for run in layout.runs:
        pieces.append((run.value_slice, x[run.value_slice] + dx[run.deriv_slice]))
    for r in layout.special:
        q = x[r.value_slice]
        d = dx[r.deriv_slice]
        pieces.append((r.value_slice, quat_integrate(q, d) if r.update == "quaternion" else q + d))
    for sl, v in pieces:
        out = out.at[sl].set(v)
    return out


def project(layout: StateLayout, x):
    """Project after a full step: normalise ``quaternion_qdot`` states."""
    out = x
    for r in layout.special:
        if r.update == "quaternion_qdot":
            out = out.at[r.value_slice].set(quat_normalize(x[r.value_slice]))
    return out


# -- RKMK (Lie-group) stage derivatives for exp-map states: see lie.py ---------------------------

def rkmk_transform(layout: StateLayout, inc: jax.Array, k: jax.Array) -> jax.Array:
    """Replace each ``quaternion`` state's stage derivative by dexp^{-1}_theta(omega), theta = ``inc``."""
    out = k
    for r in layout.special:
        if r.update == "quaternion":
            out = out.at[r.deriv_slice].set(dexpinv(inc[r.deriv_slice], k[r.deriv_slice]))
    return out


def has_exp_map_states(layout: StateLayout) -> bool:
    return any(r.update == "quaternion" for r in layout.special)
