"""Batched rollouts (jit/vmap/scan, chunking, sharding), the HDF5 writer and reader, and the CLI."""

from .engine import RolloutError, RolloutResult, initial_states, rollout
from .h5 import RolloutFile, RolloutFileError, open_rollout

__all__ = ["rollout", "RolloutResult", "RolloutError", "open_rollout", "RolloutFile", "RolloutFileError",
           "initial_states"]

try:  # the cross-check lands separately; import it when present
    from .crosscheck import crosscheck  # noqa: F401

    __all__ += ["crosscheck"]
except ImportError:  # pragma: no cover
    pass
