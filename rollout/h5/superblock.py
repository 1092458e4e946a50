"""Making a file a killed or failed SWMR writer left behind writable again (what ``h5clear -s`` does).

A SWMR writer marks the superblock "open for write" (status flags) and clears the mark when it closes.
A writer that was killed, or whose disk filled, leaves the mark set, and HDF5 then refuses every
non-SWMR open ("file is already open for write"). The superblock's end-of-allocation address is not
rewritten on every SWMR flush (chunks flushed since lie past it: "addr overflow"), and a failed write
can leave it beyond the end of the file ("truncated file"). Both are fixed in the version 2/3 superblock
(the only ones SWMR files have): clear the flags, set the allocation to the file's end (padding with
zeros if it is short), and rewrite the superblock's Jenkins lookup3 checksum. Only ever called while
holding the writer lock (``lock.FileLock``), so no live writer can be affected. Bytes past the last
flushed chunk are never read: ``/progress`` says how many samples are valid, and a resume rewrites the rest.
"""

from __future__ import annotations

import os
import struct

SIGNATURE = b"\x89HDF\r\n\x1a\n"
_M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle`` (HDF5's ``H5_checksum_lookup3``) of ``data``."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _M
    i = 0
    while n - i > 12:
        k0, k1, k2 = struct.unpack_from("<3I", data, i)
        a, b, c = (a + k0) & _M, (b + k1) & _M, (c + k2) & _M
        a = (a - c) & _M; a ^= _rot(c, 4); c = (c + b) & _M      # noqa: E702 - the mix rounds, as published
        b = (b - a) & _M; b ^= _rot(a, 6); a = (a + c) & _M      # noqa: E702
        c = (c - b) & _M; c ^= _rot(b, 8); b = (b + a) & _M      # noqa: E702
        a = (a - c) & _M; a ^= _rot(c, 16); c = (c + b) & _M     # noqa: E702
        b = (b - a) & _M; b ^= _rot(a, 19); a = (a + c) & _M     # noqa: E702
        c = (c - b) & _M; c ^= _rot(b, 4); b = (b + a) & _M      # noqa: E702
        i += 12
    if n - i == 0:
        return c
    k0, k1, k2 = struct.unpack("<3I", data[i:].ljust(12, b"\0"))
    a, b, c = (a + k0) & _M, (b + k1) & _M, (c + k2) & _M
    c ^= b; c = (c - _rot(b, 14)) & _M    # noqa: E702 - the final rounds
    a ^= c; a = (a - _rot(c, 11)) & _M    # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & _M    # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & _M    # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & _M     # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & _M    # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & _M    # noqa: E702
    return c


def _read(path: str) -> tuple[bytearray, int] | None:
    """(superblock bytes incl. checksum, size of offsets) of a v2/v3 superblock at offset 0, else None."""
    with open(path, "rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:8] != SIGNATURE or head[8] not in (2, 3):
            return None
        size_o = head[9]
        if size_o not in (2, 4, 8):
            return None
        fh.seek(0)
        sb = bytearray(fh.read(12 + 4 * size_o + 4))
    if len(sb) != 12 + 4 * size_o + 4:
        return None
    return sb, size_o


def superblock_state(path: str) -> dict | None:
    """{flags, eoa, size, checksum_ok} of a v2/v3 superblock (None: older superblock or not HDF5)."""
    got = _read(path)
    if got is None:
        return None
    sb, size_o = got
    fmt = {2: "<H", 4: "<I", 8: "<Q"}[size_o]
    base = struct.unpack_from(fmt, sb, 12)[0]
    eoa = struct.unpack_from(fmt, sb, 12 + 2 * size_o)[0]
    (stored,) = struct.unpack_from("<I", sb, len(sb) - 4)
    return dict(flags=sb[11], eoa=base + eoa, size=os.path.getsize(path),
                checksum_ok=stored == lookup3(bytes(sb[:-4])))


def reopen_for_write(path: str) -> bool:
    """Clear a killed SWMR writer's marks (status flags; a file shorter than its allocation is padded);
    True when something was changed. Call only while holding the file's writer lock."""
    st = superblock_state(path)
    if st is None or not st["checksum_ok"] or (st["flags"] == 0 and st["size"] == st["eoa"]):
        return False
    if st["size"] < st["eoa"]:
        os.truncate(path, st["eoa"])  # zeros where the failed write never landed (never read, see above)
    got = _read(path)
    assert got is not None  # superblock_state read this superblock above
    sb, size_o = got
    fmt = {2: "<H", 4: "<I", 8: "<Q"}[size_o]
    base = struct.unpack_from(fmt, sb, 12)[0]
    # A SWMR writer does not rewrite the end-of-allocation on every flush: chunks written since lie past it.
    struct.pack_into(fmt, sb, 12 + 2 * size_o, max(st["eoa"], st["size"]) - base)
    sb[11] = 0
    struct.pack_into("<I", sb, len(sb) - 4, lookup3(bytes(sb[:-4])))
    with open(path, "r+b") as fh:
        fh.write(sb)
        fh.flush()
        os.fsync(fh.fileno())
    return True
