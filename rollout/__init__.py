"""Batched rollouts (the engine), the HDF5 format, verification, benchmarks and the CLI."""

from .engine import RolloutError, RolloutResult, initial_states, rollout
from .h5 import RolloutFile, RolloutFileError, open_rollout
from .verify import crosscheck

__all__ = ["rollout", "RolloutResult", "RolloutError", "open_rollout", "RolloutFile", "RolloutFileError",
           "initial_states", "crosscheck"]
