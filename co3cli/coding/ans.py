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

**Interleaved layout.**  One state is one serial chain of dependent steps; a layer of
``n >= 2**18`` symbols is coded by ``N = 4`` independent states instead (:func:`lanes_for`):
symbol ``i`` goes through lane ``i % N``, every lane is the coder above (same ``L``, same
renormalisation), and all lanes share one word stream in the order the decoder reads it.
Each extra lane costs its 8-byte final state, plus one layout word: 28 bytes for 4 lanes,
under 0.09 % of a layer of 2**18 entries coded at 1 bit per entry.  The kernels
(:mod:`co3cli.coding.ans_kernels`) keep the ``N`` states in registers, so the CPU overlaps their chains; the encoder divides by an
exact reciprocal multiply (Alverson's method, as in F. Giesen's rans64), the decoder looks
``slot >> (precision - 12)`` up in a 4096-entry table that holds ``(symbol, f, c)`` of the
one symbol owning that bucket (only shared buckets fall back to the ``M``-entry slot table),
and the renormalisation is branch-free.  The lane count depends on ``n`` alone, so the bytes
do not depend on threads or machine.  :meth:`AnsTable.decode_lookup` decodes and
dequantizes in the same pass (it writes ``lut[symbol]``).

**Payload** (little-endian uint32 words).  Single state (layout 0: every payload written
before the interleaved coder, and the payloads of layers under 2**18 symbols)::

    word 0, word 1   final encoder state (low half, high half; the high half is < 2**31)
    word 2..         renormalisation words in the order the decoder reads them

Interleaved (layout 1, ``N`` lanes, 2 <= N <= 32), told apart by the top bit of word 1::

    word 0, word 1   lane 0's final state (low half, high half | 2**31)
    word 2           N | 1 << 8   (lane count, layout version 1; every other bit 0)
    word 3..2N       lanes 1..N-1's final states (low half, high half)
    word 2N+1..      renormalisation words in the order the decoder reads them

rANS is last-in first-out, so the encoder runs over the symbols backwards and the decoder
returns them forwards.  Every lane starts from ``x = L``; the decoder proves it consumed
exactly the input by ending with every lane in state ``L`` and every word read.  The
overhead is the 8-byte final state per lane and, interleaved, the layout word.  The payload
says its layout, so the container and the coder's config (``precision`` only) are unchanged.

**Corruption.**  A damaged word sends the decoder on a different path through ~2**63
states, so it ends with every lane in state ``L`` and every word consumed only by accident
(heuristically about one chance in 2**31 or less); size errors (not a multiple of 4 bytes,
fewer than 8 bytes, a header cut short, an unknown layout word, words missing or left over)
are always caught, and decoding never reads past the payload nor allocates more than the
``n`` outputs.

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
    >>> payload = table.encode(sym, lanes=4)  # the layout a layer of >= 2**18 entries gets
    >>> len(payload), hex(int.from_bytes(payload[8:12], "little")), table.decode(payload, 5).tolist()
    (36, '0x104', [0, 2, 1, 0, 0])
    >>> table.decode_lookup(payload, 5, np.float32([0.0, 0.5, -0.5])).tolist()
    [0.0, -0.5, 0.5, 0.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from co3cli import detmath
from co3cli.checks import check_int
from co3cli.coding import ans_kernels as K
from co3cli.coding.ans_kernels import COARSE_BITS, F_BITS, STATE_LOW  # noqa: F401 (re-exported)
from co3cli.coding.huffman import MAX_NSYM, as_symbols, as_weights, check_count
from co3cli.errors import CorruptDataError, InputError
from co3cli.registry import Configurable
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes  # noqa: F401 (re-exported)

PRECISION_RANGE = range(8, 25)
LANES_RANGE = range(1, 33)
"""Lane counts a payload may have (1: the single-state layout)."""
LANE_THRESHOLDS = ((1 << 18, 4),)
"""(minimum symbols, lanes) the encoder uses, first match; below every threshold: 1 lane."""


def lanes_for(n: int) -> int:
    """The lane count the encoder writes for ``n`` symbols (a function of ``n`` alone)."""
    return next((lanes for least, lanes in LANE_THRESHOLDS if n >= least), 1)


def check_precision(precision) -> int:
    return check_int("precision", precision, PRECISION_RANGE.start, PRECISION_RANGE.stop - 1)


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
    p = w[pos] / detmath.fsum(w[pos])
    f = np.maximum(1, np.floor(p * M)).astype(np.int64)

    def gain(f):  # bits saved by f -> f + 1
        return p * detmath.log2((f + 1) / f)

    def loss(f):  # bits lost by f -> f - 1 (impossible below 1)
        return np.where(f > 1, p * detmath.log2(f / np.maximum(f - 1, 1)), np.inf)

    while (gap := M - int(f.sum())) != 0:  # ties go to the lower symbol (stable sorts)
        if gap > 0:
            k = min(gap, f.size)
            f[np.argsort(-gain(f), kind="stable")[:k]] += 1
        else:
            k = min(-gap, int(np.count_nonzero(f > 1)))
            f[np.argsort(loss(f), kind="stable")[:k]] -= 1
    # unit swaps (a swap changes f at two symbols, so only their g and c change)
    K.unit_swaps(p, f, gain(f), loss(f))
    freqs = np.zeros(w.size, dtype=np.uint32)
    freqs[pos] = f
    return freqs


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


def _payload_lanes(words: np.ndarray) -> int:
    """Lane count of an interleaved payload (word 1's top bit set), its header checked."""
    if words.size < 3:
        raise CorruptDataError(f"rANS payload: interleaved layout cut short ({words.size} words)")
    desc = int(words[2])
    lanes = desc & 0xFF
    if desc != lanes | 1 << 8 or not 2 <= lanes < LANES_RANGE.stop:
        raise CorruptDataError(f"rANS payload: unknown layout word 0x{desc:08x} (this co3cli "
                               f"reads layout 1 with 2..{LANES_RANGE.stop - 1} lanes)")
    if words.size < 2 * lanes + 1:
        raise CorruptDataError(f"rANS payload: {words.size} words cannot hold {lanes} lane states")
    return lanes


class AnsTable:
    """rANS code for symbols ``0..nsym-1`` with integer ``freqs`` summing to 2**precision."""

    def __init__(self, freqs, precision: int = 16):
        self._precision = check_precision(precision)
        self._freqs = check_freqs(freqs, self._precision)
        self._cum = (np.cumsum(self._freqs, dtype=np.int64) - self._freqs).astype(np.uint32)
        self._slot_sym = self._packed = self._rcp = self._rows = self._ident = None

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
        """``(coarse, cshift, packed)`` for the coarse-table decoders: ``packed[s] =
        s << 50 | f << 25 | cum`` (never 0: f >= 1 for a decodable symbol), ``coarse[b]`` the
        entry of the one symbol owning every slot of bucket ``b`` (0: the bucket is shared)."""
        if self._packed is None:
            sym = self._slot_table()
            fb = np.uint64(F_BITS)
            packed = ((np.arange(self.nsym, dtype=np.uint64) << (fb + fb))
                      | (self._freqs.astype(np.uint64) << fb) | self._cum.astype(np.uint64))
            cshift = self._precision - min(self._precision, COARSE_BITS)
            first, last = sym[:: 1 << cshift], sym[(1 << cshift) - 1 :: 1 << cshift]
            coarse = np.where(first == last, packed[first], np.uint64(0)).astype(np.uint64)
            self._packed = coarse, cshift, packed
        return self._packed

    def _encoder_rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = K.encoder_rows(self._freqs, self._cum, self._precision)
        return self._rows

    def encode(self, sym, cols=None, lanes=None) -> bytes:
        """Encode uint16 symbols with ``lanes`` states (default :func:`lanes_for`, the only
        choice the codec makes); see the module docstring for both payload layouts."""
        sym = as_symbols(sym)
        lanes = lanes_for(sym.size) if lanes is None else check_int(
            "lanes", lanes, LANES_RANGE.start, LANES_RANGE.stop - 1)
        out = np.empty(sym.size + 2 * lanes + 1, dtype=np.uint32)  # <= one word per symbol
        if lanes == 1:
            if self._rcp is None:
                self._rcp = K.encoder_reciprocals(self._freqs, self._cum, self._precision)
            start = K._encode_rcp_kernel(sym, self._freqs, *self._rcp, self._precision, out)
        elif lanes == 4:
            start = K._encode_lanes4(sym, self._encoder_rows(), out)
        else:
            start = K._encode_lanes_ref(sym, self._freqs, self._cum, self._precision, lanes, out)
        if start < 0:
            i = -1 - start
            s = int(sym[i])
            why = f">= nsym={self.nsym}" if s >= self.nsym else "has frequency 0"
            raise InputError(f"sym: symbol {s} at index {i} {why}; cannot be coded")
        return out[start:].astype("<u4", copy=False).tobytes()

    def _identity(self) -> np.ndarray:
        if self._ident is None:
            self._ident = np.arange(self.nsym, dtype=np.uint16)
        return self._ident

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        """Decode exactly ``n`` symbols, consuming exactly all of ``payload`` (either layout)."""
        n = check_count(n)
        return self._decode(payload, n, self._identity(), np.empty(n, dtype=np.uint16))

    def decode_lookup(self, payload: bytes, n: int, lut, out=None) -> np.ndarray:
        """``lut[decode(payload, n)]`` in one pass (interleaved payloads) and without the symbol
        array: ``lut`` holds one value per symbol (e.g. ``grid.values / scale`` as float32,
        which gives exactly :func:`co3cli.quantize.dequantize`'s values); ``out`` (``n``
        entries of ``lut``'s dtype, contiguous) receives them if given."""
        n = check_count(n)
        lut = np.ascontiguousarray(lut)
        if lut.ndim != 1 or lut.size != self.nsym:
            raise InputError(f"lut: need one value per symbol ({self.nsym}), got shape {lut.shape}")
        if out is None:
            out = np.empty(n, dtype=lut.dtype)
        elif out.shape != (n,) or out.dtype != lut.dtype or not out.flags.c_contiguous:
            raise InputError(f"out: need a contiguous ({n},) {lut.dtype} array, got "
                             f"{out.dtype} {out.shape}")
        return self._decode(payload, n, lut, out)

    def _decode(self, payload, n, lut, out):
        payload = bytes(payload)
        if len(payload) % 4 or len(payload) < 8:
            raise CorruptDataError(
                f"rANS payload: {len(payload)} bytes; need a multiple of 4 and at least 8"
            )
        words = np.frombuffer(payload, dtype="<u4").astype(np.uint32, copy=False)
        coarse, cshift, packed = self._coarse_tables()
        slot_sym = self._slot_table()
        if not words[1] & K.LANE_FLAG:
            sym = out if lut is self._ident else np.empty(n, dtype=np.uint16)
            status = K._decode_coarse_kernel(words, coarse, cshift, slot_sym, packed,
                                             self._precision, sym)
            if not status and sym is not out:
                K._lookup(lut, sym, out)
        else:
            lanes = _payload_lanes(words)
            args = (slot_sym, self._freqs, self._cum, self._precision, lut, out)
            if lanes == 4:
                status = K._decode_lanes4(words, coarse, cshift, slot_sym, packed, *args[1:])
            else:
                xs = np.empty(lanes, dtype=np.uint64)
                status = (K._decode_lanes_ref(words, 2 * lanes + 1, xs, 0, *args)
                          if K._read_states(words, lanes, xs) else 3)
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
