"""LEB128 varints as the ``.co3`` container writes and reads them (shortest form only)."""

from __future__ import annotations

from co3cli.errors import CorruptDataError


def uvarint(n: int) -> bytes:
    """One LEB128 varint (the bytes ``varint.uvarints_to_bytes`` writes for it)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos: int, end: int, what: str) -> tuple[int, int]:
    """The varint at ``buf[pos:end]`` (at most 9 bytes, shortest form) and the position after."""
    n = shift = 0
    for k in range(pos, min(end, pos + 9)):
        b = buf[k]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and k > pos:
                raise CorruptDataError(f"{what}: a varint is not in its shortest form")
            return n, k + 1
        shift += 7
    if end - pos >= 9:
        raise CorruptDataError(f"{what}: a varint is longer than 9 bytes")
    raise CorruptDataError(f"{what}: truncated varint")
