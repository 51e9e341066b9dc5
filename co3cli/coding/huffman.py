"""Length-limited canonical Huffman coding: integer code lengths in, bits out.

Data flow::

    weights (float pmf or counts) --huffman_lengths--> lengths (uint8, <= max_len)
        --HuffmanTable--> canonical codes --encode--> (payload bytes, nbits)
                                           <--decode--

* **Lengths** come from package-merge (Larmore & Hirschberg 1990), which is *exactly*
  optimal under the limit ``max_len``; when the limit is not binding the result has the
  same expected length as plain Huffman.  Symbols of weight 0 get length 0 (not codable).
* **Canonical codes**: symbols sorted by (length, symbol index); each code is the previous
  code plus one, shifted left when the length grows.  Only the lengths need to be stored.
* **Bit order**: codes are written MSB first into a big-endian byte stream; the last byte is
  padded with zero bits.  ``nbits`` is the exact number of meaningful bits.
* **Decoding** is table driven: one table of ``2**width`` entries (``width`` = the longest
  code length in use, at most ``max_len``) maps the next ``width`` bits to
  ``(symbol << 5) | length``; an entry of 0 marks an unused pattern of an incomplete code.
  In front of it a 12-bit table (16 KiB, in L1) gives one or two whole symbols per lookup
  (``FAST_BITS``); only codes longer than 12 bits reach the big table.  The encoder writes
  its words without a branch per word, already in payload byte order.

The decoder proves it consumed exactly the input: the payload must be ``ceil(nbits / 8)``
bytes, the padding bits zero, no unused pattern may be hit and the ``n`` symbols must end
exactly at bit ``nbits``.  Anything else raises :class:`CorruptDataError`.

Table serialisation (``to_bytes``)::

    byte 0        max_len (1..20)
    bytes 1..     nsym code lengths, b = max_len.bit_length() bits each (4 bits for
                  max_len 8..15, 5 bits for 16..20), MSB first, zero padded to a byte

so 253 symbols at ``max_len=16`` take 1 + 159 bytes.  ``from_bytes`` checks the size, the
padding, every length and the Kraft inequality.

Example::

    >>> import numpy as np
    >>> table = HuffmanTable(huffman_lengths(np.array([5.0, 2.0, 1.0, 1.0])))
    >>> table.lengths.tolist()
    [1, 2, 3, 3]
    >>> payload, nbits = table.encode(np.array([0, 1, 3, 0], dtype=np.uint16))
    >>> nbits, payload.hex()
    (7, '5c')
    >>> table.decode(payload, nbits, 4).tolist()
    [0, 1, 3, 0]
"""

from __future__ import annotations

import math
import sys

import numpy as np
from numba import njit

from co3cli.checks import check_int
from co3cli.errors import CorruptDataError, InputError
from co3cli.registry import Configurable
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

MAX_NSYM = 4095
"""Largest alphabet: symbols are uint16 and a table entry keeps the symbol in 12 bits."""

MAX_LEN_LIMIT = 20
"""Largest allowed ``max_len`` (the decode table then has at most 2**20 entries)."""


# ---------------------------------------------------------------------------------------
# Input checks shared with ans.py


def as_weights(weights) -> np.ndarray:
    """Return ``weights`` as a 1-D float64 array of finite values >= 0, with one > 0."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not 1 <= w.size <= MAX_NSYM:
        raise InputError(
            f"weights: need a 1-D array of 1..{MAX_NSYM} values, got shape {w.shape}"
        )
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError("weights: every value must be finite and >= 0")
    if not np.any(w > 0):
        raise InputError("weights: at least one value must be > 0, got all zeros")
    return w


def as_symbols(sym) -> np.ndarray:
    """Check that ``sym`` is a 1-D uint16 array and return it C-contiguous (never copied
    when it already is, and never modified)."""
    if not isinstance(sym, np.ndarray):
        raise InputError(f"sym: need a 1-D numpy uint16 array, got {type(sym).__name__}")
    if sym.ndim != 1 or sym.dtype != np.uint16:
        raise InputError(
            f"sym: need a 1-D numpy uint16 array, got {sym.dtype} array of shape {sym.shape}"
        )
    return np.ascontiguousarray(sym)


def check_count(n) -> int:
    return check_int("n", n, 0)


def check_max_len(max_len) -> int:
    return check_int("max_len", max_len, 1, MAX_LEN_LIMIT)


# ---------------------------------------------------------------------------------------
# Code lengths


def huffman_lengths(weights, max_len: int = 16) -> np.ndarray:
    """Optimal code lengths of at most ``max_len`` bits (package-merge, exact).

    Package-merge solves the "coin collector" problem: each symbol is a coin of weight
    ``w`` at every level ``1..max_len``; level-d coins are worth ``2**-d``.  Building the
    list for level ``max_len`` (the leaves), then repeatedly pairing adjacent items
    ("packages") and merging them with the leaves in weight order, gives the level-1 list;
    its cheapest ``2n - 2`` items pay for a complete code, and a symbol's length is the
    number of selected items it appears in.  Because packages are pairs from the *front* of
    a sorted list, the selected items of every level are a prefix, so we only need to
    remember which positions of each merged list are leaves.

    Returns uint8 lengths: 0 for weight 0, 1..max_len otherwise (1 for a lone symbol).
    """
    w = as_weights(weights)
    max_len = check_max_len(max_len)
    idx = np.flatnonzero(w > 0)
    n = idx.size
    lengths = np.zeros(w.size, dtype=np.uint8)
    if n == 1:
        lengths[idx] = 1
        return lengths
    if n > 1 << max_len:
        raise InputError(
            f"max_len: {max_len} bits cannot code {n} symbols (need 2**max_len >= {n})"
        )
    order = idx[np.argsort(w[idx], kind="stable")]  # symbols by increasing weight
    leaves = w[order]

    # Build the lists from level max_len (leaves only) up to level 1.
    is_leaf_per_level = []
    items = leaves
    for _ in range(max_len - 1):
        half = items.size // 2
        packages = items[0 : 2 * half : 2] + items[1 : 2 * half : 2]
        merged = np.concatenate([leaves, packages])
        pick = np.argsort(merged, kind="stable")  # ties: leaves before packages
        is_leaf_per_level.append(pick < n)
        items = merged[pick]

    # Walk back down: the first m items of a level hold some leaves (the lightest ones)
    # and some packages, which expand to the first 2 * packages items one level down.
    bump = np.zeros(n + 1, dtype=np.int64)  # difference array of per-leaf counts
    m = 2 * n - 2
    for is_leaf in reversed(is_leaf_per_level):
        k = int(np.count_nonzero(is_leaf[:m]))
        bump[0] += 1
        bump[k] -= 1
        m = 2 * (m - k)
    bump[0] += 1  # level max_len holds leaves only
    bump[m] -= 1
    lengths[order] = np.cumsum(bump[:n])
    return lengths


# ---------------------------------------------------------------------------------------
# Kernels (numba).  Every error is returned as a code; Python turns it into an exception.


@njit(cache=True, nogil=True)
def _encode_kernel(sym, enc, out):  # pragma: no cover - compiled
    """Pack codes MSB first into the uint32 words ``out`` (bytes big-endian later).

    ``enc[s] = (code << 5) | length`` (0: not codable).  Returns ``(status, nwords, tail,
    tail_bits)``: status -1 on success, else the index of the first bad symbol; the last
    ``tail_bits`` (< 32) bits are left in ``tail``.
    """
    nsym = enc.size
    acc = np.uint64(0)
    nacc = 0  # bits held in acc (< 32 between symbols)
    j = 0
    for i in range(sym.size):
        s = sym[i]
        if s >= nsym:
            return i, j, acc, nacc
        e = enc[s]
        ln = e & 31
        if ln == 0:
            return i, j, acc, nacc
        acc = (acc << np.uint64(ln)) | np.uint64(e >> 5)
        nacc += ln
        if nacc >= 32:
            nacc -= 32
            out[j] = np.uint32((acc >> np.uint64(nacc)) & np.uint64(0xFFFFFFFF))
            j += 1
    return -1, j, acc & ((np.uint64(1) << np.uint64(nacc)) - np.uint64(1)), nacc


@njit(cache=True, nogil=True)
def _encode_fast_kernel(sym, enc, out, swap):  # pragma: no cover - compiled
    """:func:`_encode_kernel` without the word-full branch: the 32 bits above the ``nacc``
    pending ones are stored at ``out[j]`` every symbol and ``j`` advances only when they
    are complete (``out`` needs one spare word). Same words, same results; with ``swap``
    each word is stored byte-swapped (a little-endian host's native words are then the
    big-endian payload bytes, no conversion pass)."""
    nsym = enc.size
    m32 = np.uint64(0xFFFFFFFF)
    acc = np.uint64(0)
    nacc = np.uint64(0)
    j = 0
    for i in range(sym.size):
        s = sym[i]
        if s >= nsym:
            return i, j, acc, nacc
        e = enc[s]
        ln = np.uint64(e & 31)
        if ln == 0:
            return i, j, acc, nacc
        acc = (acc << ln) | np.uint64(e >> 5)
        nacc += ln
        full = nacc >> np.uint64(5)  # 1 when a word is complete (nacc < 64)
        nacc -= full << np.uint64(5)
        w = (acc >> nacc) & m32
        if swap:
            w = (((w & np.uint64(0xFF)) << np.uint64(24)) | ((w & np.uint64(0xFF00)) << np.uint64(8))
                 | ((w >> np.uint64(8)) & np.uint64(0xFF00)) | (w >> np.uint64(24)))
        out[j] = np.uint32(w)
        j += np.int64(full)
    return -1, j, acc & ((np.uint64(1) << nacc) - np.uint64(1)), nacc


@njit(cache=True, nogil=True)
def _decode_kernel(words, dec, width, out):  # pragma: no cover - compiled
    """Decode ``out.size`` symbols from MSB-first uint32 ``words``.

    Peeks ``width`` bits from a left-aligned 64-bit buffer, refilled 32 bits at a time
    (zeros past the end, so over-reading shows up as a wrong bit count).  Returns the
    number of bits consumed, or -1 when an unused code pattern is hit.
    """
    nw = words.size
    w64 = np.uint64(width)
    buf = np.uint64(0)
    cnt = 0  # valid bits at the top of buf
    k = 0
    for i in range(out.size):
        if cnt < width:
            if k < nw:
                buf |= np.uint64(words[k]) << np.uint64(32 - cnt)
            k += 1
            cnt += 32
        e = dec[buf >> (np.uint64(64) - w64)]
        ln = e & 31
        if ln == 0:
            return -1
        out[i] = e >> 5
        buf <<= np.uint64(ln)
        cnt -= ln
    return 32 * k - cnt


FAST_BITS = 12
"""Index width of the first-level Huffman decode table (2**12 uint32 entries: 16 KiB, in L1)."""


@njit(cache=True, nogil=True)
def _decode_pair_kernel(words, pair, fbits, fast, dec, width, out):  # pragma: no cover
    """:func:`_decode_kernel` with lookup tables, up to two symbols per lookup: ``pair[i]`` (the
    next ``fbits`` bits) is ``s1 | s2 << 12 | bits << 24 | count << 30``, ``count`` (1 or 2)
    symbols whose codes fill ``bits <= fbits`` real bits (0: the first code is longer: the
    two-level single-symbol path: ``fast`` (``2**fbits`` entries) resolves every code of at
    most ``fbits`` bits, its entry 0 sends the rare longer code to the full ``2**width``
    table ``dec``, where 0 still marks an unused pattern).  ``out`` has one spare entry at the end (the second
    symbol is always stored, then overwritten or dropped); the last symbol is decoded
    alone, so exactly ``out.size - 1`` symbols are decoded.  Same bit count, same checks."""
    nw = words.size
    w64 = np.uint64(64 - width)
    f64 = np.uint64(64 - fbits)
    buf = np.uint64(0)
    cnt = 0
    k = 0
    n = out.size - 1
    i = 0
    while i < n:
        if cnt < 32:
            if k < nw:
                buf |= np.uint64(words[k]) << np.uint64(32 - cnt)
            k += 1
            cnt += 32
        if i + 1 < n:
            e = pair[buf >> f64]
            if e != 0:
                out[i] = e & 0xFFF
                out[i + 1] = (e >> 12) & 0xFFF
                ln = (e >> 24) & 31
                i += e >> 30
                buf <<= np.uint64(ln)
                cnt -= ln
                continue
        e = fast[buf >> f64]
        if e == 0:
            e = dec[buf >> w64]
            if e & 31 == 0:
                return -1
        ln = e & 31
        out[i] = e >> 5
        i += 1
        buf <<= np.uint64(ln)
        cnt -= ln
    return 32 * k - cnt


# ---------------------------------------------------------------------------------------
# Table


class HuffmanTable:
    """Canonical Huffman code for symbols ``0..nsym-1`` given their code lengths.

    ``lengths[s]`` is 0 (symbol not codable) or 1..max_len; the Kraft sum must be <= 1.
    """

    def __init__(self, lengths, max_len: int = 16):
        max_len = check_max_len(max_len)
        raw = np.asarray(lengths)
        if raw.ndim != 1 or not 1 <= raw.size <= MAX_NSYM or raw.dtype.kind not in "iu":
            raise InputError(
                f"lengths: need a 1-D integer array of 1..{MAX_NSYM} values, "
                f"got {raw.dtype} array of shape {raw.shape}"
            )
        if raw.min() < 0 or raw.max() > max_len:
            raise InputError(
                f"lengths: values must be in 0..{max_len} (max_len), "
                f"got {int(raw.min())}..{int(raw.max())}"
            )
        ln = raw.astype(np.int64)
        used = ln > 0
        if not used.any():
            raise InputError("lengths: at least one symbol needs a length > 0, got all zeros")
        kraft = int(np.sum(np.left_shift(1, max_len - ln[used])))
        if kraft > 1 << max_len:
            raise InputError(
                f"lengths: Kraft sum {kraft / (1 << max_len):.6g} > 1, no prefix code exists"
            )
        self._lengths = ln.astype(np.uint8)
        self._lengths.flags.writeable = False
        self._max_len = max_len
        self._width = int(ln.max())

        # Canonical codes: in (length, symbol) order, code_i = (sum_{j<i} 2**(W-l_j)) >> (W-l_i).
        order = np.flatnonzero(used)
        order = order[np.argsort(ln[order], kind="stable")]
        ls = ln[order]
        span = np.left_shift(1, self._width - ls)
        start = np.concatenate([[0], np.cumsum(span)[:-1]])
        codes = start >> (self._width - ls)
        self._enc = np.zeros(ln.size, dtype=np.uint32)
        self._enc[order] = (codes << 5) | ls
        self._order, self._span, self._dec, self._fast = order, span, None, None
        self._pair = None
        self._min_len = int(ls[0])

    # -- properties -----------------------------------------------------------------
    @property
    def lengths(self) -> np.ndarray:
        """Read-only uint8 code lengths, one per symbol (0: not codable)."""
        return self._lengths

    @property
    def max_len(self) -> int:
        """The length limit this table was built for (stored in ``to_bytes``)."""
        return self._max_len

    @property
    def nsym(self) -> int:
        """Alphabet size."""
        return self._lengths.size

    def codes(self) -> np.ndarray:
        """Canonical code of each symbol as uint32 (read it with ``lengths``)."""
        return self._enc >> 5

    def _decode_table(self) -> np.ndarray:
        if self._dec is None:  # built on first decode: 2**width entries
            dec = np.zeros(1 << self._width, dtype=np.uint32)
            entries = (self._order.astype(np.uint32) << 5) | self._lengths[self._order]
            filled = np.repeat(entries, self._span)
            dec[: filled.size] = filled
            self._dec = dec
        return self._dec

    def _fast_table(self) -> tuple[np.ndarray, int]:
        """First-level table: entry ``i`` of the full table at ``i << (width - fbits)``,
        0 where the code there is longer than ``fbits`` (or the pattern unused)."""
        if self._fast is None:
            fbits = min(self._width, FAST_BITS)
            fast = self._decode_table()[:: 1 << (self._width - fbits)].copy()
            fast[(fast & 31) > fbits] = 0
            self._fast = fast, fbits
        return self._fast

    def _pair_table(self) -> np.ndarray:
        """:func:`_decode_pair_kernel`'s table: the first code of each ``fbits``-bit pattern
        and, when the rest of the pattern holds a whole second code, that one too."""
        if self._pair is None:
            fast, fbits = self._fast_table()
            idx = np.arange(fast.size, dtype=np.int64)
            l1 = (fast & 31).astype(np.int64)
            e2 = fast[(idx << l1) & (fast.size - 1)]
            l2 = (e2 & 31).astype(np.int64)
            two = (l1 > 0) & (l2 > 0) & (l1 + l2 <= fbits)
            count = np.where(two, 2, 1)
            bits = np.where(two, l1 + l2, l1)
            pair = ((fast >> 5).astype(np.int64) | (np.where(two, e2 >> 5, 0).astype(np.int64) << 12)
                    | (bits << 24) | (count << 30))
            self._pair = np.where(l1 > 0, pair, 0).astype(np.uint32)
        return self._pair

    # -- coding ---------------------------------------------------------------------
    def encode(self, sym) -> tuple[bytes, int]:
        """Encode uint16 symbols; return ``(payload, nbits)``, payload = ceil(nbits/8) bytes."""
        sym = as_symbols(sym)
        out = np.empty(sym.size * self._width // 32 + 1, dtype=np.uint32)
        swap = sys.byteorder == "little"
        status, nw, tail, tail_bits = _encode_fast_kernel(sym, self._enc, out, swap)
        if status >= 0:
            s = int(sym[status])
            why = f">= nsym={self.nsym}" if s >= self.nsym else "has code length 0"
            raise InputError(f"sym: symbol {s} at index {status} {why}; cannot be coded")
        tail_bits = int(tail_bits)
        nbytes_tail = (tail_bits + 7) // 8
        tail_word = int(tail) << (8 * nbytes_tail - tail_bits)
        words = out[:nw] if swap else out[:nw].astype(">u4")  # big-endian bytes either way
        payload = words.tobytes() + tail_word.to_bytes(nbytes_tail, "big")
        return payload, 32 * int(nw) + tail_bits

    def decode(self, payload: bytes, nbits: int, n: int) -> np.ndarray:
        """Decode exactly ``n`` symbols from exactly ``nbits`` bits of ``payload``."""
        n = check_count(n)
        nbits = check_int("nbits", nbits, 0, error=CorruptDataError)
        payload = bytes(payload)
        if len(payload) != (nbits + 7) // 8:
            raise CorruptDataError(
                f"Huffman payload: {len(payload)} bytes, but nbits={nbits} "
                f"needs {(nbits + 7) // 8}"
            )
        if not n * self._min_len <= nbits <= n * self._width:
            raise CorruptDataError(
                f"Huffman payload: {nbits} bits cannot hold {n} symbols of "
                f"{self._min_len}..{self._width} bits"
            )
        if nbits % 8 and payload[-1] & ((1 << (8 - nbits % 8)) - 1):
            raise CorruptDataError("Huffman payload: padding bits after nbits are not zero")
        padded = payload + bytes(-len(payload) % 4)
        words = np.frombuffer(padded, dtype=">u4").astype(np.uint32)
        out = np.empty(n + 1, dtype=np.uint16)  # one spare entry: the pair decoder's
        fast, fbits = self._fast_table()
        used = _decode_pair_kernel(words, self._pair_table(), fbits, fast, self._decode_table(),
                                   self._width, out)
        out = out[:n]
        if used < 0:
            raise CorruptDataError("Huffman payload: hit an unused code pattern")
        if used != nbits:
            raise CorruptDataError(
                f"Huffman payload: {n} symbols used {used} bits, but nbits={nbits}"
            )
        return out

    def expected_bits(self, counts) -> float:
        """Total bits for symbol ``counts`` under this code: ``sum(counts * lengths)``."""
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.nsym,) or np.any(c < 0):
            raise InputError(f"counts: need {self.nsym} values >= 0, got shape {c.shape}")
        if np.any(c[self._lengths == 0] > 0):
            raise InputError("counts: a symbol with code length 0 has a non-zero count")
        return float(np.dot(c, self._lengths))

    # -- serialisation --------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """``[max_len: u8] + lengths packed at max_len.bit_length() bits each``."""
        b = self._max_len.bit_length()
        bits = (self._lengths[:, None] >> np.arange(b - 1, -1, -1)) & 1
        return bytes([self._max_len]) + np.packbits(bits.astype(np.uint8).ravel()).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, nsym: int) -> "HuffmanTable":
        """Parse ``to_bytes`` output; any inconsistency raises :class:`CorruptDataError`."""
        nsym = check_int("nsym", nsym, 1, MAX_NSYM)
        data = bytes(data)
        if not data or not 1 <= data[0] <= MAX_LEN_LIMIT:
            got = data[:1].hex() or "nothing"
            raise CorruptDataError(
                f"Huffman table: max_len byte must be 1..{MAX_LEN_LIMIT}, got {got}"
            )
        max_len = data[0]
        b = max_len.bit_length()
        size = 1 + math.ceil(nsym * b / 8)
        if len(data) != size:
            raise CorruptDataError(
                f"Huffman table: {len(data)} bytes, expected {size} for nsym={nsym}"
            )
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8, offset=1))
        if bits[nsym * b :].any():
            raise CorruptDataError("Huffman table: padding bits are not zero")
        lengths = bits[: nsym * b].reshape(nsym, b) @ (1 << np.arange(b - 1, -1, -1))
        try:
            return cls(lengths, max_len)
        except InputError as err:
            raise CorruptDataError(f"Huffman table: {err}") from None


# ---------------------------------------------------------------------------------------
# The coder: framed tables (self-delimiting payloads)


class FramedHuffmanTable:
    """A :class:`HuffmanTable` with the common, self-delimiting ``encode``/``decode``."""

    def __init__(self, raw: HuffmanTable):
        self.raw = raw

    @property
    def nsym(self) -> int:
        return self.raw.nsym

    def encode(self, sym, cols=None) -> bytes:
        """``uvarint(nbits) + payload``."""
        payload, nbits = self.raw.encode(sym)
        return uvarints_to_bytes([nbits]) + payload

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        """Parse the bit count, then decode exactly ``n`` symbols from the rest."""
        payload = bytes(payload)
        (nbits,), used = uvarints_from_bytes(payload[:10], 1, "Huffman frame")
        return self.raw.decode(payload[used:], int(nbits), n)

    def expected_bits(self, counts) -> float:
        """Payload bits, not counting the few bytes of the bit-count prefix."""
        return self.raw.expected_bits(counts)

    def to_bytes(self) -> bytes:
        return self.raw.to_bytes()

    @property
    def lengths(self) -> np.ndarray:
        return self.raw.lengths

    def ints(self) -> np.ndarray:
        """The integer table (code lengths, int64; 0: the symbol cannot be coded)."""
        return self.raw.lengths.astype(np.int64)

    def pmf(self) -> np.ndarray:
        """The probabilities the code is optimal for: 2**-length (0 where the length is 0)."""
        ln = self.ints()
        return np.where(ln > 0, np.exp2(-ln.astype(np.float64)), 0.0)


class HuffmanCoder(Configurable):
    """Length-limited canonical Huffman (see :mod:`co3cli.coding.huffman`)."""

    id, kind = "huffman", "coder"
    PARAMS = {"max_len": 16}

    def check(self) -> None:
        self.params["max_len"] = self.max_len = check_max_len(self.params["max_len"])

    def table_from_weights(self, weights) -> FramedHuffmanTable:
        lengths = huffman_lengths(weights, self.max_len)
        return FramedHuffmanTable(HuffmanTable(lengths, self.max_len))

    def table_from_ints(self, lengths) -> FramedHuffmanTable:
        """Table from integer code lengths (as saved in a codebook file)."""
        return FramedHuffmanTable(HuffmanTable(lengths, self.max_len))

    def table_from_bytes(self, data: bytes, nsym: int) -> FramedHuffmanTable:
        raw = HuffmanTable.from_bytes(data, nsym)
        if raw.max_len != self.max_len:
            raise CorruptDataError(
                f"Huffman table: stored max_len={raw.max_len}, coder config says {self.max_len}"
            )
        return FramedHuffmanTable(raw)
