"""Noise of a ``System``: globally canonical slots across members, shared sources, the packed diffusion.

Slots: members in synchronization order, each member's own canonical order inside it (its sub-models
kept, ``StateRegistry.register(group=...)``), so a member's noise keeps its slots, shifted by the slots
of the members before it. A member's own shared sources (endpoints with one slot) stay shared.
``shared_noise=[[("arm.hinge/qvel", 0), ("plant.v", 0)]]`` declares one Wiener process driving
endpoints of several members: the group takes the slot of its first endpoint in canonical order
(``share_noise``'s rule), so later slots shift down and ``layout.noise_slots`` shrinks by one per merge.

The system diffusion buffer is the members' packed buffers scattered to their endpoints' global
packed offsets (index arrays built once): a shared source keeps one tangent per endpoint.
"""

from __future__ import annotations

from collections import defaultdict

import jax.numpy as jnp
import numpy as np

from mjharness.integrators import StateError


def member_shares(layout) -> list[tuple[tuple[str, int], ...]]:
    """A member's own shared groups: its endpoints that have one slot."""
    by_slot = defaultdict(list)
    for ep in layout.endpoints:
        by_slot[ep.slot].append((ep.state, ep.local))
    return [tuple(g) for g in by_slot.values() if len(g) > 1]


def check_shared_noise(groups, specs: dict, error) -> list[tuple[tuple[str, int], ...]]:
    """Validate ``shared_noise`` groups of ``("<model>.<state>", local source)`` endpoints."""
    out = []
    for g in groups or ():
        try:
            eps = [(str(s), int(j)) for s, j in g]
        except (TypeError, ValueError):
            raise error(f"shared_noise: a group is a list of ('<model>.<state>', local source) pairs, "
                        f"got {g!r}") from None
        for s, j in eps:
            if s not in specs:
                raise error(f"shared_noise names state {s!r}, which the system lacks (states: {list(specs)})")
            nc = specs[s].noise_count
            if not 0 <= j < nc:
                raise error(f"shared_noise: state {s!r} has {nc} local noise source(s); index {j} is out of range "
                            f"(declare the member's noise first, e.g. MjScene.add_joint_noise)")
        if len({s.partition(".")[0] for s, _ in eps}) < 2:
            raise error(f"shared_noise group {eps} lies in one model; share a member's own noise inside the member")
        out.append(tuple(eps))
    return out


def scatter_index(member: str, member_layout, layout) -> np.ndarray:
    """Global packed diffusion positions of a member's packed diffusion buffer."""
    idx = np.full(member_layout.diffusion_size, -1, np.int64)
    for ep in member_layout.endpoints:
        g = layout[f"{member}.{ep.state}"].diffusion_offsets[ep.local]
        idx[ep.diffusion_offset:ep.diffusion_offset + ep.tangent_size] = np.arange(g, g + ep.tangent_size)
    if (idx < 0).any():
        raise StateError(f"internal: member {member!r} has packed diffusion scalars without an endpoint")
    return idx


def assemble(size: int, parts) -> jnp.ndarray:
    """The system's packed diffusion from ``(index, member buffer)`` pairs."""
    g = None
    for idx, gm in parts:
        gm = jnp.ravel(jnp.asarray(gm))
        g = jnp.zeros(size, gm.dtype) if g is None else g
        g = g.at[idx].set(gm)
    return jnp.zeros(size) if g is None else g


def member_drift_diffusion(m, t, x, ctrl, inputs: dict, carry, evaluate_member):
    """``(f, g, carry_out)`` of one non-MuJoCo member; g is empty for members without noise."""
    if not m.layout.diffusion_size:
        out = evaluate_member(m, t, x, ctrl, inputs, carry)
        f, co = out if carry is not None else (out, None)
        return f, jnp.zeros(0, jnp.float64), co
    kw = {} if carry is None else {"carry": carry}
    if getattr(m, "inputs", None):
        kw["inputs"] = inputs
    fn = getattr(m, "drift_diffusion", None)
    if fn is not None:
        out = fn(t, x, ctrl, **kw)
        (f, g), co = out if carry is not None else (out, None)
        return f, g, co
    if not callable(getattr(m, "diffusion", None)):
        raise StateError(f"{type(m).__name__} declares noise (diffusion_size {m.layout.diffusion_size}) but has no "
                         ".diffusion(t, x, ctrl) / .drift_diffusion")
    out = m.dynamics(t, x, ctrl, **kw)
    f, co = out if carry is not None else (out, None)
    dkw = {"inputs": inputs} if getattr(m, "inputs", None) else {}
    return f, m.diffusion(t, x, ctrl, **dkw), co
