"""Compact group blocks (``GRC\\0``, ``.co3`` 1.4): a joined group's framing, scales and bodies
in fewer bytes.

A ``GRJ`` block spends, besides its payload, 12 bytes of head, a u32 table length, a member
gap each, a float32 scale per member and step and a body length per member: on a 15,366-entry
dump of 20 layers x 3 steps, 300 of its 11,362 bytes. A ``GRC`` block holds the same members
(every one's steps joined, as in ``GRJ``) as::

    grc     := "GRC\\0" | n uvarint | layout u8 | prior | scales
               | (body_len uvarint | body) * bodies | crc32 (of the whole block before it) u32
    prior   := meta_field | table_field                      (layouts 0 and 1)
             | 0 u8 | meta_field | table_field                (layouts 2 and 3, ``.co3`` 1.5)
             | 1 u8 | head | nsym uvarint
             | 2 u8 | head | nsym uvarint | top uvarint | len uvarint | raw-deflated octaves
    head    := version u8 | precision u8 | limit u8       (of a ``ctx`` table: its first bytes)
               (kind 1: meta ``{"model": "uniform"}``, the table whose prior is
               ``co3cli.tables.flat_freqs(nsym, precision)``: 6 bytes for the 31 of its fields;
               kind 2: meta ``{"model": "empirical-octaves"}``, the table whose prior is
               ``co3cli.tables.octave_freqs``': per symbol 0 (unused) or 1 + log2 of its
               frequency, as the zigzag of its difference from the previous symbol's (a byte
               each), the symbol ``top`` taking what makes the sum ``2**precision``: 50-70
               bytes for its fields' 110)
    meta_field, table_field := len << 1 | deflated uvarint | bytes
               (meta: JSON, or deflated with the header's preset dictionary; table: the
               coder's integer table, or raw-deflated)
    scales  := width u8 | first u16 | bits      (every member's scales, member by member,
               step by step: of each float32's bit pattern the top 9 bits (sign, exponent) as
               the zigzag'd difference from the previous scale's, ``width`` bits (0..10; the
               first scale's top bits: ``first``), then its 23 mantissa bits; MSB first, the
               last byte zero-padded)
             | 0x80 + width u8 | first u16 | short      (the short form, where smaller)
    short   := the differences, ``width`` bits each | a length code per scale, 4 bits (0..14:
               that many mantissa bits kept, the rest zero; 15: all 23) | each scale's kept
               mantissa bits, its top ones; MSB first, the last byte zero-padded
    layout  := 0: a body per member (its steps as further rows, as in ``GRJ``)
             | 1: a body per *stack*: the members of one row length (``row_length`` of the
               header's shape), in order of their first member, each body every member of
               that row length in member order, each member's steps as further rows
             | 2 (1.5): one body, the stacks of layout 1 one after the other, coded as
               *segments* (``ctx`` model version 5, or 7 in files written since it exists:
               a member each, its entries and row length; the statistics carry through, rows
               restart where the length changes)
             | 3 (1.5): layout 2 with each member's lag its ``numel`` (its previous step's
               entry, one step of rows back, in the contexts)

The members are the layers the trailer points at the block (no gaps stored; ``n`` must match).
A stack is one coded sequence, so an adaptive coder's statistics carry from layer to layer
and one final state is paid per stack (on digits-resnet-tiny, 20 layers in 6 stacks: 0.4 %
of the ``ctx`` payload at fp8, 1 % at fp4); a member of a stack decodes with the stack (at
most ``GROUP_ENTRIES`` symbols: the random access a group of small layers gives up). Scales
are kept bit for bit (a reader refuses any that is not a positive finite number).

Short scales (1.5, files written by co3cli 0.1.0 from this change on; a reader before it
refuses the width byte in one line): the writer of a ``GRC`` block stores for each member and
step not the scale rule's float32 but one of few mantissa bits that quantizes that step
to the same symbols with no larger squared error (``co3cli.scales.short_scales``: a few hundred
entries keep their symbols over a range of scales some 2**-8 wide), so most keep 3-14 of the 23
bits. On the 15,366-entry dump above the section fell from 198 to 112 bytes; the payload is
the same bytes, the decoded values those symbols at the stored scales.
"""

from __future__ import annotations

import json
import zlib

import numpy as np

from co3cli.container.framing import read_uvarint
from co3cli.container.hdict import deflate
from co3cli.container.header import MAX_META, MAX_TABLE, inflate, inflate_raw, parse_json
from co3cli.coding.huffman import MAX_NSYM
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarint

COMPACT_GROUP_TAG = b"GRC\0"
FLAT_META = b'{"model":"uniform"}'
OCTAVE_META = b'{"model":"empirical-octaves"}'
PRIOR_FIELDS, PRIOR_FLAT, PRIOR_OCTAVES = 0, 1, 2
HEADER_MINOR = 4
"""The minor version of files whose header is compact (``co3cli.container.hcompact``) and
whose joined groups may be ``GRC`` blocks."""
PER_MEMBER, STACKED, STREAM, STREAM_STEPS = 0, 1, 2, 3
STREAMS = (STREAM, STREAM_STEPS)
_HIGH, _LOW = 9, 23
SHORT = 0x80  # the width byte's flag of the short form (1.5, written where smaller)
_CODE, _FULL = 4, 15  # bits of a mantissa's length code; the code of all 23 bits
SCALE_ROWS = 1 << 16  # scales unpacked at a time (a multiple of 8: ~2 MB of bits, 17 MB as int64)


def stacks(cols: list[int]) -> list[list[int]]:
    """Member positions by row length, in order of each row length's first member."""
    out: dict[int, list[int]] = {}
    for k, c in enumerate(cols):
        out.setdefault(c, []).append(k)
    return list(out.values())


def _field_bits(v: np.ndarray, nbits: np.ndarray) -> np.ndarray:
    """The low ``nbits[i]`` (0..32) bits of each ``v[i]``, MSB first, one after the other
    (uint8 0/1), ``SCALE_ROWS`` values at a time."""
    out = []
    for lo in range(0, v.size, SCALE_ROWS):
        w, n = v[lo:lo + SCALE_ROWS], nbits[lo:lo + SCALE_ROWS]
        words = (w << (32 - n)).astype(">u4")  # left-aligned (a 0-bit field: v is 0)
        m = np.unpackbits(words.view(np.uint8).reshape(-1, 4), axis=1)
        out.append(m[np.arange(32) < n[:, None]])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint8)


def _bits_field(bits: np.ndarray, nbits: np.ndarray) -> np.ndarray:
    """:func:`_field_bits` undone: the values (int64) of fields of ``nbits`` bits each."""
    out, at = np.zeros(nbits.size, dtype=np.int64), 0
    for lo in range(0, nbits.size, SCALE_ROWS):
        n = nbits[lo:lo + SCALE_ROWS]
        m = np.zeros((n.size, 32), dtype=np.uint8)
        used = int(n.sum())
        m[np.arange(32) < n[:, None]] = bits[at:at + used]
        at += used
        words = np.packbits(m, axis=1).view(">u4").ravel().astype(np.int64)
        out[lo:lo + n.size] = words >> (32 - n)
    return out


def _mantissa_lengths(low: np.ndarray) -> np.ndarray:
    """Each 23-bit mantissa's length less its trailing zero bits, as stored: the code's
    (0..14) or all 23."""
    tz = np.zeros(low.size, dtype=np.int64)
    rest = low.copy()
    for b in (16, 8, 4, 2, 1):  # trailing zeros of the non-zero ones, a bisection
        z = (rest != 0) & (rest & ((1 << b) - 1) == 0)
        tz += b * z
        rest = np.where(z, rest >> b, rest)
    lens = np.where(low == 0, 0, _LOW - tz)
    return np.where(lens < _FULL, lens, _LOW)


def pack_scales(scales: np.ndarray) -> bytes:
    """The ``scales`` section of float32 ``scales`` (any bit patterns; exact): the short form
    where smaller."""
    bits = np.ascontiguousarray(scales, dtype="<f4").view("<u4").astype(np.int64)
    if not bits.size:
        return b"\0\0\0"
    high, low = bits >> _LOW, bits & ((1 << _LOW) - 1)
    d = np.diff(high, prepend=high[0])
    z = np.where(d >= 0, 2 * d, -2 * d - 1)
    width = int(z.max()).bit_length()
    head = int(high[0]).to_bytes(2, "little")
    parts = [bytes([width]) + head]
    for lo in range(0, bits.size, SCALE_ROWS):  # SCALE_ROWS (a multiple of 8) rows end on a byte
        cols = [((v[lo:lo + SCALE_ROWS, None] >> np.arange(w - 1, -1, -1)) & 1)
                for v, w in ((z, width), (low, _LOW)) if w]
        parts.append(np.packbits(np.concatenate(cols, axis=1).astype(np.uint8).ravel()).tobytes())
    full = b"".join(parts)
    lens = _mantissa_lengths(low)
    if 3 + (bits.size * (width + _CODE) + int(lens.sum()) + 7) // 8 >= len(full):
        return full
    n = np.full(bits.size, 1, dtype=np.int64)
    short = np.concatenate([_field_bits(z, width * n), _field_bits(np.minimum(lens, _FULL),
                                                                    _CODE * n),
                            _field_bits(low >> (_LOW - lens), lens)])
    return bytes([SHORT | width]) + head + np.packbits(short).tobytes()


def read_scales(buf, pos: int, end: int, n: int, what: str) -> tuple[np.ndarray, int]:
    """``n`` float32 scales of a ``scales`` section at ``buf[pos:end]`` and the position
    after it; CorruptDataError where the section is cut short, too wide or badly padded."""
    if pos + 3 > end:
        raise CorruptDataError(f"{what}: scales overrun the block")
    width, first = buf[pos], int.from_bytes(bytes(buf[pos + 1:pos + 3]), "little")
    short, width = width & SHORT, width & ~SHORT
    if width > _HIGH + 1 or first >> _HIGH:
        raise CorruptDataError(f"{what}: bad scales section (width {width}, first {first})")
    if short:
        z, low, nbits = _read_short(buf, pos + 3, end, n, width, what)
    else:
        z, low, nbits = _read_full(buf, pos + 3, end, n, width, what)
    nbytes = (nbits + 7) // 8
    raw_last = buf[pos + 3 + nbytes - 1] if nbytes else 0
    if nbits % 8 and raw_last & ((1 << (8 - nbits % 8)) - 1) or (n == 0 and first):
        raise CorruptDataError(f"{what}: scales section padded with non-zero bits")
    d = (z >> 1) ^ -(z & 1)
    if n and d[0]:
        raise CorruptDataError(f"{what}: the first scale's difference is not 0")
    high = first + np.cumsum(d)
    if n and (high.min() < 0 or high.max() >> _HIGH):
        raise CorruptDataError(f"{what}: a scale's exponent out of range")
    vals = ((high << _LOW) | low).astype("<u4").view("<f4").astype(np.float32)
    return vals, pos + 3 + nbytes


def _read_full(buf, pos: int, end: int, n: int, width: int, what: str):
    """Exponent differences and mantissas of ``n`` scales of ``width + 23`` bits each."""
    per = width + _LOW
    nbytes = (n * per + 7) // 8
    if pos + nbytes > end:
        raise CorruptDataError(f"{what}: scales overrun the block")
    raw = np.frombuffer(bytes(buf[pos:pos + nbytes]), dtype=np.uint8)
    w = 1 << np.arange(per - 1, -1, -1, dtype=np.int64)
    z, low = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for lo in range(0, n, SCALE_ROWS):  # SCALE_ROWS rows of bits at a time: bounded memory
        k = min(SCALE_ROWS, n - lo)
        b = np.unpackbits(raw[lo * per // 8:(lo * per + k * per + 7) // 8])[:k * per]
        m = b.reshape(k, per).astype(np.int64)
        if width:
            z[lo:lo + k] = m[:, :width] @ w[_LOW:]
        low[lo:lo + k] = m[:, width:] @ w[width:]
    return z, low, n * per


def _bits_at(buf, pos: int, a: int, b: int) -> np.ndarray:
    """Bits ``a`` to ``b`` (MSB first) of the bytes from ``buf[pos]`` on (uint8 0/1)."""
    raw = np.frombuffer(bytes(buf[pos + a // 8:pos + (b + 7) // 8]), dtype=np.uint8)
    return np.unpackbits(raw)[a % 8:a % 8 + b - a]


def _read_short(buf, pos: int, end: int, n: int, width: int, what: str):
    """The short form: ``n`` exponent differences, ``n`` length codes, then the mantissas'
    stored bits; ``SCALE_ROWS`` scales at a time (bounded memory, as the full form)."""
    fixed = n * (width + _CODE)
    if pos + (fixed + 7) // 8 > end:
        raise CorruptDataError(f"{what}: scales overrun the block")
    z, low = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    at = fixed  # the bit of the next scale's kept mantissa
    for lo in range(0, n, SCALE_ROWS):
        k = min(SCALE_ROWS, n - lo)
        one = np.full(k, 1, dtype=np.int64)
        z[lo:lo + k] = _bits_field(_bits_at(buf, pos, lo * width, (lo + k) * width), width * one)
        code = _bits_field(_bits_at(buf, pos, n * width + lo * _CODE, n * width + (lo + k) * _CODE),
                           _CODE * one)
        lens = np.where(code < _FULL, code, _LOW)
        used = int(lens.sum())
        if pos + (at + used + 7) // 8 > end:
            raise CorruptDataError(f"{what}: scales overrun the block")
        low[lo:lo + k] = _bits_field(_bits_at(buf, pos, at, at + used), lens) << (_LOW - lens)
        at += used
    return z, low, at


def prior_bytes(meta: dict, table: bytes, layout: int) -> int:
    """Bytes a ``GRC`` block of ``layout`` spends on metadata ``meta`` and ``table``."""
    return len(_prior(json.dumps(meta, separators=(",", ":"), sort_keys=True).encode(), table,
                      layout))


def meta_field_bytes(meta: dict) -> int:
    """Bytes a ``GRC`` block spends on metadata ``meta`` (its length field included)."""
    js = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    return len(_field(js, deflate(js)))


def _field(data: bytes, packed: bytes) -> bytes:
    """``len << 1 | deflated`` and the smaller of ``data`` and ``packed``."""
    if len(packed) < len(data):
        return uvarint(len(packed) << 1 | 1) + packed
    return uvarint(len(data) << 1) + data


def _read_field(buf, pos: int, end: int, limit: int, what: str) -> tuple[bytes, bool, int]:
    v, pos = read_uvarint(buf, pos, end, what)
    n = v >> 1
    if n > limit:
        raise CorruptDataError(f"{what}: {n} bytes (limit {limit})")
    if pos + n > end:
        raise CorruptDataError(f"{what}: overruns the block")
    return bytes(buf[pos:pos + n]), bool(v & 1), pos + n


def _flat_table(version: int, precision: int, limit: int, nsym: int) -> bytes:
    from co3cli.tables import flat_freqs
    from co3cli.varint import uvarints_to_bytes

    return bytes([version, precision, limit]) + uvarints_to_bytes(flat_freqs(nsym, precision))


def _octave_table(head: bytes, top: int, k1: np.ndarray) -> bytes | None:
    """The table bytes of an octave prior (``k1``: 0 or 1 + log2 of each frequency, ``top``
    the symbol taking the rest), or None where that is no table (a sum beyond the precision)."""
    from co3cli.varint import uvarints_to_bytes

    precision = head[1]
    f = np.where(k1 > 0, np.left_shift(np.int64(1), np.maximum(k1, 1) - 1), 0)
    f[top] += (1 << precision) - int(f.sum())
    if f[top] <= 0 or np.any(k1 > precision):
        return None
    return bytes(head) + uvarints_to_bytes(f)


def _ctx_freqs(table: bytes) -> np.ndarray | None:
    """The prior frequencies of ``ctx`` table bytes (None where they are not such a table)."""
    from co3cli.varint import uvarints_from_bytes

    if len(table) <= 3 or not 8 <= table[1] <= 24:
        return None
    nsym = int(np.count_nonzero(np.frombuffer(table[3:], dtype=np.uint8) < 0x80))
    try:
        f, used = uvarints_from_bytes(table[3:], nsym)
    except CorruptDataError:
        return None
    return f.astype(np.int64) if used == len(table) - 3 and 1 <= nsym <= MAX_NSYM else None


def _prior(meta_json: bytes, table: bytes, layout: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    fields = _field(meta_json, deflate(meta_json)) + _field(table, c.compress(table) + c.flush())
    if layout not in STREAMS:
        return fields
    f = _ctx_freqs(table) if meta_json in (FLAT_META, OCTAVE_META) else None
    if f is not None and meta_json == FLAT_META and table == _flat_table(*table[:3], f.size):
        return bytes([PRIOR_FLAT]) + table[:3] + uvarint(f.size)
    if f is not None and meta_json == OCTAVE_META:
        odd = np.flatnonzero(f & (f - 1))  # the one frequency not a power of two: the top's
        top = int(odd[0]) if odd.size == 1 else int(np.argmax(f))
        k1 = np.where(f > 0, np.frexp(np.maximum(f, 1))[1], 0).astype(np.int64)  # bit length
        if _octave_table(table[:3], top, k1) == table:
            d = np.diff(k1, prepend=0)
            z = np.where(d >= 0, 2 * d, -2 * d - 1).astype(np.uint8).tobytes()
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            z = c.compress(z) + c.flush()
            packed = (bytes([PRIOR_OCTAVES]) + table[:3] + uvarint(f.size) + uvarint(top)
                      + uvarint(len(z)) + z)
            if len(packed) < 1 + len(fields):
                return packed
    return bytes([PRIOR_FIELDS]) + fields


def _read_prior(buf, pos: int, end: int, what: str):
    """(meta, table bytes, the table's bytes in the file, position after) of a prior of kind
    1 or 2 at ``buf[pos]``."""
    kind = buf[pos]
    if pos + 4 > end:
        raise CorruptDataError(f"{what}: prior overruns the block")
    head = bytes(buf[pos + 1:pos + 4])
    nsym, pos = read_uvarint(buf, pos + 4, end, f"{what} prior")
    if not (8 <= head[1] <= 24 and 1 <= nsym <= min(MAX_NSYM, 1 << head[1])):
        raise CorruptDataError(f"{what}: prior of {nsym} symbols at precision {head[1]}")
    if kind == PRIOR_FLAT:
        return json.loads(FLAT_META), _flat_table(*head, nsym), 0, pos
    top, pos = read_uvarint(buf, pos, end, f"{what} prior")
    n, pos = read_uvarint(buf, pos, end, f"{what} prior")
    if top >= nsym or pos + n > end:
        raise CorruptDataError(f"{what}: octave prior overruns the block or its symbols")
    z = np.frombuffer(inflate_raw(bytes(buf[pos:pos + n]), f"{what} octave prior", MAX_NSYM),
                      dtype=np.uint8).astype(np.int64)
    k1 = np.cumsum((z >> 1) ^ -(z & 1))
    table = _octave_table(head, top, k1) if z.size == nsym and k1.min() >= 0 else None
    if table is None:
        raise CorruptDataError(f"{what}: octave prior is not a table of {nsym} symbols")
    return json.loads(OCTAVE_META), table, n, pos + n


def pack_group(meta_json: bytes, table: bytes, scales: list, bodies: list[bytes],
               layout: int) -> bytes:
    """A ``GRC`` block up to its CRC: ``scales`` per member (float32 arrays), ``bodies`` one
    per member (``PER_MEMBER``), per stack (``STACKED``) or one (``STREAMS``)."""
    if layout not in (PER_MEMBER, STACKED) + STREAMS:
        raise InputError(f"group layout {layout}")
    head = COMPACT_GROUP_TAG + uvarint(len(scales)) + bytes([layout]) + _prior(meta_json, table,
                                                                               layout)
    allscales = np.concatenate([np.asarray(s, dtype=np.float32) for s in scales])
    return head + pack_scales(allscales) + b"".join(uvarint(len(b)) + b for b in bodies)


def parse_group(buf, end: int, cols: list[int], nsteps: int, what: str):
    """A ``GRC`` block (``buf[:end]``, the CRC checked) of members with row lengths ``cols``:
    (meta, table, the table's bytes in the file, layout, scales per member, bodies, the
    member positions of each body, each body's bytes in the file with its length)."""
    n, pos = read_uvarint(buf, 4, end, f"{what} member count")
    if n != len(cols):
        raise CorruptDataError(f"{what}: {n} members declared, the layer index points "
                               f"{len(cols)} layers at it")
    if pos >= end or buf[pos] not in (PER_MEMBER, STACKED) + STREAMS:
        raise CorruptDataError(f"{what}: bad group layout")
    layout, pos = buf[pos], pos + 1
    kind = None
    if layout in STREAMS:
        if pos >= end or buf[pos] not in (PRIOR_FIELDS, PRIOR_FLAT, PRIOR_OCTAVES):
            raise CorruptDataError(f"{what}: bad prior kind")
        kind = buf[pos]
    if kind in (PRIOR_FLAT, PRIOR_OCTAVES):
        meta, table, tbytes, pos = _read_prior(buf, pos, end, what)
    else:
        pos += kind == PRIOR_FIELDS
        meta_raw, zipped, pos = _read_field(buf, pos, end, MAX_META, f"{what} metadata")
        if zipped:
            meta_raw = inflate(meta_raw, what, "metadata", MAX_META)
        meta = parse_json(meta_raw, f"{what} metadata")
        if not isinstance(meta, dict):
            raise CorruptDataError(f"{what}: metadata is not a JSON object")
        table, deflated, pos = _read_field(buf, pos, end, MAX_TABLE, f"{what} table")
        tbytes = len(table)
        if deflated:
            table = inflate_raw(table, f"{what} table")
    allscales, pos = read_scales(buf, pos, end, n * nsteps, what)
    groups = body_members(layout, cols)
    bodies, sizes = [], []
    for g in range(len(groups)):
        at = pos
        blen, pos = read_uvarint(buf, pos, end, f"{what} body length")
        if pos + blen > end:
            raise CorruptDataError(f"{what}: body {g} overruns the block")
        bodies.append(bytes(buf[pos:pos + blen]))
        pos += blen
        sizes.append(pos - at)
    if pos != end:
        raise CorruptDataError(f"{what}: {end - pos} unexpected bytes after its bodies")
    scales = [allscales[k * nsteps:(k + 1) * nsteps] for k in range(n)]
    return meta, table, tbytes, layout, scales, bodies, groups, sizes


def body_members(layout: int, cols: list[int]) -> list[list[int]]:
    """The member positions each body of a group of that ``layout`` holds, in coding order."""
    if layout == STACKED:
        return stacks(cols)
    if layout in STREAMS:
        return [[k for g in stacks(cols) for k in g]]
    return [[k] for k in range(len(cols))]


def stream_segments(layout: int, members: list[int], cols: list[int],
                    numels: list[int], nsteps: int) -> list[tuple[int, int, int]]:
    """The segments (entries, row length, lag) of a ``STREAMS`` body holding ``members``."""
    lag = layout == STREAM_STEPS and nsteps > 1
    return [(nsteps * numels[k], cols[k], numels[k] if lag else 0) for k in members]


def payload_shares(bodies: list[bytes], groups: list[list[int]], sizes: list[int],
                   framed: bool = True) -> list[int]:
    """Each member's bytes of ``bodies`` (``framed``: with their length varints): a body of
    its own whole, a stack's split by the members' entries ``sizes`` (the rest to its first)."""
    out = [0] * len(sizes)
    for body, members in zip(bodies, groups):
        b = len(body) + (len(uvarint(len(body))) if framed else 0)
        total = sum(sizes[k] for k in members) or 1
        for k in members:
            out[k] = b * sizes[k] // total
        out[members[0]] += b - sum(out[k] for k in members)
    return out


def stream_body(table, syms: list, layout: int) -> bytes:
    """The one body of a ``STREAMS`` group: ``syms`` ((steps x numel symbols, row length) per
    member) in stack order, coded as segments with ``table`` (``ctx`` model version 5 or 7)."""
    cols = [c for _, c in syms]
    order = body_members(layout, cols)[0]
    segs = stream_segments(layout, order, cols, [s.shape[1] for s, _ in syms], syms[0][0].shape[0])
    return table.encode_segments(np.concatenate([syms[k][0].reshape(-1) for k in order]), segs)


def stacked_bodies(table, syms: list, groups: list[list[int]]) -> list[bytes]:
    """The bodies of a ``STACKED`` group: ``syms`` ((steps x numel symbols, row length) per
    member) of each stack concatenated, each member's steps as further rows, coded with
    ``table``."""
    return [table.encode(np.concatenate([syms[k][0].reshape(-1) for k in g]), cols=syms[g[0]][1])
            for g in groups]
