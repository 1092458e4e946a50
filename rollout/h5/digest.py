"""The content digest of a rollout file: SHA-256 over the model and the settings, stored at creation.

Chunk checksums (Fletcher-32) catch a flipped byte in the arrays; the digest catches one in what
cannot be chunked or checksummed by HDF5: the model (``/model/mjb``, ``/model/mjcf``, the source XML,
the compatibility log), the ``/layout`` table and the settings attributes. ``verify`` recomputes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

import h5py
import numpy as np
import xxhash

from .format import VOLATILE_ATTRS, decode_attr

DIGESTED = ("model/mjb", "model/mjcf", "model/source_xml", "model/compat_log", "layout")


def _bytes(v) -> bytes:
    v = decode_attr(v)
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, np.ndarray) and v.dtype.kind == "O":  # strings (a joined file's ``shards``): by value,
        return json.dumps([decode_attr(e) for e in v.ravel()], default=str).encode()  # not by pointer
    if isinstance(v, np.ndarray):
        return v.dtype.str.encode() + np.ascontiguousarray(v).tobytes()
    return json.dumps(v, default=str).encode()


def settings(f: h5py.File) -> dict:
    """The root attributes that are fixed for the file's life, decoded."""
    return {k: decode_attr(v) for k, v in f.attrs.items() if k not in VOLATILE_ATTRS}


def content_digest(f: h5py.File) -> str:
    """Hex SHA-256 of the digested datasets (in ``DIGESTED`` order, absent ones skipped) and the settings."""
    h = hashlib.sha256()
    for name in DIGESTED:
        if name in f:
            h.update(name.encode() + b"\0" + _bytes(f[name][()]) + b"\0")
    for k, v in sorted(settings(f).items()):
        h.update(k.encode() + b"\0" + _bytes(v if not isinstance(v, np.ndarray) else v) + b"\0")
    return h.hexdigest()


# -- content hashes: every object, attribute, dimension scale and chunk of the file ------------------------
#
# ``content_digest`` above covers the model and the settings only. The records below cover everything a
# reader can get out of a file, found by walking it (so datasets added later are covered without a list):
#
#   /integrity/object     (N,)     the path of every object (group, dataset) but /integrity's own, sorted,
#                                  then /integrity itself (its description but for its tables' rows)
#   /integrity/meta       (N, 16)  XXH3-128 of each object's kind, type, shape, chunking, fill value,
#                                  virtual mapping and attributes (fixed-size ones as stored; references
#                                  by the object they lead to, so attached dimension scales are covered);
#                                  computed by the writer's thread with the first chunk (``defer``)
#   /integrity/value      (N, 16)  XXH3-128 of the values of each dataset that is not streamed or
#                                  virtual (zeros: no value of its own); the writer updates the rows of the
#                                  datasets it rewrites in place each chunk (``/status``, ``/status_step``)
#   /integrity/blocks/<k> (nblocks, 16)  per streamed dataset (chunked, growable along time), the hash of
#                                  each block of ``block_rows`` samples (its HDF5 chunk length along time) as
#                                  a reader gets them (C order, stored dtype), written by the writer right
#                                  after the rows are flushed and before ``/progress`` publishes them
#
# Hashes are over values as read (dtype as stored), so they hold through compression, and a flip
# anywhere that changes what a reader returns changes a hash (or makes the object unreadable).
# ``/progress`` is the one value not hashed (it is published after the hashes, each chunk): ``verify``
# checks it against the root attributes ``samples``/``complete`` and the blocks. Fletcher-32 stays as
# HDF5's own check of the stored bytes.

INTEGRITY_GROUP = "integrity"
MARKER = b"mjharness-rollout"   # also the group's ``format`` attribute: a second copy of the file's identity
HASH_NAME = "xxh3-128"
DIGEST_SIZE = 16
ZERO = bytes(DIGEST_SIZE)
UNHASHED_VALUES = ("progress",)       # rewritten in place after the hashes; checked for consistency instead
ROOT_VOLATILE = ("samples", "complete")  # lag /progress while written; checked against it instead
_HASHES = True


@contextlib.contextmanager
def without_hashes():
    """Files created inside get no content hashes: only to measure what they cost (``mjharness bench``'s
    ``rollout_h5_nocheck`` peer, ``scripts/measure_checksum_cost.py``); every user-facing file has them."""
    global _HASHES
    saved, _HASHES = _HASHES, False
    try:
        yield
    finally:
        _HASHES = saved


def hasher():
    """The content hash: XXH3-128 (``xxhash``). Not cryptographic (it finds damage, not forgery) and fast
    enough to hash every written byte at a cost well under the 3 % of a run that BLAKE2b (~0.45 GB/s on
    one core, +22 % of a run writing every step) could not meet."""
    return xxhash.xxh3_128()


def feed(h, v, f: h5py.File | None = None) -> None:
    """Feed ``v`` (an attribute or dataset value as h5py returns it) to ``h`` canonically: numbers by dtype
    and bytes, strings by value, object references by the path of the object they point to."""
    if isinstance(v, (h5py.Reference, h5py.RegionReference)):
        h.update(b"R" + _ref_name(v, f) + b"\0")
    elif isinstance(v, (bytes, np.bytes_)):
        h.update(b"B%d:" % len(v) + bytes(v))
    elif isinstance(v, str):
        e = v.encode("utf-8", "surrogatepass")
        h.update(b"S%d:" % len(e) + e)
    elif isinstance(v, h5py.Empty):
        h.update(b"E" + np.dtype(v.dtype).str.encode())
    elif isinstance(v, np.ndarray):
        _feed_array(h, v, f)
    elif isinstance(v, np.void):
        _feed_array(h, np.asarray(v), f)
    elif isinstance(v, np.generic):
        h.update(b"N" + v.dtype.str.encode() + v.tobytes())
    else:
        h.update(b"P" + repr(v).encode())


def _ref_name(v, f) -> bytes:
    """The object a reference points to (by address); a reference to a deleted object (HDF5 leaves them in a
    scale's ``REFERENCE_LIST`` when a dataset it was attached to is deleted) as such."""
    if not v or f is None:
        return b"null"
    try:  # the address it leads to (a path lookup costs twice as much): the same object, the same address
        return b"@%d" % h5py.h5o.get_info(h5py.h5r.dereference(v, f.id)).addr
    except Exception:  # noqa: BLE001 - any failure to follow it: the same mark before and after a change
        return b"(dangling)"
def _has_objects(dt: np.dtype) -> bool:
    if dt.names and dt.fields is not None:
        return any(_has_objects(dt.fields[n][0]) for n in dt.names)
    return dt.kind == "O" or (dt.subdtype is not None and _has_objects(dt.subdtype[0]))


def _feed_array(h, a: np.ndarray, f) -> None:
    h.update(b"A" + repr(a.shape).encode())
    if not _has_objects(a.dtype):
        h.update(repr(a.dtype.descr if a.dtype.names else a.dtype.str).encode())
        h.update(np.ascontiguousarray(a).data.cast("B") if a.size else b"")
        return
    if a.dtype.names:
        for rec in a.ravel():
            for name in a.dtype.names:
                h.update(name.encode() + b"=")
                feed(h, rec[name], f)
        return
    for e in a.ravel():
        feed(h, e, f)


def feed_rows(h, a: np.ndarray) -> None:
    """Rows of a streamed dataset (numbers): their bytes as stored, C order; the same on write and on read."""
    a = np.ascontiguousarray(a)
    if a.size:
        h.update(a.data.cast("B"))


def is_streamed(ds: h5py.Dataset) -> bool:
    """A dataset written chunk by chunk while the run goes: chunked, growable along time, not virtual."""
    return (not ds.is_virtual and ds.chunks is not None and ds.maxshape is not None and len(ds.maxshape) >= 1
            and ds.maxshape[0] is None)


def block_key(path: str) -> str:
    return path.strip("/").replace("/", ".")


def walk(f: h5py.File):
    """(path, object or the exception that opening it raised) of every object but ``/integrity``'s, root first,
    members in name order. A group whose member list does not read yields that exception under its path."""
    yield "/", f
    yield from _walk(f, "/")


def _walk(g, prefix: str):
    try:
        names = sorted(g.keys())
    except Exception as e:  # noqa: BLE001 - a damaged group is reported under its path, not raised
        yield prefix + "(members)", e
        return
    for name in names:
        path = prefix + name
        if path == "/" + INTEGRITY_GROUP:
            continue
        try:
            obj = g[name]
        except Exception as e:  # noqa: BLE001
            yield path, e
            continue
        yield path, obj
        if isinstance(obj, h5py.Group):
            yield from _walk(obj, path + "/")


def meta_digest(f: h5py.File, path: str, obj) -> bytes:
    """The hash of what describes ``obj``: kind, type, shape, chunking, fill value, virtual mapping, attributes."""
    h = hasher()
    h.update(path.encode() + b"\0")
    if isinstance(obj, h5py.Dataset):
        h.update(b"dataset")
        feed(h, repr((obj.dtype.descr if obj.dtype.names else obj.dtype.str, obj.shape, obj.maxshape, obj.chunks,
                      obj.is_virtual)))
        h5py.check_dtype(vlen=obj.dtype)  # reads the type message
        fill = obj.fillvalue
        feed(h, fill, f)
        if obj.is_virtual:
            for m in obj.virtual_sources():
                feed(h, repr((m.file_name, m.dset_name, selection(m.vspace), selection(m.src_space))))
    else:
        h.update(b"group")
    for key in sorted(obj.attrs.keys()):
        if path == "/" and key in ROOT_VOLATILE:
            continue
        h.update(b"@" + key.encode() + b"\0")
        if not _feed_raw_attr(h, obj, key):
            feed(h, obj.attrs[key], f)
    return h.digest()


def _feed_raw_attr(h, obj, key: str) -> bool:
    """Feed an attribute of a fixed-size type (numbers, compounds, object references: a scale's
    ``REFERENCE_LIST``) as its type and stored bytes, read by HDF5 without conversion: exact and ~50x
    cheaper than decoding it. False for strings and variable-length types (decoded by ``feed``)."""
    aid = h5py.h5a.open(obj.id, key.encode())
    t = aid.get_type()
    if t.detect_class(h5py.h5t.VLEN) or t.detect_class(h5py.h5t.STRING) or aid.shape is None:
        return False
    buf = np.zeros(aid.shape, dtype=f"V{t.get_size()}")  # zeros: a compound's padding is not read
    aid.read(buf, mtype=t)
    h.update(b"T" + t.encode() + b"%r" % (aid.shape,) + buf.tobytes())
    return True


def selection(space) -> tuple:
    """A dataspace's selection in one canonical form (HDF5 hands the same hyperslab back as count x block or
    block x count, depending on whether the file was just written or reopened)."""
    kind = space.get_select_type()
    if kind != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
        return ("other", kind, space.get_select_npoints() if kind != h5py.h5s.SEL_ALL else -1)
    U = h5py.h5s.UNLIMITED
    out: list[tuple[int, ...]] = []
    for start, stride, count, block in zip(*space.get_regular_hyperslab()):
        if count == 1 or (block == stride and count != U) or (block == 1 and stride == 1):
            out.append((start, 1, U if U in (count, block) else count * block))
        else:
            out.append((start, stride, count, block))
    return ("hyperslab", tuple(out))


def value_digest(f: h5py.File, ds: h5py.Dataset) -> bytes:
    """The hash of a (not streamed, not virtual) dataset's values; ZERO for the datasets that have none of
    their own (streamed: ``blocks``; virtual: their sources; ``/progress``: checked for consistency)."""
    if ds.is_virtual or is_streamed(ds) or ds.name.lstrip("/") in UNHASHED_VALUES:
        return ZERO
    h = hasher()
    feed(h, ds[()], f)
    return h.digest()


def array_digest(a: np.ndarray, dtype) -> bytes:
    """``value_digest`` of values about to be written to a dataset of ``dtype`` (what a reader will get)."""
    h = hasher()
    feed(h, np.asarray(a, dtype=dtype))
    return h.digest()


def _digest_table(g, name: str, rows: list[bytes], scale) -> h5py.Dataset:
    data = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), DIGEST_SIZE)
    ds = g.create_dataset(name, data=data, maxshape=(None, DIGEST_SIZE), chunks=(max(1, min(len(rows), 4096)),
                                                                                  DIGEST_SIZE))
    ds.attrs["units"] = "1"
    ds.attrs["long_name"] = f"{HASH_NAME} content hash"
    ds.dims[0].attach_scale(scale)
    ds.dims[1].attach_scale(g.file[f"{INTEGRITY_GROUP}/digest_byte"])
    return ds


def _recreate(g, name: str):
    """Delete ``g[name]``, detaching its dimension scales first (HDF5 would leave the scales' back-references
    to the deleted dataset in place)."""
    if name not in g:
        return
    ds = g[name]
    for i, dim in enumerate(ds.dims):
        for scale in list(dim.values()):
            ds.dims[i].detach_scale(scale)
    del g[name]


def seal(f: h5py.File, *, create: bool, from_data: bool = False, rewritten: tuple = (), defer: bool = False) -> bool:
    """(Re)write the object table and its hashes, and give every streamed dataset its block table (rows
    already recorded are kept). ``create``: add the records to a file without them (new files); otherwise
    only a file that has them is resealed (files written before content hashes stay as they are).
    ``from_data``: hash the blocks of new block tables from the rows in the file (a file made whole, as a
    join; a new file's rows are hashed as the writer writes them). ``rewritten``: the datasets the writer
    rewrites in place each chunk (kept in the ``rewritten`` attribute: a killed writer may have stopped
    between one of them and its hash, which ``verify`` then notes rather than calls damage). ``defer``: leave
    the object hashes to the writer's thread (``ChunkDigests``, before the first chunk is published), so a new
    file costs its run nothing for them. Returns whether the file has records now. Call with the file open
    for writing, not in SWMR mode."""
    if INTEGRITY_GROUP not in f and not (create and _HASHES):
        return False
    g = f.require_group(INTEGRITY_GROUP)
    g.attrs["format"] = MARKER.decode()
    g.attrs["hash"] = HASH_NAME
    if rewritten or "rewritten" not in g.attrs:
        g.attrs["rewritten"] = ",".join(rewritten)
    g.attrs["long_name"] = "content hashes of every object, attribute, dimension scale and chunk (mjharness verify)"
    if "digest_byte" not in g:
        byte = g.create_dataset("digest_byte", data=np.arange(DIGEST_SIZE, dtype=np.uint8))
        byte.make_scale("digest_byte")
        byte.attrs.update(long_name=f"byte of a {HASH_NAME} content hash", units="1")
    objs = [(p, o) for p, o in walk(f) if not isinstance(o, Exception)]
    for name in ("meta", "value", "object"):
        _recreate(g, name)
    # The last row is /integrity itself (its description but for its tables' rows: ``records_digest``).
    names = g.create_dataset("object", data=np.array([p for p, _ in objs] + [g.name], dtype=h5py.string_dtype()))
    names.make_scale("object")
    names.attrs.update(long_name="path of each hashed object (the last: /integrity itself)", units="1")
    _digest_table(g, "meta", [ZERO] * (len(objs) + 1), names)
    _digest_table(g, "value", [ZERO] * (len(objs) + 1), names)
    blocks = g.require_group("blocks")
    for path, ds in objs:
        if isinstance(ds, h5py.Dataset) and is_streamed(ds):
            _block_table(blocks, path, ds, from_data)
    if not defer:
        hash_objects(f)
    return True


def _open_object(f: h5py.File, path: str):
    """``path``'s object opened by HDF5 itself (not through ``f.__getitem__``, which a caller may wrap)."""
    oid = h5py.h5o.open(f.id, path.encode())
    return h5py.Dataset(oid) if isinstance(oid, h5py.h5d.DatasetID) else h5py.Group(oid)


def hash_objects(f: h5py.File) -> dict:
    """Fill ``/integrity/meta`` and ``/integrity/value`` for every object of ``/integrity/object``; returns
    {path: value hash}. SWMR-safe (writes rows of existing datasets)."""
    g = f[INTEGRITY_GROUP]
    paths = [decode_attr(p) for p in g["object"][()]]
    meta, value = [], []
    for path in paths:
        if path == g.name:
            meta.append(records_digest(f))
            value.append(ZERO)
            continue
        obj = _open_object(f, path)
        meta.append(meta_digest(f, path, obj))
        value.append(value_digest(f, obj) if isinstance(obj, h5py.Dataset) else ZERO)
    for name, rows in (("meta", meta), ("value", value)):
        g[name][...] = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), DIGEST_SIZE)
    return dict(zip(paths, value))


START = ".block_start"  # suffix of a block table's axis (beside it: netCDF sees a dimension in its own group)


def _is_table(rel: str) -> bool:
    """Whether ``/integrity/<rel>`` is a hash table (compared row by row, its values not hashed themselves)."""
    return rel in ("meta", "value") or (rel.startswith("blocks/") and not rel.endswith(START))


def records_digest(f: h5py.File) -> bytes:
    """The hash of ``/integrity`` itself but for its tables' rows: its objects, their attributes, shapes, and
    the values of its labels (``object``, ``digest_byte``, each block table's ``.block_start``)."""
    g = _open_object(f, "/" + INTEGRITY_GROUP)
    h = hasher()
    h.update(meta_digest(f, g.name, g))
    for path, obj in _walk(g, g.name + "/"):
        if isinstance(obj, Exception):
            raise obj
        h.update(meta_digest(f, path, obj))
        rel = path[len(g.name) + 1:]
        if isinstance(obj, h5py.Dataset) and not _is_table(rel):
            feed(h, obj[()], f)
    return h.digest()


def _block_table(blocks, path: str, ds: h5py.Dataset, from_data: bool) -> None:
    rows = int(ds.chunks[0])
    nb = -(-int(ds.shape[0]) // rows)
    key = block_key(path)
    axis = key + START
    if key in blocks and axis in blocks and int(blocks[key].attrs["block_rows"]) == rows:
        if blocks[key].shape[0] != nb:
            blocks[key].resize((nb, DIGEST_SIZE))
            blocks[axis].resize((nb,))
            blocks[axis][:] = np.arange(nb, dtype=np.int64) * rows
        return
    _recreate(blocks, key)
    _recreate(blocks, axis)
    s = blocks.create_dataset(axis, data=np.arange(nb, dtype=np.int64) * rows, maxshape=(None,),
                              chunks=(max(1, min(nb, 4096)),))
    s.make_scale(axis)
    s.attrs["units"] = "1"
    s.attrs["long_name"] = f"first sample of each hashed block of {path}"
    t = _digest_table(blocks, key, [_rows_digest(ds[k * rows:k * rows + rows]) if from_data else ZERO
                                    for k in range(nb)], s)
    t.attrs["dataset"] = path
    t.attrs["block_rows"] = np.int64(rows)


def _rows_digest(a) -> bytes:
    h = hasher()
    feed_rows(h, a)
    return h.digest()


def seal_path(path: str) -> None:
    """``seal(create=False)`` of the closed file ``path`` (after a change outside the streaming writer)."""
    with h5py.File(path, "r+", locking=False) as f:
        seal(f, create=False)


class ChunkDigests:
    """The writer's side: ``record(rows, j0, j1)`` hashes the rows it has just written and stores the hashes
    (block tables for streamed datasets, ``/integrity/value`` rows for datasets rewritten whole). SWMR-safe:
    only writes into datasets that exist. A block a chunk fills in part is hashed on with the state kept from
    the chunk before (or, after a resume, the rows on disk)."""

    def __init__(self, f: h5py.File):
        self._f = f
        self.active = INTEGRITY_GROUP in f
        if not self.active:
            return
        g = f[INTEGRITY_GROUP]
        self._row = {decode_attr(p).lstrip("/"): i for i, p in enumerate(g["object"][()])}
        self._value = g["value"]
        self._blocks = {decode_attr(t.attrs["dataset"]).lstrip("/"): t for k, t in g["blocks"].items()
                        if not k.endswith(START)}
        self._pending: dict = {}
        self._ds: dict = {}
        self._rows: dict = {}
        self._last = {name: self._value[i].tobytes() for name, i in self._row.items()}
        self._unhashed = not g["meta"][()].any()  # a new file: its objects are hashed here, off the run's path

    def record(self, rows, j0: int, j1: int) -> None:
        if not self.active:
            return
        if self._unhashed:  # before this chunk's /progress: no published sample is ever without them
            self._last = {k.lstrip("/"): v for k, v in hash_objects(self._f).items()}
            self._unhashed = False
        # One write per table and chunk (small HDF5 writes, not the hashing, are what costs); the writer's
        # file flush right after puts them on disk before /progress.
        for name, v in rows:
            ds = self._dataset(name)
            if name in self._blocks:
                self._record_blocks(name, ds, np.asarray(v, dtype=ds.dtype), j0, j1)
            elif name in self._row:
                d = array_digest(v, ds.dtype)
                if self._last.get(name) != d:  # statuses rarely change: most chunks write nothing here
                    self._value[self._row[name]] = np.frombuffer(d, dtype=np.uint8)
                    self._last[name] = d

    def _dataset(self, name: str) -> h5py.Dataset:
        """Our own handle on ``name`` (HDF5's, not through the file object the writer may have wrapped)."""
        if name not in self._ds:
            self._ds[name] = h5py.Dataset(h5py.h5d.open(self._f.id, name.encode()))
        return self._ds[name]

    def _record_blocks(self, name, ds, a, j0: int, j1: int) -> None:
        table = self._blocks[name]
        c = self._rows.get(name) or self._rows.setdefault(name, int(table.attrs["block_rows"]))
        r, k0, out = j0, j0 // c, []
        while r < j1:
            k = r // c
            s, e = k * c, min(k * c + c, j1)
            p = self._pending.get(name)
            if p is not None and p[0] == k and p[2] == r:
                h = p[1]
            else:
                h = hasher()
                if s < r:  # the block's first rows were written before this writer (a resume): as on disk
                    feed_rows(h, ds[s:r])
            feed_rows(h, a[r - j0:e - j0])
            out.append(h.digest())
            self._pending[name] = (k, h, e)
            r = e
        if out:
            table[k0:k0 + len(out)] = np.frombuffer(b"".join(out), dtype=np.uint8).reshape(len(out), DIGEST_SIZE)
