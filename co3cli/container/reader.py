"""Opening a ``.co3`` file: magic, version, header, trailer, CRCs and the block index verified
before anything is decoded (the layout: ``co3cli.container``)."""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

from co3cli.container.blocks import (_PRE, _SAME, _U32, END_MAGIC, MAGIC, MAJOR, SAME_TAG,
                                     Co3File)
from co3cli.container.framing import read_trailer
from co3cli.container.gcompact import HEADER_MINOR
from co3cli.container.hcm import unpack_header15
from co3cli.container.hcompact import unpack_header
from co3cli.container.hdict import stream_dict_id
from co3cli.container.header import (COMPACT_MINOR, MAX_DIMS, MAX_ENTRIES_PER_BYTE, MAX_HEADER,
                                     STEP_CONTEXT_MINOR, TEXT_HEADER_MINOR, header_problem,
                                     inflate, parse_json, step_context)
from co3cli.errors import CorruptDataError
from co3cli.fileio import misplaced


def _block_index(offsets: list[int], first: int, end: int, minor: int, name: str):
    """Blocks' ends and layers from the trailer's offsets, or CorruptDataError: blocks in the
    order of their first layer, the first right after the header, a layer block per layer in
    1.0 (a group's layers share its offset in 1.1)."""
    refs: dict[int, list[int]] = {}
    starts: list[int] = []
    for i, o in enumerate(offsets):
        if o not in refs:
            if starts and o <= starts[-1]:
                raise CorruptDataError(f"{name}: layer index is inconsistent")
            starts.append(o)
            refs[o] = []
        refs[o].append(i)
    if starts and (starts[0] != first or starts[-1] >= end) or (minor == 0 and len(starts) != len(offsets)):
        raise CorruptDataError(f"{name}: layer index is inconsistent")
    if not offsets and end != first:
        raise CorruptDataError(f"{name}: unexpected bytes between header and trailer")
    return dict(zip(starts, starts[1:] + [end])), refs


def open_co3(f: BinaryIO, name: str = "input") -> Co3File:
    """Verify a seekable ``.co3`` stream (magic, version, CRCs, trailer) and return a reader."""
    f.seek(0, io.SEEK_END)
    size = f.tell()
    f.seek(0)
    pre = f.read(_PRE.size)
    if len(pre) < _PRE.size or pre[:8] != MAGIC:
        raise CorruptDataError(misplaced(f, name, "co3") or f"{name} is not a .co3 file (bad magic)")
    _, major, minor, hlen = _PRE.unpack(pre)
    if major != MAJOR:
        raise CorruptDataError(f"{name} has .co3 format version {major}.{minor}; this co3cli reads "
                               f"version {MAJOR}.x (upgrade co3cli)")
    if _PRE.size + hlen + 4 > size:
        raise CorruptDataError(f"{name} is truncated or its header length is corrupt")
    if hlen > MAX_HEADER:
        raise CorruptDataError(f"{name}: compressed header of {hlen} bytes (limit {MAX_HEADER})")
    js = f.read(hlen)
    (hcrc,) = _U32.unpack(f.read(4))
    if hcrc != zlib.crc32(pre + js):
        raise CorruptDataError(f"{name}: header checksum mismatch")
    if stream_dict_id(js) is not None and minor < COMPACT_MINOR:
        raise CorruptDataError(f"{name}: header names a preset dictionary but the file says "
                               f"version {major}.{minor} (needs 1.{COMPACT_MINOR})")
    if minor >= TEXT_HEADER_MINOR:
        header = unpack_header15(js, size, MAX_DIMS, f"header of {name}")
    elif minor >= HEADER_MINOR:
        header = unpack_header(inflate(js, name), size, MAX_DIMS, f"header of {name}")
    else:
        header = parse_json(inflate(js, name), f"header of {name}")
    problem = header_problem(header)
    if problem:
        raise CorruptDataError(f"{name}: malformed header: {problem}")
    if step_context(header) and minor < STEP_CONTEXT_MINOR:
        raise CorruptDataError(f"{name}: coder {header['coder']['id']!r} codes steps in context "
                               f"but the file says version {major}.{minor} (needs 1.2)")
    nlayers = len(header["layers"])
    if len(header["steps"]) > size:
        raise CorruptDataError(f"{name}: header declares {len(header['steps'])} steps x {nlayers} "
                               f"layers, more chunks than a {size}-byte file can hold")
    end, offsets, file_crc = read_trailer(f, size, _PRE.size + hlen + 4, nlayers, minor, name,
                                          END_MAGIC)
    f.seek(0)
    crc, left = 0, size - 4 - len(END_MAGIC)
    while left:
        b = f.read(min(left, 1 << 24))
        if not b:
            raise CorruptDataError(f"{name} is truncated")
        crc = zlib.crc32(b, crc)
        left -= len(b)
    if crc != file_crc:
        raise CorruptDataError(f"{name}: file checksum mismatch (corrupted data)")
    offsets = offsets()
    stops, refs = _block_index(offsets, _PRE.size + hlen + 4, end, minor, name)
    nsteps = len(header["steps"])
    chunked, referenced = 0, 0
    for a, b in stops.items():
        entries = nsteps * sum(header["layers"][i]["numel"] for i in refs[a])
        if b - a == _SAME.size + 4 and len(refs[a]) == 1:
            f.seek(a)
            if f.read(4) == SAME_TAG:  # a reference: its entries are its source block's
                referenced += entries
                continue
        chunked += len(refs[a])
        if entries > MAX_ENTRIES_PER_BYTE * (b - a):
            raise CorruptDataError(f"{name}: layer {refs[a][0]} declares {entries} entries "
                                   f"(steps x numel), more than its {b - a}-byte block can hold")
    if nsteps * chunked > size:
        raise CorruptDataError(f"{name}: header declares {nsteps} steps x {chunked} coded "
                               f"layers, more chunks than a {size}-byte file can hold")
    if referenced > MAX_ENTRIES_PER_BYTE * size:  # references amplify no more than blocks do
        raise CorruptDataError(f"{name}: references to equal layers declare {referenced} "
                               f"entries, more than a {size}-byte file may hold")
    return Co3File(f, size, header, offsets, (major, minor), end, stops, refs)
