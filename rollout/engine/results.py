"""What ``rollout`` returns: time-major arrays like the file, plus run statistics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from mjharness.integrators import STATUS_OK, StateLayout

if TYPE_CHECKING:
    from mjharness.rollout.h5 import RolloutFile


class RolloutResult:
    """Outcome of ``rollout``: time-major arrays like the file.

    ``.time`` (T,), ``.x`` (T, B, n), ``.qpos`` (T, B, nq), ``.qvel`` (T, B, nv), ``.state(name)``,
    ``.status`` (B,) (``mjharness.integrators.Status`` codes), ``.status_step`` (B,) (-1 when ok),
    ``.x0`` (B, n), ``.carry`` (dict name -> (B, ...): the carried values after the last step),
    ``.integrator`` (the integrator object that ran), ``.outputs`` (name -> (T, B, ...) recorded outputs),
    ``.model_params`` (field -> (B, ...): the per-world model fields that ran, drawn by ``randomize`` with
    their derived constants, or given as ``model_params``), ``.layout``, ``.path`` (the HDF5 file or None),
    ``.stats`` (wall_s, compile_s, steps_per_s, world_steps_per_s, worlds_ok, worlds_failed,
    file_bytes, ...). With ``keep=False`` the trajectory is not held in memory: ``.x`` reads the file.
    """

    def __init__(self, *, time: np.ndarray, x: np.ndarray | None, status: np.ndarray, status_step: np.ndarray,
                 x0: np.ndarray, layout: StateLayout, qpos_segment: slice | None, qvel_segment: slice | None,
                 path: str | None, stats: dict, carry: dict | None = None, integrator: object = None,
                 outputs: dict | None = None, output_names: Iterable[str] = (), model_params: dict | None = None,
                 loop: dict | None = None, loop_info: dict | None = None) -> None:
        self.time = time
        self._x = x
        self.status = status
        self.status_step = status_step
        self.x0 = x0
        self.layout = layout
        self.qpos_segment = qpos_segment
        self.qvel_segment = qvel_segment
        self.path = path
        self.stats = stats
        self.carry = carry or {}
        self.integrator = integrator
        self._outputs = outputs
        self._output_names = tuple(output_names)
        self.model_params = dict(model_params or {})
        self._loop = loop
        self._loop_info = loop_info

    def _loop_entry(self, name):
        if self._loop_info is None or name not in self._loop_info["names"]:
            return None
        if self._loop is None:  # keep=False: the file holds it
            from mjharness.rollout.h5 import open_rollout

            with open_rollout(self.path) as f:
                return f.carry_entry(name)
        return self._loop[name]

    @property
    def ctrl(self) -> np.ndarray | None:
        """The controls applied during each recorded sample's step, (T, B, nu), for a run with a ``Controller``
        (the file's ``/ctrl``); None otherwise."""
        return self._loop_entry("ctrl")

    @property
    def episode(self) -> np.ndarray | None:
        """The episode index of each recorded sample, (T, B) int, for a run with a termination rule (the file's
        ``/episode``); None otherwise."""
        e = self._loop_entry("episode")
        return None if e is None else e.astype(np.int64)

    @property
    def reward(self) -> np.ndarray | None:
        """The reward of the last control period ended at or before each recorded sample, (T, B), for a run with
        ``reward=`` (the file's ``/reward``); None otherwise."""
        return self._loop_entry("reward")

    def episodes(self, world: int) -> list[dict]:
        """The episodes of ``world`` (global index): ``{episode, start_step, end_step, end, samples, time, x}``
        (and ``return`` with a reward) as ``RolloutFile.episodes`` gives them; [] without a termination rule."""
        from mjharness.rollout.h5 import cut_episodes

        if self._loop_info is None or "episode" not in self._loop_info["names"]:
            return []
        info = self._loop_info
        episode = self.episode
        assert episode is not None  # the run has a termination rule: "episode" is in the loop's names
        return cut_episodes(episode, self._loop_entry("episode_start"), self._loop_entry("terminated"),
                            self.status, self.status_step, world - info["world_offset"], time=self.time,
                            x=self.x[:, world - info["world_offset"]] if 0 <= world - info["world_offset"] <
                            len(self.status) else None,
                            record_every=info["record_every"], steps=info["steps"], complete=True,
                            world_offset=info["world_offset"], returns=self._loop_entry("episode_return"))

    @property
    def outputs(self) -> dict:
        """Recorded outputs, name -> (T, B, ...) (``rollout(outputs=...)``); read from the file with keep=False."""
        if self._outputs is None and self._output_names:
            with self._file() as f:
                return {name: f.output(name) for name in self._output_names}
        return self._outputs or {}

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            with self._file() as f:
                return f.x
        return self._x

    def _file(self) -> RolloutFile:
        """The run's file, which holds what ``keep=False`` did not keep in memory."""
        from mjharness.rollout.h5 import open_rollout

        assert self.path is not None  # keep=False needs out
        return open_rollout(self.path)

    def _seg(self, seg, what):
        if seg is None:
            raise AttributeError(f"this rollout's model has no {what} segment (not a MuJoCo scene)")
        return self.x[..., seg]

    @property
    def qpos(self) -> np.ndarray:
        return self._seg(self.qpos_segment, "qpos")

    @property
    def qvel(self) -> np.ndarray:
        return self._seg(self.qvel_segment, "qvel")

    def state(self, name: str) -> np.ndarray:
        return self.layout.get(self.x, name)

    @property
    def ok(self) -> np.ndarray:
        return self.status == STATUS_OK

    def __repr__(self):
        T = len(self.time)
        B = len(self.status)
        return (f"RolloutResult(samples={T}, batch={B}, n={self.layout.size}, ok={int(self.ok.sum())}/{B}, "
                f"path={self.path!r})")
