"""One progress bar for a multi-process run, drawn by process 0 from every shard's ``/progress``.

Each process streams its worlds to its own shard file, whose ``/progress`` dataset ([samples flushed,
complete]) is rewritten after every chunk and readable at any time (SWMR). Process 0 reads all of them
every ``POLL_S`` seconds on a background thread and shows one bar whose position is the step of the
*slowest* process (the run is done when it is; its ETA is the run's), with each process's step beside it;
the other processes show nothing. A shard that does not exist yet, is being created, cannot be read at
this instant, or is a previous run's file that this (fresh) run has not replaced yet counts as not started
(its last value read). Reading never blocks a writer: process 0's own shard is opened under h5py's global
lock (HDF5 refuses to open a file for writing that the same process has open), the others as SWMR readers;
a read that stalls only stalls the bar's thread, which the run does not wait for.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext

POLL_S = 0.5
SHOWN_PROCESSES = 4  # per-process steps beside the bar up to this many processes, else the spread


def _stat_key(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def shard_step(path: str, *, steps: int, record_every: int, in_process: bool = False) -> int | None:
    """The steps shard ``path`` has flushed (its samples x ``record_every``; ``steps`` once complete with
    every sample), or None when it cannot be read now (missing, being created, not a rollout file).
    ``in_process``: this process writes the file (read under h5py's lock, see the module doc)."""
    if not os.path.isfile(path):
        return None
    from h5py._objects import phil

    from ..h5.reading import open_h5

    try:
        with phil if in_process else nullcontext():
            f, _ = open_h5(path)
            try:
                samples, complete = (int(v) for v in f["progress"][()][:2])
            finally:
                f.close()
    except Exception:  # not there yet, its header being written, torn: the next poll tries again
        return None
    if complete and samples >= steps // record_every:
        return steps
    return min(steps, samples * record_every)


class ShardProgress:
    """The bar of a multi-process run (process ``own`` draws it). ``paths``: every process's shard, in process
    order; ``steps``: the run's total; ``fresh``: a new run (not a resume), so shard files that already exist
    now are a previous run's until they change; ``initial``: the step the bar starts at (a resume's)."""

    def __init__(self, paths, *, steps: int, record_every: int, own: int = 0, fresh: bool = True, initial: int = 0,
                 poll_s: float = POLL_S, file=None):
        self.paths = list(paths)
        self.steps, self.record_every, self.own, self.poll_s = int(steps), int(record_every), own, poll_s
        self._stale = {p: _stat_key(p) for p in self.paths} if fresh else {}
        self.last: list[int | None] = [None] * len(self.paths)
        self.initial = int(initial)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        from tqdm.auto import tqdm

        n = len(self.paths)
        self.bar = tqdm(total=self.steps, initial=self.initial, unit="step", dynamic_ncols=True,
                        desc=f"rollout ({n} processes, slowest)", file=file if file is not None else sys.stderr)

    def poll(self) -> list[int | None]:
        """Read every shard once; returns each process's step (None: not started or not readable yet)."""
        for k, path in enumerate(self.paths):
            if path in self._stale:
                if _stat_key(path) == self._stale[path]:
                    continue  # a previous run's file, not yet replaced by this run's
                del self._stale[path]
            step = shard_step(path, steps=self.steps, record_every=self.record_every, in_process=k == self.own)
            if step is not None:
                self.last[k] = step
        return list(self.last)

    def position(self) -> int:
        """The slowest process's step (a process not started yet counts as at ``initial``)."""
        return min(self.initial if s is None else s for s in self.last)

    def postfix(self) -> str:
        if len(self.last) <= SHOWN_PROCESSES:
            return " ".join(f"p{k} {'-' if s is None else s}" for k, s in enumerate(self.last))
        known = [s for s in self.last if s is not None]
        started = f"{len(known)}/{len(self.last)} started"
        return f"{started}, fastest {max(known)}" if known else started

    def update(self) -> None:
        """Poll the shards and redraw the bar."""
        self.poll()
        with self._lock:
            if self.bar is None:
                return
            self.bar.n = self.position()
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.refresh()

    def _run(self):
        while not self._stop.wait(self.poll_s):
            self.update()

    def start(self) -> ShardProgress:
        self.update()
        thread = threading.Thread(target=self._run, name="mjharness-shard-progress", daemon=True)
        self._thread = thread
        thread.start()
        return self

    def close(self, done: bool = False) -> None:
        """Stop polling and close the bar; ``done``: every process finished (the bar shows the total). Never
        waits on a stalled read for more than a few polls."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 4 * self.poll_s))
        with self._lock:
            if self.bar is None:
                return
            if done:
                self.last = [self.steps] * len(self.last)
                self.bar.n = self.steps
                self.bar.set_postfix_str(self.postfix(), refresh=False)
                self.bar.refresh()
            self.bar.close()
            self.bar = None
