"""The pair coder (table version 3, the default of ``co3 compress --format *-lossless``):
bit-exact float32 / bfloat16 / float16 words, two words per rANS symbol.

Data flow, per layer (all steps) and per step::

    words (steps, numel) --range pass--> exponents present, t, +-0 words
        --one pass: every pair's index at the fine split, exact counts--> every coarser
        split weighed on them --> PairTable (the smallest) + the pairs' indices
    the pairs' indices --encode_many3--> 8-lane rANS over pairs, raw bits packed from the words
    chunk body --decode_many3 (the pairs, then one vectorised join)--> words

**Split.**  A word ``w`` of ``bits`` bits loses its ``t`` low bits (0 in every word of the
layer: float32 values that came from bfloat16 have ``t >= 16``); with ``rot`` its sign moves
to bit 0; the top ``S`` bits are the **symbol**, the low ``R = bits - t - S`` bits are
**raw** (stored as they are: the low mantissa bits of gradients are near uniform). The fit
weighs ``S = E + k + s``: the exponent field, ``k`` (0 or 1) top mantissa bits and the sign
(``s = 1``, no rotation) or not (``s = 0``, the sign raw). With ``compact`` the words +0 and
-0 are the symbols ``Z = 2**S`` and ``Z + 1`` and carry no raw bits (dead units); without
it they split like any word, so every word has ``R`` raw bits and the join is vectorised.

**Pairs.**  Words ``2q`` and ``2q + 1`` of a step are one rANS symbol (an odd step's last
word is paired with itself), with one order-0 table of the pairs per layer: a lookup, a
multiply-add and a 32-bit store decode two words, and neighbouring gradients are not
independent (on the MLP dumps the pairs' entropy is 5-18 % below twice the symbols'; dead
inputs, runs of small and of large values, sign runs on convolutions). ``rANS``: eight
32-bit lanes in ``[2**15, 2**31)``, 16-bit renormalisation words in one shared stream
(read in the order the backwards encoder wrote them), precision ``p`` (the fit's choice of
12 or 13 by size; 14 saved 0.05-0.2 % more and decoded 15 % slower, its table no longer in
L1), the encoder division-free (exact reciprocals).

**Fit** (by measurement, on the counts; :mod:`co3cli.coding.lossless_pair_fit`, one kernel
call): a vectorised pass finds the range of exponents (and ``t``, the +-0 words); one pass
gives every pair its index at the *fine* split -- sign, exponent, a top mantissa bit (from
``K_FROM`` entries), +-0 apart -- and counts them exactly; every coarser split (no top bit,
the sign raw, +-0 not apart) has its pair counts summed from those, and the split and
precision of the smallest estimated size (the pairs' code length after the rounding's floor
of 1, the table, the raw bits, the framing) win, unless the raw words are smaller (mode raw;
a layer under ``MIN_CODED`` entries is raw without a fit: measured on the benchmark dumps, a
few KiB more and a fixed cost per layer less). ``compact`` is chosen when the +-0 words'
raw bits would be over ``COMPACT_FROM`` of the layer's. The winner's counts are rounded
(``normalize3``: integer arithmetic, the bytes depend on it), and the pairs' indices of the
counting pass are what the encoder codes: each word is split once.

**Table** (``to_bytes``; the ``.co3`` layer block's table)::

    byte 0  version (3)    byte 1  layout (0 float32, 1 bfloat16, 2 float16)
    byte 2  mode (0 raw, 1 pairs); mode pairs only:
    byte 3  flags (bit 0 rot, bit 1 compact)   byte 4  t   byte 5  R   byte 6  precision
    uvarint m, then m x uvarint: the symbols present, gap from the previous one - 1
    uvarint n, then n x (uvarint, uvarint): the pairs present (index a * m + b), gap from
            the previous one - 1, and frequency - 1

The frequencies must sum to ``2**precision``; anything else is rejected.

**Chunk body** (one step): mode raw: the words, little-endian. Mode pairs: ``uvarint(words)
| L x uint32 lane states | words x uint16 | raw bits`` (little-endian; ``L = min(8,
pairs)``, the lanes the step uses); the raw bits of the
``N`` words that have them (every word, or the non-zero ones) are packed transposed
(``lossless_pair_kernels``): ``(N // 32) * R`` uint32 words, then the last ``N % 32`` values
in ``ceil(R * (N % 32) / 8)`` bytes. The decoder proves it consumed exactly its input: every
renormalisation word read, every lane back at ``2**15``, an odd step's pad symbol equal to
its last, and exactly the raw bytes its symbols call for, with zero padding; otherwise a
one-line CorruptDataError.

References: rANS: J. Duda, "Asymmetric numeral systems", arXiv:1311.2540; interleaving and
the reciprocal encoder: F. Giesen, "Interleaved entropy coders", arXiv:1402.3392; the
transposed bit packing: D. Lemire and L. Boytsov, "Decoding billions of integers per
second through vectorization", arXiv:1209.2137. The peer it is measured against is ZipNN
(M. Hershcovitch et al., arXiv:2411.05239).
"""

from __future__ import annotations

import numpy as np

from co3cli.coding import lossless_pair_fit as F
from co3cli.coding import lossless_pair_kernels as K
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

VERSION = 3
MODE_RAW, MODE_PAIRS = 0, 1
PRECISIONS = np.array([12, 13], dtype=np.int64)  # the fit's choice; a reader takes 10..15
PRECISION_RANGE = range(10, 16)
MAX_S = 12  # symbol bits a table may have (symbols < 2**12 + 2 fit 16 bits)
MAX_SYMBOLS = F.FSTRIDE  # symbols a table may list (128: the fit's fine split has at most as
# many; a reader's pair arrays: MAX_SYMBOLS**2 entries at most)
MIN_CODED = 4096  # entries below which a layer is stored raw without a fit
KMAX = 1  # top mantissa bits a symbol may take
K_FROM = 1 << 16  # entries from which a layer weighs symbols with them (below, the table's
# bytes outweigh what they save: on the benchmark dumps they won only on layers of 10**5+)
COMPACT_FROM = 1e-3  # share of the raw bits the +-0 words must have for compact mode
JOIN_MAX = 1 << 18  # chunk bytes up to which a layer's bodies are joined for one decoder
# call; above, each is decoded where it lies (the copy costs more than the calls)
PER_CHUNK = 36  # bytes of a chunk's lane states and length varint (the fit's estimate)
_STATUS = {K.E_SHORT: "runs out before its end", K.E_STATE: "ends in the wrong coder state",
           K.E_LEFT: "has bytes left over", K.E_PAD: "has non-zero padding bits",
           K.E_SYMBOL: "pads its odd last word with another symbol",
           K.E_SIZE: "has parts that do not fit its length",
           K.E_VARINT: "has a length varint truncated, over 9 bytes or not in shortest form"}


class PairTable:
    """One layer's version-3 coding parameters (see the module docstring)."""

    contexts = 1

    def __init__(self, layout, mode: int, rot: int = 0, compact: int = 0, t: int = 0,
                 R: int = 0, precision: int = 12, syms=None, freqs=None):
        self.layout, self.mode = layout, mode
        self.rot, self.compact, self.t, self.R, self.precision = rot, compact, t, R, precision
        self._dec = self._enc = None
        if mode == MODE_PAIRS:
            self.S = layout.bits - t - R
            self.Z = 1 << self.S
            self.syms = np.ascontiguousarray(syms, dtype=np.int64)
            self.m = self.syms.size
            self.freqs = np.ascontiguousarray(freqs, dtype=np.int64)  # dense, m * m
            self.params = np.array([layout.bits, t, R, rot, compact, precision, self.S, self.Z,
                                    self.m, 0, 0, 0], dtype=np.int64)

    # -- serialisation ------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = bytes([VERSION, self.layout.code, self.mode])
        if self.mode == MODE_RAW:
            return head
        present = np.flatnonzero(self.freqs)
        pairs = np.stack([np.diff(present, prepend=-1) - 1, self.freqs[present] - 1], 1).ravel()
        return head + bytes([self.rot | self.compact << 1, self.t, self.R, self.precision]) + \
            uvarints_to_bytes([self.m]) + uvarints_to_bytes(np.diff(self.syms, prepend=-1) - 1) + \
            uvarints_to_bytes([present.size]) + uvarints_to_bytes(pairs)

    @classmethod
    def from_bytes(cls, data: bytes, layout) -> PairTable:
        """Parse a version-3 table of ``layout`` (CorruptDataError on anything but what
        ``to_bytes`` writes)."""
        data = bytes(data)
        if len(data) < 3 or data[0] != VERSION or data[1] != layout.code:
            raise CorruptDataError("lossless table: not a version-3 table of the file's format")
        if data[2] == MODE_RAW:
            if len(data) != 3:
                raise CorruptDataError("lossless table: bytes after a raw table")
            return cls(layout, MODE_RAW)
        if data[2] != MODE_PAIRS or len(data) < 11:
            raise CorruptDataError(f"lossless table: unknown mode {data[2]} or truncated")
        flags, t, R, prec = data[3:7]
        S = layout.bits - t - R
        if not (flags < 4 and t <= layout.man_bits and 1 <= S <= MAX_S and R >= flags & 1
                and prec in PRECISION_RANGE):
            raise CorruptDataError(f"lossless table: parameters flags={flags} t={t} R={R} "
                                   f"precision={prec} out of range")
        rot, compact = flags & 1, flags >> 1
        nsym = (1 << S) + 2 * compact
        pos = 7
        (m,), used = uvarints_from_bytes(data[pos:pos + 9], 1, "lossless table")
        pos += used
        if not 1 <= m <= min(nsym, MAX_SYMBOLS):
            raise CorruptDataError(f"lossless table: {m} symbols for an alphabet of {nsym} "
                                   f"(at most {MAX_SYMBOLS})")
        m = int(m)
        gaps, used = uvarints_from_bytes(data[pos:pos + 9 * m], m, "lossless table")
        pos += used
        if int(gaps.max()) >= nsym or int(gaps.sum()) + m > nsym:
            raise CorruptDataError("lossless table: a symbol out of range")
        syms = np.cumsum(gaps.astype(np.int64) + 1) - 1
        (npairs,), used = uvarints_from_bytes(data[pos:pos + 9], 1, "lossless table")
        pos += used
        if not 1 <= npairs <= min(m * m, 1 << prec):
            raise CorruptDataError(f"lossless table: {npairs} pairs for {m} symbols at "
                                   f"precision {prec}")
        vals, used = uvarints_from_bytes(data[pos:], 2 * int(npairs), "lossless table")
        if pos + used != len(data):
            raise CorruptDataError(f"lossless table: {len(data) - pos - used} trailing bytes")
        if int(vals.max()) >= 1 << 31:
            raise CorruptDataError("lossless table: a gap or frequency out of range")
        vals = vals.astype(np.int64).reshape(-1, 2)
        idx = np.cumsum(vals[:, 0] + 1) - 1
        f = vals[:, 1] + 1
        if idx[-1] >= m * m or int(f.sum()) != 1 << prec:
            raise CorruptDataError(f"lossless table: pair frequencies do not sum to 2**{prec} "
                                   "over the pairs of its symbols")
        freqs = np.zeros(m * m, dtype=np.int64)
        freqs[idx] = f
        return cls(layout, MODE_PAIRS, rot, compact, t, R, prec, syms, freqs)

    @property
    def k(self) -> int:
        """Top mantissa bits in the symbol (``co3 report``'s reference split)."""
        return self.S - self.layout.exp_bits - (1 - self.rot)

    @property
    def width(self) -> int:
        """Mantissa bits below the symbol's, less the ``t`` dropped ones."""
        return self.layout.man_bits - self.k - self.t

    def config(self) -> dict:
        out = {"mode": "raw" if self.mode == MODE_RAW else "pairs", "version": VERSION}
        if self.mode == MODE_PAIRS:
            out.update(rot=self.rot, compact=self.compact, t=self.t, R=self.R,
                       precision=self.precision, contexts=1)
        return out

    # -- coding -------------------------------------------------------------------------
    def _enc_tables(self):
        if self._enc is None:
            self._enc = np.empty(2 * self.m * self.m, dtype=np.uint64)
            K.enc_consts3(self.freqs, self.precision, self._enc)
        return self._enc

    @property
    def slot_table(self) -> np.ndarray:
        """Per slot of ``2**precision``: ``symbol a | b << 16 | offset << 32 | f << 48``."""
        if self._dec is None:
            self._dec = np.empty(1 << self.precision, dtype=np.uint64)
            K.dec_tables3(self.freqs, self.syms, self.m, self._dec)
        return self._dec

    def split(self, words):
        """(pair indices, identity map) of (steps, n) ``words`` with this table's symbols
        (InputError unless this table can code them)."""
        steps, n = words.shape
        lut = np.full(self.Z + 2, -1, dtype=np.int64)
        lut[self.syms] = np.arange(self.m)
        pids = np.empty((steps, (n + 1) // 2), dtype=np.uint16)
        counts = np.zeros(self.m * self.m, np.int64)
        bad = F.check_split(words, self.params, lut)
        if not bad:
            F.table_pairs(words, self.params, lut, pids, counts)
        if bad or np.any(counts[self.freqs == 0]):
            raise InputError("lossless table: these words have symbols, pairs or low bits the "
                             "table does not hold (it was fitted to other data)")
        return pids, np.arange(self.m * self.m, dtype=np.uint16)

    def encode(self, words, cols=None) -> bytes:
        """One step's words (1-D, the layout's word dtype) -> chunk body (``cols`` unused)."""
        words = np.ascontiguousarray(words, dtype=self.layout.word_dtype).ravel()
        return self.encode_steps(words[None, :])[0]

    def encode_steps(self, words, cols=None, split=None) -> list[bytes]:
        """Every step (row) of ``words`` (steps, n) -> its chunk body, in one kernel call
        (``split``: the fit's pair indices and map, :meth:`split`'s otherwise)."""
        words = np.ascontiguousarray(words, dtype=self.layout.word_dtype)
        if self.mode == MODE_RAW:
            le = words.astype(words.dtype.newbyteorder("<"), copy=False)
            return [row.tobytes() for row in le]
        steps, n = words.shape
        pids, cmap = self.split(words) if split is None else split
        npairs = (n + 1) // 2
        body = 5 + 3 + 4 * K.NL + 2 * npairs + K.raw_bytes(n, self.R) + 8
        out = np.empty((steps * body + 11) // 4 * 4, dtype=np.uint8)  # (4-byte aligned)
        starts = np.empty(steps, dtype=np.int64)
        ends = np.empty(steps, dtype=np.int64)
        K.encode_many3(words, pids, cmap, self.params, self._enc_tables(), out, starts, ends)
        return [out[a:b].tobytes() for a, b in zip(starts.tolist(), ends.tolist())]

    def decode(self, body: bytes, n: int, cols=None) -> np.ndarray:
        """Chunk body -> ``n`` words (CorruptDataError unless it is exactly one step's)."""
        return self.decode_steps([body], n)[0]

    def decode_steps(self, bodies, n: int, cols=None) -> np.ndarray:
        """Chunk bodies -> (steps, n) words, in one kernel call (CorruptDataError, naming the
        step, unless each body is exactly one step's)."""
        dt = self.layout.word_dtype
        steps = len(bodies)
        if self.mode == MODE_RAW:
            sizes = [len(body) for body in bodies]
            if sizes.count(n * dt.itemsize) != steps:
                r = next(i for i, m in enumerate(sizes) if m != n * dt.itemsize)
                raise CorruptDataError(f"step {r}: lossless raw chunk: {sizes[r]} bytes for "
                                       f"{n} words")
            le = np.frombuffer(bytearray().join(bodies), dtype=dt.newbyteorder("<"))
            return (le.astype(dt) if K.BIG else le).reshape(steps, n)  # (one copy, writable)
        out = np.empty((steps, n), dtype=dt)
        lens = np.array([len(b) for b in bodies], dtype=np.int64)
        if lens.sum() <= JOIN_MAX:  # one call over the bodies joined
            r, status = K.decode_many3(np.frombuffer(b"".join(bodies), dtype=np.uint8), lens,
                                       self.params, self.slot_table, out)
        else:  # one call per body, read where it lies (no copy)
            for i, body in enumerate(bodies):
                r, status = K.decode_many3(np.frombuffer(body, dtype=np.uint8), lens[i:i + 1],
                                           self.params, self.slot_table, out[i:i + 1])
                if r >= 0:
                    r = i
                    break
        if r >= 0:
            raise CorruptDataError(f"step {r}: lossless chunk {_STATUS[status]}")
        return out


def _fit(words, layout):
    """(table, the fit's (pair indices, map) or None) of a (steps, n) array of words (see
    the module docstring)."""
    steps, n = words.shape
    raw = PairTable(layout, MODE_RAW)
    if words.size < MIN_CODED:
        return raw, None
    E, M, bits = layout.exp_bits, layout.man_bits, layout.bits
    prm, syms, freqs, cmap, pids, size = F.fit_layer(
        words, E, M, KMAX if words.size >= K_FROM else 0, PRECISIONS, COMPACT_FROM,
        8 + steps * PER_CHUNK)
    if prm[K.P_M] == 0 or size >= words.size * bits / 8 + 3:
        return raw, None
    table = PairTable(layout, MODE_PAIRS, int(prm[K.P_ROT]), int(prm[K.P_COMPACT]), int(prm[K.P_T]),
                      int(prm[K.P_R]), int(prm[K.P_PREC]), syms, freqs)
    return table, (pids, cmap)


def fit_encode(words: np.ndarray, layout, cols=None):
    """(table, chunk bodies) of a (steps, numel) array of words: :func:`fit_pairs` and
    ``encode_steps``, with every word split once."""
    words = np.ascontiguousarray(words, dtype=layout.word_dtype)
    table, split = _fit(words, layout)
    return table, table.encode_steps(words, split=split)


def fit_pairs(words: np.ndarray, layout, cols=None) -> PairTable:
    """The smallest version-3 table for a (steps, numel) array of words (see the module
    docstring); ``cols`` unused."""
    words = np.ascontiguousarray(words, dtype=layout.word_dtype)
    return _fit(words if words.ndim > 1 else words[None, :], layout)[0]
