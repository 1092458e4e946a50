"""``verify``: is a rollout file intact? Every chunk of every dataset read (Fletcher-32 checked by HDF5),
the attributes decoded, the model digest and the content digest recomputed.

Outcome: ``"intact"``, ``"corrupt"`` (with one line per problem, naming the dataset and the chunk) or
``"foreign"`` (not a rollout file). Files written before checksums existed are read all the same; the
report says they carry no checksums, so only unreadable data can be found in them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import h5py

from .digest import content_digest
from .errors import RolloutFileError
from .format import FORMAT, decode_attr
from .reader import open_h5


@dataclass
class VerifyReport:
    path: str
    status: str                      # "intact" | "corrupt" | "foreign"
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    chunks: int = 0

    @property
    def exit_code(self) -> int:
        return {"intact": 0, "corrupt": 1}.get(self.status, 2)

    def summary(self) -> str:
        head = {"intact": "intact", "corrupt": "CORRUPT", "foreign": "not a rollout file"}[self.status]
        lines = [f"{self.path}: {head} ({self.chunks} chunks read)"]
        lines += [f"  problem: {p}" for p in self.problems] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _datasets(g, prefix=""):
    for name in g:
        try:
            obj = g[name]
        except (OSError, KeyError) as e:
            yield prefix + name, e
            continue
        if isinstance(obj, h5py.Dataset):
            yield prefix + name, obj
        else:
            yield from _datasets(obj, prefix + name + "/")


def _check_dataset(name: str, ds) -> tuple[list[str], int]:
    """(problems, chunks read) of one dataset: each chunk read on its own, so a failure names its chunk."""
    if isinstance(ds, Exception):
        return [f"/{name}: its header does not read ({ds})"], 0
    if ds.is_virtual:
        return [], 0  # views over /x and /outputs, checked there
    if ds.chunks is None or ds.size == 0:
        try:
            ds[()]
            return [], 1
        except OSError as e:
            return [f"/{name}: does not read ({e})"], 1
    problems, n = [], 0
    for part in ds.iter_chunks():
        n += 1
        try:
            ds[part]
        except OSError as e:
            idx = tuple(s.start // c for s, c in zip(part, ds.chunks))
            why = "checksum mismatch" if "checksum" in str(e).lower() else str(e)
            problems.append(f"/{name} chunk {idx} (rows {part[0].start}..{part[0].stop - 1}): {why}")
    return problems, n


def _check_digests(f: h5py.File) -> tuple[list[str], list[str]]:
    problems, notes = [], []
    a = f.attrs
    if "mjb" in f.get("model", {}) and "model_sha256" in a:
        try:
            if hashlib.sha256(f["model/mjb"][()].tobytes()).hexdigest() != decode_attr(a["model_sha256"]):
                problems.append("/model/mjb: its SHA-256 differs from the model_sha256 attribute (the model changed)")
        except OSError:
            pass  # reported with the chunks
    if "content_sha256" in a:
        try:
            if content_digest(f) != decode_attr(a["content_sha256"]):
                problems.append("content digest mismatch: the model, the layout or a settings attribute changed "
                                "since the file was created")
        except OSError as e:
            problems.append(f"content digest cannot be computed ({e})")
    else:
        notes.append("no content digest (written before format integrity 1: model and settings not checked)")
    return problems, notes


def verify(path) -> VerifyReport:
    """Check every chunk, the attributes and the digests of the rollout file ``path``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        return VerifyReport(path, "foreign", problems=["no such file"])
    try:
        f, _ = open_h5(path)
    except RolloutFileError as e:
        foreign = "no HDF5 signature" in str(e)
        return VerifyReport(path, "foreign" if foreign else "corrupt", problems=[str(e)])
    with f:
        try:
            attrs = {k: decode_attr(v) for k, v in f.attrs.items()}
        except OSError as e:
            return VerifyReport(path, "corrupt", problems=[f"root attributes do not read ({e})"])
        if attrs.get("format") != FORMAT:
            return VerifyReport(path, "foreign", problems=[f"no format={FORMAT!r} attribute: not a rollout file"])
        rep = VerifyReport(path, "intact")
        if "integrity" not in attrs:
            rep.notes.append(f"no checksums (written before format integrity 1, by mjharness "
                             f"{attrs.get('mjharness_version', '?')}): only unreadable data can be detected")
        for name, ds in _datasets(f):
            problems, n = _check_dataset(name, ds)
            rep.problems += problems
            rep.chunks += n
        problems, notes = _check_digests(f)
        rep.problems += problems
        rep.notes += notes
        if "progress" in f:
            try:
                samples, complete = (int(v) for v in f["progress"][()])
                rep.notes.append(f"{samples} of {f['x'].shape[0]} samples written, complete={bool(complete)}")
            except OSError:
                pass
    rep.status = "corrupt" if rep.problems else "intact"
    return rep
