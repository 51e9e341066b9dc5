"""Numba kernels of the lossless float coder (:mod:`co3cli.coding.lossless`).

Three passes, each one loop over a step's words (no Python per entry):

* :func:`split` -- words -> symbols (sign, exponent field, top ``k`` mantissa bits; or one of
  the two zero symbols) and the packed remaining mantissa bits of the non-zero entries;
* :func:`rans_encode` / :func:`rans_decode` -- the symbols through rANS with one frequency
  table per context (the context of entry ``i``: the classes of its left and upper
  neighbours in the tensor's 2-D view, both already decoded);
* :func:`join` -- symbols and packed bits -> words.

The rANS coder is the project's (``co3cli.coding.ans``): a 64-bit state in ``[L, 2**63)``,
``L = 2**31``, 32-bit renormalisation words, the encoder running backwards. Decoders return a
negative status instead of raising (numba), never read or write outside their arrays, and the
wrapper turns a status into CorruptDataError.
"""

from __future__ import annotations

import numpy as np
from numba import njit

STATE_LOW = np.uint64(1 << 31)
OK, E_SHORT, E_STATE, E_SYMBOL, E_LEFT, E_PAD = 0, -1, -2, -3, -4, -5


@njit(cache=True, nogil=True, inline="always")
def _ctx(sym, i, col, cols, cls_lut, ncls):
    """Context of entry ``i`` (in column ``col = i % cols``): ``ncls * class(left) +
    class(up)`` (class 0 when absent)."""
    left = cls_lut[sym[i - 1]] if col != 0 else 0
    up = cls_lut[sym[i - cols]] if i >= cols else 0
    return left * ncls + up


@njit(cache=True, nogil=True)
def split(words, mag_bits, ek, k, t, width, zbase, sym, packed):
    """Symbols of ``words`` into ``sym``; the ``width`` mantissa bits below the top ``k``
    (less ``t`` always-zero trailing bits) of each non-zero entry, LSB first, into ``packed``.
    Returns the bytes of ``packed`` used."""
    mag_mask = (np.uint64(1) << np.uint64(mag_bits)) - np.uint64(1)
    low_shift = np.uint64(mag_bits - ek)  # bits below the exponent field and top k bits
    wmask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    acc = np.uint64(0)
    nacc = 0
    pos = 0
    for i in range(words.size):
        w = np.uint64(words[i])
        mag = w & mag_mask
        sign = w >> np.uint64(mag_bits)
        if mag == 0:
            sym[i] = zbase + sign
            continue
        sym[i] = (sign << np.uint64(ek)) | (mag >> low_shift)
        if width:
            acc |= ((mag >> np.uint64(t)) & wmask) << np.uint64(nacc)
            nacc += width
            while nacc >= 8:
                packed[pos] = acc & np.uint64(0xFF)
                pos += 1
                acc >>= np.uint64(8)
                nacc -= 8
    if nacc:
        packed[pos] = acc & np.uint64(0xFF)
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def join(sym, packed, mag_bits, ek, k, t, width, zbase, words):
    """Inverse of :func:`split`; returns OK, or E_SHORT / E_LEFT / E_PAD when ``packed`` is
    not exactly the bits the symbols call for (its padding bits must be 0)."""
    low_shift = np.uint64(mag_bits - ek)
    hi_mask = (np.uint64(1) << np.uint64(ek)) - np.uint64(1)
    wmask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    acc = np.uint64(0)
    nacc = 0
    pos = 0
    for i in range(sym.size):
        s = np.uint64(sym[i])
        if s >= zbase:
            words[i] = (s - np.uint64(zbase)) << np.uint64(mag_bits)
            continue
        w = ((s >> np.uint64(ek)) << np.uint64(mag_bits)) | ((s & hi_mask) << low_shift)
        if width:
            while nacc < width:
                if pos >= packed.size:
                    return E_SHORT
                acc |= np.uint64(packed[pos]) << np.uint64(nacc)
                pos += 1
                nacc += 8
            w |= (acc & wmask) << np.uint64(t)
            acc >>= np.uint64(width)
            nacc -= width
        words[i] = w
    if pos != packed.size:
        return E_LEFT
    if acc != 0:
        return E_PAD
    return OK


@njit(cache=True, nogil=True)
def rans_encode(sym, cols, cls_lut, ncls, nctx, freq, cum, precision, out):
    """Encode ``sym`` (backwards); renormalisation words into ``out`` in the order emitted.
    Returns (final state, words written; -1: a symbol without a frequency in its context).
    (A division-free update by exact reciprocals, as ``ans_kernels`` has, measured 13 %
    slower here: numba's 64x64-bit high product costs more than the hardware division.)"""
    x = STATE_LOW
    nw = 0
    p = np.uint64(precision)
    bound = (STATE_LOW >> p) << np.uint64(32)
    col = (sym.size - 1) % cols
    for i in range(sym.size - 1, -1, -1):
        c = _ctx(sym, i, col, cols, cls_lut, ncls) if nctx > 1 else 0
        col = col - 1 if col else cols - 1
        s = sym[i]
        f = np.uint64(freq[c, s])
        if f == 0:
            return x, -1
        if x >= bound * f:
            out[nw] = np.uint32(x & np.uint64(0xFFFFFFFF))
            nw += 1
            x >>= np.uint64(32)
        x = ((x // f) << p) + (x % f) + np.uint64(cum[c, s])
    return x, nw


@njit(cache=True, nogil=True)
def rans_decode(words, n, cols, cls_lut, ncls, nctx, slots, precision, sym):
    """Decode ``n`` symbols into ``sym`` from ``words`` (the final state's two halves, then
    the renormalisation words in reading order); ``slots[c, slot]`` packs the symbol owning
    the slot, its frequency and the slot's offset in its range (``s | f << 16 | off << 32``;
    0: no symbol, an empty context). Returns OK or a negative status."""
    if words.size < 2:
        return E_SHORT
    x = np.uint64(words[0]) | (np.uint64(words[1]) << np.uint64(32))
    if x < STATE_LOW or x >> np.uint64(63):
        return E_STATE
    pos = 2
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    m16 = np.uint64(0xFFFF)
    col = 0
    for i in range(n):
        c = _ctx(sym, i, col, cols, cls_lut, ncls) if nctx > 1 else 0
        col = col + 1 if col + 1 < cols else 0
        e = slots[c, x & mask]
        f = (e >> np.uint64(16)) & m16
        if f == 0:  # an empty context: no symbol owns the slot
            return E_SYMBOL
        x = f * (x >> p) + (e >> np.uint64(32))
        sym[i] = e & m16
        if x < STATE_LOW:
            if pos >= words.size:
                return E_SHORT
            x = (x << np.uint64(32)) | np.uint64(words[pos])
            pos += 1
    if pos != words.size:
        return E_LEFT
    if x != STATE_LOW:
        return E_STATE
    return OK


@njit(cache=True, nogil=True)
def joint_counts(words, mag_bits, ek, zbase, cls_lut, ncls, cols, counts, row):
    """Add the (context, symbol) counts of every step (row of ``words``) into ``counts``
    (ncls**2, nsym), contexts as :func:`rans_encode` forms them; ``row``: a scratch array of
    one step's symbols. Returns the OR of every word's magnitude bits."""
    mag_mask = (np.uint64(1) << np.uint64(mag_bits)) - np.uint64(1)
    low_shift = np.uint64(mag_bits - ek)
    low = np.uint64(0)
    for r in range(words.shape[0]):
        col = 0
        for i in range(words.shape[1]):
            w = np.uint64(words[r, i])
            mag = w & mag_mask
            sign = w >> np.uint64(mag_bits)
            if mag == 0:
                s = zbase + sign
            else:
                s = (sign << np.uint64(ek)) | (mag >> low_shift)
            row[i] = s
            c = _ctx(row, i, col, cols, cls_lut, ncls)
            col = col + 1 if col + 1 < cols else 0
            counts[c, row[i]] += 1
            low |= mag
    return low


@njit(cache=True, nogil=True)
def word_stats(words, mag_bits, man_bits, ehist):
    """Non-zero words, the OR of their mantissas, and their exponent fields' histogram
    (added into ``ehist``) over a (steps, numel) array."""
    mag_mask = (np.uint64(1) << np.uint64(mag_bits)) - np.uint64(1)
    man_mask = (np.uint64(1) << np.uint64(man_bits)) - np.uint64(1)
    nnz = 0
    low = np.uint64(0)
    for r in range(words.shape[0]):
        for i in range(words.shape[1]):
            mag = np.uint64(words[r, i]) & mag_mask
            if mag != 0:
                nnz += 1
                low |= mag & man_mask
                ehist[mag >> np.uint64(man_bits)] += 1
    return nnz, low
