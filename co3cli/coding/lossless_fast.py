"""The fast lossless float coder of table version 2 (the default of ``co3 compress --format
*-lossless`` until version 3, :mod:`co3cli.coding.lossless_pairs`; its files still decode, and
``co3cli.lossless.compress_lossless(..., _version=2)`` writes it): bit-exact float32 /
bfloat16 / float16 words.

Data flow, per layer (all steps) and per step::

    words (steps, numel) --one counting pass (hist_or)--> counts at every k --> FastTable
        (k, t, precision, one order-0 table; or raw), the smallest by the counts' cost
    one step's words --encode2 (one kernel)--> 4-lane rANS payload + packed mantissa bits
    chunk body --decode2 (one kernel: table lookup, lanes, bit unpacking)--> words

**Symbols** are version 1's (:mod:`co3cli.coding.lossless`): ``+0`` and ``-0`` are ``Z`` and
``Z + 1`` (``Z = 2**(1 + E + k)``) and carry no mantissa; any other word is ``sign << (E + k)
| exponent field << k | top k mantissa bits`` (the word shifted right, NaN/Inf/subnormals
included), its ``width = M - k - t`` low mantissa bits (``t``: trailing bits 0 in every word
of the layer) packed LSB-first, padded with 0 bits to a whole byte. Unlike version 1 there is
no neighbour context: one order-0 table per layer, so the four lanes are independent and a
step costs one pass. (Version 1's 16 contexts save more on MLPs with dead units, at 5-20x the
time: ``co3cli.lossless`` keeps it as ``level="max"``.)

**Fit.**  One pass over the layer counts the symbols at ``k = max_k`` and ORs every word
(the +-0 words are counted in a second pass only when the two bins that hold them are not
empty); the counts at every smaller ``k`` are sums of adjacent bins. For every ``k`` and
precision 12 (14 when over 2**11 symbols are present) the size is estimated from the counts
(the order-0 code length, mantissa bits, table bytes, per-chunk framing); the smallest wins,
unless the raw words are smaller (mode raw; a layer under ``MIN_CODED`` entries is raw
without a fit). The frequencies are the largest-remainder rounding of the counts, ties broken
by numpy's ``argpartition`` (the bytes depend on it). Counting, the choice, the rounding's
scaling, both coders' tables and the chunk framing are kernels: per layer, a handful of
calls, no per-step Python but joining the chunk parts (numpy copies them, at memory speed,
from ``MEMCPY_FROM`` entries per step).

**rANS**: four 32-bit states (entry ``i`` in lane ``i % 4``) in ``[2**15, 2**31)``, 16-bit
renormalisation words in one shared stream (the decoder reads them in the order the encoder,
running backwards, wrote them last), frequencies summing to ``2**precision``
(``precision`` 10..15). The encoder divides by exact reciprocals (F. Giesen's ryg_rans
``RansEncSymbol``, exact for states below ``2**31``); the decoder looks each slot up in two
tables of ``2**precision`` uint32 entries (``f | (slot - start) << 16``, and the symbol's
word without its low mantissa bits, their count in the low 5 bits), so a word costs a
lookup, a multiply-add and a few shifts.

**Table** (``to_bytes``; the ``.co3`` layer block's table)::

    byte 0   version (2)      byte 1   layout (0 float32, 1 bfloat16, 2 float16)
    byte 2   mode (0 raw, 1 rans); mode rans only:
    byte 3   k                byte 4   t               byte 5   precision (10..15)
    uvarint                   present symbols m
    uvarint * 2 * m           per present symbol: gap from the previous one (- 1), freq - 1

The frequencies must sum to ``2**precision``; anything else is rejected.

**Chunk body** (one step): mode raw: the words, little-endian, ``numel * bytes`` exactly.
Mode rans: ``uvarint(n16) | 4 x uint32 final lane states | n16 x uint16 renormalisation words
| packed bits`` (little-endian). The decoder proves it consumed exactly its input: every word
read, every lane back at ``2**15``, then exactly ``ceil(nonzeros * width / 8)`` packed bytes
with zero padding; otherwise one-line CorruptDataError.

References: rANS: J. Duda, "Asymmetric numeral systems", arXiv:1311.2540; interleaving and
the reciprocal encoder: F. Giesen, "Interleaved entropy coders", arXiv:1402.3392. The peer
it is measured against is ZipNN (M. Hershcovitch et al., arXiv:2411.05239).
"""

from __future__ import annotations

import sys

import numpy as np

from co3cli.coding import lossless_kernels as K
from co3cli.coding import lossless_layer_kernels as L
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarint, uvarints_from_bytes, uvarints_to_bytes

VERSION = 2
MODE_RAW, MODE_RANS = 0, 1
PRECISION_RANGE = range(10, 16)
PER_CHUNK = 18  # bytes of a chunk's lane states and length varint
_LITTLE = sys.byteorder == "little"
MEMCPY_FROM = 8192  # entries per step from which numpy, not a kernel, copies the chunk parts
COPY_BATCH = 16 << 20  # bytes of those copied parts held at once (a batch of steps)
MIN_CODED = 128  # entries below which a layer is stored raw without a fit (its table's
# 8 + 3 per present symbol bytes exceed what coding saves: the fit chose raw on every such
# layer of the benchmark dumps)
_STATUS = {K.E_SHORT: "runs out before its end", K.E_STATE: "ends in the wrong coder state",
           K.E_LEFT: "has bytes left over"}


def normalize(counts: np.ndarray, precision: int) -> np.ndarray:
    """Frequencies (uint32, summing to ``2**precision``) of ``counts``: every present symbol
    >= 1, the rest by largest remainder (taken back from the largest when the floor of 1
    overshoots). InputError when more symbols are present than slots. (The scaling is a
    kernel; the choice among equal remainders is numpy's ``argpartition``, as it always
    was: the bytes depend on it.)"""
    M = 1 << precision
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    idx = np.empty(counts.size, dtype=np.int64)
    x = np.empty(counts.size)
    f = np.empty(counts.size, dtype=np.int64)
    m, gap = L.normalize_floor(counts, precision, idx, x, f) if counts.any() else (0, 0)
    if m > M:
        raise InputError(f"precision: 2**{precision} slots cannot hold {m} symbols")
    x, f = x[:m], f[:m]
    if gap > 0:
        f[np.argpartition(f - x, gap - 1)[:gap]] += 1
    while gap < 0:  # the floor of 1 overshot: take from the largest
        room = f - 1
        take = min(-gap, int(np.count_nonzero(room)))
        f[np.argpartition(-room, take - 1)[:take]] -= 1
        gap += take
    out = np.zeros(counts.size, dtype=np.uint32)
    out[idx[:m]] = f
    return out


class FastTable:
    """One layer's version-2 coding parameters (see the module docstring)."""

    contexts = 1

    def __init__(self, layout, mode: int, k: int = 0, t: int = 0, precision: int = 12,
                 freqs: np.ndarray | None = None):
        self.layout, self.mode, self.k, self.t, self.precision = layout, mode, k, t, precision
        self.ek = layout.exp_bits + k
        self.zbase = 1 << (1 + self.ek)
        self.nsym = self.zbase + 2
        self.width = layout.man_bits - k - t
        self.params = np.array([layout.bits - 1, self.ek, k, t, self.width, self.zbase,
                                precision, 0], dtype=np.int64)
        self._enc = self._tab = None
        if mode == MODE_RANS:
            self.freqs = np.ascontiguousarray(freqs, dtype=np.uint32)
            self.cum = np.zeros_like(self.freqs)
            np.cumsum(self.freqs[:-1], out=self.cum[1:])

    # -- serialisation ------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = bytes([VERSION, self.layout.code, self.mode])
        if self.mode == MODE_RAW:
            return head
        present = np.flatnonzero(self.freqs)
        gaps = np.diff(present, prepend=-1) - 1
        pairs = np.stack([gaps, self.freqs[present].astype(np.int64) - 1], 1).ravel()
        return head + bytes([self.k, self.t, self.precision]) + \
            uvarints_to_bytes([present.size]) + uvarints_to_bytes(pairs)

    @classmethod
    def from_bytes(cls, data: bytes, layout) -> FastTable:
        """Parse a version-2 table of ``layout`` (CorruptDataError on anything but what
        ``to_bytes`` writes)."""
        data = bytes(data)
        if len(data) < 3 or data[0] != VERSION or data[1] != layout.code:
            raise CorruptDataError("lossless table: not a version-2 table of the file's format")
        if data[2] == MODE_RAW:
            if len(data) != 3:
                raise CorruptDataError("lossless table: bytes after a raw table")
            return cls(layout, MODE_RAW)
        if data[2] != MODE_RANS or len(data) < 6:
            raise CorruptDataError(f"lossless table: unknown mode {data[2]} or truncated")
        k, t, prec = data[3:6]
        if not (k <= layout.max_k and t <= layout.man_bits - k and prec in PRECISION_RANGE):
            raise CorruptDataError(f"lossless table: parameters k={k} t={t} precision={prec} "
                                   "out of range")
        nsym = (1 << (1 + layout.exp_bits + k)) + 2
        (m,), used = uvarints_from_bytes(data[6:6 + 9], 1, "lossless table")
        if m < 1 or m > min(nsym, 1 << prec):
            raise CorruptDataError(f"lossless table: {m} symbols for an alphabet of {nsym}")
        vals, used2 = uvarints_from_bytes(data[6 + used:], 2 * int(m), "lossless table")
        if 6 + used + used2 != len(data):
            raise CorruptDataError(f"lossless table: {len(data) - 6 - used - used2} trailing bytes")
        if int(vals.max()) >= 1 << 31:
            raise CorruptDataError("lossless table: a gap or frequency out of range")
        vals = vals.astype(np.int64).reshape(-1, 2)
        syms = np.cumsum(vals[:, 0] + 1) - 1
        f = vals[:, 1] + 1
        if syms[-1] >= nsym or int(f.sum()) != 1 << prec:
            raise CorruptDataError(f"lossless table: frequencies do not sum to 2**{prec} over "
                                   "the alphabet")
        freqs = np.zeros(nsym, dtype=np.uint32)
        freqs[syms] = f
        return cls(layout, MODE_RANS, k, t, prec, freqs)

    def config(self) -> dict:
        out = {"mode": "raw" if self.mode == MODE_RAW else "rans", "version": VERSION}
        if self.mode == MODE_RANS:
            out.update(k=self.k, t=self.t, precision=self.precision, contexts=1)
        return out

    # -- coding -------------------------------------------------------------------------
    def _enc_tables(self):
        if self._enc is None:
            self._enc = tuple(np.empty(self.nsym, dtype=np.uint64) for _ in range(5))
            K.enc_tables2(self.freqs, self.cum, self.precision, *self._enc)
        return self._enc

    @property
    def slot_tables(self):
        """Per slot of ``2**precision`` (uint32 each): the owning symbol's frequency | the
        slot's offset in its range << 16, and its word without the low mantissa bits (their
        count in the low 5 bits)."""
        if self._tab is None:
            M = 1 << self.precision
            self._tab = (np.empty(M, dtype=np.uint32), np.empty(M, dtype=np.uint32))
            mag_bits = self.layout.bits - 1
            L.slot_tables2(self.freqs, self.cum, self.zbase, mag_bits, mag_bits - self.ek,
                           self.width, *self._tab)
        return self._tab

    def encode(self, words, cols=None) -> bytes:
        """One step's words (1-D, the layout's word dtype) -> chunk body (``cols`` unused:
        order 0)."""
        words = np.ascontiguousarray(words, dtype=self.layout.word_dtype).ravel()
        return self.encode_steps(words[None, :])[0]

    def encode_steps(self, words, cols=None) -> list[bytes]:
        """Every step (row) of ``words`` (steps, n) -> its chunk body, in one kernel call."""
        words = np.ascontiguousarray(words, dtype=self.layout.word_dtype)
        if self.mode == MODE_RAW:
            le = words.astype(words.dtype.newbyteorder("<"), copy=False)
            return [row.tobytes() for row in le]
        steps, n = words.shape
        rw = np.empty((steps, n + 4), dtype=np.uint16)
        packed = np.empty((steps, (n * self.width + 31) // 32 + 1), dtype=np.uint32)
        states = np.empty((steps, 4), dtype=np.uint64)
        meta = np.empty((steps, 2), dtype=np.int64)
        if K.encode_many(words, self.params, *self._enc_tables(), rw, packed, states, meta):
            raise InputError("lossless table: a symbol of these words has no frequency (the "
                             "table was fitted to other data)")
        if n >= MEMCPY_FROM:  # numpy copies at memory speed (numba's byte loop: ~0.5 ns/byte)
            st = states.astype("<u4").tobytes()
            rw = rw.astype("<u2", copy=False)
            p8 = packed.astype("<u4", copy=False).view(np.uint8)
            return [b"".join((uvarint(n + 4 - start), st[16 * r:16 * r + 16],
                              rw[r, start:].tobytes(), p8[r, :(nbits + 7) // 8].tobytes()))
                    for r, (start, nbits) in enumerate(meta.tolist())]
        if not _LITTLE:  # (frame_many copies the native bytes)
            rw.byteswap(inplace=True)
            packed.byteswap(inplace=True)
        out = np.empty(steps * (10 + 16 + 2 * (n + 4)) + packed.nbytes, dtype=np.uint8)
        ends = np.empty(steps + 1, dtype=np.int64)
        ends[0] = 0
        L.frame_many(n, rw, packed, states, meta, out, ends[1:])
        buf = out[:ends[-1]].tobytes()
        return [buf[a:b] for a, b in zip(ends[:-1].tolist(), ends[1:].tolist())]

    def decode(self, body: bytes, n: int, cols=None) -> np.ndarray:
        """Chunk body -> ``n`` words (CorruptDataError unless it is exactly one step's)."""
        return self.decode_steps([body], n)[0]

    def decode_steps(self, bodies, n: int, cols=None) -> np.ndarray:
        """Chunk bodies -> (steps, n) words, in one kernel call (CorruptDataError, naming the
        step, unless each body is exactly one step's)."""
        dt = self.layout.word_dtype
        if self.mode == MODE_RAW:
            sizes = [len(body) for body in bodies]
            if sizes.count(n * dt.itemsize) != len(sizes):
                r = next(i for i, m in enumerate(sizes) if m != n * dt.itemsize)
                raise CorruptDataError(f"step {r}: lossless raw chunk: {sizes[r]} bytes for "
                                       f"{n} words")
            le = np.frombuffer(b"".join(bodies), dtype=dt.newbyteorder("<"))
            return le.astype(dt).reshape(len(bodies), n)
        offs = np.empty((len(bodies), 5), dtype=np.int64)
        starts = np.zeros(len(bodies) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in bodies], out=starts[1:])
        buf = np.frombuffer(b"".join(bodies), dtype=np.uint8)
        r = L.parse_many(buf, starts, n, self.width, offs)
        if r >= 0:
            if offs[r, 0] == L.E_VARINT:
                raise CorruptDataError(f"step {r}: lossless chunk length: a varint truncated, "
                                       "longer than 9 bytes or not in its shortest form")
            raise CorruptDataError(f"step {r}: lossless chunk: {offs[r, 1]} words and "
                                   f"{offs[r, 4]} bytes of mantissa bits do not fit {n} words")
        steps = len(bodies)
        out = np.empty((steps, n), dtype=dt)
        status = np.zeros(steps, dtype=np.int64)
        filled = n >= MEMCPY_FROM
        words = (n * self.width) // 32 + 2
        # filled: the parts of COPY_BATCH bytes of steps at a time (not of every step)
        batch = max(1, COPY_BATCH // (2 * n + 4 * words)) if filled else steps
        for lo in range(0, steps, batch):
            hi = min(steps, lo + batch)
            rw = np.zeros((hi - lo if filled else 1, n + 1), dtype=np.uint16)
            packed = np.zeros((hi - lo if filled else 1, words), dtype=np.uint32)
            if filled:  # numpy copies the parts at memory speed (numba's byte loop: ~0.5 ns/byte)
                p8 = packed.view(np.uint8)
                for r, (_, nw, o2, o3, tail) in enumerate(offs[lo:hi].tolist()):
                    rw[r, :nw] = buf[o2:o2 + 2 * nw].view("<u2")
                    p8[r, :tail] = buf[o3:o3 + tail]
            K.decode_many(buf, offs[lo:hi], *self.slot_tables, self.params, rw, packed, filled,
                          out[lo:hi], status[lo:hi])
            if status[lo:hi].any():
                break
        bad = np.flatnonzero(status)
        if bad.size:
            r = int(bad[0])
            what = {K.E_PAD: "mantissa bits have non-zero padding",
                    K.E_LEFT: "coded words or mantissa bytes are not exactly the ones read"}
            raise CorruptDataError(f"step {r}: lossless chunk: the "
                                   + (f"coded symbols {_STATUS[status[r]]}"
                                      if status[r] in (K.E_SHORT, K.E_STATE) else what[status[r]]))
        return out


def fit_fast(words: np.ndarray, layout, cols=None) -> FastTable:
    """The smallest version-2 table for a (steps, numel) array of words (see the module
    docstring); ``cols`` unused (order 0)."""
    words = np.ascontiguousarray(words, dtype=layout.word_dtype)
    steps = words.shape[0] if words.ndim > 1 else 1
    if words.size < MIN_CODED:  # a table costs more than coding can save
        return FastTable(layout, MODE_RAW)
    E, M, mag = layout.exp_bits, layout.man_bits, layout.bits - 1
    hist = np.zeros(1 << (1 + E + layout.max_k), dtype=np.int64)
    extra = np.zeros(3, dtype=np.int64)
    L.hist_or(words.reshape(steps, -1), mag - E - layout.max_k, hist, extra)
    zp, zn, low = int(extra[0]), int(extra[1]), int(extra[2])
    hist[0] -= zp
    hist[hist.size // 2] -= zn
    man = low & ((1 << M) - 1)
    t0 = M if man == 0 else (man & -man).bit_length() - 1
    counts = np.empty(hist.size + 2, dtype=np.int64)
    # for every k (top mantissa bits in the symbol): the order-0 code length, the mantissa
    # bits, the table's bytes and the chunks' framing; the smallest wins, if below raw
    k, t, present = L.choose_k(hist, zp, zn, words.size - zp - zn, t0, M, layout.max_k,
                               words.size * layout.bits / 8 + 3, steps, PER_CHUNK, counts)
    if k < 0:
        return FastTable(layout, MODE_RAW)
    prec = 12 if present <= 1 << 11 else 14
    counts = counts[:(1 << (1 + E + k)) + 2]
    return FastTable(layout, MODE_RANS, k, t, prec, normalize(counts, prec))
