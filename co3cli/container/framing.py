"""The ``.co3`` container's small framing: LEB128 varints (shortest form only), the table
field (1.3: raw-deflated where smaller) and the trailer (1.3: varint offsets)."""

from __future__ import annotations

import struct
import zlib

from co3cli.container.header import COMPACT_MINOR
from co3cli.errors import CorruptDataError
from co3cli.varint import uvarint

_U32 = struct.Struct("<I")
TRAILER_HEAD = struct.Struct("<4sI")  # "END\0", layer count
_TRAILER_TAIL = struct.Struct("<II")  # 1.3: trailer length, file CRC (then the end magic)


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


TABLE_DEFLATED = 1 << 31  # 1.3: a table_len with this bit: the table is raw-deflated


def table_field_bytes(table: bytes) -> int:
    """Bytes a block spends on ``table`` (its length field included)."""
    return len(table_field(table))


def table_field(table: bytes) -> bytes:
    """``table_len u32 | table``, the table raw-deflated where that is smaller (1.3)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    d = c.compress(table) + c.flush()
    if len(d) < len(table):
        return _U32.pack(len(d) | TABLE_DEFLATED) + d
    return _U32.pack(len(table)) + table


def trailer_bytes(offsets: list[int]) -> bytes:
    """A 1.3 trailer up to the file CRC: head, zigzag varint offset deltas (a group's members
    after a later block point back), its length."""
    deltas = [b - a for a, b in zip([0] + offsets, offsets)]
    tr = TRAILER_HEAD.pack(b"END\0", len(offsets)) + b"".join(
        uvarint(2 * d if d >= 0 else -2 * d - 1) for d in deltas)
    return tr + _U32.pack(len(tr))


def read_trailer(f, size: int, first: int, nlayers: int, minor: int, name: str,
                 end_magic: bytes):
    """(where the trailer starts, the layer offsets, the file CRC): u64 offsets before 1.3,
    then a zigzag varint per layer (its offset less the previous layer's) and the trailer's
    length."""
    bad = f"{name} is truncated or its trailer is corrupt"
    if minor >= COMPACT_MINOR:
        tail = _TRAILER_TAIL.size + len(end_magic)
        if size - tail < first:
            raise CorruptDataError(f"{name} is truncated (no room for the trailer)")
        f.seek(size - tail)
        t = f.read(tail)
        tlen, file_crc = _TRAILER_TAIL.unpack_from(t, 0)
        if t[-len(end_magic):] != end_magic or not TRAILER_HEAD.size + nlayers <= tlen \
                <= TRAILER_HEAD.size + 9 * nlayers:
            raise CorruptDataError(bad)
        end = size - tail - tlen
        if end < first:
            raise CorruptDataError(f"{name} is truncated (no room for the trailer)")
        f.seek(end)
        tr = f.read(tlen)
        tag, n = TRAILER_HEAD.unpack_from(tr, 0)
        if tag != b"END\0" or n != nlayers:
            raise CorruptDataError(bad)

        def offsets():  # read once the file CRC holds
            out, pos, at = [], TRAILER_HEAD.size, 0
            for _ in range(n):
                z, pos = read_uvarint(tr, pos, tlen, f"{name}: corrupt trailer")
                at += (z >> 1) ^ -(z & 1)
                out.append(at)
            if pos != tlen:
                raise CorruptDataError(bad)
            return out
        return end, offsets, file_crc
    tsize = TRAILER_HEAD.size + 8 * nlayers + 4 + len(end_magic)
    end = size - tsize
    if end < first:
        raise CorruptDataError(f"{name} is truncated (no room for the trailer)")
    f.seek(end)
    tr = f.read(tsize)
    tag, n = TRAILER_HEAD.unpack_from(tr, 0)
    if tag != b"END\0" or n != nlayers or tr[-len(end_magic):] != end_magic:
        raise CorruptDataError(bad)
    offsets = list(struct.unpack_from(f"<{n}Q", tr, TRAILER_HEAD.size))
    (file_crc,) = _U32.unpack_from(tr, TRAILER_HEAD.size + 8 * n)
    return end, lambda: offsets, file_crc
