"""``verify``: is a rollout file intact? Every object, attribute, dimension scale and chunk checked.

A file written with content hashes (``/integrity``, see ``digest``) is walked object by object: the set of
objects, each object's description and attributes, each dataset's values and each streamed dataset's
blocks are hashed again and compared with what the writer recorded; every chunk is read (Fletcher-32
checked by HDF5); ``/progress`` is checked against the root attributes. A joined multi-process file is
verified with its shards (each one in full, and against the identity recorded when it was joined).

Outcome: ``"intact"``, ``"corrupt"`` (one line per problem, naming the object's path, the chunk or block,
or the shard) or ``"foreign"`` (not a rollout file at all). "Ours but damaged" is told from "not ours" by
the file's identity, which a damaged file keeps somewhere: the ``format`` attribute (root, and again on
``/integrity``) or, when the file no longer opens, the bytes ``mjharness-rollout`` anywhere in it. A file
that carries it is never called foreign, whatever is damaged. Files written before content hashes (or
before checksums) are read in full all the same; the report notes what they cannot show.
"""

from __future__ import annotations

import hashlib
import os

import h5py
import numpy as np

from . import digest as dg
from .format import FORMAT, decode_attr
from .superblock import superblock_state
from .verify_report import VerifyReport, _err, _open, _unopenable, carries_marker

# -- the checks ---------------------------------------------------------------------------------------

class _Check:
    def __init__(self, f: h5py.File, rep: VerifyReport):
        self.f, self.rep = f, rep
        self.unfinished = False  # the run has not finished (being written, killed, or stopped by a fault)
        self.blocks: dict | None = None  # dataset path -> (its block hashes, block_rows), read once

    def problem(self, text: str) -> None:
        self.rep.problems.append(text)

    def attrs(self, path: str, obj) -> dict:
        """Every attribute of ``obj`` decoded; one that does not read is a problem naming it."""
        out: dict[str, object] = {}
        try:
            keys = list(obj.attrs.keys())
        except Exception as e:  # noqa: BLE001 - damaged metadata is a finding, not a crash
            self.problem(f"{path}: its attributes do not read ({_err(e)})")
            return out
        for k in keys:
            try:
                v = obj.attrs[k]
                if isinstance(v, np.ndarray) and dg._has_objects(v.dtype):  # references: resolve them too
                    dg.feed(dg.hasher(), v, self.f)
                out[k] = decode_attr(v)
            except Exception as e:  # noqa: BLE001
                self.problem(f"{path}: attribute {k!r} does not read ({_err(e)})")
        return out

    def chunks(self, path: str, ds: h5py.Dataset, rows: slice | None = None, unpublished: bool = False) -> bool:
        """Read ``ds`` (rows ``rows`` of it) chunk by chunk, naming each chunk that fails; True when all read.
        ``unpublished``: rows past ``/progress`` (a killed writer's last chunk): a failure there is a note."""
        if ds.is_virtual:
            return True
        if ds.chunks is None or ds.size == 0:
            self.rep.chunks += 1
            try:
                ds[()]
                return True
            except Exception as e:  # noqa: BLE001
                self.problem(f"{path}: does not read ({_err(e)})")
                return False
        ok = True
        try:
            parts = list(ds.iter_chunks() if rows is None else ds.iter_chunks(
                (rows,) + tuple(slice(None) for _ in ds.shape[1:])))
        except Exception as e:  # noqa: BLE001
            self.problem(f"{path}: its chunk index does not read ({_err(e)})")
            return False
        for part in parts:
            self.rep.chunks += 1
            try:
                ds[part]
            except Exception as e:  # noqa: BLE001
                ok = False
                idx = tuple(s.start // c for s, c in zip(part, ds.chunks))
                why = "checksum mismatch" if "checksum" in str(e).lower() else _err(e)
                text = f"{path} chunk {idx} (rows {part[0].start}..{part[0].stop - 1}): {why}"
                if unpublished:
                    self.rep.notes.append(text + " (past the published samples: a killed writer's last chunk, "
                                                 "which a resume rewrites)")
                else:
                    self.problem(text)
        return ok


def _progress(c: _Check, attrs: dict, T: int | None) -> int | None:
    """Samples the file says are flushed, after checking ``/progress`` against the root attributes."""
    f = c.f
    if "progress" not in f:
        s = attrs.get("samples")
        return int(s) if isinstance(s, (int, np.integer)) else None
    try:
        p = f["progress"][()]
        samples, complete = int(p[0]), int(p[1])
    except Exception as e:  # noqa: BLE001
        c.problem(f"/progress: does not read ({_err(e)})")
        return None
    if complete not in (0, 1) or T is not None and not 0 <= samples <= T:
        c.problem(f"/progress: [{samples}, {complete}] is impossible (/x holds {T} samples; complete is 0 or 1)")
        return None
    a_s, a_c = attrs.get("samples"), attrs.get("complete")
    if complete and (samples != T or a_s != samples or a_c is not True):
        c.problem(f"/progress: says complete with {samples} samples, but /x holds {T} and the root attributes "
                  f"say samples={a_s!r}, complete={a_c!r}")
    elif not complete and (a_c is not False or not isinstance(a_s, (int, np.integer)) or a_s > samples):
        c.problem(f"/progress: says {samples} samples, incomplete, but the root attributes say samples={a_s!r}, "
                  f"complete={a_c!r}")
    if not complete:
        c.rep.notes.append(f"{samples} of {T} samples written, complete=False")
        c.rep.written = (samples, T)
    return samples


def _check_legacy(c: _Check) -> None:
    """A file without content hashes: every object, attribute and chunk read; nothing to compare with."""
    for path, obj in dg.walk(c.f):
        if isinstance(obj, Exception):
            c.problem(f"{path}: does not read ({_err(obj)})")
            continue
        c.attrs(path, obj)
        if isinstance(obj, h5py.Dataset):
            c.chunks(path, obj)


def _records(c: _Check):
    g = c.f[dg.INTEGRITY_GROUP]
    names = [decode_attr(v) for v in g["object"][()]]
    meta, value = g["meta"][()], g["value"][()]
    if meta.shape != (len(names), dg.DIGEST_SIZE) or value.shape != meta.shape:
        raise ValueError(f"/integrity tables have shapes {meta.shape}, {value.shape} for {len(names)} objects")
    return names, meta, value


def _check_objects(c: _Check, samples: int | None) -> None:
    """Each object: present, described and valued as written; each streamed dataset block by block."""
    try:
        names, meta, value = _records(c)
    except Exception as e:  # noqa: BLE001
        c.problem(f"/integrity: the hash records do not read ({_err(e)}); nothing can be compared")
        _check_legacy(c)
        return
    want = {p: i for i, p in enumerate(names)}
    own = "/" + dg.INTEGRITY_GROUP
    if not meta.any():  # the writer hashes the objects with its first chunk
        text = "no object hashes recorded (the run stopped before its first chunk)"
        if c.unfinished:
            c.rep.notes.append(text)
            _check_legacy(c)
            return
        c.problem(f"/integrity: {text}, yet the file says it is complete")
    try:
        if own not in want or dg.records_digest(c.f) != meta[want[own]].tobytes():
            c.problem("/integrity: the hash records' own description changed (hash mismatch)")
    except Exception as e:  # noqa: BLE001
        c.problem(f"/integrity: the hash records' description does not read ({_err(e)})")
    seen = {own}
    rewritten = decode_attr(c.f[dg.INTEGRITY_GROUP].attrs.get("rewritten", "")).split(",")
    for path, obj in dg.walk(c.f):
        if isinstance(obj, Exception):
            c.problem(f"{path}: does not read ({_err(obj)})")
            continue
        seen.add(path)
        c.attrs(path, obj)
        i = want.get(path)
        if i is None:
            c.problem(f"{path}: not in the file as written (an object added or renamed since)")
        else:
            try:
                if dg.meta_digest(c.f, path, obj) != meta[i].tobytes():
                    c.problem(f"{path}: its attributes, type, shape or dimension scales changed (hash mismatch)")
            except Exception as e:  # noqa: BLE001
                c.problem(f"{path}: its description does not read ({_err(e)})")
        if not isinstance(obj, h5py.Dataset):
            if i is not None and value[i].any():
                c.problem(f"/integrity/value: the row of {path} (a group: no value) is not empty")
            continue
        if dg.is_streamed(obj):
            _check_blocks(c, path, obj, samples)
            if i is not None and value[i].any():
                c.problem(f"/integrity/value: the row of {path} (hashed by blocks) is not empty")
        elif c.chunks(path, obj) and i is not None:
            try:
                if dg.value_digest(c.f, obj) != value[i].tobytes():
                    if c.unfinished and path.lstrip("/") in rewritten:  # stopped between it and its hash?
                        c.rep.notes.append(f"{path}: its values differ from their hash: the run stopped (or is being "
                                           f"written) between rewriting it and its hash; a resume rewrites both")
                    else:
                        c.problem(f"{path}: its values changed (hash mismatch)")
            except Exception as e:  # noqa: BLE001
                c.problem(f"{path}: its values do not read ({_err(e)})")
    for path in want.keys() - seen:
        c.problem(f"{path}: missing (it was written, the file no longer has it)")


def _block_tables(c: _Check) -> dict:
    out = {}
    for key, t in c.f[dg.INTEGRITY_GROUP]["blocks"].items():
        if key.endswith(dg.START):
            continue
        try:
            out[decode_attr(t.attrs["dataset"])] = (t[()], int(t.attrs["block_rows"]))
        except Exception as e:  # noqa: BLE001
            c.problem(f"/integrity/blocks/{key}: does not read ({_err(e)})")
    return out


def _check_blocks(c: _Check, path: str, ds: h5py.Dataset, samples: int | None) -> None:
    if c.blocks is None:
        c.blocks = _block_tables(c)
    tables = c.blocks
    if path not in tables:
        c.problem(f"{path}: no block hashes recorded for it")
        c.chunks(path, ds)
        return
    table, rows = tables[path]
    T = int(ds.shape[0])
    n = T if samples is None else min(samples, T)
    if rows < 1 or table.shape[0] != -(-T // rows):
        c.problem(f"{path}: its block hashes ({table.shape[0]} of {rows} rows) do not fit its {T} samples")
        c.chunks(path, ds)
        return
    for k in range(table.shape[0]):
        s, e = k * rows, min(k * rows + rows, n)
        if e <= s:
            break
        try:
            a = ds[s:e]
        except Exception:  # noqa: BLE001 - named chunk by chunk
            c.chunks(path, ds, slice(s, e))
            continue
        c.rep.chunks += 1
        if not table[k].any():
            c.problem(f"{path} rows {s}..{e - 1}: no content hash recorded for them")
            continue
        h = dg.hasher()
        dg.feed_rows(h, a)
        if h.digest() != table[k].tobytes():
            c.problem(f"{path} rows {s}..{e - 1} (block {k}): content hash mismatch")
    if n < T:
        c.chunks(path, ds, slice(n, T), unpublished=True)  # flushed by a killed run but never published


def _check_digests(c: _Check, attrs: dict) -> None:
    """The model's SHA-256 and the settings digest (files since format integrity 1)."""
    from .digest import content_digest

    f = c.f
    if "model" in f and "mjb" in f["model"] and "model_sha256" in attrs:
        try:
            if hashlib.sha256(f["model/mjb"][()].tobytes()).hexdigest() != attrs["model_sha256"]:
                c.problem("/model/mjb: its SHA-256 differs from the model_sha256 attribute (the model changed)")
        except Exception:  # noqa: BLE001, S110 - reported with the chunks
            pass
    if "content_sha256" in attrs:
        try:
            if content_digest(f) != attrs["content_sha256"]:
                c.problem("/: content digest mismatch: the model, the layout or a settings attribute changed since "
                          "the file was created")
        except Exception as e:  # noqa: BLE001
            c.problem(f"/: the content digest cannot be computed ({_err(e)})")
    else:
        c.rep.notes.append("no content digest (written before format integrity 1: model and settings not checked)")


# -- joined files ---------------------------------------------------------------------------------------

def shard_identity(path: str) -> str:
    """A hash that names a shard's content: its recorded hashes (or, in a shard without them, its settings)."""
    h = dg.hasher()
    with _open(path) as f:
        for k in sorted(f.attrs.keys()):
            if k not in dg.ROOT_VOLATILE:
                h.update(k.encode())
                dg.feed(h, f.attrs[k], f)
        if dg.INTEGRITY_GROUP in f:
            g = f[dg.INTEGRITY_GROUP]
            for name in ("meta", "value"):
                dg.feed(h, g[name][()])
            for key in sorted(g["blocks"].keys()):
                dg.feed(h, g["blocks"][key][()])
    return h.hexdigest()


def missing_shards(path: str, attrs: dict) -> list[str]:
    """The shards a joined file names that are not beside it."""
    return [s for s in _shard_names(attrs) if not os.path.isfile(os.path.join(os.path.dirname(path) or ".", s))]


def _shard_names(attrs: dict) -> list[str]:
    s = attrs.get("shards")
    if s is None:
        return []
    return [decode_attr(v) for v in (s if isinstance(s, (list, tuple, np.ndarray)) else [s])]


def _check_shards(c: _Check, path: str, attrs: dict, depth: int) -> None:
    names = _shard_names(attrs)
    if not names:
        return
    ids = attrs.get("shard_digests")
    ids = None if ids is None else [decode_attr(v) for v in np.atleast_1d(ids)]
    if ids is not None and len(ids) != len(names):
        c.problem(f"/: {len(names)} shards but {len(ids)} shard_digests")
        ids = None
    if ids is None:
        c.rep.notes.append("joined before shard identities were recorded: a replaced shard cannot be told")
    for k, name in enumerate(names):
        sp = os.path.join(os.path.dirname(path) or ".", name)
        if not os.path.isfile(sp):
            c.problem(f"shard {name}: missing (expected at {sp}); the joined file's data live in it")
            continue
        sub = verify(sp, _depth=depth + 1)
        c.rep.chunks += sub.chunks
        if sub.status != "intact":
            c.problem(f"shard {name}: {sub.status.upper()}" + "".join(f"; {p}" for p in sub.problems))
            continue
        try:
            if ids is not None and shard_identity(sp) != ids[k]:
                c.problem(f"shard {name}: replaced (its content differs from the shard joined into this file)")
        except Exception as e:  # noqa: BLE001
            c.problem(f"shard {name}: does not read ({_err(e)})")


# -- verify ---------------------------------------------------------------------------------------------

def verify(path: str | os.PathLike[str], _depth: int = 0) -> VerifyReport:
    """Check every object, attribute, dimension scale and chunk of the rollout file ``path`` (and of its
    shards, for a joined file). Never raises for anything in the file: a damage is a problem in the report."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        return VerifyReport(path, "foreign", problems=["no such file"])
    try:
        f = _open(path)
    except Exception as e:  # noqa: BLE001 - whatever HDF5 says, the file is told damaged or foreign
        return _unopenable(path, e)
    with f:
        rep = VerifyReport(path, "intact")
        c = _Check(f, rep)
        attrs = c.attrs("/", f)
        if attrs.get("format") != FORMAT:
            if not _ours(f) and not carries_marker(path):
                return VerifyReport(path, "foreign", problems=[f"no format={FORMAT!r} attribute: not a rollout file"])
            c.problem(f"/: attribute 'format' reads {attrs.get('format')!r}, not {FORMAT!r} (damaged)")
        try:
            _verify_open(c, path, attrs, _depth)
        except Exception as e:  # noqa: BLE001 - a damage the checks above did not foresee: still a finding
            c.problem(f"{path}: reading failed ({_err(e)})")
    rep.status = "corrupt" if rep.problems else "intact"
    return rep


def _ours(f: h5py.File) -> bool:
    try:
        return decode_attr(f[dg.INTEGRITY_GROUP].attrs["format"]) == FORMAT
    except Exception:  # noqa: BLE001
        return False


def _verify_open(c: _Check, path: str, attrs: dict, depth: int) -> None:
    f, rep = c.f, c.rep
    if "integrity" not in attrs:
        rep.notes.append(f"no checksums (written before format integrity 1, by mjharness "
                         f"{attrs.get('mjharness_version', '?')}): only unreadable data can be detected")
    try:
        T = int(f["x"].shape[0]) if "x" in f else None
    except Exception as e:  # noqa: BLE001
        c.problem(f"/x: does not read ({_err(e)})")
        T = None
    samples = _progress(c, attrs, T)
    c.unfinished = attrs.get("complete") is False
    if dg.INTEGRITY_GROUP in f:
        _check_objects(c, samples)
    else:
        rep.notes.append("no content hashes (written before them): unreadable data and checksum failures are "
                         "found, a change that keeps the file readable is not")
        _check_legacy(c)
    _check_digests(c, attrs)
    if depth == 0:
        _check_shards(c, path, attrs, depth)



# -- repair ---------------------------------------------------------------------------------------------

def repair(path: str | os.PathLike[str]) -> str:
    """Make a file a killed (or failed) SWMR writer left readable by every reader, as ``h5clear -s`` does:
    clear the superblock's "open for write" flags and set its end of allocation to the file's end
    (``superblock.reopen_for_write``). Refused (``FileInUseError``, naming the holder) while a writer holds
    the file's lock, and for a file that is not a rollout file; changes nothing else. Returns what it did."""
    from .errors import RolloutFileError
    from .lock import FileLock
    from .superblock import reopen_for_write

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise RolloutFileError(f"{path}: no such file")
    if not carries_marker(path):
        raise RolloutFileError(f"{path}: not a rollout file; --repair changes only rollout files")
    with FileLock(path):
        before = superblock_state(path)
        if before is None:
            return f"{path}: nothing to repair (not a file a SWMR writer left: no version 2/3 superblock)"
        if not before["checksum_ok"]:
            return f"{path}: not repaired: its superblock is damaged (checksum fails); --repair clears a writer's " \
                   f"marks only"
        if not reopen_for_write(path):
            return f"{path}: nothing to repair (closed by its writer)"
    what = ["cleared the open-for-write flag"] if before["flags"] else []
    if before["size"] != before["eoa"]:
        end = max(before["eoa"], before["size"])
        what.append(f"set the end of allocation to the file's end ({before['eoa']} -> {end} bytes)")
    return f"{path}: repaired: {' and '.join(what)}; every HDF5 reader opens it now"
