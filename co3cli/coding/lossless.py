"""Lossless float coding: float32 / bfloat16 / float16 words back bit for bit (table
version 1: the neighbour-context coder, ``level="max"``; the default fast coder, version 3,
is :mod:`co3cli.coding.lossless_pairs`; version 2, :mod:`co3cli.coding.lossless_fast` over
this module's symbols, the default before it, still decodes).

A word is ``sign | exponent field (E bits) | mantissa (M bits)``: float32 (E=8, M=23),
bfloat16 (8, 7), float16 (5, 10). Data flow, per layer (all steps) and per step::

    words (steps, numel) --fit (by measurement)--> LosslessTable: mode, k, t, contexts, tables
    words of one step --split--> symbols + packed low mantissa bits
        symbols --rANS, one table per context--> payload;  packed bits stored as they are

**Symbols.**  ``+0`` and ``-0`` are the symbols ``Z`` and ``Z + 1`` (``Z = 2**(1 + E + k)``):
exact zeros (dead units) carry no mantissa. Any other word is the symbol
``sign << (E + k) | exponent field << k | top k mantissa bits`` (subnormals: exponent field 0;
Inf and NaN: the top field, their payload in the mantissa bits), so ``nsym = Z + 2``. The
mantissa bits below the top ``k`` of a non-zero word, less the ``t`` trailing bits that are 0
in every word of the layer (float32 values that came from bfloat16 have ``t >= 16``), are
stored raw: ``width = M - k - t`` bits each, LSB-first, padded with 0 bits to a whole byte.
The low mantissa bits of gradients are near uniform (measured: 0.98-1.00 bits per bit), so
coding them would cost time for nothing; the top bits are skewed by the distribution's
slope within a binade, which ``k`` lets the symbol's table capture.

**Contexts.**  ``contexts = 16``: entry ``(r, c)`` of the tensor's 2-D view (rows of ``cols``
entries) is coded with the table of ``4 * class(left) + class(up)``, where the class of a
symbol is 0 for a zero (or an absent neighbour), else 1, 2, 3 by its exponent field against
two thresholds ``t1 <= t2`` (the layer's 1/3 and 2/3 quantiles of non-zero exponents).
Dead input columns (zeros in every row) and rows of small or large gradients are what it
captures (on the mnist5k MLP: 3.59 -> 2.54 bits/entry for the sign and exponent).
``contexts = 1``: one order-0 table.

**Fit by measurement.**  For every candidate (``k`` in 0..2, or 0..3 for float16; contexts 1
or 16; precision 12) the encoder counts the (context, symbol) pairs of a sample of the layer
(at most ``SAMPLE`` entries, whole rows of its 2-D view), estimates the payload with rounded
frequencies scaled to the layer, adds the table's serialised size and the raw mantissa bits,
and keeps the smallest; the winner's counts are then taken over the whole layer and its
frequencies made optimal (``ans.quantize_freqs``). A layer for which the words themselves
are smaller is stored ``raw``; below ``MIN_CONTEXT_ENTRIES`` entries only ``k = 0`` with one
context is weighed. The choice depends on the data only. Precision 15 was measured too: it
saved at most 0.07 % on the mnist5k MLP and halved the decoder's speed with 16 contexts.

**Table** (``to_bytes``; the ``.co3`` layer block's table)::

    byte 0   version (1)      byte 1   layout (0 float32, 1 bfloat16, 2 float16)
    byte 2   mode (0 raw, 1 rans); mode rans only:
    byte 3   k                byte 4   t               byte 5   precision (10..15)
    byte 6   contexts (1|16)  byte 7   t1              byte 8   t2
    uvarint * contexts          present symbols m_c of each context (0: unused)
    uvarint * 2 * sum(m_c)      per present symbol: gap from the previous one (- 1), freq - 1

Each used context's frequencies sum to ``2**precision``; anything else is rejected.

**Chunk body** (one step): mode raw: the words, little-endian, ``numel * bytes`` exactly.
Mode rans: ``uvarint(len(payload)) | payload | packed bits``; the payload is the rANS final
state (2 words) and the renormalisation words (little-endian uint32) in reading order. The
decoder proves it consumed both parts exactly: every word read and the state back at ``L``,
then exactly ``ceil(nonzeros * width / 8)`` packed bytes with zero padding; otherwise one-line
CorruptDataError.

References: the byte-grouping baseline is ZipNN (M. Hershcovitch et al., "ZipNN: Lossless
Compression for AI Models", arXiv:2411.05239), which Huffman-codes the exponent byte and keeps
the mantissa bytes; rANS: J. Duda, "Asymmetric numeral systems", arXiv:1311.2540.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from co3cli.coding import lossless_kernels as K
from co3cli.coding.ans import quantize_freqs
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

VERSION = 1
MODE_RAW, MODE_RANS = 0, 1
PRECISIONS = (12,)  # 15 saved <= 0.07 % on the mnist5k MLP and halved decoding speed
PRECISION_RANGE = range(10, 16)  # a frequency (<= 2**15) fits the decoder's 16 bits
NCLS = 4
CONTEXTS = (1, NCLS * NCLS)


@dataclass(frozen=True)
class FloatLayout:
    """Bit layout of a float type coded losslessly."""

    code: int  # the table's layout byte
    dtype: str  # the dump's storage type: float32, bfloat16, float16
    exp_bits: int
    man_bits: int
    max_k: int

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def word_dtype(self):
        return _WORD[self.bits]


_WORD = {32: np.dtype(np.uint32), 16: np.dtype(np.uint16)}
LAYOUTS = {"float32": FloatLayout(0, "float32", 8, 23, 2),
           "bfloat16": FloatLayout(1, "bfloat16", 8, 7, 2),
           "float16": FloatLayout(2, "float16", 5, 10, 3)}
_BY_CODE = {lay.code: lay for lay in LAYOUTS.values()}
_STATUS = {K.E_SHORT: "runs out before its end", K.E_STATE: "ends in the wrong coder state",
           K.E_SYMBOL: "codes a symbol its table cannot hold", K.E_LEFT: "has bytes left over",
           K.E_PAD: "has non-zero padding bits"}


def _uv(data: bytes, pos: int):
    """One uvarint (LEB128, shortest form, at most 9 bytes) of ``data`` at ``pos`` and the
    position after (CorruptDataError otherwise)."""
    (n,), used = uvarints_from_bytes(data[pos:pos + 9], 1, "lossless chunk length")
    return int(n), pos + used


class LosslessTable:
    """One layer's lossless coding parameters (see the module docstring)."""

    def __init__(self, layout: FloatLayout, mode: int, k: int = 0, t: int = 0,
                 precision: int = 12, contexts: int = 1, t1: int = 0, t2: int = 0,
                 freqs: np.ndarray | None = None):
        self.layout, self.mode, self.k, self.t = layout, mode, k, t
        self.precision, self.contexts, self.t1, self.t2 = precision, contexts, t1, t2
        self.ek = layout.exp_bits + k
        self.zbase = 1 << (1 + self.ek)
        self.nsym = self.zbase + 2
        self.width = layout.man_bits - k - t
        if mode == MODE_RANS:
            self.freqs = np.ascontiguousarray(freqs, dtype=np.uint32)
            self.cum = np.zeros_like(self.freqs)
            np.cumsum(self.freqs[:, :-1], axis=1, out=self.cum[:, 1:])
            self.cls_lut = class_lut(self.nsym, self.zbase, k, layout.exp_bits, t1, t2)
            self._slots = None

    # -- serialisation ------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = bytes([VERSION, self.layout.code, self.mode])
        if self.mode == MODE_RAW:
            return head
        head += bytes([self.k, self.t, self.precision, self.contexts, self.t1, self.t2])
        present = [np.flatnonzero(row) for row in self.freqs]
        gaps = [np.diff(p, prepend=-1) - 1 for p in present]
        pairs = [np.stack([g, row[p].astype(np.int64) - 1], 1).ravel()
                 for g, p, row in zip(gaps, present, self.freqs)]
        return head + uvarints_to_bytes([p.size for p in present]) + \
            uvarints_to_bytes(np.concatenate(pairs) if pairs else [])

    @classmethod
    def from_bytes(cls, data: bytes, layout: FloatLayout | None = None) -> LosslessTable:
        """Parse a table (CorruptDataError on anything but what ``to_bytes`` writes)."""
        data = bytes(data)
        if len(data) < 3 or data[0] != VERSION:
            raise CorruptDataError(f"lossless table: version {data[:1].hex() or 'missing'}, "
                                   f"this co3cli reads version {VERSION}")
        lay = _BY_CODE.get(data[1])
        if lay is None or (layout is not None and lay != layout):
            raise CorruptDataError(f"lossless table: layout byte {data[1]} does not match the "
                                   "file's format")
        if data[2] == MODE_RAW:
            if len(data) != 3:
                raise CorruptDataError("lossless table: bytes after a raw table")
            return cls(lay, MODE_RAW)
        if data[2] != MODE_RANS or len(data) < 9:
            raise CorruptDataError(f"lossless table: unknown mode {data[2]} or truncated")
        k, t, prec, nctx, t1, t2 = data[3:9]
        if not (k <= lay.max_k and t <= lay.man_bits - k and prec in PRECISION_RANGE
                and nctx in CONTEXTS and t1 <= t2 < (1 << lay.exp_bits)):
            raise CorruptDataError(f"lossless table: parameters k={k} t={t} precision={prec} "
                                   f"contexts={nctx} t1={t1} t2={t2} out of range")
        nsym = (1 << (1 + lay.exp_bits + k)) + 2
        counts, used = uvarints_from_bytes(data[9:], nctx, "lossless table")
        if np.any(counts > np.uint64(nsym)):
            raise CorruptDataError("lossless table: more symbols than the alphabet holds")
        counts = counts.astype(np.int64)
        npairs = int(counts.sum())
        vals, used2 = uvarints_from_bytes(data[9 + used:], 2 * npairs, "lossless table")
        if 9 + used + used2 != len(data):
            raise CorruptDataError(f"lossless table: {len(data) - 9 - used - used2} trailing bytes")
        if vals.size and int(vals.max()) >= 1 << 31:  # no gap or frequency comes near
            raise CorruptDataError("lossless table: a gap or frequency out of range")
        vals = vals.astype(np.int64).reshape(-1, 2)
        freqs = np.zeros((nctx, nsym), dtype=np.int64)
        start = 0
        for c, m in enumerate(counts):
            g, f = vals[start:start + m, 0], vals[start:start + m, 1] + 1
            start += m
            if m == 0:
                continue
            syms = np.cumsum(g + 1) - 1
            if syms[-1] >= nsym or f.max() > (1 << prec) or int(f.sum()) != 1 << prec:
                raise CorruptDataError(f"lossless table: context {c}'s frequencies do not sum to "
                                       f"2**{prec} over the alphabet")
            freqs[c, syms] = f
        return cls(lay, MODE_RANS, k, t, prec, nctx, t1, t2, freqs)

    def config(self) -> dict:
        out = {"mode": "raw" if self.mode == MODE_RAW else "rans"}
        if self.mode == MODE_RANS:
            out.update(k=self.k, t=self.t, precision=self.precision, contexts=self.contexts,
                       t1=self.t1, t2=self.t2)
        return out

    # -- coding -------------------------------------------------------------------------
    def _split(self, words: np.ndarray):
        sym = np.empty(words.size, dtype=np.uint16)
        packed = np.empty((words.size * self.width + 7) // 8, dtype=np.uint8)
        used = K.split(words, self.layout.bits - 1, self.ek, self.k, self.t, self.width,
                       self.zbase, sym, packed)
        return sym, packed[:used]

    def encode(self, words, cols=None) -> bytes:
        """One step's words (1-D, the layout's word dtype) -> chunk body."""
        words = np.ascontiguousarray(words, dtype=self.layout.word_dtype).ravel()
        if self.mode == MODE_RAW:
            return words.astype(words.dtype.newbyteorder("<"), copy=False).tobytes()
        sym, packed = self._split(words)
        cols = max(1, min(cols or words.size, words.size))
        out = np.empty(words.size + 2, dtype=np.uint32)
        x, nw = K.rans_encode(sym, cols, self.cls_lut, NCLS, self.contexts, self.freqs,
                              self.cum, self.precision, out)
        if nw < 0:
            raise InputError("lossless table: a symbol of these words has no frequency in its "
                             "context (the table was fitted to other data)")
        payload = np.concatenate([np.array([int(x) & 0xFFFFFFFF, int(x) >> 32], np.uint32),
                                  out[:nw][::-1]]).astype("<u4").tobytes()
        return uvarints_to_bytes([len(payload)]) + payload + packed.tobytes()

    def encode_steps(self, words, cols=None) -> list[bytes]:
        """Every step (row) of ``words`` -> its chunk body."""
        return [self.encode(row, cols) for row in words]

    def decode_steps(self, bodies, n: int, cols=None) -> np.ndarray:
        """Chunk bodies -> (steps, n) words (CorruptDataError naming the step)."""
        out = np.empty((len(bodies), n), dtype=self.layout.word_dtype)
        for t, body in enumerate(bodies):
            try:
                out[t] = self.decode(body, n, cols)
            except CorruptDataError as e:
                raise CorruptDataError(f"step {t}: {e}") from None
        return out

    def code_bits(self, counts: np.ndarray) -> float:
        """Exact bits of the payload that codes (contexts, nsym) ``counts`` with this table."""
        used = counts > 0
        return float(-(counts[used] * np.log2(self.freqs[used] / (1 << self.precision))).sum())

    @property
    def slots(self) -> np.ndarray:
        """Per context and slot of ``2**precision``: ``symbol | freq << 16 | offset << 32``
        (the offset of the slot in its symbol's range), 0 where a context is unused."""
        if self._slots is None:
            M = 1 << self.precision
            slots = np.zeros((self.contexts, M), dtype=np.uint64)
            for c in range(self.contexts):
                f = self.freqs[c].astype(np.uint64)
                if f.any():
                    s = np.repeat(np.arange(self.nsym, dtype=np.uint64), self.freqs[c].astype(np.int64))
                    off = np.arange(M, dtype=np.uint64) - self.cum[c].astype(np.uint64)[s]
                    slots[c] = s | f[s] << np.uint64(16) | off << np.uint64(32)
            self._slots = slots
        return self._slots

    def decode(self, body: bytes, n: int, cols=None) -> np.ndarray:
        """Chunk body -> ``n`` words (CorruptDataError unless it is exactly one step's)."""
        dt = self.layout.word_dtype
        if self.mode == MODE_RAW:
            if len(body) != n * dt.itemsize:
                raise CorruptDataError(f"lossless raw chunk: {len(body)} bytes for {n} words")
            return np.frombuffer(body, dtype=dt.newbyteorder("<")).astype(dt)
        plen, pos = _uv(body, 0)
        if plen % 4 or pos + plen > len(body):
            raise CorruptDataError(f"lossless chunk: payload of {plen} bytes does not fit "
                                   f"its {len(body)}-byte chunk")
        words = np.frombuffer(body, dtype="<u4", count=plen // 4, offset=pos).astype(np.uint32)
        sym = np.empty(n, dtype=np.uint16)
        cols = max(1, min(cols or n, n)) if n else 1
        status = K.rans_decode(words, n, cols, self.cls_lut, NCLS, self.contexts, self.slots,
                               self.precision, sym)
        if status != K.OK:
            raise CorruptDataError(f"lossless chunk: the coded symbols {_STATUS[status]}")
        packed = np.frombuffer(body, dtype=np.uint8, offset=pos + plen)
        out = np.empty(n, dtype=dt)
        status = K.join(sym, packed, self.layout.bits - 1, self.ek, self.k, self.t,
                        self.width, self.zbase, out)
        if status != K.OK:
            raise CorruptDataError(f"lossless chunk: the mantissa bits {_STATUS[status]}")
        return out


def class_lut(nsym: int, zbase: int, k: int, exp_bits: int, t1: int, t2: int) -> np.ndarray:
    """Context class of every symbol (0: zero; 1, 2, 3: exponent field below ``t1``, below
    or at ``t2``, above)."""
    s = np.arange(nsym)
    e = (s >> k) & ((1 << exp_bits) - 1)
    cls = np.where(e < t1, 1, np.where(e <= t2, 2, 3))
    return np.where(s >= zbase, 0, cls).astype(np.uint8)


def symbols(words: np.ndarray, layout: FloatLayout, k: int) -> np.ndarray:
    """Symbols (uint16, flat) of ``words`` at ``k`` top mantissa bits."""
    flat = np.ascontiguousarray(words).ravel()
    sym = np.empty(flat.size, dtype=np.uint16)
    ek = layout.exp_bits + k
    K.split(flat, layout.bits - 1, ek, k, 0, 0, 1 << (1 + ek), sym, np.empty(0, np.uint8))
    return sym


def _varint_len(v: np.ndarray) -> np.ndarray:
    return 1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21)


def _estimate(counts: np.ndarray, precision: int) -> tuple[float, float]:
    """Bytes of (payload, table) for ``counts`` (contexts, nsym) at ``precision``, with the
    frequencies rounded (the fit's ranking; the winner's are then made optimal)."""
    M = 1 << precision
    rows, syms = np.nonzero(counts)
    c = counts[rows, syms]
    present = np.bincount(rows, minlength=counts.shape[0])
    if present.max(initial=0) > M:
        return np.inf, np.inf
    total = np.bincount(rows, weights=c, minlength=counts.shape[0])
    f = np.maximum(1, np.rint(c * (M / total[rows])))
    q = f / np.bincount(rows, weights=f, minlength=counts.shape[0])[rows]
    # per present symbol: its frequency's varint and (mostly) a 1-byte gap
    table = _varint_len(f.astype(np.int64) - 1).sum() + c.size + _varint_len(present).sum() + 9
    return float(-(c * np.log2(q)).sum()) / 8, float(table)


def _optimal(counts: np.ndarray, precision: int) -> np.ndarray:
    freqs = np.zeros(counts.shape, dtype=np.uint32)
    for c, row in enumerate(counts):
        if row.any():
            freqs[c] = quantize_freqs(row, precision)
    return freqs


def _stats(words: np.ndarray, layout: FloatLayout):
    """Non-zero words, always-zero trailing mantissa bits ``t0`` and the class thresholds."""
    M_bits = layout.man_bits
    ehist = np.zeros(1 << layout.exp_bits, dtype=np.int64)
    nnz, low = K.word_stats(words, layout.bits - 1, M_bits, ehist)
    t0 = _trailing_zeros(int(low), M_bits)
    t1 = t2 = 0
    if nnz:
        cdf = np.cumsum(ehist) / nnz
        t1, t2 = int(np.searchsorted(cdf, 1 / 3)), int(np.searchsorted(cdf, 2 / 3))
    return nnz, t0, t1, t2


def _joint(words: np.ndarray, layout: FloatLayout, k: int, t1: int, t2: int, cols: int):
    """(context, symbol) counts (NCLS**2, nsym) at ``k``."""
    nsym = (1 << (1 + layout.exp_bits + k)) + 2
    lut = class_lut(nsym, nsym - 2, k, layout.exp_bits, t1, t2)
    joint = np.zeros((NCLS * NCLS, nsym), dtype=np.int64)
    low = K.joint_counts(words, layout.bits - 1, layout.exp_bits + k, nsym - 2, lut, NCLS, cols,
                         joint, np.empty(words.shape[1], dtype=np.uint16))
    return joint, int(low)


MIN_CONTEXT_ENTRIES = 4096  # below: k = 0 and one context only (more tables cost more than
# they can save: measured on the bundled dumps' biases and small heads)
PER_CHUNK = 10  # bytes of a chunk's rANS final state and length varint
SAMPLE = 1 << 18  # entries the fit ranks its candidates on (whole rows of the 2-D view)


def _sample(words: np.ndarray, cols: int) -> np.ndarray:
    steps, numel = words.shape
    if words.size <= SAMPLE:
        return words
    stride = max(1, steps * cols // SAMPLE) if steps > 1 else 1
    sub = words[::stride]
    m = min(numel, max(cols, SAMPLE // sub.shape[0] // cols * cols))
    return np.ascontiguousarray(sub[:, :m])


def _ranked(words, layout, cols, nnz, t0, t1, t2):
    """(estimated bytes, params) of every candidate, from ``words`` (a sample of the layer
    with ``nnz`` non-zeros): payload and table bytes of the sample, raw bytes of the layer."""
    small = words.size < MIN_CONTEXT_ENTRIES
    for k in range(1 if small else layout.max_k + 1):
        t = min(t0, layout.man_bits - k)
        joint = _joint(words, layout, k, t1, t2, cols)[0]
        for nctx in CONTEXTS[:1] if small else CONTEXTS:
            counts = joint.sum(axis=0, keepdims=True) if nctx == 1 else joint
            for prec in PRECISIONS:
                payload, table = _estimate(counts, prec)
                yield payload, table, nnz * (layout.man_bits - k - t) / 8, (k, t, prec, nctx, t1, t2)


def candidates(words: np.ndarray, layout: FloatLayout, cols: int | None = None):
    """Every rANS table the fit weighs for a (steps, numel) array of words, with optimal
    frequencies and its exact size in bytes (payload, raw mantissa bits, table, chunk
    framing): ``(size, table)``."""
    words = np.ascontiguousarray(words, dtype=layout.word_dtype)
    cols = max(1, min(cols or words.shape[1], words.shape[1]))
    nnz, t0, t1, t2 = _stats(words, layout)
    for _, _, raw, params in _ranked(words, layout, cols, nnz, t0, t1, t2):
        k, t, prec, nctx = params[:4]
        joint = _joint(words, layout, k, t1, t2, cols)[0]
        counts = joint.sum(axis=0, keepdims=True) if nctx == 1 else joint
        if np.any((counts > 0).sum(axis=1) > 1 << prec):
            continue
        table = LosslessTable(layout, MODE_RANS, *params, freqs=_optimal(counts, prec))
        yield (table.code_bits(counts) / 8 + raw + len(table.to_bytes())
               + words.shape[0] * PER_CHUNK), table


def _trailing_zeros(low: int, bits: int) -> int:
    """Trailing zero bits of ``low`` (``bits`` when it is 0)."""
    return bits if low == 0 else (low & -low).bit_length() - 1


def fit_table(words: np.ndarray, layout: FloatLayout, cols: int | None = None) -> LosslessTable:
    """The smallest table for a (steps, numel) array of words, by measurement (see the module
    docstring): each candidate's size, estimated on a sample of at most ``SAMPLE`` entries
    (whole rows of the 2-D view; its non-zeros, trailing zero bits and class thresholds too)
    scaled to the layer, against storing the words raw; then one pass over the layer counts
    the winner's (context, symbol) pairs and its always-zero trailing bits, and its
    frequencies are made optimal (``ans.quantize_freqs``)."""
    words = np.ascontiguousarray(words, dtype=layout.word_dtype)
    steps, numel = words.shape
    cols = max(1, min(cols or numel, numel))
    sub = _sample(words, cols)
    nnz, t0, t1, t2 = _stats(sub, layout)
    scale = words.size / sub.size
    best = (words.size * layout.bits / 8 + 3, None)
    for payload, table, raw, params in _ranked(sub, layout, cols, nnz, t0, t1, t2):
        size = (payload + raw) * scale + table + steps * PER_CHUNK
        if size < best[0]:
            best = (size, params)
    if best[1] is None:
        return LosslessTable(layout, MODE_RAW)
    k, _, prec, nctx = best[1][:4]
    joint, low = _joint(words, layout, k, t1, t2, cols)
    t = min(_trailing_zeros(low & ((1 << layout.man_bits) - 1), layout.man_bits),
            layout.man_bits - k)
    counts = joint.sum(axis=0, keepdims=True) if nctx == 1 else joint
    return LosslessTable(layout, MODE_RANS, k, t, prec, nctx, t1, t2,
                         freqs=_optimal(counts, prec))


CODER_ID = "lossless-rans"
LEVELS = {"fast": 3, "max": VERSION}  # level -> the table version it writes
VERSIONS = (1, 2, 3)  # every version a reader decodes (2: co3cli.coding.lossless_fast, the
# default of co3cli 0.1's later files; 3: co3cli.coding.lossless_pairs)


class LosslessCoder:
    """The coder of a lossless ``.co3`` file (header ``coder``: ``{"id": "lossless-rans",
    "version": v}``): parses its layers' tables, which must be of version ``v`` (1: this
    module's context coder, ``level="max"``; 2: :mod:`co3cli.coding.lossless_fast`, read
    only; 3: :mod:`co3cli.coding.lossless_pairs`, the default ``level="fast"``)."""

    id = CODER_ID

    def __init__(self, dtype: str, version: int = LEVELS["fast"]):
        self.layout = LAYOUTS[dtype]
        self.version = version

    def config(self) -> dict:
        return {"id": CODER_ID, "version": self.version}

    def fit(self, words: np.ndarray, cols: int | None = None):
        """The table this coder writes for a layer's (steps, numel) words."""
        if self.version == VERSION:
            return fit_table(words, self.layout, cols)
        if self.version == 2:
            from co3cli.coding.lossless_fast import fit_fast

            return fit_fast(words, self.layout, cols)
        from co3cli.coding.lossless_pairs import fit_pairs

        return fit_pairs(words, self.layout, cols)

    def fit_encode(self, words: np.ndarray, cols: int | None = None):
        """(table, chunk bodies) of a layer's (steps, numel) words: :meth:`fit` then the
        table's ``encode_steps`` (version 3 splits every word once for both)."""
        if self.version == 3:
            from co3cli.coding.lossless_pairs import fit_encode

            return fit_encode(words, self.layout, cols)
        table = self.fit(words, cols)
        return table, table.encode_steps(words, cols)

    def table_from_bytes(self, data: bytes, nsym=None):
        try:
            if data[:1] != bytes([self.version]):
                got = bytes(data[:1]).hex() or "missing"
                raise CorruptDataError(f"lossless table: version {got} in a file of coder "
                                       f"version {self.version}")
            if self.version == VERSION:
                return LosslessTable.from_bytes(data, self.layout)
            if self.version == 2:
                from co3cli.coding.lossless_fast import FastTable

                return FastTable.from_bytes(data, self.layout)
            from co3cli.coding.lossless_pairs import PairTable

            return PairTable.from_bytes(data, self.layout)
        except CorruptDataError as e:  # the container names the layer
            raise InputError(str(e)) from None


def lossless_setup(header: dict):
    """Format and coder of a lossless ``.co3`` header (CorruptDataError when unusable)."""
    from co3cli.formats import get_lossless

    fmt = get_lossless(header["format"].get("id"))
    coder = header["coder"]
    if fmt is None or fmt.config() != header["format"] or not isinstance(coder, dict) or \
            coder.get("id") != CODER_ID or type(coder.get("version")) is not int \
            or coder["version"] not in VERSIONS or \
            set(coder) != {"id", "version"}:
        raise CorruptDataError(f"header's lossless format {header['format']} / coder "
                               f"{header['coder']} is not one this co3cli reads")
    return fmt, LosslessCoder(fmt.dtype, coder["version"])
