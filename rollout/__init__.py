"""Batched rollouts (the engine), the HDF5 format, verification, benchmarks and the CLI.

The names load on first use (``mjharness.integrators.lazy``): ``mjharness --help`` imports the CLI, a
subpackage of this one, and must not import JAX and MJX with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mjharness.integrators import lazy

if TYPE_CHECKING:
    from .engine import Controller, Reward, RolloutError, RolloutResult, Termination, initial_states, rollout
    from .engine.simulate import simulate  # the function (mypy binds ``engine.simulate`` to the submodule)
    from .h5 import RolloutFileError
    from .rendering import RenderError, render
    from .replay import RolloutFile, open_rollout  # h5's reader with episode_start and replay (they run the engine)
    from .verify import crosscheck

__all__ = ["rollout", "Controller", "Termination", "Reward", "simulate", "RolloutResult", "RolloutError",
           "open_rollout", "RolloutFile", "RolloutFileError", "initial_states", "crosscheck", "render", "RenderError"]

__getattr__, __dir__ = lazy.attach(__name__, __file__, __all__)
