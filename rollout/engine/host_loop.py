"""A run's closed loop on whole-batch host arrays, between whole-step calls of a backend that steps in C.

``episodes.begin`` / ``episodes.end`` define one step of one world inside the compiled chunk. Where the backend
steps MuJoCo's own scheme in C (``adapters/backends/host_closed.py``), the controller and the termination rule
are instead evaluated here, on the host, only when due: the backend advances every live world to the next
moment something is due (a controller call, a rule check, a recorded sample), one batched C call, and asks
this object what happens there. The rules are those of ``episodes``, to the bit:

- a world whose last step ended its episode restarts at its next step (state, warm start and controller state
  as at an episode's start; ``reset_to="draw"`` draws with ``episodes.draw_state``);
- the controller runs at steps ``k`` with ``(k - episode_start) % every == 0`` and its controls are held;
- the rule runs on the state after step ``k`` with ``(k + 1 - episode_start) % every == 0``, at ``t + dt``.

Functions are called only when due and only for the worlds due: NumPy functions world by world (exactly one
call per world and due step), JAX functions once for the whole batch (``jit(vmap(fn))``, compiled once for its
one shape; pure, so the worlds not due are simply not used).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mjharness.integrators import STATUS_TERMINATED

from . import episodes as _ep


class HostLoop:
    """``begin`` before a world's step, ``segment`` to the next due moment, ``end`` after the segment's last step.

    ``carry``: {name: (B, ...)} host arrays, the integrator's entries and the loop's (``EpisodePlan.carry_spec``);
    each method returns new arrays and never changes its arguments."""

    def __init__(self, ep: _ep.EpisodePlan, *, t0: float, dt: float, seed: int, wids: np.ndarray, reset: tuple):
        self.ep, self.t0, self.dt, self.seed = ep, np.float64(t0), np.float64(dt), seed
        self.wids = np.asarray(wids, np.int64)
        self.reset = reset                  # (x (B, n), cold carry {name: (B, ...)}) or ()
        c, term, rew = ep.controller, ep.terminate, ep.reward
        # Each function as f(t, x, [c,] world), whichever form the user wrote (episodes.takes_world).
        self._step_w = c is not None and _ep.takes_world(c.step)
        self._rule_w = term is not None and _ep.takes_world(term.fn)
        if c is not None and ep.mode == "jax":
            step = c.step if self._step_w else (lambda t, x, c_, w: c.step(t, x, c_))
            self._step = jax.jit(jax.vmap(step, in_axes=(None, 0, 0, 0)))
            self._init = jax.jit(jax.vmap(_ep._init_fn(c, ep.init_world)))
        if term is not None and ep.terminate_mode == "jax":
            rule = term.fn if self._rule_w else (lambda t, x, w: term.fn(t, x))
            self._rule = jax.jit(jax.vmap(lambda t, x, w: jnp.asarray(rule(t, x, w)).astype(bool),
                                          in_axes=(None, 0, 0)))
        self._rew_w = rew is not None and _ep.takes_world(rew.fn)
        if rew is not None and ep.reward_mode == "jax":
            fn = rew.fn if self._rew_w else (lambda t, x, w: rew.fn(t, x))
            self._rew = jax.jit(jax.vmap(lambda t, x, w: jnp.asarray(fn(t, x, w)).astype(jnp.float64),
                                         in_axes=(None, 0, 0)))
        if ep.draw_scale:
            self._draw = jax.jit(jax.vmap(lambda b, w, e: _ep.draw_state(b, ep.draw_scale, ep.quaternions, seed, w, e)))

    def time(self, k: int) -> np.float64:
        """The engine's time of step ``k`` (``t0 + k dt``, as the chunk computes it)."""
        return self.t0 + np.float64(k) * self.dt

    # -- the controller state, leaves <-> pytree ----------------------------------------------------------

    def _states(self, carry: dict, ids):
        leaves = [carry[name][ids].astype(dtype).reshape((-1,) + shape)
                  for name, shape, dtype in self.ep.leaves]
        return jax.tree_util.tree_unflatten(self.ep.treedef, leaves)

    def _put_states(self, carry: dict, ids: np.ndarray, states) -> None:
        dtype = carry[_ep.CTRL].dtype
        for (name, _, _), v in zip(self.ep.leaves, jax.tree.leaves(states)):
            carry[name][ids] = np.asarray(v).astype(dtype).reshape(carry[name][ids].shape)

    def _init_states(self, x: np.ndarray, ids: np.ndarray):
        ep = self.ep
        if ep.mode == "jax":  # the whole batch (one compiled shape), the worlds due taken from it
            return jax.tree.map(lambda v: np.asarray(v)[ids], self._init(jnp.asarray(x), jnp.asarray(self.wids)))
        assert ep.controller is not None  # the carry holds controller states only for a run with a Controller
        init = _ep._init_fn(ep.controller, ep.init_world)
        shapes = _ep._shapes(ep)
        per = [jax.tree.map(lambda v, s: np.asarray(v, s.dtype), init(x[w].copy(), int(self.wids[w])), shapes)
               for w in ids]
        return jax.tree.map(lambda *vs: np.stack(vs), *per)

    def _controls(self, t, x: np.ndarray, carry: dict, ids: np.ndarray):
        ep, nu = self.ep, self.ep.nu
        if ep.mode == "jax":  # the whole batch (one compiled shape), the worlds due taken from it
            u, cn = self._step(t, jnp.asarray(x), self._states(carry, slice(None)), jnp.asarray(self.wids))
            return (np.asarray(u, carry[_ep.CTRL].dtype)[ids].reshape(len(ids), nu),
                    jax.tree.map(lambda v: np.asarray(v)[ids], cn))
        c = self._states(carry, ids)
        # World by world; the pytree is taken apart once (leaf lists), not mapped per world (µs per call count
        # at a thousand worlds every few steps).
        assert ep.controller is not None  # controls are computed only for a run with a Controller
        step, treedef, t = ep.controller.step, ep.treedef, float(t)
        leaves = [np.asarray(v) for v in jax.tree.leaves(c)]
        dtypes = [np.dtype(d) for _, _, d in ep.leaves]
        u_out = np.empty((len(ids), nu), carry[_ep.CTRL].dtype)
        c_out = [np.empty_like(v) for v in leaves]
        world = self._step_w
        for j, w in enumerate(ids):
            # copies, as the compiled chunk's callback gives: a function that writes into x or c changes no run state
            c_j = treedef.unflatten([np.array(v[j]) for v in leaves])
            u, cn = step(t, x[w].copy(), c_j, int(self.wids[w])) if world else step(t, x[w].copy(), c_j)
            u_out[j] = np.asarray(u, x.dtype).reshape(nu)
            for out, v, d in zip(c_out, jax.tree.leaves(cn), dtypes):
                out[j] = np.asarray(v, d)
        return u_out, treedef.unflatten(c_out)

    def _terminated(self, t, x: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if self.ep.terminate_mode == "jax":
            return np.asarray(self._rule(t, jnp.asarray(x), jnp.asarray(self.wids)), bool)[ids]
        assert self.ep.terminate is not None  # termination is checked only for a run with a termination rule
        fn, t = self.ep.terminate.fn, float(t)
        if self._rule_w:
            return np.array([bool(fn(t, x[w].copy(), int(self.wids[w]))) for w in ids], bool)
        return np.array([bool(fn(t, x[w].copy())) for w in ids], bool)

    def _rewards(self, t, x: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if self.ep.reward_mode == "jax":
            return np.asarray(self._rew(t, jnp.asarray(x), jnp.asarray(self.wids)), np.float64)[ids]
        assert self.ep.reward is not None  # rewards are evaluated only for a run with a reward
        fn, t = self.ep.reward.fn, float(t)
        if self._rew_w:
            return np.array([float(fn(t, x[w].copy(), int(self.wids[w]))) for w in ids], np.float64)
        return np.array([float(fn(t, x[w].copy())) for w in ids], np.float64)

    # -- the three moments ------------------------------------------------------------------------------

    def begin(self, k: int, x: np.ndarray, carry: dict, live: np.ndarray) -> tuple[np.ndarray, dict]:
        """Before step ``k`` of the ``live`` worlds: pending resets, then the controller where due."""
        ep = self.ep
        x, carry = x.copy(), {name: v.copy() for name, v in carry.items()}
        if ep.resets:
            r = np.flatnonzero(live & (carry[_ep.PENDING] > 0))
            if len(r):
                x_reset, cold = self.reset
                e_next = carry[_ep.EPISODE][r] + 1
                xr = x_reset[r]
                if ep.draw_scale:  # the whole batch (one compiled shape), the worlds reset taken from it
                    e_all = (carry[_ep.EPISODE] + 1).astype(np.int32)
                    xr = np.asarray(self._draw(jnp.asarray(x_reset), jnp.asarray(self.wids), jnp.asarray(e_all)))[r]
                x[r] = xr.astype(x.dtype)
                for name, v in cold.items():
                    carry[name][r] = v[r].astype(carry[name].dtype)
                carry[_ep.EPISODE][r] = e_next
                carry[_ep.EPISODE_START][r] = k
                carry[_ep.PENDING][r] = 0
                if ep.reward is not None:  # a new episode has no reward yet
                    carry[_ep.REWARD][r] = 0
                    carry[_ep.RETURN][r] = 0
                if ep.controller is not None:
                    self._put_states(carry, r, self._init_states(x, r))
        if ep.controller is not None:
            n_in = k - self._start(carry)
            due = np.flatnonzero(live & (n_in % ep.controller.every == 0))
            if len(due):
                u, cn = self._controls(self.time(k), x, carry, due)
                carry[_ep.CTRL][due] = u
                self._put_states(carry, due, cn)
        return x, carry

    def _start(self, carry: dict):
        return carry[_ep.EPISODE_START].astype(np.int64) if self.ep.terminate is not None else 0

    def segment(self, k: int, carry: dict, live: np.ndarray, limit: int) -> int:
        """Steps from ``k`` (at least 1, at most ``limit``) the live worlds take before the next due moment: the
        segment ends with the first step after which a rule is due, and before the next controller call."""
        ep, g = self.ep, limit
        if not live.any():
            return g
        start = self._start(carry)
        start = start[live] if np.ndim(start) else start
        if ep.controller is not None:
            every = ep.controller.every
            g = min(g, int(np.min(every - (k - start) % every)))  # the next call after k
        rules = ((ep.terminate.every,) if ep.terminate is not None else ()) + (
            (ep.reward_every,) if ep.reward is not None else ())
        for every in rules:
            g = min(g, int(np.min((start - k - 1) % every)) + 1)  # the first step k' >= k a rule follows
        return max(1, g)

    def end(self, k: int, x: np.ndarray, carry: dict, ok: np.ndarray, status: np.ndarray,
            status_step: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
        """After step ``k`` (the segment's last) of the worlds whose steps all succeeded (``ok``): the rule, then the
        reward (due at a period's end and where the rule ended the episode)."""
        ep = self.ep
        n_in = k + 1 - self._start(carry)
        t = self.time(k) + self.dt
        hit = np.zeros(0, np.int64)
        if ep.terminate is not None:
            due = np.flatnonzero(ok & (n_in % ep.terminate.every == 0))
            if len(due):
                hit = due[self._terminated(t, x, due)]
                carry, status, status_step = dict(carry), status.copy(), status_step.copy()
                if ep.on_terminate == "freeze":
                    status[hit], status_step[hit] = STATUS_TERMINATED, k
                pending = carry[_ep.PENDING].copy()
                pending[hit] = 1
                carry[_ep.PENDING] = pending
        if ep.reward is not None:
            due = np.union1d(np.flatnonzero(ok & (n_in % ep.reward_every == 0)), hit)
            if len(due):
                r = self._rewards(t, x, due)
                carry = dict(carry)
                carry[_ep.REWARD], carry[_ep.RETURN] = carry[_ep.REWARD].copy(), carry[_ep.RETURN].copy()
                carry[_ep.REWARD][due] = r
                carry[_ep.RETURN][due] += r
        return carry, status, status_step
