"""The content digest of a rollout file: SHA-256 over the model and the settings, stored at creation.

Chunk checksums (Fletcher-32) catch a flipped byte in the arrays; the digest catches one in what
cannot be chunked or checksummed by HDF5: the model (``/model/mjb``, ``/model/mjcf``, the source XML,
the compatibility log), the ``/layout`` table and the settings attributes. ``verify`` recomputes it.
"""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np

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
