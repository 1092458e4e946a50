"""SHA-256 of every dataset of HDF5 files, as the h5py (and HDF5) that runs this script reads them.

    python scripts/h5_digests.py FILE.h5 ...   ->  JSON {file: {"/path": "dtype shape sha256", ...}}

Runs with any h5py >= 3.0 and numpy >= 1.21 (no mjharness import), so a second, older HDF5 can read
the same files: tests/test_files_compat.py runs it in a throwaway venv (h5py 3.10, HDF5 1.14) and
compares with the current h5py bit for bit. Numbers are hashed as little-endian bytes, strings as
their UTF-8 text, compound rows field by field.
"""

from __future__ import annotations

import hashlib
import json
import sys

import h5py
import numpy as np


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _bytes(a: np.ndarray) -> bytes:
    if a.dtype.names:
        return b"".join(_bytes(np.asarray(a[name])) for name in a.dtype.names)
    if a.dtype.kind in "OSU":
        return json.dumps([_text(v) for v in a.reshape(-1).tolist()]).encode()
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()


def digest(ds) -> str:
    kind = "compound" if ds.dtype.names else ds.dtype.str
    return f"{kind} {list(ds.shape)} {hashlib.sha256(_bytes(np.asarray(ds[()]))).hexdigest()}"


def file_digests(path: str) -> dict:
    """{"/path": "dtype shape sha256"} of every dataset in ``path`` (virtual ones read through their sources)."""
    out = {}
    with h5py.File(path, "r", locking=False) as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out["/" + name] = digest(obj)
        f.visititems(visit)
    return out


if __name__ == "__main__":
    json.dump({p: file_digests(p) for p in sys.argv[1:]}, sys.stdout, indent=1, sort_keys=True)
