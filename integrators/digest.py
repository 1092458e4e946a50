"""Content hashes of pytrees: cache keys for traced functions (``rollout/cache.py``, ``MjScene.trace_key``)."""

from __future__ import annotations

import re

import jax
import numpy as np

_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")


def tree_digest(h, tree) -> None:
    """Feed a pytree's structure and every leaf's dtype, shape and bytes into hashlib object ``h``.

    Object addresses in the structure's static data are dropped (they differ per process): static
    arrays there (MJX wraps the model's in hash wrappers) must be covered by the caller, as
    ``MjScene.trace_key`` does with the model's binary.
    """
    leaves, treedef = jax.tree.flatten(tree)
    h.update(_ADDRESS.sub("", str(treedef)).encode())
    for leaf in leaves:
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
