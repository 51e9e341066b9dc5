"""The ``.co3`` container: compressed gradient dumps, self-describing and checked.

All integers are little-endian. Every byte is covered by a CRC-32, so any single flipped
byte is detected before anything is decoded::

    file      := preamble header layer* trailer
    preamble  := magic "CO3\\x89GRD\\n" (8) | major u16 | minor u16 | header_len u32
    header    := header_len bytes of zlib-compressed UTF-8 JSON | crc32(preamble + header) u32
    layer     := "LYR\\0" | index u32 | meta_len u32 | meta JSON | table_len u32 | table
                 | chunk * steps | crc32(the whole layer block before it) u32
    chunk     := scale f32 | body_len uvarint (LEB128) | body (coder payload, body_len bytes)
    trailer   := "END\\0" | n_layers u32 | layer offsets u64 * n_layers | file_crc u32 | "\\x89CO3END"
                 (file_crc = crc32 of every byte before it, trailer head and offsets included)

The JSON header records the format (grid config), tie rule, scale rule, coder config,
model, layer names/shapes, steps, losses, the source dump's attributes and the co3cli
version. A layer's ``meta`` holds its fitted model parameters (report metadata only: the
decoder uses the integer ``table``, never floats). Each chunk is one step of one layer and
decodes on its own given its layer's table. A reader accepts major version 1, any minor
version; it verifies the file CRC and structure before decoding anything, and each decoder
must consume its chunk exactly.

Limits (a contract: a file beyond any of them is refused with CorruptDataError, one line
naming the limit, before anything big is allocated; memory stays bounded on hostile files):

=====================  ==================================================================
``MAX_HEADER``         compressed header: at most 16 MiB
``MAX_HEADER_JSON``    inflated header JSON: at most 16 MiB (inflated incrementally, so a
                       zlib bomb is stopped at the limit)
``MAX_META``           one layer's metadata JSON: at most 1 MiB
``MAX_DEPTH``          JSON nesting (header and metadata): at most 64 levels
``MAX_TABLE``          one layer's integer table: at most 16 MiB
``MAX_CHUNK``          one chunk's body: at most 1 GiB (and within its layer block)
``MAX_DIMS``           dimensions of a layer's shape: at most 32 (as HDF5)
``MAX_ENTRIES``        entries of one layer (steps x numel): at most 2**31
entries per byte       at most 2**20 entries per byte of the layer's block (no coder
                       comes near: a lie about numel is refused before decoding)
steps x layers         at most the file size (every chunk costs bytes in the file)
=====================  ==================================================================

Layer names must be distinct, non-empty relative HDF5 paths, none a folder of another.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np

from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

MAGIC = b"CO3\x89GRD\n"
END_MAGIC = b"\x89CO3END"
MAJOR, MINOR = 1, 0
_PRE = struct.Struct("<8sHHI")
_U32 = struct.Struct("<I")
_LAYER_HEAD = struct.Struct("<4sII")
_F32 = struct.Struct("<f")
_TRAILER_HEAD = struct.Struct("<4sI")
MAX_HEADER = 16 << 20
MAX_HEADER_JSON = 16 << 20
MAX_META = 1 << 20
MAX_DEPTH = 64
MAX_TABLE = 16 << 20
MAX_CHUNK = 1 << 30
MAX_DIMS = 32
MAX_ENTRIES = 1 << 31
MAX_ENTRIES_PER_BYTE = 1 << 20


def _nesting_depth(raw: bytes) -> int:
    """Deepest ``[``/``{`` nesting of JSON text ``raw``, outside strings (vectorized scan)."""
    a = np.frombuffer(raw, dtype=np.uint8)
    if not a.size or not (np.any(a == 0x5B) or np.any(a == 0x7B)):
        return 0
    quote = a == 0x22
    if quote.any():  # a quote preceded by an odd run of backslashes is escaped
        bs = (a == 0x5C).astype(np.int32)
        run = np.cumsum(bs, dtype=np.int32)
        last_non = np.maximum.accumulate(np.where(bs == 0, run, 0))
        prev_run = np.concatenate(([0], (run - last_non)[:-1]))
        quote &= prev_run % 2 == 0
        inside = (np.cumsum(quote, dtype=np.int32) - quote) % 2 == 1
    else:
        inside = np.zeros(a.size, dtype=bool)
    step = np.where(inside | quote, 0, (a == 0x5B).astype(np.int32) + (a == 0x7B)
                    - (a == 0x5D) - (a == 0x7D))
    return int(np.cumsum(step, dtype=np.int32).max())


def parse_json(raw: bytes, what: str) -> object:
    """JSON ``raw`` (at most MAX_DEPTH deep) or CorruptDataError naming ``what``."""
    depth = _nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise CorruptDataError(f"{what} nests {depth} levels deep (limit {MAX_DEPTH})")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise CorruptDataError(f"unreadable {what} ({str(e)[:200]})") from None


def _inflate(js: bytes, name: str) -> bytes:
    """zlib-inflate the header, refusing more than MAX_HEADER_JSON bytes of output."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(js, MAX_HEADER_JSON)
        if d.unconsumed_tail:
            raise CorruptDataError(f"{name}: header inflates to more than {MAX_HEADER_JSON >> 20} MiB "
                                   "(limit; a decompression bomb?)")
        out += d.flush()
    except zlib.error as e:
        raise CorruptDataError(f"{name}: unreadable header ({e})") from None
    if len(out) > MAX_HEADER_JSON:
        raise CorruptDataError(f"{name}: header inflates to more than {MAX_HEADER_JSON >> 20} MiB")
    if not d.eof or d.unused_data:
        raise CorruptDataError(f"{name}: unreadable header (incomplete or trailing zlib data)")
    return out


class _CrcWriter:
    """File wrapper that tracks position and the running CRC-32 of everything written."""

    def __init__(self, f: BinaryIO):
        self.f, self.pos, self.crc = f, 0, 0

    def write(self, b: bytes) -> None:
        self.f.write(b)
        self.pos += len(b)
        self.crc = zlib.crc32(b, self.crc)


class Co3Writer:
    """Streaming writer: header first, then one layer at a time, then the trailer."""

    def __init__(self, f: BinaryIO, header: dict):
        self.w = _CrcWriter(f)
        self.header = header
        self.offsets: list[int] = []
        self.layer_bytes: list[int] = []
        js = zlib.compress(json.dumps(header, separators=(",", ":"), sort_keys=True).encode(), 9)
        pre = _PRE.pack(MAGIC, MAJOR, MINOR, len(js))
        self.w.write(pre + js + _U32.pack(zlib.crc32(pre + js)))

    def write_layer(self, meta: dict, table: bytes, chunks: list[tuple[float, bytes]]) -> int:
        """Write one layer block; returns its size in bytes."""
        idx = len(self.offsets)
        if idx >= len(self.header["layers"]):
            raise InputError("more layers written than the header declares")
        if len(chunks) != len(self.header["steps"]):
            raise InputError(f"layer {idx}: {len(chunks)} chunks for {len(self.header['steps'])} steps")
        start = self.w.pos
        self.offsets.append(start)
        mj = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
        head = _LAYER_HEAD.pack(b"LYR\0", idx, len(mj)) + mj + _U32.pack(len(table)) + table
        crc = zlib.crc32(head)
        self.w.write(head)
        for scale, body in chunks:
            c = _F32.pack(scale) + uvarints_to_bytes([len(body)]) + body
            crc = zlib.crc32(c, crc)
            self.w.write(c)
        self.w.write(_U32.pack(crc))
        self.layer_bytes.append(self.w.pos - start)
        return self.layer_bytes[-1]

    def close(self) -> int:
        """Write the trailer; returns the total file size."""
        n = len(self.offsets)
        if n != len(self.header["layers"]):
            raise InputError(f"{n} layers written, header declares {len(self.header['layers'])}")
        self.w.write(_TRAILER_HEAD.pack(b"END\0", n) + struct.pack(f"<{n}Q", *self.offsets))
        self.w.write(_U32.pack(self.w.crc) + END_MAGIC)
        return self.w.pos


@dataclass
class LayerBlock:
    index: int
    name: str
    meta: dict
    table: bytes
    scales: np.ndarray  # float32 (steps,)
    bodies: list[bytes]
    nbytes: int  # whole block, side information included
    payload_bytes: int = 0

    @property
    def side_bytes(self) -> int:
        return self.nbytes - self.payload_bytes


@dataclass
class Co3File:
    """A verified ``.co3`` file, opened for layer-by-layer reading."""

    f: BinaryIO
    size: int
    header: dict
    offsets: list[int]
    version: tuple[int, int] = (MAJOR, MINOR)
    _end: int = field(default=0, repr=False)

    @property
    def layer_names(self) -> list[str]:
        return [lay["name"] for lay in self.header["layers"]]

    @property
    def header_bytes(self) -> int:
        return self.offsets[0] if self.offsets else self._end

    @property
    def trailer_bytes(self) -> int:
        return self.size - self._end

    def read_layer(self, i: int) -> LayerBlock:
        lay = self.header["layers"][i]
        nsteps = len(self.header["steps"])
        start = self.offsets[i]
        stop = self.offsets[i + 1] if i + 1 < len(self.offsets) else self._end
        self.f.seek(start)
        buf = self.f.read(stop - start)
        if len(buf) != stop - start:
            raise CorruptDataError("file is truncated")
        mv = memoryview(buf)
        pos = _LAYER_HEAD.size
        if len(buf) < pos + 8:
            raise CorruptDataError(f"layer {i}: block too short")
        if _U32.unpack_from(buf, len(buf) - 4)[0] != zlib.crc32(mv[:-4]):
            raise CorruptDataError(f"layer {i} ({lay['name']}): checksum mismatch")
        mv = mv[:-4]
        tag, idx, mlen = _LAYER_HEAD.unpack_from(buf, 0)
        if tag != b"LYR\0" or idx != i:
            raise CorruptDataError(f"layer {i}: bad block tag or index")
        if pos + mlen + 4 > len(buf):
            raise CorruptDataError(f"layer {i}: metadata overruns the block")
        if mlen > MAX_META:
            raise CorruptDataError(f"layer {i}: metadata of {mlen} bytes (limit {MAX_META})")
        meta_raw = bytes(mv[pos:pos + mlen])
        pos += mlen
        (tlen,) = _U32.unpack_from(buf, pos)
        pos += 4
        if tlen > MAX_TABLE:
            raise CorruptDataError(f"layer {i}: table of {tlen} bytes (limit {MAX_TABLE})")
        if pos + tlen > len(mv):
            raise CorruptDataError(f"layer {i}: table overruns the block")
        table = bytes(mv[pos:pos + tlen])
        pos += tlen
        meta = parse_json(meta_raw, f"layer {i} metadata")
        if not isinstance(meta, dict):
            raise CorruptDataError(f"layer {i}: metadata is not a JSON object")
        scales = np.empty(nsteps, dtype=np.float32)
        bodies, payload = [], 0
        for t in range(nsteps):
            if pos + _F32.size >= len(mv):
                raise CorruptDataError(f"layer {i} step {t}: chunk overruns the block")
            (scales[t],) = _F32.unpack_from(buf, pos)
            (blen,), used = uvarints_from_bytes(mv[pos + 4:pos + 14], 1, f"layer {i} step {t} length")
            start = pos + 4 + used
            blen = int(blen)
            if blen > MAX_CHUNK:
                raise CorruptDataError(f"layer {i} step {t}: chunk of {blen} bytes (limit {MAX_CHUNK})")
            end = start + blen
            if end > len(mv):
                raise CorruptDataError(f"layer {i} step {t}: chunk overruns the block")
            bodies.append(bytes(mv[start:end]))
            payload += blen
            pos = end
        if pos != len(mv):
            raise CorruptDataError(f"layer {i}: {len(mv) - pos} unexpected bytes after its chunks")
        if not np.all(np.isfinite(scales) & (scales > 0)):
            raise CorruptDataError(f"layer {i} ({lay['name']}): a scale is not a positive number")
        return LayerBlock(i, lay["name"], meta, table, scales, bodies, len(buf), payload)

    def layers(self) -> Iterator[LayerBlock]:
        for i in range(len(self.offsets)):
            yield self.read_layer(i)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def header_problem(h) -> str | None:
    """What is structurally wrong with a decoded header (None when it is usable)."""
    if not isinstance(h, dict):
        return "not a JSON object"
    for key, kind in (("format", dict), ("coder", dict), ("layers", list), ("steps", list),
                      ("scale_rule", str), ("model", str)):
        if not isinstance(h.get(key), kind):
            return f"{key!r} missing or not a {kind.__name__}"
    if not isinstance(h["format"].get("id"), str) or not isinstance(h["coder"].get("id"), str):
        return "format/coder without an id"
    if not all(_is_int(s) and -2**63 <= s < 2**63 for s in h["steps"]):
        return "steps must be 64-bit integers"
    if h.get("loss") is not None and (not isinstance(h["loss"], list) or len(h["loss"]) != len(h["steps"])
                                      or not all(isinstance(v, (int, float)) for v in h["loss"])):
        return "loss must be a list of numbers, one per step"
    if not isinstance(h.get("source", {}), dict):
        return "source must be an object"
    nsteps = max(1, len(h["steps"]))
    names: set[str] = set()
    for i, lay in enumerate(h["layers"]):
        if not (isinstance(lay, dict) and isinstance(lay.get("name"), str) and _is_int(lay.get("numel"))
                and isinstance(lay.get("shape"), list)):
            return f"layer {i} needs a name, an integer numel and a shape"
        if len(lay["shape"]) > MAX_DIMS:
            return f"layer {i}: shape has {len(lay['shape'])} dimensions (limit {MAX_DIMS})"
        if not all(_is_int(d) and 1 <= d <= MAX_ENTRIES for d in lay["shape"]):
            return f"layer {i}: shape dimensions must be integers in 1..{MAX_ENTRIES}"
        if not 1 <= lay["numel"] <= MAX_ENTRIES // nsteps:
            return (f"layer {i}: {nsteps} step(s) x numel {lay['numel']} entries "
                    f"(limit {MAX_ENTRIES} per layer)")
        prod = 1
        for d in lay["shape"]:
            prod *= d
        if lay["numel"] != prod:
            return f"layer {i} ({lay['name'][:80]!r}): numel {lay['numel']} does not match its shape"
        name = lay["name"]
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts):
            return f"layer {i}: name {name[:80]!r} is not a valid relative HDF5 path"
        if name in names or any("/".join(parts[:k]) in names for k in range(1, len(parts))):
            return f"layer {i}: name {name[:80]!r} repeats or nests under another layer's name"
        names.add(name)
    folders = {"/".join(p[:k]) for p in (n.split("/") for n in names) for k in range(1, len(p))}
    if folders & names:
        return f"layer name {sorted(folders & names)[0][:80]!r} is also a folder of another layer"
    return None


def open_co3(f: BinaryIO, name: str = "input") -> Co3File:
    """Verify a seekable ``.co3`` stream (magic, version, CRCs, trailer) and return a reader."""
    f.seek(0, io.SEEK_END)
    size = f.tell()
    f.seek(0)
    pre = f.read(_PRE.size)
    if len(pre) < _PRE.size or pre[:8] != MAGIC:
        raise CorruptDataError(f"{name} is not a .co3 file (bad magic)")
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
    header = parse_json(_inflate(js, name), f"header of {name}")
    problem = header_problem(header)
    if problem:
        raise CorruptDataError(f"{name}: malformed header: {problem}")
    nlayers = len(header["layers"])
    if len(header["steps"]) * nlayers > size:
        raise CorruptDataError(f"{name}: header declares {len(header['steps'])} steps x {nlayers} "
                               f"layers, more chunks than a {size}-byte file can hold")
    tsize = _TRAILER_HEAD.size + 8 * nlayers + 4 + len(END_MAGIC)
    end = size - tsize
    if end < _PRE.size + hlen + 4:
        raise CorruptDataError(f"{name} is truncated (no room for the trailer)")
    f.seek(end)
    tr = f.read(tsize)
    tag, n = _TRAILER_HEAD.unpack_from(tr, 0)
    if tag != b"END\0" or n != nlayers or tr[-len(END_MAGIC):] != END_MAGIC:
        raise CorruptDataError(f"{name} is truncated or its trailer is corrupt")
    offsets = list(struct.unpack_from(f"<{n}Q", tr, _TRAILER_HEAD.size))
    (file_crc,) = _U32.unpack_from(tr, _TRAILER_HEAD.size + 8 * n)
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
    first = _PRE.size + hlen + 4
    expect = first
    if offsets and offsets[0] != first or any(b <= a for a, b in zip(offsets, offsets[1:])) or \
            (offsets and offsets[-1] >= end):
        raise CorruptDataError(f"{name}: layer index is inconsistent")
    if not offsets and end != expect:
        raise CorruptDataError(f"{name}: unexpected bytes between header and trailer")
    nsteps = len(header["steps"])
    for i, (a, b) in enumerate(zip(offsets, offsets[1:] + [end])):
        lay = header["layers"][i]
        if nsteps * lay["numel"] > MAX_ENTRIES_PER_BYTE * (b - a):
            raise CorruptDataError(f"{name}: layer {i} declares {nsteps} x {lay['numel']} entries, "
                                   f"more than its {b - a}-byte block can hold")
    return Co3File(f, size, header, offsets, (major, minor), end)
