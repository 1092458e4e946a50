"""Batched rollouts (the engine), the HDF5 format, verification, benchmarks and the CLI."""

from .engine import Controller, RolloutError, RolloutResult, Termination, initial_states, rollout, simulate
from .h5 import RolloutFile, RolloutFileError, open_rollout
from .rendering import RenderError, render
from .verify import crosscheck

__all__ = ["rollout", "Controller", "Termination", "simulate", "RolloutResult", "RolloutError", "open_rollout",
           "RolloutFile",           "RolloutFileError", "initial_states", "crosscheck", "render", "RenderError"]
