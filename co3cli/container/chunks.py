"""Reading a block's chunks, scales, metadata and table (``co3cli.container.blocks``'s helpers)."""

from __future__ import annotations

import struct

import numpy as np

from co3cli.container.framing import TABLE_DEFLATED, read_uvarint
from co3cli.container.header import (COMPACT_MINOR, MAX_CHUNK, MAX_META, MAX_TABLE, inflate,
                                     inflate_raw, parse_json)
from co3cli.container.plan import JOIN_ENTRIES, joinable
from co3cli.errors import CorruptDataError

_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
LAYER_HEAD = struct.Struct("<4sII")  # tag, index (a group: its member count), meta_len


def _read_chunks(buf, pos: int, end: int, nsteps: int, what: str, joined: bool = False,
                 numel: int = 0):
    """``nsteps`` chunks from ``buf[pos:end]`` (``joined``: ``nsteps`` scales and one body of
    ``nsteps x numel`` symbols): (scales, bodies, payload bytes, position after)."""
    if joined:
        if not joinable(nsteps, numel):  # what the writer joins (a few entries)
            raise CorruptDataError(f"{what}: joined steps ({nsteps} x {numel} entries) beyond "
                                   f"what a joined block holds (1 step or more, at most "
                                   f"{JOIN_ENTRIES} entries)")
        if pos + 4 * nsteps >= end:
            raise CorruptDataError(f"{what}: scales overrun the block")
        scales = np.frombuffer(buf, dtype="<f4", count=nsteps, offset=pos).astype(np.float32)
        blen, start = read_uvarint(buf, pos + 4 * nsteps, end, f"{what} length")
        if blen > MAX_CHUNK:
            raise CorruptDataError(f"{what}: chunk of {blen} bytes (limit {MAX_CHUNK})")
        if start + blen > end:
            raise CorruptDataError(f"{what}: chunk overruns the block")
        return scales, [bytes(buf[start:start + blen])], blen, start + blen
    scales = np.empty(nsteps, dtype=np.float32)
    bodies, payload = [], 0
    for t in range(nsteps):
        if pos + _F32.size >= end:
            raise CorruptDataError(f"{what} step {t}: chunk overruns the block")
        (scales[t],) = _F32.unpack_from(buf, pos)
        blen, start = read_uvarint(buf, pos + 4, end, f"{what} step {t} length")
        if blen > MAX_CHUNK:
            raise CorruptDataError(f"{what} step {t}: chunk of {blen} bytes (limit {MAX_CHUNK})")
        pos = start + blen
        if pos > end:
            raise CorruptDataError(f"{what} step {t}: chunk overruns the block")
        bodies.append(bytes(buf[start:pos]))
        payload += blen
    return scales, bodies, payload, pos


def _check_scales(scales, what: str) -> None:
    if not np.all(np.isfinite(scales) & (scales > 0)):
        raise CorruptDataError(f"{what}: a scale is not a positive number")


def _meta_table(buf, mv, mlen: int, end: int, what: str, zipped: bool = False,
                minor: int = 0, start: int = LAYER_HEAD.size) -> tuple[dict, bytes, int, int]:
    """The metadata object (``zipped``: zlib-compressed JSON, a group's) and table after a
    block head (``start``: its size; ``minor`` >= 3: maybe deflated); returns them, the
    position after and the table's bytes in the file."""
    pos = start
    if pos + mlen + 4 > end:
        raise CorruptDataError(f"{what}: metadata overruns the block")
    if mlen > MAX_META:
        raise CorruptDataError(f"{what}: metadata of {mlen} bytes (limit {MAX_META})")
    meta_raw = bytes(mv[pos:pos + mlen])
    pos += mlen
    (tlen,) = _U32.unpack_from(buf, pos)
    pos += 4
    deflated = minor >= COMPACT_MINOR and tlen & TABLE_DEFLATED
    tlen &= ~TABLE_DEFLATED if deflated else -1
    if tlen > MAX_TABLE:
        raise CorruptDataError(f"{what}: table of {tlen} bytes (limit {MAX_TABLE})")
    if pos + tlen > end:
        raise CorruptDataError(f"{what}: table overruns the block")
    table = bytes(mv[pos:pos + tlen])
    if deflated:
        table = inflate_raw(table, f"{what} table")
    if zipped:
        meta_raw = inflate(meta_raw, what, "metadata", MAX_META)
    meta = parse_json(meta_raw, f"{what} metadata")
    if not isinstance(meta, dict):
        raise CorruptDataError(f"{what}: metadata is not a JSON object")
    return meta, table, pos + tlen, tlen
