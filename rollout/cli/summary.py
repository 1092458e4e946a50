"""The summary lines ``run`` (one process, or process 0 of several) and ``show`` print about a run."""

from __future__ import annotations

from mjharness.integrators import STATUS_TERMINATED


def flagged_lines(flagged: dict, shown: int = 8) -> list[str]:
    """One line per output that flagged worlds (contact overflow), naming the worlds, their first flagged row
    and how many rows (the file: ``/outputs/<name>[..., 2]``, bits as its ``overflow_bits`` attribute)."""
    lines = []
    for name, per in flagged.items():
        worlds = list(per.items())
        text = ", ".join(f"world {w} (row {first}, {n} rows)" for w, (first, n) in worlds[:shown])
        lines.append(f"  {name}: contact overflow in {len(worlds)} world(s): {text}"
                     + (", ..." if len(worlds) > shown else "")
                     + " -- raise K (--outputs contacts:K; `mjharness probe` reports the peak)")
    return lines


def episode_lines(path) -> list[str]:
    """A closed loop's summary from its file (a run's, or a multi-process run's joined one): the worlds a
    termination rule froze, or the episodes of a resetting run; [] for a run without a termination rule."""
    from mjharness.rollout.h5 import open_rollout

    if path is None:
        return []
    with open_rollout(path) as f:
        if not f.attrs.get("terminate"):
            return []
        frozen = int((f.status == STATUS_TERMINATED).sum())
        if f.attrs.get("on_terminate") != "reset":
            return [f"  terminated: {frozen} world(s) (on_terminate=freeze)"]
        ends = f.episode_table()
    done = [e for e in ends if e["end"] == "terminated"]
    lengths = [e['end_step'] - e['start_step'] + 1 for e in done]
    mean = f", mean length {sum(lengths) / len(lengths):.0f} steps" if done else ""
    return [f"  episodes: {len(ends)} ({len(done)} terminated{mean}); open_rollout(file).episodes(world)"]
