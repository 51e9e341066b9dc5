"""Range ANS (rANS, Duda 2013): integer frequencies in, 32-bit words out.

Data flow::

    weights --quantize_freqs--> freqs (uint32, sum 2**precision) --AnsTable--> encode/decode

**Coder.**  One 64-bit state ``x`` kept in ``[L, 2**63)`` with ``L = 2**31``, renormalised
32 bits at a time, frequencies summing to ``M = 2**precision`` (precision 8..24).  Coding
symbol ``s`` with frequency ``f`` and cumulative start ``c`` maps
``x -> (x // f) * M + x % f + c``; before that the encoder emits the low 32 bits of ``x``
while ``x >= 2**(63 - precision) * f``, which keeps the new state below ``2**63``.  The
decoder inverts it: ``slot = x % M`` looks up ``s`` in a table of ``M`` entries,
``x -> f * (x // M) + slot - c``, and it reads a word while ``x < L``.  A 64-bit state
makes the 32-bit division exact for every precision up to 24 and at most one word moves
per symbol, so each step has a single, well-predicted branch.

**Kernels.**  The encoder replaces ``x // f`` by an exact reciprocal multiply
(``mulhi64(x, rcp) >> shift``, Alverson's method as in F. Giesen's rans64;
:func:`encoder_reciprocals`); the decoder looks ``slot >> (precision - 12)`` up in a
4096-entry table (32 KiB, in L1) that holds ``(symbol, f, c)`` of the one symbol owning
the whole bucket, and only for the few shared buckets falls back to the ``M``-entry
slot table.  Both produce and accept exactly the words described here (the original
kernels stay as references for the tests).

**Payload** (little-endian uint32 words)::

    word 0, word 1   final encoder state (low half, high half)
    word 2..         renormalisation words in the order the decoder reads them

rANS is last-in first-out, so the encoder runs over the symbols backwards and the decoder
returns them forwards.  The encoder starts from ``x = L``; the decoder proves it consumed
exactly the input by ending in state ``L`` with every word read.  The overhead is the
8-byte final state.

**Corruption.**  A damaged word sends the decoder on a different path through ~2**63
states, so it ends in state ``L`` with every word consumed only by accident (heuristically
about one chance in 2**31 or less); size errors (not a multiple of 4 bytes, fewer than
8 bytes, words missing or left over) are always caught.

**Table serialisation** (``to_bytes``)::

    byte 0      precision (8..24)
    bytes 1..   nsym frequencies as LEB128 unsigned varints (7 bits per byte, low group
                first, high bit = "more follows"; shortest form only)

``from_bytes`` rejects a wrong precision, a truncated or over-long varint, a frequency
above ``2**precision``, trailing bytes and a sum other than ``2**precision``.

Example::

    >>> import numpy as np
    >>> table = AnsTable(quantize_freqs(np.array([0.5, 0.25, 0.25]), precision=8), 8)
    >>> table.freqs.tolist()
    [128, 64, 64]
    >>> sym = np.array([0, 2, 1, 0, 0], dtype=np.uint16)
    >>> payload = table.encode(sym)
    >>> len(payload), table.decode(payload, 5).tolist()
    (8, [0, 2, 1, 0, 0])
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.checks import check_int
from co3cli.coding.huffman import MAX_NSYM, as_symbols, as_weights, check_count
from co3cli.errors import CorruptDataError, InputError
from co3cli.registry import Configurable
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes  # noqa: F401 (re-exported)

STATE_LOW = 1 << 31
"""Lower end L of the normalised state interval [L, 2**63); also the initial state."""

PRECISION_RANGE = range(8, 25)


def check_precision(precision) -> int:
    return check_int("precision", precision, PRECISION_RANGE.start, PRECISION_RANGE.stop - 1)


# ---------------------------------------------------------------------------------------
# LEB128 varints (also used by the coder registry to frame Huffman payloads)


# ---------------------------------------------------------------------------------------
# Frequencies


def quantize_freqs(weights, precision: int = 16) -> np.ndarray:
    """Integer frequencies summing to ``2**precision`` that minimise the expected code
    length ``-sum p_s log2(f_s / 2**precision)`` (exactly, for the given weights).

    Start from ``max(1, floor(p * M))``, close the gap to ``M`` in batches (add 1 where it
    saves most bits, or take 1 where it costs least), then swap single units while a swap
    still helps.  The cost is separable and convex in each ``f_s``, so a state that no unit
    swap improves is the global optimum.  Zero weights get frequency 0.
    """
    w = as_weights(weights)
    precision = check_precision(precision)
    M = 1 << precision
    pos = np.flatnonzero(w > 0)
    if pos.size > M:
        raise InputError(
            f"precision: 2**{precision} slots cannot give {pos.size} symbols a frequency >= 1"
        )
    p = w[pos] / w[pos].sum()
    f = np.maximum(1, np.floor(p * M)).astype(np.int64)

    def gain(f):  # bits saved by f -> f + 1
        return p * np.log2((f + 1) / f)

    def loss(f):  # bits lost by f -> f - 1 (impossible below 1)
        return np.where(f > 1, p * np.log2(f / np.maximum(f - 1, 1)), np.inf)

    while (gap := M - int(f.sum())) != 0:
        if gap > 0:
            k = min(gap, f.size)
            f[np.argpartition(-gain(f), k - 1)[:k]] += 1
        else:
            k = min(-gap, int(np.count_nonzero(f > 1)))
            f[np.argpartition(loss(f), k - 1)[:k]] -= 1
    while True:
        g, c = gain(f), loss(f)
        j, i = int(np.argmax(g)), int(np.argmin(c))
        if i == j or not g[j] > c[i] * (1 + 1e-12):
            break
        f[j] += 1
        f[i] -= 1
    freqs = np.zeros(w.size, dtype=np.uint32)
    freqs[pos] = f
    return freqs


# ---------------------------------------------------------------------------------------
# Kernels (numba).  Errors are returned as codes; Python raises.


@njit(cache=True, nogil=True)
def _encode_kernel(sym, freq, cum, precision, out):  # pragma: no cover - compiled
    """Encode backwards into the tail of ``out``; return the index of the first word
    (>= 0), or ``-1 - i`` when symbol ``i`` is out of range or has frequency 0."""
    nsym = freq.size
    p = np.uint64(precision)
    x = np.uint64(STATE_LOW)
    j = out.size
    for i in range(sym.size - 1, -1, -1):
        s = sym[i]
        if s >= nsym or freq[s] == 0:
            return -1 - i
        f = np.uint64(freq[s])
        if x >= f << (np.uint64(63) - p):
            j -= 1
            out[j] = np.uint32(x & np.uint64(0xFFFFFFFF))
            x >>= np.uint64(32)
        x = ((x // f) << p) + x % f + np.uint64(cum[s])
    out[j - 1] = np.uint32(x >> np.uint64(32))
    out[j - 2] = np.uint32(x & np.uint64(0xFFFFFFFF))
    return j - 2


@njit(cache=True, nogil=True)
def _encode_rcp_kernel(sym, freq, rcp, rshift, bias, cmpl, precision, out):  # pragma: no cover
    """:func:`_encode_kernel` without the 64-bit division (same words out): ``x // f`` is
    ``mulhi64(x, rcp[s]) >> rshift[s]`` (Alverson's exact reciprocal, as in Giesen's
    rans64) and the new state ``x + bias[s] + q * (2**precision - f)``; see
    :func:`encoder_reciprocals`."""
    nsym = freq.size
    p = np.uint64(precision)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    x = np.uint64(STATE_LOW)
    j = out.size
    for i in range(sym.size - 1, -1, -1):
        s = sym[i]
        if s >= nsym or freq[s] == 0:
            return -1 - i
        if x >= np.uint64(freq[s]) << (np.uint64(63) - p):
            j -= 1
            out[j] = np.uint32(x & m32)
            x >>= s32
        r = rcp[s]
        alo, ahi, blo, bhi = x & m32, x >> s32, r & m32, r >> s32
        p1, p2 = alo * bhi, ahi * blo
        mid = ((alo * blo) >> s32) + (p1 & m32) + (p2 & m32)
        q = (ahi * bhi + (p1 >> s32) + (p2 >> s32) + (mid >> s32)) >> np.uint64(rshift[s])
        x = x + bias[s] + q * cmpl[s]
    out[j - 1] = np.uint32(x >> s32)
    out[j - 2] = np.uint32(x & m32)
    return j - 2


def encoder_reciprocals(freqs, cum, precision: int):
    """Per-symbol ``(rcp, rshift, bias, cmpl)`` (uint64, uint8, uint64, uint64) such that
    ``(x // f) * 2**p + x % f + cum == x + bias + (mulhi64(x, rcp) >> rshift) * cmpl`` for
    every ``x < 2**64``: for ``f >= 2``, ``rcp = ceil(2**(shift + 63) / f)`` with ``shift =
    ceil(log2 f)``, ``rshift = shift - 1``; for ``f = 1``, ``rcp = 2**64 - 1`` (the product's
    high word is ``x - 1``) and ``bias = cum + 2**p - 1``.  Frequency 0: unused zeros."""
    f = np.asarray(freqs, dtype=np.int64)
    c = np.asarray(cum, dtype=np.int64)
    shift = np.zeros(f.size, dtype=np.int64)
    big = f >= 2
    shift[big] = np.ceil(np.log2(f[big])).astype(np.int64)
    shift[big & (np.left_shift(1, shift) < f)] += 1  # guard log2 rounding
    shift[big & (np.left_shift(1, np.maximum(shift - 1, 0)) >= f)] -= 1
    fo = f.astype(object)
    rcp = np.where(big, ((np.left_shift(1, shift).astype(object) << 63) + fo - 1) // np.maximum(fo, 1),
                   (1 << 64) - 1)
    rcp = np.where(f > 0, rcp, 0).astype(np.uint64)
    rshift = np.where(big, shift - 1, 0).astype(np.uint8)
    bias = np.where(f == 1, c + (1 << precision) - 1, c)
    bias = np.where(f > 0, bias, 0).astype(np.uint64)
    cmpl = np.where(f > 0, (1 << precision) - f, 0).astype(np.uint64)
    return rcp, rshift, bias, cmpl


@njit(cache=True, nogil=True)
def _decode_kernel(words, slot_sym, freq, cum, precision, out):  # pragma: no cover - compiled
    """Decode ``out.size`` symbols; return 0 if the state ends at L with every word read,
    1 if the words ran out, 2 if the final state or word count is wrong, 3 if the
    initial state is out of range."""
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    low = np.uint64(STATE_LOW)
    x = np.uint64(words[0]) | (np.uint64(words[1]) << np.uint64(32))
    if x < low or x >= np.uint64(1) << np.uint64(63):
        return 3
    k = 2
    nw = words.size
    for i in range(out.size):
        slot = x & mask
        s = slot_sym[slot]
        x = np.uint64(freq[s]) * (x >> p) + slot - np.uint64(cum[s])
        if x < low:
            if k >= nw:
                return 1
            x = (x << np.uint64(32)) | np.uint64(words[k])
            k += 1
        out[i] = s
    return 0 if x == low and k == nw else 2


COARSE_BITS = 12
"""Index width of the rANS decoder's first-level table (2**12 uint64 entries: 32 KiB)."""
_F_BITS = 25  # a frequency (<= 2**24) or a cumulative start (< 2**24) in a packed entry


@njit(cache=True, nogil=True)
def _decode_coarse_kernel(words, coarse, cshift, slot_sym, packed, precision, out):  # pragma: no cover
    """:func:`_decode_kernel` with the symbol's ``(sym, f, cum)`` in one load from a small
    table: ``coarse[slot >> cshift]`` is ``sym << 50 | f << 25 | cum`` when every slot of
    that bucket belongs to one symbol, else 0, and then (rarely) ``packed[slot_sym[slot]]``
    gives the same entry.  Same arithmetic, same statuses, same checks."""
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    low = np.uint64(STATE_LOW)
    cs = np.uint64(cshift)
    fb = np.uint64(_F_BITS)
    fmask = (np.uint64(1) << fb) - np.uint64(1)
    x = np.uint64(words[0]) | (np.uint64(words[1]) << np.uint64(32))
    if x < low or x >= np.uint64(1) << np.uint64(63):
        return 3
    k = 2
    nw = words.size
    for i in range(out.size):
        slot = x & mask
        e = coarse[slot >> cs]
        if e == 0:
            e = packed[slot_sym[slot]]
        x = ((e >> fb) & fmask) * (x >> p) + slot - (e & fmask)
        if x < low:
            if k >= nw:
                return 1
            x = (x << np.uint64(32)) | np.uint64(words[k])
            k += 1
        out[i] = np.uint16(e >> (fb + fb))
    return 0 if x == low and k == nw else 2


# ---------------------------------------------------------------------------------------
# Table


def check_freqs(freqs, precision: int) -> np.ndarray:
    """Validated read-only uint32 copy of a frequency table summing to 2**precision."""
    raw = np.asarray(freqs)
    if raw.ndim != 1 or not 1 <= raw.size <= MAX_NSYM or raw.dtype.kind not in "iu":
        raise InputError(
            f"freqs: need a 1-D integer array of 1..{MAX_NSYM} values, "
            f"got {raw.dtype} array of shape {raw.shape}"
        )
    M = 1 << precision
    if raw.min() < 0 or raw.max() > M:
        raise InputError(
            f"freqs: values must be in 0..2**{precision}, got {int(raw.min())}..{int(raw.max())}"
        )
    total = int(raw.astype(np.int64).sum())
    if total != M:
        raise InputError(f"freqs: must sum to 2**{precision} = {M}, got {total}")
    out = raw.astype(np.uint32)
    out.flags.writeable = False
    return out


def parse_freqs(data: bytes, nsym: int, precision: int, what: str) -> np.ndarray:
    """``nsym`` LEB128 frequencies filling ``data`` exactly (CorruptDataError otherwise)."""
    freqs, used = uvarints_from_bytes(data, nsym, what)
    if used != len(data):
        raise CorruptDataError(f"{what}: {len(data) - used} trailing bytes")
    if freqs.max() > 1 << precision:
        raise CorruptDataError(f"{what}: a frequency exceeds 2**{precision}")
    return freqs.astype(np.int64)


class AnsTable:
    """rANS code for symbols ``0..nsym-1`` with integer ``freqs`` summing to 2**precision."""

    def __init__(self, freqs, precision: int = 16):
        self._precision = check_precision(precision)
        self._freqs = check_freqs(freqs, self._precision)
        self._cum = (np.cumsum(self._freqs, dtype=np.int64) - self._freqs).astype(np.uint32)
        self._slot_sym = self._packed = self._rcp = None

    @property
    def freqs(self) -> np.ndarray:
        """Read-only uint32 frequencies, one per symbol (0: not codable)."""
        return self._freqs

    @property
    def precision(self) -> int:
        """log2 of the frequency total."""
        return self._precision

    def ints(self) -> np.ndarray:
        """The integer table (the frequencies, int64): the shared table vocabulary."""
        return self._freqs.astype(np.int64)

    def pmf(self) -> np.ndarray:
        """The probabilities the table codes with (frequency / 2**precision)."""
        return self._freqs / float(1 << self._precision)

    @property
    def nsym(self) -> int:
        """Alphabet size."""
        return self._freqs.size

    def _slot_table(self) -> np.ndarray:
        if self._slot_sym is None:  # built on first decode: 2**precision entries
            self._slot_sym = np.repeat(np.arange(self.nsym, dtype=np.uint16), self._freqs)
        return self._slot_sym

    def _coarse_tables(self):
        """``(coarse, cshift, packed)`` for :func:`_decode_coarse_kernel`: ``packed[s] =
        s << 50 | f << 25 | cum`` (never 0: f >= 1 for a decodable symbol), ``coarse[b]`` the
        entry of the one symbol owning every slot of bucket ``b`` (0: the bucket is shared)."""
        if self._packed is None:
            sym = self._slot_table()
            fb = np.uint64(_F_BITS)
            packed = ((np.arange(self.nsym, dtype=np.uint64) << (fb + fb))
                      | (self._freqs.astype(np.uint64) << fb) | self._cum.astype(np.uint64))
            cshift = self._precision - min(self._precision, COARSE_BITS)
            first, last = sym[:: 1 << cshift], sym[(1 << cshift) - 1 :: 1 << cshift]
            coarse = np.where(first == last, packed[first], np.uint64(0)).astype(np.uint64)
            self._packed = coarse, cshift, packed
        return self._packed

    def encode(self, sym, cols=None) -> bytes:
        """Encode uint16 symbols; see the module docstring for the payload layout."""
        sym = as_symbols(sym)
        out = np.empty(sym.size + 2, dtype=np.uint32)  # at most one word per symbol
        if self._rcp is None:
            self._rcp = encoder_reciprocals(self._freqs, self._cum, self._precision)
        start = _encode_rcp_kernel(sym, self._freqs, *self._rcp, self._precision, out)
        if start < 0:
            i = -1 - start
            s = int(sym[i])
            why = f">= nsym={self.nsym}" if s >= self.nsym else "has frequency 0"
            raise InputError(f"sym: symbol {s} at index {i} {why}; cannot be coded")
        return out[start:].astype("<u4").tobytes()

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        """Decode exactly ``n`` symbols, consuming exactly all of ``payload``."""
        n = check_count(n)
        payload = bytes(payload)
        if len(payload) % 4 or len(payload) < 8:
            raise CorruptDataError(
                f"rANS payload: {len(payload)} bytes; need a multiple of 4 and at least 8"
            )
        words = np.frombuffer(payload, dtype="<u4").astype(np.uint32)
        out = np.empty(n, dtype=np.uint16)
        coarse, cshift, packed = self._coarse_tables()
        status = _decode_coarse_kernel(words, coarse, cshift, self._slot_table(), packed,
                                       self._precision, out)
        if status:
            why = {
                1: "ran out of words",
                2: "did not end in the initial state with every word read",
                3: "starts with a state out of range",
            }[status]
            raise CorruptDataError(f"rANS payload: decoding {n} symbols {why}")
        return out

    def expected_bits(self, counts) -> float:
        """Ideal total bits for symbol ``counts``: ``sum(counts * (precision - log2 freq))``."""
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.nsym,) or np.any(c < 0):
            raise InputError(f"counts: need {self.nsym} values >= 0, got shape {c.shape}")
        used = self._freqs > 0
        if np.any(c[~used] > 0):
            raise InputError("counts: a symbol with frequency 0 has a non-zero count")
        return float(np.dot(c[used], self._precision - np.log2(self._freqs[used])))

    def to_bytes(self) -> bytes:
        """``[precision: u8] + freqs as LEB128 varints``."""
        return bytes([self._precision]) + uvarints_to_bytes(self._freqs)

    @classmethod
    def from_bytes(cls, data: bytes, nsym: int) -> "AnsTable":
        """Parse ``to_bytes`` output; any inconsistency raises :class:`CorruptDataError`."""
        nsym = check_int("nsym", nsym, 1, MAX_NSYM)
        data = bytes(data)
        if not data or data[0] not in PRECISION_RANGE:
            raise CorruptDataError(
                f"rANS table: precision byte must be 8..24, got {data[:1].hex() or 'nothing'}"
            )
        freqs = parse_freqs(data[1:], nsym, data[0], "rANS table")
        try:
            return cls(freqs, data[0])
        except InputError as err:
            raise CorruptDataError(f"rANS table: {err}") from None


class AnsCoder(Configurable):
    """Range ANS with a 64-bit state (see :mod:`co3cli.coding.ans`)."""

    id, kind = "ans", "coder"
    PARAMS = {"precision": 16}

    def check(self) -> None:
        self.params["precision"] = self.precision = check_precision(self.params["precision"])

    def table_from_weights(self, weights) -> AnsTable:
        return AnsTable(quantize_freqs(weights, self.precision), self.precision)

    def table_from_ints(self, freqs) -> AnsTable:
        """Table from integer frequencies (as saved in a codebook file)."""
        return AnsTable(freqs, self.precision)

    def table_from_bytes(self, data: bytes, nsym: int) -> AnsTable:
        table = AnsTable.from_bytes(data, nsym)
        if table.precision != self.precision:
            raise CorruptDataError(
                f"rANS table: stored precision={table.precision}, "
                f"coder config says {self.precision}"
            )
        return table
