"""Counter-based randomness: the key of world ``i`` at step ``k`` is derived from (seed, i, k).

Results therefore do not depend on how the batch is chunked or how many devices share it.
"""

from __future__ import annotations

import jax


def world_key(seed, world):
    """Key of one world (``world`` is its global index in the batch)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), world)


def step_key(seed, world, step):
    """Key of world ``world`` at step ``step`` (global indices, not chunk-local)."""
    return jax.random.fold_in(world_key(seed, world), step)
