"""Flagged rows (contact overflow) recomputed from a rollout file's recorded outputs.

A run reports them as ``RolloutResult.stats["flagged"]`` = {output: {world: (first flagged row, flagged
rows)}} while it runs; ``flagged_in_file`` gives the same from the file alone (``mjharness show``, and the
summary of a multi-process run, whose joined file holds every process's worlds under their global index).
An output flags rows when its kind says so (``adapters.outputs.OutputKind.flags``: the ``overflow`` column
of ``/outputs/<contacts>_ncon``); the kind is read from the dataset's ``mujoco_field`` attribute.
"""

from __future__ import annotations

import numpy as np

from .format import decode_attr

BLOCK_VALUES = 1 << 22  # values read per block (a few MB), so a long file is never read whole


def flagging_outputs(f) -> dict:
    """{output name: its kind's ``flags`` function} for the recorded outputs of ``f`` (a ``RolloutFile``)
    that flag rows (contact counts); {} when none was recorded."""
    from mjharness.adapters.outputs import KIND_OF_FIELD

    found = {}
    for name in f.output_names:
        kind = KIND_OF_FIELD.get(decode_attr(f.h5["outputs"][name].attrs.get("mujoco_field")))
        if kind is not None and kind.flags is not None:
            found[name] = kind.flags
    return found


def flagged_in_file(f, first_row: int = 0) -> dict:
    """{output: {world: (first flagged row, flagged rows)}} over the flushed rows ``first_row ..`` of ``f``
    (a ``RolloutFile``), worlds as the file indexes them; outputs without a flagged row are left out, as in
    ``RolloutResult.stats["flagged"]``."""
    out = {}
    for name, flags in flagging_outputs(f).items():
        ds = f.h5["outputs"][name]
        per_row = max(1, int(np.prod(ds.shape[1:], dtype=np.int64)))
        block = max(1, BLOCK_VALUES // per_row)
        first: dict[int, int] = {}
        count: dict[int, int] = {}
        for j0 in range(max(0, first_row), f.samples, block):
            j1 = min(f.samples, j0 + block)
            rows = np.asarray(flags(None, f.read(f"outputs/{name}", np.s_[j0:j1])))
            for w in np.nonzero(rows.any(axis=0))[0].tolist():
                first.setdefault(w, j0 + int(np.argmax(rows[:, w])))
                count[w] = count.get(w, 0) + int(rows[:, w].sum())
        if first:
            out[name] = {w: (first[w], count[w]) for w in sorted(first)}
    return out
