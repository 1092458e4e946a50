"""A closed loop's episodes, from what a run records (``rollout(terminate=...)``, ``engine.episodes``).

The carry of every sample holds the world's ``episode``, ``episode_start`` (global index of the episode's
first step) and ``terminated`` (1 after the step that ended the episode, until the reset); with the final
``status``/``status_step`` that is enough to cut the samples into episodes and to say how each ended.
"""

from __future__ import annotations

import numpy as np

from mjharness.integrators import STATUS_TERMINATED

END_REASONS = ("terminated", "failed", "truncated", "running")


def episode_table(episode: np.ndarray, episode_start: np.ndarray, pending: np.ndarray, status: np.ndarray,
                  status_step: np.ndarray, *, record_every: int, steps: int,
                  samples_done: int, complete: bool, world_offset: int = 0,
                  returns: np.ndarray | None = None) -> list[dict]:
    """Rows ``{world, episode, start_step, end_step, end, samples}`` from the recorded samples: ``episode``,
    ``episode_start`` and ``pending`` (T, B) as the carry holds them, the final ``status``/``status_step`` (B,).
    ``end``: "terminated", "failed" (a failed step, at status_step), "truncated" (the run ended) or "running"
    (the file is still being written). ``samples``: the sample indices holding the episode's states.
    Exact when every episode spans at least ``record_every`` steps (record_every=1: always); an episode that
    starts and ends between two samples has ``start_step = end_step = -1``. With ``returns`` (T, B) (the carry's
    ``episode_return``, a run with a reward) each row has ``return``: the sum of the episode's rewards, read at its
    last sample (NaN for an episode with no sample)."""
    T = samples_done
    B = np.shape(status)[0]
    rows = []
    for w in range(B):
        ep = np.asarray(episode[:T, w]).astype(np.int64)
        st = np.asarray(episode_start[:T, w]).astype(np.int64)
        pend = np.asarray(pending[:T, w]) > 0
        e_last = int(ep[-1]) if T else 0
        for e in range(e_last + 1):
            js = np.nonzero(ep == e)[0]
            if len(js):
                start = int(st[js[0]])
            elif e == 0:
                start = 0
            else:
                start = -1
            later = np.nonzero(ep > e)[0]
            if len(later):  # a later episode began: this one ended at the step before the next start
                nxt = int(ep[later[0]])
                end_step = int(st[later[0]]) - 1 if nxt == e + 1 else -1
                end = "terminated"
            elif int(status[w]) == STATUS_TERMINATED:
                end_step, end = int(status_step[w]), "terminated"
            elif int(status[w]) != 0:
                end_step, end = int(status_step[w]), "failed"
            elif T and pend[-1]:
                end_step, end = (T * record_every) - 1, "terminated"
            elif complete:
                end_step, end = steps - 1, "truncated"
            else:
                end_step, end = T * record_every - 1, "running"
            if not len(later) and end_step >= 0 and int(status[w]) != 0:
                # A frozen world (terminated or failed) keeps its last episode index in every later sample: the
                # episode ends with the first sample at or after end_step (that sample holds its final state).
                js = js[(js + 1) * record_every - 1 < end_step + record_every]
            row = dict(world=w + world_offset, episode=e, start_step=start, end_step=end_step, end=end, samples=js)
            if returns is not None:
                row["return"] = float(returns[js[-1], w]) if len(js) else float("nan")
            rows.append(row)
    return rows


def cut_episodes(episode: np.ndarray, episode_start: np.ndarray, pending: np.ndarray, status: np.ndarray,
                 status_step: np.ndarray, w: int, *, time: np.ndarray, x: np.ndarray | None, record_every: int,
                 steps: int, complete: bool, world_offset: int = 0, returns: np.ndarray | None = None) -> list[dict]:
    """The episodes of local world ``w`` (``episode_table`` rows) with their recorded ``time`` (m,) and ``x``
    (m, n) cut out; ``x``: that world's samples (T, n) (None: ``w`` is out of range, refused)."""
    if not 0 <= w < np.shape(status)[0]:
        raise IndexError(f"world {w + world_offset} is not in this run's worlds {world_offset}.."
                         f"{world_offset + np.shape(status)[0] - 1}")
    T = np.shape(episode)[0]
    rows = episode_table(np.asarray(episode)[:, w:w + 1], np.asarray(episode_start)[:, w:w + 1],
                         np.asarray(pending)[:, w:w + 1], np.asarray(status)[w:w + 1],
                         np.asarray(status_step)[w:w + 1], record_every=record_every, steps=steps, samples_done=T,
                         complete=complete, world_offset=world_offset + w,
                         returns=None if returns is None else np.asarray(returns)[:, w:w + 1])
    for r in rows:
        r["time"] = np.asarray(time)[r["samples"]]
        r["x"] = np.asarray(x)[r["samples"]]
    return rows
