"""The ``.co3`` container's small framing: LEB128 varints (shortest form only), the table
field (1.3: raw-deflated where smaller) and the trailer (1.3: varint offsets; 1.5: block sizes
and each layer's block)."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from co3cli.container.header import COMPACT_MINOR, TEXT_HEADER_MINOR
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


TRAILER15_TAG = b"E"


def trailer15_bytes(offsets: list[int], end: int) -> bytes:
    """A 1.5 trailer up to the file CRC (``offsets``: each layer's block start; ``end``: where
    the trailer starts)::

        "E" | nblocks uvarint | size uvarint * nblocks | map | tlen (backward varint)

    the blocks in file order (the first right after the header), each one's bytes; ``map``:
    each layer's block index in ``ceil(log2(nblocks))`` bits (none for one block), MSB first,
    zero-padded to a byte; ``tlen``: the bytes from "E" to the map's end as a varint whose
    bytes are written last first (the reader takes them backwards from the CRC: the low 7
    bits in the byte before it, bit 7 set where more bytes precede)."""
    starts = sorted(set(offsets))
    sizes = [b - a for a, b in zip(starts, starts[1:] + [end])]
    index = {o: k for k, o in enumerate(starts)}
    width = (len(starts) - 1).bit_length()
    idx = np.array([index[o] for o in offsets], dtype=np.int64)
    bits = (idx[:, None] >> np.arange(width - 1, -1, -1)) & 1
    body = (TRAILER15_TAG + uvarint(len(starts)) + b"".join(uvarint(s) for s in sizes)
            + np.packbits(bits.astype(np.uint8).ravel()).tobytes())
    return body + uvarint(len(body))[::-1]


def _read_trailer15(f, size: int, first: int, nlayers: int, name: str, end_magic: bytes):
    bad = f"{name} is truncated or its trailer is corrupt"
    tail = 4 + len(end_magic)
    if size - tail - 2 < first:
        raise CorruptDataError(f"{name} is truncated (no room for the trailer)")
    f.seek(max(first, size - tail - 9))
    t = f.read(size - max(first, size - tail - 9))
    if t[-len(end_magic):] != end_magic:
        raise CorruptDataError(bad)
    file_crc = _U32.unpack_from(t, len(t) - tail)[0]
    back = t[:len(t) - tail][::-1]  # the length's bytes, low first
    tlen, k = read_uvarint(back, 0, len(back), bad)
    end = size - tail - k - tlen
    if tlen < 2 or end < first:
        raise CorruptDataError(bad)
    f.seek(end)
    tr = f.read(tlen)
    if len(tr) != tlen or tr[:1] != TRAILER15_TAG:
        raise CorruptDataError(bad)

    def offsets():  # read once the file CRC holds
        nblocks, pos = read_uvarint(tr, 1, tlen, bad)
        if nblocks > nlayers or (nblocks == 0) != (nlayers == 0):
            raise CorruptDataError(f"{name}: {nblocks} blocks for {nlayers} layers")
        starts, at = [], first
        for _ in range(nblocks):
            n, pos = read_uvarint(tr, pos, tlen, bad)
            starts.append(at)
            at += n
        if at != end:
            raise CorruptDataError(f"{name}: block sizes do not add up to the file")
        width = (nblocks - 1).bit_length() if nblocks else 0
        nbytes = (nlayers * width + 7) // 8
        if pos + nbytes != tlen:
            raise CorruptDataError(bad)
        bits = np.unpackbits(np.frombuffer(tr[pos:], dtype=np.uint8))
        if bits[nlayers * width:].any():
            raise CorruptDataError(f"{name}: trailer padded with non-zero bits")
        idx = bits[:nlayers * width].reshape(nlayers, width).astype(np.int64) @ (
            1 << np.arange(width - 1, -1, -1, dtype=np.int64))
        if nlayers and idx.max() >= nblocks:
            i = int(np.argmax(idx >= nblocks))
            raise CorruptDataError(f"{name}: layer {i} in block {int(idx[i])} of {nblocks}")
        return np.asarray(starts, dtype=np.int64)[idx].tolist() if nlayers else []
    return end, offsets, file_crc


def read_trailer(f, size: int, first: int, nlayers: int, minor: int, name: str,
                 end_magic: bytes):
    """(where the trailer starts, the layer offsets, the file CRC): u64 offsets before 1.3,
    then a zigzag varint per layer (its offset less the previous layer's) and the trailer's
    length; 1.5: :func:`trailer15_bytes`."""
    bad = f"{name} is truncated or its trailer is corrupt"
    if minor >= TEXT_HEADER_MINOR:
        return _read_trailer15(f, size, first, nlayers, name, end_magic)
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
