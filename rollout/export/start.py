"""The first observation of an episode: the state it starts from, and recorded outputs evaluated there.

The file's samples are states after steps, so an episode's first state is not a sample: it is x0 or the state
a reset drew (``RolloutFile.episode_start``). Outputs (MuJoCo data fields such as ``sensordata``) are not
recorded for it either: they are evaluated with ``mj_forward`` on the model that ran, with the world's
randomized fields and zero controls (no control has been applied yet).
"""

from __future__ import annotations

import mujoco
import numpy as np

from mjharness.rollout.h5 import RolloutFileError
from mjharness.rollout.h5.format import decode_attr
from mjharness.rollout.h5.layout import vds_segment

from .core import Episode, ExportPlan


def start_state(plan: ExportPlan, ep: Episode, x0: np.ndarray) -> np.ndarray:
    """The state (n,) episode ``ep`` starts from, as ``f.episode_start(world, episode)["x"]`` gives it: ``/x0`` for
    a first episode, else the reset state (``replay.ResetStates``, one per plan: the scene built and a draw
    compiled once; ``episode_start`` would also rebuild the episode's carry, ~0.3 s an episode)."""
    episode = int(ep.row["episode"])
    if episode == 0 or plan.reset_to == "x0":
        return x0[ep.local_world]
    if plan.resets is None:
        from mjharness.rollout.replay import ResetStates  # (it runs the engine's reset rules: JAX)

        plan.resets = ResetStates(plan.file)
    return plan.resets(ep.local_world, episode)


class WorldFields:
    """Writes a world's randomized model fields (``plan.model_params``, those that are fields of the model) into
    ``model``; ``strict``: a randomized key that is not a model field (a force provider's parameter) is refused,
    naming it, where what is computed depends on every parameter."""

    def __init__(self, plan: ExportPlan, model: mujoco.MjModel, *, strict: bool):
        self.model = model
        fields = {k: v for k, v in plan.model_params.items() if hasattr(model, k)}
        missing = [k for k in plan.model_params if k not in fields]
        if strict and missing:
            raise RolloutFileError(f"{plan.file.path}: randomized field {missing[0]!r} is not a field of the model: "
                                   f"the outputs at an episode's first state cannot be evaluated; export states only")
        self.params = fields
        self.shapes = {k: np.shape(getattr(model, k)) for k in fields}

    def set(self, local_world: int) -> None:
        for k, v in self.params.items():
            getattr(self.model, k)[...] = np.reshape(v[local_world], self.shapes[k])


class OutputsAt:
    """Evaluates the plan's outputs at given states of a world: one ``MjData`` on the file's model, the world's
    randomized fields written into it."""

    def __init__(self, plan: ExportPlan):
        self.plan = plan
        self.outputs = [o for o in plan.obs if o.output is not None]
        if not self.outputs:
            return
        f = plan.file
        self.model = f.model()
        self.data = mujoco.MjData(self.model)
        self.fields = WorldFields(plan, self.model, strict=True)
        self.q, self.v = vds_segment(f.h5["qpos"]), vds_segment(f.h5["qvel"])
        self.names = {o.name: decode_attr(f.h5["outputs"][o.output].attrs.get("mujoco_field")) for o in self.outputs}

    def __call__(self, local_world: int, x: np.ndarray) -> dict:
        if not self.outputs:
            return {}
        m, d = self.model, self.data
        self.fields.set(local_world)
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = x[self.q], x[self.v]
        mujoco.mj_forward(m, d)
        return {o.name: np.array(getattr(d, self.names[o.name]), dtype=np.float64).reshape(-1) for o in self.outputs}


def first_observations(plan: ExportPlan, ep: Episode, x0: np.ndarray, outputs_at: OutputsAt) -> dict:
    """name -> (size,) observation of the episode's first state."""
    x = start_state(plan, ep, x0)
    first = {o.name: x[o.cols] for o in plan.obs if o.cols is not None}
    first.update(outputs_at(ep.local_world, x))
    return first
