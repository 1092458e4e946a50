"""Closed loops in whole steps of MuJoCo C: decimated controllers and termination rules between batched calls.

A run with a ``Controller(every=k)`` and/or a termination rule, stepping one of MuJoCo's own schemes, needs
nothing from JAX between the moments something is due. The chunk is therefore cut into segments: every live
world advances to the next due moment (a controller call, a rule check, a recorded sample) in one
``Batch.rollout`` call with its controls held, then the run's closed loop (``run.loop``, the engine's
``rollout.engine.host_loop.HostLoop``: resets, the controller, the rule, each only for the worlds due) runs on
the host for the whole batch. A world mj_step warned about in a segment is re-run step by step from the
segment's start with the engine's freezing rule (``host_chunk._WorldLoop``), as in open-loop whole chunks.

Each world's steps are ``mj_step``'s own, so a run equals a hand-written loop of ``mj_step`` calls with the same
controller and rule bit for bit (a gym-style ``frame_skip`` loop for ``every = frame_skip``).
"""

from __future__ import annotations

import numpy as np

from .base import CtrlMode
from .host_chunk import REC, ChunkRunner, HostChunk, _sel

CTRL = "ctrl"  # the loop's applied controls in the carry (rollout.engine.episodes.CTRL)


class ClosedLoopRunner(ChunkRunner):
    """``runner(x, carry, status, status_step, k0, ctrl) -> HostChunk`` for a run with a closed loop."""

    def __call__(self, x, carry, status, status_step, k0: int, ctrl=None, dest=None,
                 carries: bool = True) -> HostChunk:
        st, episodes, B, n = self.st, self.run.loop, self.B, self.n  # (self.loop: the step-by-step fallback)
        R, S = st.record_every, st.samples
        nstep = max(0, min(st.chunk, self.run.steps - k0))
        x = np.array(x, np.float64)
        carry = {name: np.array(v) for name, v in carry.items()}
        status, status_step = np.array(status, np.int8), np.array(status_step, np.int64)
        u_arr = None if ctrl is None else np.asarray(ctrl, np.float64)
        xs = dest if dest is not None else np.empty((S, B, n))
        cs = {name: np.empty((S,) + v.shape, v.dtype) for name, v in carry.items()}
        k, end = k0, k0 + nstep
        while k < end:
            live = status == 0
            x_pre, carry_pre = x, carry
            x, carry = episodes.begin(k, x, carry, live)
            g = episodes.segment(k, carry, live, min(end - k, R - k % R))  # to the next due moment or sample
            ids = np.flatnonzero(live)
            if len(ids):
                x, carry, status, status_step = self._segment(ids, k, g, x, carry, x_pre, carry_pre, status,
                                                              status_step, None if u_arr is None else
                                                              u_arr[:, k - k0:k - k0 + g])
            ok = live & (status == 0)
            carry, status, status_step = episodes.end(k + g - 1, x, carry, ok, status, status_step)
            k += g
            if k % R == 0:
                j = (k - k0) // R - 1
                xs[j] = x
                for name, v in carry.items():
                    cs[name][j] = v
        for j in range(nstep // R, S):  # rows past the run's last step: the final state, as open-loop chunks give
            xs[j] = x
            for name, v in carry.items():
                cs[name][j] = v
        return HostChunk(x=x, carry=carry, status=status, status_step=status_step, xs=xs, carries=cs, outputs={})

    def _held(self, carry: dict) -> np.ndarray:
        return carry[CTRL] if CTRL in carry and self.st.ctrl_mode == CtrlMode.CONTROLLER else \
            np.broadcast_to(self.ctrl0, (self.B, self.ctrl0.size))

    def _segment(self, ids, k, g, x, carry, x_pre, carry_pre, status, status_step, u):
        """Step the worlds ``ids`` ``g`` steps from step ``k`` (controls held, or ``u`` (B, g, nu) per step).
        ``x_pre``/``carry_pre``: the state and carry before ``begin``, where a world failing at step ``k`` stays."""
        f, sel, run, nq, nv, n = self.fields, _sel(ids, self.B), self.run, self.nq, self.nv, self.n
        held = self._held(carry)
        ws0 = carry["qacc_warmstart"]
        self.batch.state[sel] = self.row0  # whole rows first: a world mj_step reset last time lost its forces
        f["time"][sel] = run.t0 + k * run.dt
        f["qpos"][sel], f["qvel"][sel], f["act"][sel] = x[sel, :nq], x[sel, nq:nq + nv], x[sel, nq + nv:n]
        f["qacc_warmstart"][sel], f["ctrl"][sel] = ws0[sel], held[sel]
        warn = self.batch.warning
        warn[sel] = 0  # mj_step's reset clears the counters before counting its own warning (host_chunk)
        rec = self.batch.rollout(g, control=None if u is None else u[sel], record=(REC,),
                                 ids=None if len(ids) == self.B else ids.astype(np.int32),
                                 out={REC: self._buffer(len(ids), g, n + nv)})[REC]
        bad = ids[warn[sel, :, 1].any(axis=1) | ~np.isfinite(rec.sum(axis=(1, 2)))]
        x_new, ws = x.copy(), ws0.copy()
        x_new[sel], ws[sel] = rec[:, -1, :n], rec[:, -1, n:]
        carry = {**carry, "qacc_warmstart": ws}
        for w in bad:  # re-run from the segment's start, frozen at the engine's rule
            self.loop.load(run.t0 + k * run.dt, x[w], ws0[w], held[w], w)
            rows, failed, code = self.loop.run(None if u is None else u[w], g, k)
            x_new[w], ws[w] = rows[-1, :n], rows[-1, n:]
            if failed < 0:
                continue
            status[w], status_step[w] = code, failed
            if failed == k:  # the step after begin failed: the world stays as it was before it, carry included
                x_new[w] = x_pre[w]
                for name, v in carry_pre.items():  # (begin's arrays, or ws: this segment's copies)
                    carry[name][w] = v[w]
        return x_new, carry, status, status_step
