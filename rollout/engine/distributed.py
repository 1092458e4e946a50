"""Multi-process rollouts on JAX's distributed runtime, one shard file per process and one joined file.

Every process runs the same call after ``jax.distributed.initialize`` (``rollout`` itself comes here
when ``jax.process_count() > 1``, so user code needs no change). Process k of N holds the
global worlds [k B / N, (k+1) B / N): it advances them on its own (addressable) devices and streams
them to ``<out>.p<k>-of-<N>.h5``; the engine's world ids are global (``Plan.world_offset``), so
initial states and noise streams do not depend on N. Worlds are independent, so no collective runs
in a chunk; the processes meet only at barriers of JAX's coordination service, and process 0 then
writes ``<out>`` (virtual datasets over the shards, ``rollout.h5.join``). A dead peer is noticed by
the coordination service's heartbeats (``HEARTBEAT_S``) or by a barrier that times out.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from ..h5.join import join_shards, shard_attr, shard_path, shard_paths
from .plan import RolloutError, initial_states, make_plan, resolve_scene
from .results import RolloutResult
from .run import execute

ENV = ("MJHARNESS_COORDINATOR", "MJHARNESS_NUM_PROCESSES", "MJHARNESS_PROCESS_ID")
HEARTBEAT_S = 10      # a silent peer is declared dead after this
BARRIER_S = 45        # a peer that never reaches a barrier fails the others after this


class DistributedError(RuntimeError):
    """A peer process failed or never arrived; names the barrier and the process."""


def initialize(coordinator=None, num_processes=None, process_id=None) -> tuple[int, int]:
    """``jax.distributed.initialize`` from the arguments, else MJHARNESS_* variables, else JAX's own
    cluster detection (SLURM, Open MPI, ...). Returns (process_index, process_count)."""
    from jax._src import distributed as _dist

    if _dist.global_state.client is None:
        env = [os.environ.get(k) for k in ENV]
        coordinator = coordinator or env[0]
        num_processes = num_processes if num_processes is not None else (int(env[1]) if env[1] else None)
        process_id = process_id if process_id is not None else (int(env[2]) if env[2] else None)
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id, heartbeat_timeout_seconds=HEARTBEAT_S)
        # Arrays made without a device (MJX models, constants) must live on this process's devices.
        jax.config.update("jax_default_device", jax.local_devices()[0])
    return jax.process_index(), jax.process_count()


def barrier(name: str, timeout_s: float = BARRIER_S) -> None:
    from jax._src import distributed as _dist

    client = _dist.global_state.client
    if client is None:
        return
    try:
        client.wait_at_barrier(name, int(timeout_s * 1000))
    except Exception as e:  # the runtime's error names the missing task(s)
        raise DistributedError(f"process {jax.process_index()}/{jax.process_count()}: barrier {name!r} failed "
                               f"within {timeout_s:g} s (a peer process died or stalled): {e}") from None


def world_range(B: int, k: int, n: int) -> tuple[int, int]:
    return k * B // n, (k + 1) * B // n


def _slice_worlds(name, v, lo, hi, B):
    """This process's rows [lo, hi) of a per-world input (leading axis = the global batch)."""
    if v is None or callable(v):
        return v
    if isinstance(v, dict):
        return {k: _slice_worlds(f"{name}[{k!r}]", a, lo, hi, B) for k, a in v.items()}
    a = np.asarray(v)
    if a.ndim == 0 or a.shape[0] != B:
        raise RolloutError(f"{name}: shape {a.shape}; a multi-process run needs one row per world of the "
                           f"global batch ({B}) on its leading axis")
    return a[lo:hi]


def _shard_plan(scene, integrator, *, out, resume, k, n, batch, seed, perturb, x0, per_world, **kw):
    shard = shard_path(out, k, n)
    if resume:
        if not os.path.isfile(shard):
            raise RolloutError(f"resume: shard {shard} of process {k} is missing")
        plan = make_plan(scene, integrator, out=None, resume=shard, batch=None, x0=None, seed=seed,
                         perturb=perturb, ctrl=per_world["ctrl"], model_params=None, carry=None, **kw)
        lo = int(shard_attr(shard, "world_offset"))
        if per_world["ctrl"] is not None and not callable(per_world["ctrl"]):
            raise RolloutError("resume: an array ctrl is not supported in a multi-process resume; use a ctrl function")
    else:
        if x0 is not None:
            x0 = np.asarray(x0, dtype=np.float64)
            if x0.ndim != 2:
                raise RolloutError(f"x0: shape {x0.shape}; a multi-process run needs x0 of shape (batch, n)")
            batch = x0.shape[0]
        elif batch is None:
            raise RolloutError("batch: required (or x0) in a multi-process run")
        if batch < n:
            raise RolloutError(f"batch={batch} < {n} processes: every process needs at least one world")
        lo, hi = world_range(batch, k, n)
        x0 = (initial_states(scene, batch, seed, perturb) if x0 is None else x0)[lo:hi]
        mine = {key: _slice_worlds(key, v, lo, hi, batch) for key, v in per_world.items()}
        plan = make_plan(scene, integrator, out=shard, resume=None, batch=None, x0=x0, seed=seed,
                         perturb=perturb, **mine, **kw)
        plan.attrs.update(global_batch=batch)
    plan.world_offset = lo
    plan.attrs.update(world_offset=lo, process_index=k, process_count=n)
    return plan


def distributed_rollout(scene, integrator=None, *, out, steps, batch=None, x0=None, ctrl=None, dt=None, seed=0,
                        record_every=1, chunk=None, overwrite=False, resume=False, perturb=0.01, compression=None,
                        watchdog_s=None, progress=False, mjx="adapt", quaternion_update="quaternion",
                        devices=None, model_params=None, carry=None, t0=0.0, outputs=None,
                        output_semantics="live") -> RolloutResult:
    """Run this process's share of a rollout (after ``initialize``; ``rollout`` comes here when
    ``jax.process_count() > 1``); process 0 joins the shards into ``out``. Per-world inputs (x0,
    an array ctrl, model_params, carry) are global (leading axis = the whole batch); each process
    takes its rows. Returns the joined run on every process (arrays read from ``out``); ``.stats``
    are this process's plus ``process``, ``processes``, ``shard`` and ``joined`` (samples, complete)."""
    k, n = jax.process_index(), jax.process_count()
    if out is None:
        raise RolloutError(f"out=None: a multi-process run ({n} processes) needs out=<path>; each process "
                           f"writes <out>.p<k>-of-{n}.h5 and process 0 joins them into <out>")
    out = os.path.abspath(os.fspath(out))
    scene = resolve_scene(scene, mjx=mjx, quaternion_update=quaternion_update)  # MJX model and data on a local device
    local = tuple(jax.local_devices())
    if devices is not None:
        if not isinstance(devices, int) or not 1 <= devices <= len(local):
            raise RolloutError(f"devices={devices!r}: process {k} has {len(local)} local device(s); give a count")
        local = local[:devices]
    per_world = dict(ctrl=ctrl, model_params=model_params, carry=carry)
    plan = _shard_plan(scene, integrator, out=out, resume=resume, k=k, n=n, batch=batch, seed=seed, x0=x0,
                       perturb=perturb, per_world=per_world, dt=dt, steps=steps, record_every=record_every,
                       chunk=chunk, overwrite=overwrite, devices=local, keep=False, t0=t0, mjx=mjx,
                       quaternion_update=quaternion_update, outputs=outputs, output_semantics=output_semantics)
    barrier("mjharness:start")
    r = execute(plan, progress=progress and k == 0, compression=compression, watchdog_s=watchdog_s, keep=False,
                resume=bool(resume))
    _write_world_index(plan.out, plan.world_offset, plan.x0.shape[0])
    stats = dict(r.stats, process=k, processes=n, shard=plan.out)
    barrier("mjharness:done")
    if k == 0:
        join_shards(out, shard_paths(out, n))
    barrier("mjharness:joined")
    return _joined_result(out, r, stats)


def _joined_result(out, r, stats) -> RolloutResult:
    from ..h5.reader import open_rollout

    with open_rollout(out) as f:
        stats["joined"] = dict(samples=f.samples, complete=f.complete, batch=f.batch)
        carry = f.carry_at(f.samples - 1) if f.samples and f.carry_layout else {}
        return RolloutResult(time=f.time, x=None, status=f.status, status_step=f.status_step, x0=f.x0,
                             layout=r.layout, qpos_segment=r.qpos_segment, qvel_segment=r.qvel_segment, path=out,
                             stats=stats, carry=carry, integrator=r.integrator, outputs=None,
                             output_names=r._output_names)


def _write_world_index(path, lo, B):
    import h5py

    with h5py.File(path, "r+", locking=False) as f:
        if "world_index" not in f:
            f.create_dataset("world_index", data=np.arange(lo, lo + B, dtype=np.int64))
