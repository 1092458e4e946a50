"""Verification: a rollout file cross-checked against a reference, and the check-case suite.

- ``comparison``: ``crosscheck(path, reference="model" | "mujoco" | other.h5)`` -> ``CrossCheckReport``
  (``report``), with the peers in ``reference_model`` (the reference rigid-body model),
  ``mujoco_peer`` (MuJoCo C ``mj_step``) and ``reference_file``; ``recorded`` reads the file,
  ``invariants`` measures energy and angular-momentum drift with MuJoCo C.
- ``cases`` / ``case_checks``: the check cases of ``data/cases`` run through ``rollout`` and
  compared with analytic answers (``mjharness.adapters.analytic``).

The ``mjharness check`` and ``mjharness cases`` subcommands are ``rollout/cli/check.py`` and ``cases.py``.
"""

from __future__ import annotations

from .comparison import crosscheck, save_reference_file
from .invariants import recorded_invariants
from .mujoco_peer import mujoco_peer_trajectory
from .recorded import CrossCheckError
from .reference_model import reference_model_trajectory
from .report import CrossCheckReport, FieldResult

__all__ = ["crosscheck", "CrossCheckReport", "FieldResult", "CrossCheckError", "reference_model_trajectory",
           "mujoco_peer_trajectory", "recorded_invariants", "save_reference_file"]
