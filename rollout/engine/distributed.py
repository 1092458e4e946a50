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
import sys
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from mjharness.scenes.settings import configure

from ..errors import RolloutFaultError
from ..h5.format import decode_attr
from ..h5.join import join_shards, shard_attr, shard_path, shard_paths
from .plan import RolloutError, initial_states, make_plan, needs_sensors, resolve_scene, run_needs
from .results import RolloutResult
from .run import PHASES, execute
from .spec import RunSpec, check_spec, file_settings

if TYPE_CHECKING:
    from .arguments import IntegratorLike, SceneLike

ENV = ("MJHARNESS_COORDINATOR", "MJHARNESS_NUM_PROCESSES", "MJHARNESS_PROCESS_ID")
HEARTBEAT_S = 10      # a silent peer is declared dead after this
BARRIER_S = 45        # a peer that never reaches a barrier fails the others after this


class DistributedError(RolloutFaultError):
    """A peer process failed or never arrived; names the barrier and the process."""


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> tuple[int, int]:
    """``jax.distributed.initialize`` from the arguments, else MJHARNESS_* variables, else JAX's own
    cluster detection (SLURM, Open MPI, ...). Returns (process_index, process_count)."""
    configure()  # the XLA flags and float64 before JAX starts its backend
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
    """This process's rows [lo, hi) of a per-world input (leading axis = the global batch). Functions and a
    ``Controller`` (its ``init`` takes the global world index) are every process's own."""
    from .episodes import Controller

    if v is None or callable(v) or isinstance(v, Controller):
        return v
    if isinstance(v, dict):
        return {k: _slice_worlds(f"{name}[{k!r}]", a, lo, hi, B) for k, a in v.items()}
    a = np.asarray(v)
    if a.ndim == 0 or a.shape[0] != B:
        raise RolloutError(f"{name}: shape {a.shape}; a multi-process run needs one row per world of the "
                           f"global batch ({B}) on its leading axis")
    return a[lo:hi]


def _shard_plan(scene, integrator, spec: RunSpec, *, joined: str, resume: bool, k: int, n: int):
    """Process k's plan: its worlds of the global batch, streamed to its shard of ``joined``."""
    shard = shard_path(joined, k, n)
    per_world = {"ctrl": spec.start.ctrl, "model_params": spec.start.model_params, "carry": spec.start.carry}
    info = dict(process_index=k, process_count=n)
    if resume:
        if not os.path.isfile(shard):  # killed before it created its shard: it starts again from step 0
            return _restart_missing_shard(scene, integrator, spec, joined=joined, k=k, n=n, info=info)
        if per_world["ctrl"] is not None and not callable(per_world["ctrl"]):
            raise RolloutError("resume: an array ctrl is not supported in a multi-process resume; use a ctrl function")
        lo = int(shard_attr(shard, "world_offset"))
        mine = spec.replace(out=None, resume=shard, batch=None, x0=None, model_params=None, carry=None)
        return make_plan(scene, integrator, mine, world_offset=lo, extra_attrs=dict(info, world_offset=lo))
    x0, batch = spec.start.x0, spec.start.batch
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
    st = spec.start
    x0 = (initial_states(scene, batch, st.seed, st.perturb, st.perturb_qpos) if x0 is None else x0)[lo:hi]
    my_rows = {key: _slice_worlds(key, v, lo, hi, batch) for key, v in per_world.items()}
    local = spec.replace(out=shard, resume=None, batch=None, x0=x0, **my_rows)
    return make_plan(scene, integrator, local, world_offset=lo,
                     extra_attrs=dict(info, world_offset=lo, global_batch=batch))


def _restart_missing_shard(scene, integrator, spec: RunSpec, *, joined: str, k: int, n: int, info: dict):
    """The plan of a process whose worker died before it created its shard: its worlds from step 0. Its
    initial states are rebuilt from the seed as the first run built them (checked against a sibling shard,
    so a run started from explicit x0 or per-world parameters is refused rather than restarted wrongly)."""
    from ..h5.reader import open_rollout

    siblings = [p for p in shard_paths(joined, n) if os.path.isfile(p)]
    if not siblings:
        raise RolloutError(f"resume: none of the {n} shards of {joined} exists; start the run anew (--out)")
    with open_rollout(siblings[0]) as f:
        a = f.attrs
        lo_s, x0_s, per_world = int(a.get("world_offset", 0)), f.x0, f.model_params
        raw = {key: decode_attr(v) for key, v in f.h5.attrs.items()}
    spec = file_settings(spec, raw)  # the options not given again are the run's, as its sibling recorded them
    batch = int(a.get("global_batch") or 0)
    if not batch or per_world:
        raise RolloutError(f"resume: shard {shard_path(joined, k, n)} is missing and cannot be rebuilt "
                           f"({'per-world model parameters' if per_world else 'no global_batch'} in {siblings[0]})")
    seed, perturb = int(a.get("seed", 0)), float(a.get("perturb", 0.0))
    kw = dict(perturb_qpos=float(a["perturb_qpos"])) if "perturb_qpos" in a else {}
    try:
        x0_all = initial_states(scene, batch, seed, perturb, **kw)
    except TypeError:  # an initial_states without perturb_qpos
        x0_all = initial_states(scene, batch, seed, perturb)
    if not np.array_equal(x0_all[lo_s:lo_s + x0_s.shape[0]], x0_s):
        raise RolloutError(f"resume: shard {shard_path(joined, k, n)} is missing and the run did not start from "
                           f"the seeded default states (explicit x0?); it cannot be rebuilt: start the run anew")
    lo, hi = world_range(batch, k, n)
    local = spec.replace(out=shard_path(joined, k, n), resume=None, batch=None, x0=x0_all[lo:hi], seed=seed,
                         overwrite=True)
    return make_plan(scene, integrator, local, world_offset=lo,
                     extra_attrs=dict(info, world_offset=lo, global_batch=batch))


def distributed_rollout(scene: SceneLike, integrator: IntegratorLike = None, spec: RunSpec | None = None,
                        **options: Any) -> RolloutResult:
    """Run this process's share of a rollout (after ``initialize``; ``rollout`` comes here when
    ``jax.process_count() > 1``) from ``spec`` (or ``rollout()``'s keywords); process 0 joins the shards
    into the file (``out``, or ``resume`` to continue one). Per-world inputs (x0, an array ctrl,
    model_params, carry) are global (leading axis = the whole batch); each process takes its rows.
    Returns the joined run on every process (arrays read from the file); ``.stats`` are this
    process's plus ``process``, ``processes``, ``shard`` and ``joined`` (samples, complete), except
    ``flagged`` (contact overflow), which is the joined file's: every process's worlds by global index.
    With ``progress``, process 0 shows one bar for the whole run (the slowest process's step)."""
    spec = check_spec(spec if spec is not None else RunSpec.from_options(**options))
    k, n = jax.process_index(), jax.process_count()
    path = spec.storage.resume if spec.storage.resume is not None else spec.storage.out
    if path is None:
        raise RolloutError(f"out=None: a multi-process run ({n} processes) needs out=<path>; each process "
                           f"writes <out>.p<k>-of-{n}.h5 and process 0 joins them into <out>")
    joined = os.path.abspath(os.fspath(path))
    scene, spec = _local_scene_spec(scene, spec, k)
    plan, resumed = _plan_shard(scene, integrator, spec, joined=joined, k=k, n=n)
    # One bar for the run on process 0, read from every shard's /progress (shard_progress); the others are quiet.
    bar = _run_bar(plan, joined, n, fresh=spec.storage.resume is None) if spec.execution.progress and k == 0 else None
    barrier("mjharness:start")
    done = False
    try:
        if bar is not None:
            bar.start()
        # Process 0 under the combined bar still says what it loads and compiles (the phase lines, no bar of its own).
        progress = (PHASES if bar is not None else True) if spec.execution.progress and k == 0 else False
        r = _run_shard(plan, spec, resumed, progress=progress)
        stats = dict(r.stats, process=k, processes=n, shard=plan.record.out)
        barrier("mjharness:done")
        done = True
    finally:
        if bar is not None:
            bar.close(done=done)
    if k == 0:
        join_shards(joined, shard_paths(joined, n))
    barrier("mjharness:joined")
    return _joined_result(joined, r, stats)


def _local_scene_spec(scene, spec: RunSpec, k: int):
    """The scene resolved once (MJX model and data on a local device; make_plan keeps its backend) and the spec
    with this process's devices."""
    ld, rec, ex = spec.loading, spec.recording, spec.execution
    scene = resolve_scene(scene, mjx=ld.mjx, quaternion_update=ld.quaternion_update, backend=ex.backend,
                          needs=run_needs(spec.start.model_params, rec.outputs, spec.start.randomize),
                          unsupported_contacts=ld.unsupported_contacts, need_sensors=needs_sensors(rec.outputs))
    local = tuple(jax.local_devices())
    if ex.devices is not None:
        if not isinstance(ex.devices, int) or not 1 <= ex.devices <= len(local):
            raise RolloutError(f"devices={ex.devices!r}: process {k} has {len(local)} local device(s); give a count")
        local = local[:ex.devices]
    return scene, spec.replace(devices=local, keep=False)


def _plan_shard(scene, integrator, spec: RunSpec, *, joined: str, k: int, n: int):
    """(process k's plan, whether it continues its shard); a resume whose shard is missing starts it afresh."""
    plan = _shard_plan(scene, integrator, spec, joined=joined, resume=spec.storage.resume is not None, k=k, n=n)
    return plan, spec.storage.resume is not None and os.path.isfile(plan.record.out)


def _run_shard(plan, spec: RunSpec, resumed: bool, *, progress):
    """Run process k's plan into its shard (and label its worlds by global index)."""
    assert resumed == (plan.resume is not None) and not plan.spec.recording.keep
    r = execute(plan, progress=progress)
    _write_world_index(plan.record.out, plan.start.world_offset, plan.start.x0.shape[0])
    return r


def _run_bar(plan, joined: str, n: int, *, fresh: bool):
    """Process 0's bar over every shard: the slowest process's step (``shard_progress``). Made before the start
    barrier, so on a fresh run every shard file that exists now is a previous run's."""
    from tqdm.auto import tqdm

    from .shard_progress import ShardProgress

    tqdm.write(f"rollout: {n} processes; the bar follows the slowest (pK: process K's step)", file=sys.stderr)
    return ShardProgress(shard_paths(joined, n), steps=plan.record.steps, record_every=plan.record.record_every, own=0,
                         fresh=fresh, initial=plan.start.start_step)


def _joined_result(out, r, stats) -> RolloutResult:
    from ..h5.flags import flagged_in_file
    from ..h5.reader import open_rollout

    with open_rollout(out) as f:
        stats["joined"] = dict(samples=f.samples, complete=f.complete, batch=f.batch)
        stats["flagged"] = flagged_in_file(f)  # every process's worlds (global index), every row of the file
        carry = f.carry_at(f.samples - 1) if f.samples and f.carry_layout else {}
        return RolloutResult(time=f.time, x=None, status=f.status, status_step=f.status_step, x0=f.x0,
                             layout=r.layout, qpos_segment=r.qpos_segment, qvel_segment=r.qvel_segment, path=out,
                             stats=stats, carry=carry, integrator=r.integrator, outputs=None,
                             output_names=r._output_names, model_params=f.model_params)


def _write_world_index(path, lo, B):
    from ..h5.digest import seal
    from ..h5.writer import open_rw

    with open_rw(path) as f:  # in the file's own HDF5 format (1.10 for format 2: older readers read shards too)
        if "world_index" not in f:
            ds = f.create_dataset("world_index", data=np.arange(lo, lo + B, dtype=np.int64))
            ds.attrs.update(long_name="global world index of each world", units="1")
            if "world" in f and f["world"].shape == (B,):  # the shard's world axis (xarray: no phony dimension)
                ds.dims[0].attach_scale(f["world"])
            seal(f, create=False)  # the shard's content hashes cover the new dataset
