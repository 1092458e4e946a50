"""What a resumed run takes from its file, read in one open (``read_resume``).

A resume needs the file's settings (to match them and to fill the ones not given again), its initial
states and per-world model fields, where it stopped (the last flushed sample's state, carry and the
worlds' statuses) and, when the run keeps its trajectory in memory, the samples already written. The
engine reads all of it here once and never reopens the file to learn a setting; only the writer opens
it again (to extend it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .format import decode_attr
from .layout import carry_dict
from .reader import RolloutFile, open_rollout


@dataclass(frozen=True)
class ResumePrefix:
    """The samples a file already holds, for a run that keeps its trajectory in memory."""

    x: np.ndarray                       # (j, B, n)
    outputs: dict[str, np.ndarray]      # name -> (j, B, ...)
    carry: dict[str, np.ndarray]        # carry entry -> (j, B, size) (every entry of the file's carry)


@dataclass(frozen=True)
class ResumeInfo:
    """A rollout file as a resume sees it (``read_resume``).

    Attributes:
        path: the file.
        attrs: its root attributes, decoded (``RolloutFile.attrs``).
        raw_attrs: the same, as ``decode_attr`` gives them (JSON text left as text), to compare with a plan's.
        samples: samples flushed (the run restarts after the last).
        complete: whether the file holds its whole planned run.
        x0: (B, n) initial states; model_params: {field: (B, ...)}.
        n: the state size of its samples; carry_layout: ((name, size), ...); has_carry: a /carry dataset.
        has_mjb: the file keeps the binary model (older files hashed the XML).
        x_last: (B, n) the last flushed sample's state (None when no sample was flushed).
        carry_last: {name: (B, size)} the carry after it, or the initial carry when none was flushed.
        status, status_step: (B,) the worlds' statuses and steps as flushed.
        model: the MjModel that ran (None when the file has no model).
        prefix: the flushed samples (``ResumePrefix``), when asked for.
    """

    path: str
    attrs: dict
    raw_attrs: dict
    samples: int
    complete: bool
    x0: np.ndarray
    model_params: dict
    n: int
    carry_layout: tuple
    has_carry: bool
    has_mjb: bool
    x_last: np.ndarray | None
    carry_last: dict
    status: np.ndarray
    status_step: np.ndarray
    model: Any = None
    prefix: ResumePrefix | None = None
    batch: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "batch", int(self.x0.shape[0]))

    def setting(self, name: str, default: Any = None) -> Any:
        """A run setting as the file recorded it (decoded), or ``default`` when the file has none."""
        v = self.attrs.get(name)
        return default if v is None or v == "" else v


def _prefix(f: RolloutFile, j: int) -> ResumePrefix:
    outputs = {name: np.asarray(ds[:j]) for name, ds in f.h5["outputs"].items()} if "outputs" in f.h5 else {}
    carry = carry_dict(f.carry_layout, f.read("carry", np.s_[:j])) if f.carry_layout and j else {}
    return ResumePrefix(x=np.asarray(f.h5["x"][:j]), outputs=outputs, carry=carry)


def _model(f: RolloutFile):
    try:
        return f.model()
    except Exception:  # a file without a model (a non-MuJoCo scene's): the caller gives the scene
        return None


def read_resume(path: str | os.PathLike[str], *, prefix: bool = False, model: bool = False) -> ResumeInfo:
    """Everything a resume of ``path`` needs, in one open of the file (``prefix``: also the flushed samples;
    ``model``: also the MjModel that ran)."""
    path = os.fspath(path)
    with open_rollout(path) as f:
        j = f.samples
        layout = f.carry_layout
        carry_last = f.carry_at(j - 1) if (j > 0 and layout) else (
            carry_dict(layout, f.carry0) if layout else {})
        return ResumeInfo(
            path=path, attrs=dict(f.attrs), raw_attrs={k: decode_attr(v) for k, v in f.h5.attrs.items()},
            samples=j, complete=f.complete, x0=np.asarray(f.x0), model_params=dict(f.model_params),
            n=int(f.h5["x"].shape[2]), carry_layout=tuple(layout), has_carry="carry" in f.h5,
            has_mjb=f.mjb is not None, x_last=np.asarray(f.h5["x"][j - 1]) if j > 0 else None,
            carry_last={k: np.asarray(v) for k, v in carry_last.items()},
            status=np.asarray(f.status).astype(np.int8), status_step=np.asarray(f.status_step).astype(np.int64),
            model=_model(f) if model else None, prefix=_prefix(f, j) if prefix else None)
