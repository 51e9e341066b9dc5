"""LEB128 unsigned varints (shortest form), vectorised with numpy; no numba import."""

from __future__ import annotations

import numpy as np

from co3cli.errors import CorruptDataError


def uvarint(n: int) -> bytes:
    """One LEB128 varint (the bytes :func:`uvarints_to_bytes` writes for it), without numpy."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def uvarints_to_bytes(values) -> bytes:
    """Encode non-negative integers (< 2**63) as LEB128 varints, vectorised."""
    v = np.asarray(values, dtype=np.uint64).ravel()
    nbytes = 1 + sum((v >> np.uint64(7 * k)) > 0 for k in range(1, 10)).astype(np.int64)
    owner = np.repeat(np.arange(v.size), nbytes)
    group = np.arange(owner.size) - np.repeat(np.cumsum(nbytes) - nbytes, nbytes)
    out = (v[owner] >> (7 * group).astype(np.uint64)) & np.uint64(0x7F)
    more = group < nbytes[owner] - 1
    return (out | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8).tobytes()


def uvarints_from_bytes(data: bytes, count: int, what: str = "varints") -> tuple[np.ndarray, int]:
    """Decode ``count`` LEB128 varints (at most 9 bytes each, shortest form) from the start
    of ``data``; return ``(uint64 values, bytes used)``.  Raises CorruptDataError."""
    b = np.frombuffer(bytes(data), dtype=np.uint8)
    ends = np.flatnonzero(b < 0x80)[:count]
    if ends.size < count:
        raise CorruptDataError(f"{what}: truncated, found {ends.size} of {count} varints")
    if count == 0:
        return np.zeros(0, dtype=np.uint64), 0
    used = int(ends[-1]) + 1
    starts = np.concatenate([[0], ends[:-1] + 1])
    nbytes = ends - starts + 1
    if nbytes.max() > 9:
        raise CorruptDataError(f"{what}: a varint is longer than 9 bytes")
    if np.any((nbytes > 1) & (b[ends] == 0)):
        raise CorruptDataError(f"{what}: a varint is not in its shortest form")
    group = np.arange(used) - np.repeat(starts, nbytes)
    parts = (b[:used].astype(np.uint64) & np.uint64(0x7F)) << (7 * group).astype(np.uint64)
    return np.add.reduceat(parts, starts), used
