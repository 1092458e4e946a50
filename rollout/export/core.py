"""The shared core of the dataset exports: a rollout file's episodes -> frames of a gym loop.

One frame per control period (what a gym ``step`` is): the observation before the period, the control held
during it (``/ctrl``), the reward evaluated after it, and whether the episode terminated or was truncated
there. Everything is planned first (``plan_export``: options, observation names, the output folder, which
samples end which periods of which episode) and refused with one error before anything is written; the
writers then read the file in blocks of worlds and cut whole-episode array slices (no Python per frame).

Episode ends (``/episodes`` ``end``) as datasets see them:

- ``terminated``: terminated at the last frame (its next observation is the terminal state, also when the rule
  fired in the middle of a control period: that last period is then shorter);
- ``truncated`` (the run ended first): truncated at the last whole control period;
- ``failed`` (a non-finite state or control): truncated at the last sample before the failed step (the failed
  step produced no state), with ``failed=True`` in the episode's metadata;
- ``running`` (a file still being written): not exported; the episodes finished so far are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mjharness.rollout.errors import RolloutError
from mjharness.rollout.h5 import RolloutFile, RolloutFileError
from mjharness.rollout.h5.episodes import episode_table
from mjharness.rollout.h5.format import decode_attr
from mjharness.rollout.h5.layout import carry_slots_of_table, vds_segment

FORMATS = ("lerobot", "minari")
DEFAULT_OBS = ("qpos", "qvel")
# Frames of one part of a block: the frames, columns and statistics of a part (~10 MB an array) are made and
# written before the next; a fresh process's first touch of memory costs more than its use (``block_parts``).
PART_FRAMES = 1 << 16
# Bytes of one block of worlds read at once (/x, /carry and observed outputs of T samples): files are chunked with
# every world in a chunk, so each block decodes every chunk once; fewer blocks, fewer passes.
BLOCK_BYTES = 1024 * 2**20
_EVERY = re.compile(r"every=(\d+)")


@dataclass(frozen=True)
class Obs:
    """One observation: columns ``cols`` of ``/x`` (a state, qpos, qvel, x) or the output ``output``."""

    name: str
    shape: tuple
    labels: tuple
    cols: slice | None = None
    output: str | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Episode:
    """One exported episode: ``row`` of ``/episodes``; ``frames`` the sample indices ending its N periods."""

    row: dict
    frames: np.ndarray
    local_world: int

    @property
    def length(self) -> int:
        return len(self.frames)


@dataclass
class ExportPlan:
    """What an export reads and writes, checked before anything is written (``plan_export``)."""

    file: RolloutFile
    format: str
    out: str
    obs: tuple
    every: int
    record_every: int
    dt: float
    fps: float
    episodes: list
    skipped: dict
    has_reward: bool
    nu: int
    meta: dict = field(default_factory=dict)
    reset_to: str = "x0"
    slots: dict = field(default_factory=dict)  # carry entry -> (shape, offset, size)
    carry: dict = field(default_factory=dict)  # the actions' entries of every world, read with the episodes
    resets: Any = None  # replay.ResetStates, made at the first reset episode
    model_params: dict = field(default_factory=dict)  # read once: RolloutFile reads on every access


def _controller_every(attrs: dict) -> int:
    """The Controller's ``every`` (recorded in the root attribute ``controller``), 1 without one."""
    m = _EVERY.search(str(attrs.get("controller") or ""))
    return int(m.group(1)) if m else 1


def _state_labels(f: RolloutFile, cols: slice) -> tuple:
    labels = f.h5["state"][cols] if "state" in f.h5 else np.arange(cols.start, cols.stop)
    return tuple(decode_attr(v) if isinstance(v, bytes) else str(v) for v in labels)


def resolve_obs(f: RolloutFile, names) -> tuple:
    """``Obs`` of each name: "x", "qpos", "qvel", a named state of the layout or a recorded output (one
    ``RolloutError`` naming the first unknown name and what the file holds)."""
    if isinstance(names, str):
        names = tuple(n.strip() for n in names.split(",") if n.strip())
    names = tuple(names)
    if not names:
        raise RolloutError("obs: no observation named (give e.g. obs=('qpos', 'qvel'))")
    if len(set(names)) != len(names):
        raise RolloutError(f"obs={list(names)}: a name is given twice")
    n = int(f.h5["x"].shape[2])
    out = []
    for name in names:
        if name == "x":
            cols = slice(0, n)
            out.append(Obs(name, (n,), _state_labels(f, cols), cols=cols))
        elif name in ("qpos", "qvel") and name in f.h5:
            cols = vds_segment(f.h5[name])
            out.append(Obs(name, (cols.stop - cols.start,), _state_labels(f, cols), cols=cols))
        elif name in f.layout.names:
            r = f.layout[name]
            cols = slice(r.offset, r.offset + r.size)
            out.append(Obs(name, (r.size,), _state_labels(f, cols), cols=cols))
        elif name in f.output_names:
            ds = f.h5["outputs"][name]
            if decode_attr(ds.attrs.get("mujoco_field")) in (None, "", "contacts"):
                raise RolloutError(f"obs {name!r}: output {name!r} of {f.path} is not a MuJoCo data field (its "
                                   f"value at an episode's first state cannot be evaluated); use states or a "
                                   f"field such as 'sensordata'")
            shape = tuple(int(s) for s in ds.shape[2:])
            size = int(np.prod(shape, dtype=np.int64))
            out.append(Obs(name, (size,), tuple(f"{name}[{i}]" for i in range(size)), output=name))
        else:
            raise RolloutError(f"obs {name!r}: {f.path} has no state or output {name!r}; states: x, qpos, qvel, "
                               f"{', '.join(f.layout.names)}; outputs: {', '.join(f.output_names) or 'none'}")
    return tuple(out)


def check_out(out) -> str:
    """The output folder: absent or empty (refused otherwise, before anything is written)."""
    out = os.fspath(out)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise RolloutError(f"out={out!r}: exists and is not an empty folder (an export writes a new dataset; "
                           f"remove it or name another)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise RolloutError(f"out={out!r}: its folder {parent} does not exist")
    return out


def check_format(format: str) -> str:
    if format not in FORMATS:
        raise RolloutError(f"format={format!r}: not a dataset format; use one of {', '.join(FORMATS)}")
    return format


def period_frames(row: dict, *, record_every: int, every: int) -> np.ndarray:
    """The sample indices at which the control periods of episode ``row`` end (N,): the samples whose step
    k has (k + 1 - start) % every == 0, up to the episode's end (module docstring); raises
    ``RolloutFileError`` when a period end is not a sample."""
    s = np.asarray(row["samples"], dtype=np.int64)
    start, end_step, end = int(row["start_step"]), int(row["end_step"]), row["end"]
    step = (s + 1) * record_every - 1
    if end == "failed":  # the failed step and the frozen samples after it hold no new state
        s, step = s[step < end_step], step[step < end_step]
    at_end = (step + 1 - start) % every == 0
    if end == "terminated" and len(s):
        if step[-1] < end_step:
            raise RolloutFileError(f"world {row['world']} episode {row['episode']}: its terminal state (step "
                                   f"{end_step}) falls between two samples (record_every={record_every}); record "
                                   f"every step (or every control period) to export it")
        at_end[-1] = True  # the terminal state, also mid-period
    frames = s[at_end]
    n = len(frames)
    whole = (step[at_end] + 1 - start) // every
    expect = np.arange(1, n + 1)
    if end == "terminated" and n:
        whole, expect = whole[:-1], expect[:-1]
    if not np.array_equal(whole, expect):
        raise RolloutFileError(f"world {row['world']} episode {row['episode']} (start step {start}): its control "
                               f"periods (every={every}) do not all end on a sample (record_every={record_every}); "
                               f"record with a record_every that divides every and the episodes' start steps")
    return frames


EPISODE_ENTRIES = ("episode", "episode_start", "terminated")


def _span(slots: dict, names) -> tuple:
    """(first, last + 1) of the carry columns of entries ``names`` (slot: (shape, offset, size))."""
    return min(slots[k][1] for k in names), max(slots[k][1] + slots[k][2] for k in names)


def carry_columns(f: RolloutFile, slots: dict, names, sel: tuple) -> dict:
    """name -> ``/carry[sel + (entry's columns,)]`` of carry entries ``names`` (slot: (shape, offset, size)), a
    scalar entry without its last axis: one read of the columns' span (a contiguous hyperslab reads ~5x faster
    than a list of columns, and much faster than every column of the chunks)."""
    lo, hi = _span(slots, names)
    span = f.read("carry", sel + (slice(lo, hi),))
    out = {}
    for k in names:
        shape, off, size = slots[k]
        a = span[..., off - lo:off - lo + size]
        out[k] = a[..., 0] if shape == () else a
    return out


def _actions(slots: dict) -> tuple:
    """The carry entries of a dataset's steps: the control held, the reward after it (when recorded)."""
    return ("ctrl", "reward") if "reward" in slots else ("ctrl",)


def _rows(f: RolloutFile, slots: dict) -> tuple:
    """(``f.episode_table()``'s rows, carry entry -> (T, batch, ...) of what was read). The episode entries are
    read in one pass over ``/carry`` with the actions when they fit a block (the reader reads each entry in a
    pass of its own, and every pass decodes and checksums whole chunks of every entry)."""
    if all(k in slots for k in EPISODE_ENTRIES):
        a, T = f.attrs, f.samples
        names = EPISODE_ENTRIES + _actions(slots)
        lo, hi = _span(slots, names)
        if 8 * T * f.batch * (hi - lo) > BLOCK_BYTES:
            names = EPISODE_ENTRIES
        cols = carry_columns(f, slots, names, np.s_[:T, :])
        ep, start, pending = (cols[k] for k in EPISODE_ENTRIES)
        return episode_table(ep.astype(np.int64), start, pending, f.status, f.status_step,
                             record_every=int(a["record_every"]), steps=int(a["steps"]), samples_done=T,
                             complete=f.complete, world_offset=int(a.get("world_offset", 0) or 0)), cols
    # A run without a termination rule: one episode per world, truncated by the run's end (or failed).
    status, status_step = f.status, f.status_step
    T, re_ = f.samples, int(f.attrs["record_every"])
    off = int(f.attrs.get("world_offset", 0) or 0)
    steps, complete = int(f.attrs["steps"]), f.complete
    rows = []
    for w in range(f.batch):
        code = int(status[w])
        end = "failed" if code else ("truncated" if complete else "running")
        end_step = int(status_step[w]) if code else (steps - 1 if complete else T * re_ - 1)
        rows.append(dict(world=w + off, episode=0, start_step=0, end_step=end_step, end=end, samples=np.arange(T)))
    return rows, {}


def plan_export(f: RolloutFile, out, *, format: str, obs=DEFAULT_OBS) -> ExportPlan:
    """Check every option against the file and choose the frames of every episode; nothing is written."""
    format = check_format(format)
    obs = resolve_obs(f, obs)
    out = check_out(out)
    a = f.attrs
    slots = carry_slots_of_table(f.table("layout"))
    if "ctrl" not in slots:
        raise RolloutFileError(f"{f.path}: no /ctrl (the run's controls were an input array, not a Controller or "
                               f"a control function): a dataset needs the applied actions")
    every, record_every, dt = _controller_every(a), int(a["record_every"]), float(a["dt"])
    if every % record_every:
        raise RolloutFileError(f"{f.path}: record_every={record_every} does not divide the controller's "
                               f"every={every}: the ends of the control periods (a dataset's frames) are not all "
                               f"samples")
    off = int(a.get("world_offset", 0) or 0)
    episodes, skipped = [], {"running": 0, "no frames": 0}
    rows, carry = _rows(f, slots)
    for row in rows:
        if row["end"] == "running":
            skipped["running"] += 1
            continue
        frames = (period_frames(row, record_every=record_every, every=every) if row["start_step"] >= 0
                  else np.zeros(0, np.int64))
        if len(frames) == 0:
            skipped["no frames"] += 1
            continue
        episodes.append(Episode(row, np.asarray(frames, dtype=np.int64), int(row["world"]) - off))
    if not episodes:
        raise RolloutFileError(f"{f.path}: no finished episode with a whole control period to export "
                               f"({', '.join(f'{v} {k}' for k, v in skipped.items() if v) or 'no episodes'})")
    has_reward = "reward" in slots
    return ExportPlan(f, format, out, obs, every, record_every, dt, 1.0 / (every * dt), episodes, skipped,
                      has_reward, int(slots["ctrl"][2]),
                      meta=_file_meta(f, a, has_reward, every), reset_to=str(a.get("reset_to") or "x0"),
                      slots=slots, carry={k: v for k, v in carry.items() if k in _actions(slots)},
                      model_params=f.model_params)


def _file_meta(f: RolloutFile, a: dict, has_reward: bool, every: int) -> dict:
    """Dataset-wide metadata: where the data came from."""
    return {"source_file": os.path.abspath(f.path), "model_sha256": str(a.get("model_sha256", "")),
            "scene": str(a.get("scene", "")), "seed": int(a.get("seed", 0)), "dt": float(a["dt"]),
            "controller_every": every, "record_every": int(a["record_every"]),
            "reward_recorded": has_reward, "mjharness_version": str(a.get("mjharness_version", ""))}


def episode_meta(plan: ExportPlan, ep: Episode) -> dict:
    """Per-episode metadata: world, episode, how it ended, the seed, the model digest, the world's randomized
    parameters."""
    r = ep.row
    meta = {"world": int(r["world"]), "episode": int(r["episode"]), "end": r["end"], "failed": r["end"] == "failed",
            "start_step": int(r["start_step"]), "end_step": int(r["end_step"]), "seed": plan.meta["seed"],
            "model_sha256": plan.meta["model_sha256"], "reward_recorded": plan.has_reward}
    for k, v in plan.model_params.items():
        meta[f"model_params/{k}"] = np.asarray(v[ep.local_world], dtype=np.float64).tolist()
    return meta


def world_blocks(plan: ExportPlan):
    """(w0, w1, episodes of worlds w0..w1-1) in world order, each block's arrays within ``BLOCK_BYTES``."""
    f = plan.file
    T, n, nc = f.samples, f.h5["x"].shape[2], f.h5["carry"].shape[2]
    # at most what read_block reads
    per_world = 8 * T * (n + nc + sum(o.size for o in plan.obs if o.output is not None)) + 1
    width = max(1, BLOCK_BYTES // per_world)
    by_world: dict[int, list] = {}
    for ep in plan.episodes:
        by_world.setdefault(ep.local_world, []).append(ep)
    worlds = sorted(by_world)
    for i in range(0, len(worlds), width):
        ws = worlds[i:i + width]
        yield ws[0], ws[-1] + 1, [ep for w in ws for ep in by_world[w]]


@dataclass
class Block:
    """The arrays of worlds w0..w1-1 over the flushed samples: ``x`` (T, b, n) (when a state is observed),
    ``outputs`` name -> (T, b, size), ``ctrl`` (T, b, nu), ``reward`` (T, b)."""

    w0: int
    x: np.ndarray
    outputs: dict
    ctrl: np.ndarray
    reward: np.ndarray


def read_block(plan: ExportPlan, w0: int, w1: int) -> Block:
    f, T = plan.file, plan.file.samples
    sel = np.s_[:T, w0:w1]
    x = f.read("x", sel) if any(o.cols is not None for o in plan.obs) else np.zeros((T, w1 - w0, 0))
    outputs = {o.name: f.read(f"outputs/{o.output}", sel).reshape(T, w1 - w0, o.size)
               for o in plan.obs if o.output is not None}
    names = _actions(plan.slots)
    carry = ({k: plan.carry[k][:, w0:w1] for k in names} if plan.carry else
             carry_columns(f, plan.slots, names, sel))
    # contiguous once a block: each part's gather takes rows of a (T * b, ...) view
    ctrl = np.ascontiguousarray(carry["ctrl"])
    reward = np.ascontiguousarray(carry["reward"]) if plan.has_reward else np.zeros((T, w1 - w0))
    return Block(w0, x, outputs, ctrl, reward)


@dataclass
class Frames:
    """Episodes ``eps`` of a block as a gym loop saw them, concatenated: episode i holds frames
    ``bounds[i]:bounds[i+1]``. ``after`` name -> (F, size) the observation after each frame's period, ``firsts``
    name -> (E, size) each episode's first observation, ``action`` (F, nu), ``reward`` (F,),
    ``terminated``/``truncated`` (F,) bool (an episode's last frame)."""

    bounds: np.ndarray
    after: dict
    firsts: dict
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    def episode(self, i: int) -> slice:
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))

    def before(self, names) -> np.ndarray:
        """(F, sum of sizes): the observations ``names`` before each frame's period, side by side (an episode's
        first frame: its first state), written into one array."""
        sizes = [self.after[k].shape[1] for k in names]
        out = np.empty((int(self.bounds[-1]), sum(sizes)))
        starts, c = self.bounds[:-1], 0
        for k, n in zip(names, sizes):
            out[1:, c:c + n] = self.after[k][:-1]
            out[starts, c:c + n] = self.firsts[k]
            c += n
        return out


def block_parts(plan: ExportPlan, block: Block, eps: list, firsts):
    """(episodes, ``Frames``) of consecutive parts of a block's episodes of up to ``PART_FRAMES`` frames (at least
    one episode): each part's arrays are small enough for the allocator to reuse the last part's memory, where
    one gather of a whole block touches ~1 GB of fresh pages (each first touch a page fault: in a fresh process
    half the export's time). ``firsts(ep)``: name -> (size,) the observation of ``ep``'s first state."""
    lengths = np.array([ep.length for ep in eps], dtype=np.int64)
    ends = np.cumsum(lengths)
    i = 0
    while i < len(eps):
        j = max(i + 1, int(np.searchsorted(ends, (ends[i - 1] if i else 0) + PART_FRAMES, side="right")))
        part = eps[i:j]
        yield part, block_frames(plan, block, part, [firsts(ep) for ep in part])
        i = j


def episode_observations(fr: Frames) -> dict:
    """name -> (F + E, size): every episode's N+1 observations (its first state, then each period's end), episode
    i in rows ``bounds[i] + i : bounds[i + 1] + i + 1``: one scatter per name, not a copy per episode."""
    lengths = np.diff(fr.bounds)
    first = fr.bounds[:-1] + np.arange(len(lengths))  # row of each episode's first observation
    is_first = np.zeros(int(fr.bounds[-1]) + len(lengths), bool)
    is_first[first] = True
    out = {}
    for k, after in fr.after.items():
        a = np.empty((len(is_first),) + after.shape[1:], after.dtype)
        a[first], a[~is_first] = fr.firsts[k], after
        out[k] = a
    return out


def block_frames(plan: ExportPlan, block: Block, eps: list, firsts: list) -> Frames:
    """The frames of episodes ``eps`` of ``block``: one gather per array over every episode (no Python per frame);
    ``firsts[i]`` name -> (size,) the observation of episode i's first state."""
    lengths = np.array([ep.length for ep in eps], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    js = np.concatenate([ep.frames for ep in eps])
    bs = np.repeat(np.array([ep.local_world - block.w0 for ep in eps], dtype=np.int64), lengths)
    rows = js * block.x.shape[1] + bs  # (sample, world) -> row of the (T * b, ...) view: one np.take per array
    take = lambda a: np.take(a.reshape((-1,) + a.shape[2:]), rows, axis=0)  # noqa: E731
    x = take(block.x)
    after = {o.name: x[:, o.cols] if o.cols is not None else take(block.outputs[o.name]) for o in plan.obs}
    ends = bounds[1:] - 1
    first = {name: np.stack([f[name] for f in firsts]) for name in after}
    terminated, truncated = np.zeros(len(js), bool), np.zeros(len(js), bool)
    ended = np.array([ep.row["end"] == "terminated" for ep in eps])
    terminated[ends[ended]], truncated[ends[~ended]] = True, True
    return Frames(bounds, after, first, take(block.ctrl), take(block.reward), terminated, truncated)
