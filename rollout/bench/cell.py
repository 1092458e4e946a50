"""One bench cell: every peer on one scene, one batch, one dtype, in one process.

All peers of a cell are compiled and warmed up first, then timed interleaved (``timing``); calls
repeat until ``min_time`` seconds and ``repeats`` calls are timed per peer; throughput is
world-steps per second over the timed calls. Ratios are *time* ratios: ``x_mjx = time / time of
mjx_step`` (1.05 means 5 % slower than raw MJX), ``x_native`` the same against ``mujoco_rollout``.
The peers that step the scene's own scheme must end where MuJoCo C ends (``max_dqpos``/``max_dqvel``).
"""

from __future__ import annotations

import math
import os
import tempfile

from .peers import (
    C_PAIRS,
    DEFAULT_PEERS,
    ENGINE_PEERS,
    NATIVE,
    RAW_PEERS,
    REFERENCE,
    VARIANT_PAIRS,
    BenchError,
    check_counts,
    check_peers,
    same_scheme,
    scene_scheme,
    setup_peer,
)
from .report import load_average
from .timing import Peer, time_interleaved

__all__ = ["bench_cell", "engine_steps"]


def engine_steps(own_call_s: float | None, steps: int, min_time: float, most: int = 50) -> int:
    """Steps of one engine call: a whole run, as a user makes it, long enough (``min_time``, judged from
    ``own_call_s``, the seconds per ``steps`` of the engine's integrator's own peer in this cell) that
    per-run setup (planning, the file's creation) weighs as in real use; a multiple of ``steps``, at
    most ``most`` times it. Without that peer in the cell (``None``): ``steps``."""
    if own_call_s is None or min_time <= 0:
        return steps
    return steps * max(1, min(most, math.ceil(min_time / max(own_call_s, 1e-9))))


def _check(scene, *, peers, steps, record_every, dt) -> None:
    import mujoco

    engine = set(ENGINE_PEERS) & set(peers)
    if steps % record_every and engine:
        raise BenchError(f"steps={steps} must be a multiple of record_every={record_every}")
    if engine and scene_scheme(scene) is None:
        own = mujoco.mjtIntegrator(int(scene.model.opt.integrator)).name
        raise BenchError(f"peer(s) {sorted(engine)} run the scene's own integrator ({own}), which no registered "
                         f"integrator steps; leave them out")
    if dt != float(scene.model.opt.timestep) and set(RAW_PEERS) & set(peers):
        raise BenchError(f"dt={dt} differs from the scene's timestep {scene.model.opt.timestep}: the raw peers step "
                         f"with the model's timestep; edit the scene instead")


def _set_up(scene, x0, peers, *, steps, dt, record_every, min_time, nthread, tmpdir, say) -> list:
    """Every peer compiled and warmed up, in order; the engine peers sized by their integrator's peer."""
    own = scene_scheme(scene)
    out = os.path.join(tmpdir or tempfile.gettempdir(), f"mjharness-bench-{os.getpid()}.h5")
    set_up: list[Peer] = []
    try:
        for p in peers:
            say(f"  {p}: compile + warm-up ...")
            own_s = next((q.warm_s for q in set_up if q.name == own), None)
            set_up.append(setup_peer(p, scene, x0, steps=steps, dt=dt, record_every=record_every, nthread=nthread,
                                     run_steps=engine_steps(own_s, steps, min_time), out=out))
    except BaseException:
        for q in set_up:
            q.close()
        raise
    return set_up


def bench_cell(scene, *, batch: int, steps: int, peers=DEFAULT_PEERS, dt: float | None = None, record_every: int = 10,
               repeats: int = 2, min_time: float = 1.0, seed: int = 0, perturb: float = 0.01, nthread=None,
               tmpdir: str | None = None, log=None) -> dict:
    """Every peer on one scene and batch. ``scene``: an MjScene or anything ``load_scene`` takes;
    ``peers``: names from ``peer_names()``."""
    from mjharness.rollout import initial_states
    from mjharness.rollout.engine import resolve_scene

    peers = tuple(peers)
    check_peers(peers)
    check_counts(batch=batch, steps=steps, repeats=repeats, record_every=record_every)
    scene = resolve_scene(scene, backend="mjx")  # ours on MJX vs raw mjx.step: the same engine
    dt = float(scene.model.opt.timestep) if dt is None else float(dt)
    _check(scene, peers=peers, steps=steps, record_every=record_every, dt=dt)
    x0 = initial_states(scene, batch, seed, perturb)
    say = log or (lambda s: None)
    set_up = _set_up(scene, x0, peers, steps=steps, dt=dt, record_every=record_every, min_time=min_time,
                     nthread=nthread, tmpdir=tmpdir, say=say)
    try:
        say(f"  timing {len(set_up)} peers, interleaved ...")
        cpu: dict = {}
        times = time_interleaved(set_up, repeats=repeats, min_time=min_time, cpu=cpu)
        rows = [q.finish(times[q.name], q.state) for q in set_up]
        for r in rows:
            r["cpu_call_s"] = [round(c, 6) for c in cpu[r["peer"]]]
        finals = {q.name: q.finals for q in set_up}
    finally:
        for q in set_up:
            q.close()
    for r in rows:
        say(f"  {r['peer']}: {r['world_steps_per_s']:.4g} world-steps/s, compile {r['compile_s']:.1f} s")
    add_ratios(rows)
    add_agreement(rows, finals, same_scheme(scene))
    m = scene.model
    return dict(scene=getattr(scene, "name", "?"), source=_source(scene), nq=m.nq, nv=m.nv, nu=m.nu, ngeom=m.ngeom,
                dt=dt, batch=batch, steps=steps, record_every=record_every, load_average=load_average(),
                results=rows)


def _source(scene) -> str:
    from mjharness.scenes import scene_info

    try:
        return scene_info(scene.model).source
    except Exception:
        return "?"


def add_agreement(rows, finals, same) -> None:
    """``max_dqpos`` / ``max_dqvel`` of every peer in ``same`` (the scene's own scheme): largest
    |difference| from the reference peer (MuJoCo C, else raw MJX) after one call's steps."""
    import numpy as np

    ref = next((p for p in (NATIVE, REFERENCE) if p in finals), None)
    # A C backend peer stepping another scheme than the scene's is held to mujoco.rollout stepping that scheme.
    own_native = {p: n for p, n, _ in C_PAIRS if p not in same and n in finals}
    for r in rows:
        r["agrees_with"] = None
        yardstick = own_native.get(r["peer"], ref if r["peer"] in same else None)
        if yardstick is None:
            continue
        (q, v), (q0, v0) = finals[r["peer"]], finals[yardstick]
        r["agrees_with"] = yardstick
        r["max_dqpos"] = float(np.max(np.abs(np.asarray(q) - np.asarray(q0)), initial=0.0))
        r["max_dqvel"] = float(np.max(np.abs(np.asarray(v) - np.asarray(v0)), initial=0.0))


def add_ratios(rows) -> None:
    """Time ratios against raw MJX and MuJoCo C (per world-step: same batch, any steps per call)."""
    by = {r["peer"]: r["world_steps_per_s"] for r in rows}
    for r in rows:
        for key, ref in (("x_mjx", REFERENCE), ("x_native", NATIVE)):
            r[key] = by[ref] / r["world_steps_per_s"] if ref in by else None
    for peer, native, _ in C_PAIRS:  # our C backend's speed as a fraction of mujoco.rollout's
        if peer in by and native in by:
            next(r for r in rows if r["peer"] == peer)["vs_mujoco_rollout"] = by[peer] / by[native]
    cpu = {r["peer"]: sum(r["cpu_call_s"]) / len(r["cpu_call_s"]) for r in rows if r.get("cpu_call_s")}
    for peer, plain, _ in VARIANT_PAIRS:  # against the same run without what the peer adds: worse of wall and CPU
        if peer in by and plain in by:
            row = next(r for r in rows if r["peer"] == peer)
            row["vs_plain_wall"] = by[peer] / by[plain]
            if peer in cpu and plain in cpu and cpu[peer] > 0:
                row["vs_plain_cpu"] = cpu[plain] / cpu[peer]
            row["vs_plain"] = min(row["vs_plain_wall"], row.get("vs_plain_cpu", math.inf))
    if "rollout" in by and "rollout_h5" in by:
        for r in rows:
            if r["peer"] == "rollout_h5":
                r["x_rollout"] = by["rollout"] / r["world_steps_per_s"]
    for peer, key in (("rollout_h5_nocheck", "checksum_cost"), ("rollout_h5_nohash", "hash_cost")):
        if "rollout_h5" in by and peer in by:  # what chunk checksums + content hashes / the hashes alone cost
            next(r for r in rows if r["peer"] == "rollout_h5")[key] = by[peer] / by["rollout_h5"] - 1.0
