"""numba kernels of the rANS coder (:mod:`co3cli.coding.ans` documents the bitstream).

Two layouts, both of 32-bit little-endian words and 64-bit states in ``[L, 2**63)``,
``L = 2**31``:

* **single state** (layout 0, every payload before the interleaved coder, and today's
  payloads of small layers): :func:`_encode_rcp_kernel` / :func:`_decode_coarse_kernel`, with
  :func:`_encode_kernel` / :func:`_decode_kernel` (plain division, ``M``-entry slot table)
  kept as their references;
* **interleaved** (layout 1): ``N`` independent states, symbol ``i`` coded by lane
  ``i % N``, one shared word stream in the order the decoder reads it.  The fast kernels
  (:func:`_encode_lanes4`, :func:`_decode_lanes4`: ``N = 4``, the count the encoder writes)
  keep the states in registers so the four dependency chains overlap in the CPU; the
  renormalisation is branch-free (a word is always stored or loaded, and the index moves by
  the comparison's 0/1); indices are unsigned (no negative-index code).  8 lanes measured
  slower than 4 here (register spills), 2 lanes no faster than one state.
  :func:`_encode_lanes_ref` / :func:`_decode_lanes_ref` are the plain references (any ``N``:
  the decoder reads every lane count the layout allows; the fast decoder finishes the last,
  bounds-checked words with the reference loop).

The decoders write ``lut[symbol]`` for each decoded symbol: an identity table gives the
symbols, ``grid.values / scale`` gives the dequantized values in the same pass.

Errors are returned as codes; Python raises.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.detmath import INV_LN2, log1

STATE_LOW = 1 << 31
"""Lower end L of the normalised state interval [L, 2**63); also the initial state."""
LANE_FLAG = 1 << 31
"""Set in word 1 of an interleaved payload (the high half of a state < 2**63 never has it)."""
COARSE_BITS = 12
"""Index width of the rANS decoder's first-level table (2**12 uint64 entries: 32 KiB)."""
F_BITS = 25  # a frequency (<= 2**24) or a cumulative start (< 2**24) in a packed entry

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


# ---------------------------------------------------------------------------------------
# Single state (layout 0)


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


def encoder_rows(freqs, cum, precision: int) -> np.ndarray:
    """The interleaved encoders' per-symbol row ``(xmax, rcp, bias, cmpl << 8 | rshift)``
    (uint64, one 32-byte row for each of the 2**16 uint16 values): ``xmax = f << (63 -
    precision)`` is the state at which a word must leave first; 0 marks a value that cannot
    be coded (frequency 0, or past the alphabet)."""
    rcp, rshift, bias, cmpl = encoder_reciprocals(freqs, cum, precision)
    f = np.asarray(freqs, dtype=np.uint64)
    rows = np.zeros((1 << 16, 4), dtype=np.uint64)  # calloc: the unused rows cost no pages
    rows[: f.size, 0] = f << np.uint64(63 - precision)
    rows[: f.size, 1], rows[: f.size, 2] = rcp, bias
    rows[: f.size, 3] = (cmpl << np.uint64(8)) | rshift.astype(np.uint64)
    return rows


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
    fb = np.uint64(F_BITS)
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
# Interleaved (layout 1): the header, then the references


@njit(cache=True, nogil=True)
def _write_states(xs, out, j):  # pragma: no cover - compiled
    """Put the lane states and the layout words just below ``out[j]``; return the first
    index: ``lo0, hi0 | LANE_FLAG, lanes | 1 << 8, lo1, hi1, ..., lo(N-1), hi(N-1)``."""
    lanes = xs.size
    for lane in range(lanes - 1, 0, -1):
        out[j - 1] = np.uint32(xs[lane] >> _S32)
        out[j - 2] = np.uint32(xs[lane] & _M32)
        j -= 2
    out[j - 1] = np.uint32(lanes | (1 << 8))
    out[j - 2] = np.uint32((xs[0] >> _S32) | np.uint64(LANE_FLAG))
    out[j - 3] = np.uint32(xs[0] & _M32)
    return j - 3


@njit(cache=True, nogil=True)
def _read_states(words, lanes, xs):  # pragma: no cover - compiled
    """Fill ``xs`` from the header (``words`` holds at least ``2 * lanes + 1`` words); return
    False if a state is out of ``[L, 2**63)``."""
    top = np.uint64(1) << np.uint64(63)
    low = np.uint64(STATE_LOW)
    xs[0] = np.uint64(words[0]) | ((np.uint64(words[1]) & np.uint64(LANE_FLAG - 1)) << _S32)
    for lane in range(1, lanes):
        xs[lane] = np.uint64(words[2 * lane + 1]) | (np.uint64(words[2 * lane + 2]) << _S32)
    for lane in range(lanes):
        if xs[lane] < low or xs[lane] >= top:
            return False
    return True


@njit(cache=True, nogil=True)
def _encode_lanes_ref(sym, freq, cum, precision, lanes, out):  # pragma: no cover - compiled
    """Interleaved encode with ``lanes`` states and plain division into the tail of ``out``
    (at least ``sym.size + 2 * lanes + 1`` words); return the index of the first word, or
    ``-1 - i`` when symbol ``i`` cannot be coded (the last such ``i``)."""
    nsym = freq.size
    p = np.uint64(precision)
    xs = np.full(lanes, np.uint64(STATE_LOW), dtype=np.uint64)
    j = out.size
    for i in range(sym.size - 1, -1, -1):
        s = sym[i]
        if s >= nsym or freq[s] == 0:
            return -1 - i
        lane = i % lanes
        x = xs[lane]
        f = np.uint64(freq[s])
        if x >= f << (np.uint64(63) - p):
            j -= 1
            out[j] = np.uint32(x & _M32)
            x >>= _S32
        xs[lane] = ((x // f) << p) + x % f + np.uint64(cum[s])
    return _write_states(xs, out, j)


@njit(cache=True, nogil=True)
def _decode_lanes_ref(words, k, xs, i0, slot_sym, freq, cum, precision, lut, out):  # pragma: no cover
    """Decode symbols ``i0..out.size-1`` (lane ``i % lanes``) from states ``xs`` and words
    ``words[k:]``, writing ``lut[symbol]``; statuses as :func:`_decode_kernel` (0: every
    lane ends in L with every word read; 1: words ran out; 2: wrong end)."""
    lanes = xs.size
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    low = np.uint64(STATE_LOW)
    nw = words.size
    for i in range(i0, out.size):
        lane = i % lanes
        x = xs[lane]
        slot = x & mask
        s = slot_sym[slot]
        x = np.uint64(freq[s]) * (x >> p) + slot - np.uint64(cum[s])
        if x < low:
            if k >= nw:
                return 1
            x = (x << _S32) | np.uint64(words[k])
            k += 1
        xs[lane] = x
        out[i] = lut[s]
    if k != nw:
        return 2
    for lane in range(lanes):
        if xs[lane] != low:
            return 2
    return 0


# ---------------------------------------------------------------------------------------
# Interleaved: the fast kernels (states in registers, branch-free renormalisation)


@njit(nogil=True)
def _enc_next(x, xmax, rcp, bias, e3):  # pragma: no cover - compiled
    """One symbol into state ``x`` (scalars only, so it inlines without reference counts):
    returns the new state and 1 when the caller's word ``low32(x)`` (stored at ``out[j - 1]``
    beforehand, always) is kept, else 0; then the reciprocal update of
    :func:`_encode_rcp_kernel`."""
    c = x >= xmax
    x >>= np.uint64(c) * _S32
    alo, ahi, blo, bhi = x & _M32, x >> _S32, rcp & _M32, rcp >> _S32
    p1, p2 = alo * bhi, ahi * blo
    mid = ((alo * blo) >> _S32) + (p1 & _M32) + (p2 & _M32)
    q = (ahi * bhi + (p1 >> _S32) + (p2 >> _S32) + (mid >> _S32)) >> (e3 & np.uint64(0xFF))
    return x + bias + q * (e3 >> np.uint64(8)), np.uint64(c)


@njit(nogil=True)
def _dec_next(x, e, w, mask, p):  # pragma: no cover - compiled
    """One symbol out of state ``x`` given its packed entry ``e`` (scalars only): the new
    state, with word ``w`` (loaded always) shifted in when it falls below L, and 1 if it was."""
    fb = np.uint64(F_BITS)
    fmask = (np.uint64(1) << fb) - np.uint64(1)
    x = ((e >> fb) & fmask) * (x >> p) + (x & mask) - (e & fmask)
    c = x < np.uint64(STATE_LOW)
    return (x << (np.uint64(c) * _S32)) | (w & (np.uint64(0) - np.uint64(c))), np.uint64(c)


@njit(cache=True, nogil=True)
def _encode_lanes4(sym, enc, out):  # pragma: no cover - compiled
    """:func:`_encode_lanes_ref` with 4 lanes and the reciprocal rows of
    :func:`encoder_rows` (same words, same return values; ``out`` as there).  ``enc`` has a
    row for every uint16 value (xmax 0 past the alphabet), so one test of xmax checks each
    symbol."""
    n = sym.size
    xs = np.full(4, np.uint64(STATE_LOW), dtype=np.uint64)
    ju = np.uint64(out.size)  # unsigned indices: no negative-index wraparound code
    one = np.uint64(1)
    g = n - n % 4
    for i in range(n - 1, g - 1, -1):  # the partial last group, lane by lane
        s = sym[i]
        if enc[s, 0] == 0:
            return -1 - i
        out[ju - one] = np.uint32(xs[i - g] & _M32)
        xs[i - g], c = _enc_next(xs[i - g], enc[s, 0], enc[s, 1], enc[s, 2], enc[s, 3])
        ju -= c
    x0, x1, x2, x3 = xs[0], xs[1], xs[2], xs[3]
    for gi in range(g // 4 - 1, -1, -1):
        i = np.uint64(gi) * np.uint64(4)
        s = sym[i + np.uint64(3)]
        xm = enc[s, 0]
        if xm == 0:
            return -1 - np.int64(i + np.uint64(3))
        out[ju - one] = np.uint32(x3 & _M32)
        x3, c = _enc_next(x3, xm, enc[s, 1], enc[s, 2], enc[s, 3])
        ju -= c
        s = sym[i + np.uint64(2)]
        xm = enc[s, 0]
        if xm == 0:
            return -1 - np.int64(i + np.uint64(2))
        out[ju - one] = np.uint32(x2 & _M32)
        x2, c = _enc_next(x2, xm, enc[s, 1], enc[s, 2], enc[s, 3])
        ju -= c
        s = sym[i + np.uint64(1)]
        xm = enc[s, 0]
        if xm == 0:
            return -1 - np.int64(i + np.uint64(1))
        out[ju - one] = np.uint32(x1 & _M32)
        x1, c = _enc_next(x1, xm, enc[s, 1], enc[s, 2], enc[s, 3])
        ju -= c
        s = sym[i]
        xm = enc[s, 0]
        if xm == 0:
            return -1 - np.int64(i)
        out[ju - one] = np.uint32(x0 & _M32)
        x0, c = _enc_next(x0, xm, enc[s, 1], enc[s, 2], enc[s, 3])
        ju -= c
    xs[0], xs[1], xs[2], xs[3] = x0, x1, x2, x3
    return _write_states(xs, out, np.int64(ju))


@njit(cache=True, nogil=True)
def _decode_lanes4(words, coarse, cshift, slot_sym, packed, freq, cum, precision, lut, out):  # pragma: no cover
    """:func:`_decode_lanes_ref` from the start of a 4-lane payload (the header
    checked by the caller, except the state ranges: status 3): whole groups while 4 more
    words surely exist, then the reference loop for the rest (same statuses and output)."""
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    cs = np.uint64(cshift)
    xs = np.empty(4, dtype=np.uint64)
    if not _read_states(words, 4, xs):
        return 3
    x0, x1, x2, x3 = xs[0], xs[1], xs[2], xs[3]
    k = np.uint64(9)  # unsigned indices: no negative-index wraparound code
    nw = np.uint64(words.size)
    g = np.uint64(out.size - out.size % 4)
    i = np.uint64(0)
    while i < g and k + np.uint64(4) <= nw:
        e = coarse[(x0 & mask) >> cs]
        if e == 0:
            e = packed[slot_sym[x0 & mask]]
        x0, c = _dec_next(x0, e, np.uint64(words[k]), mask, p)
        k += c
        out[i + np.uint64(0)] = lut[e >> np.uint64(2 * F_BITS)]
        e = coarse[(x1 & mask) >> cs]
        if e == 0:
            e = packed[slot_sym[x1 & mask]]
        x1, c = _dec_next(x1, e, np.uint64(words[k]), mask, p)
        k += c
        out[i + np.uint64(1)] = lut[e >> np.uint64(2 * F_BITS)]
        e = coarse[(x2 & mask) >> cs]
        if e == 0:
            e = packed[slot_sym[x2 & mask]]
        x2, c = _dec_next(x2, e, np.uint64(words[k]), mask, p)
        k += c
        out[i + np.uint64(2)] = lut[e >> np.uint64(2 * F_BITS)]
        e = coarse[(x3 & mask) >> cs]
        if e == 0:
            e = packed[slot_sym[x3 & mask]]
        x3, c = _dec_next(x3, e, np.uint64(words[k]), mask, p)
        k += c
        out[i + np.uint64(3)] = lut[e >> np.uint64(2 * F_BITS)]
        i += np.uint64(4)
    xs[0], xs[1], xs[2], xs[3] = x0, x1, x2, x3
    return _decode_lanes_ref(words, np.int64(k), xs, np.int64(i), slot_sym, freq, cum, precision, lut, out)


@njit(cache=True, nogil=True)
def _lookup(lut, sym, out):  # pragma: no cover - compiled
    """``out[i] = lut[sym[i]]`` (the symbols come from a decoder: all in range)."""
    for i in range(sym.size):
        out[i] = lut[sym[i]]


@njit(cache=True, nogil=True, error_model="numpy")
def unit_swaps(p, f, g, c):  # pragma: no cover - compiled
    """``quantize_freqs``'s last phase in place: while the symbol of largest gain ``g`` (bits
    saved by ``f + 1``) beats the one of least loss ``c`` (bits lost by ``f - 1``) by more
    than a relative 1e-12, move one unit between them and update their two gains and losses
    (the first of equal values, as ``np.argmax``/``np.argmin``; ``co3cli.detmath``'s log, as
    the vectorised phase before it computes them: the same bits)."""
    n = f.size
    while True:
        j = 0
        i = 0
        for k in range(1, n):
            if g[k] > g[j]:
                j = k
            if c[k] < c[i]:
                i = k
        if i == j or not g[j] > c[i] * (1 + 1e-12):
            return
        f[j] += 1
        f[i] -= 1
        for k in (i, j):
            g[k] = p[k] * (log1((f[k] + 1) / f[k]) * INV_LN2)
            c[k] = p[k] * (log1(f[k] / max(f[k] - 1, 1)) * INV_LN2) if f[k] > 1 else np.inf
