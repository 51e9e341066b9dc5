"""Numba kernels of the lossless float coders: version 1 (:mod:`co3cli.coding.lossless`,
neighbour contexts) and version 2 (:mod:`co3cli.coding.lossless_fast`, below the line
"version 2": one counting pass, then one kernel call per layer that codes every step through
four interleaved rANS lanes; its per-layer work, from the counting pass to the chunk
framing, is in :mod:`co3cli.coding.lossless_layer_kernels`).

Version 1: three passes, each one loop over a step's words (no Python per entry):

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


# -- version 2 (the fast coder, co3cli.coding.lossless_fast) ---------------------------------
# Four interleaved 32-bit rANS lanes (entry i in lane i % 4), state in [2**15, 2**31), 16-bit
# renormalisation words in one shared stream; encoder division-free (exact reciprocals for
# states < 2**31), decoder one 64-bit table entry per slot.  One order-0 table per layer.
LOW2 = 1 << 15
NLANES = 4
# params (int64[8]) of split2 / encode2 / decode2: mag_bits, ek, k, t, width, zbase, precision
P_MAG, P_EK, P_K, P_T, P_W, P_Z, P_PREC = range(7)


@njit(cache=True, nogil=True, inline="always")
def _sym2(w, mag_mask, low_shift, zbase, mag_bits):
    return np.uint64(zbase) + (w >> np.uint64(mag_bits)) if (w & mag_mask) == 0 else w >> low_shift


@njit(cache=True, nogil=True, inline="always")
def _enc2(x, s, xmax, rcp, rsh, bias, cmpl, out, nw):
    emit = np.uint64(x >= xmax[s])  # branch-free: the word is written, kept only if emitted
    out[np.uint64(nw - 1)] = np.uint16(x & np.uint64(0xFFFF))
    nw -= np.int64(emit)
    x >>= np.uint64(16) * emit
    q = ((x * np.uint64(rcp[s])) >> np.uint64(32)) >> np.uint64(rsh[s])
    return x + np.uint64(bias[s]) + q * np.uint64(cmpl[s]), nw


@njit(cache=True, nogil=True)
def encode2(words, params, xmax, rcp, rsh, bias, cmpl, out, packed, states):
    """One step's words -> renormalisation words (written backwards from the end of ``out``,
    so ``out[start:]`` is in reading order) and the packed low mantissa bits of the non-zero
    words (LSB first, into the uint32 array ``packed``). The lanes' final states go to
    ``states``. Returns (start, packed bits); start -1: a symbol without a frequency."""
    mag_bits = params[P_MAG]
    low_shift = np.uint64(mag_bits - params[P_EK])
    mag_mask = (np.uint64(1) << np.uint64(mag_bits)) - np.uint64(1)
    zbase = params[P_Z]
    t = np.uint64(params[P_T])
    width = params[P_W]
    wmask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    n = words.size
    # mantissa bits, forwards
    acc = np.uint64(0)
    nacc = np.uint64(0)
    pos = 0
    nbits = 0
    if width:
        first = 0
        if width <= 8:  # four words' bits grouped (<= 32) before they join the accumulator
            first = n - n % 4
            for i in range(0, first, 4):
                u = np.uint64(i)
                w0 = np.uint64(words[u])
                w1 = np.uint64(words[u + np.uint64(1)])
                w2 = np.uint64(words[u + np.uint64(2)])
                w3 = np.uint64(words[u + np.uint64(3)])
                d0 = np.uint64(width) if (w0 & mag_mask) != 0 else np.uint64(0)
                d1 = np.uint64(width) if (w1 & mag_mask) != 0 else np.uint64(0)
                d2 = np.uint64(width) if (w2 & mag_mask) != 0 else np.uint64(0)
                d3 = np.uint64(width) if (w3 & mag_mask) != 0 else np.uint64(0)
                g = ((w0 >> t) & wmask) | (((w1 >> t) & wmask) << d0) | \
                    (((w2 >> t) & wmask) << (d0 + d1)) | (((w3 >> t) & wmask) << (d0 + d1 + d2))
                acc |= g << nacc
                nacc += d0 + d1 + d2 + d3
                packed[np.uint64(pos)] = np.uint32(acc & np.uint64(0xFFFFFFFF))
                full = np.uint64(nacc >= np.uint64(32))
                pos += np.int64(full)
                acc >>= np.uint64(32) * full
                nacc -= np.uint64(32) * full
        for i in range(first, n):  # branch-free: a zero word adds 0 bits
            w = np.uint64(words[np.uint64(i)])
            wid = np.uint64(width) if (w & mag_mask) != 0 else np.uint64(0)
            acc |= ((w >> t) & wmask) << np.uint64(nacc)
            nacc += wid
            packed[np.uint64(pos)] = np.uint32(acc & np.uint64(0xFFFFFFFF))
            full = np.uint64(nacc >= np.uint64(32))
            pos += np.int64(full)
            acc >>= np.uint64(32) * full
            nacc -= np.uint64(32) * full
        nbits = pos * 32 + np.int64(nacc)
        packed[pos] = np.uint32(acc & np.uint64(0xFFFFFFFF))
    # symbols, backwards through the lanes (xmax 0: a symbol without a frequency)
    nw = out.size
    x0 = np.uint64(LOW2)
    x1 = x0
    x2 = x0
    x3 = x0
    body = n - n % 4
    for i in range(n - 1, body - 1, -1):
        s = _sym2(np.uint64(words[np.uint64(i)]), mag_mask, low_shift, zbase, mag_bits)
        if xmax[s] == 0:
            return -1, 0
        lane = i & 3
        if lane == 0:
            x0, nw = _enc2(x0, s, xmax, rcp, rsh, bias, cmpl, out, nw)
        elif lane == 1:
            x1, nw = _enc2(x1, s, xmax, rcp, rsh, bias, cmpl, out, nw)
        else:
            x2, nw = _enc2(x2, s, xmax, rcp, rsh, bias, cmpl, out, nw)
    for i in range(body - 4, -1, -4):
        u = np.uint64(i)  # (unsigned indices: no wraparound test)
        s3 = _sym2(np.uint64(words[u + np.uint64(3)]), mag_mask, low_shift, zbase, mag_bits)
        s2 = _sym2(np.uint64(words[u + np.uint64(2)]), mag_mask, low_shift, zbase, mag_bits)
        s1 = _sym2(np.uint64(words[u + np.uint64(1)]), mag_mask, low_shift, zbase, mag_bits)
        s0 = _sym2(np.uint64(words[u]), mag_mask, low_shift, zbase, mag_bits)
        if xmax[s0] == 0 or xmax[s1] == 0 or xmax[s2] == 0 or xmax[s3] == 0:
            return -1, 0
        x3, nw = _enc2(x3, s3, xmax, rcp, rsh, bias, cmpl, out, nw)
        x2, nw = _enc2(x2, s2, xmax, rcp, rsh, bias, cmpl, out, nw)
        x1, nw = _enc2(x1, s1, xmax, rcp, rsh, bias, cmpl, out, nw)
        x0, nw = _enc2(x0, s0, xmax, rcp, rsh, bias, cmpl, out, nw)
    states[0] = x0
    states[1] = x1
    states[2] = x2
    states[3] = x3
    return nw, nbits


@njit(cache=True, nogil=True, inline="always")
def _dec2(x, tfb, th, mask, p, rw, pos):
    """One lane's step: (state, the symbol's word part, read position)."""
    slot = x & mask
    e = np.uint64(tfb[slot])
    x = (e & np.uint64(0xFFFF)) * (x >> p) + (e >> np.uint64(16))
    need = x < np.uint64(LOW2)  # branch-free: the word is read, kept only when needed
    y = (x << np.uint64(16)) | np.uint64(rw[np.uint64(pos)])  # (unsigned: no wraparound test)
    return y if need else x, np.uint64(th[slot]), pos + np.int64(need)


@njit(cache=True, nogil=True, inline="always")
def _word2(hw, t, bp, packed):
    """The word of table part ``hw`` with its mantissa bits from bit ``bp`` of ``packed``
    (two words read: only ``bp`` carries from word to word)."""
    wid = hw & np.uint64(31)
    j = np.uint64(bp) >> np.uint64(5)  # (unsigned: no wraparound test)
    v = (np.uint64(packed[j]) | (np.uint64(packed[j + np.uint64(1)]) << np.uint64(32))) >> \
        np.uint64(bp & 31)
    return (hw ^ wid) | ((v & ((np.uint64(1) << wid) - np.uint64(1))) << t), bp + np.int64(wid)


@njit(cache=True, nogil=True)
def decode2(states, nw, rw, packed, tfb, th, params, out):
    """Decode ``out.size`` words: lanes from ``states``, renormalisation words ``rw[:nw]``
    (``rw`` zero-padded to ``out.size + 1`` words: a lane reads at most one per word),
    mantissa bits from ``packed`` (uint32, LSB first, zero-padded to hold ``out.size`` full
    widths and one word more). Per slot: ``tfb`` the frequency | the slot's offset in its
    symbol's range << 16, ``th`` the symbol's word without its low mantissa bits, their count
    in its low 5 bits. Returns (status, mantissa bits read)."""
    p = np.uint64(params[P_PREC])
    mask = (np.uint64(1) << p) - np.uint64(1)
    t = np.uint64(params[P_T])
    x0 = np.uint64(states[0])
    x1 = np.uint64(states[1])
    x2 = np.uint64(states[2])
    x3 = np.uint64(states[3])
    lo = np.uint64(LOW2)
    hi = np.uint64(1) << np.uint64(31)
    if x0 < lo or x1 < lo or x2 < lo or x3 < lo or x0 >= hi or x1 >= hi or x2 >= hi or x3 >= hi:
        return E_STATE, 0
    n = out.size
    pos = 0
    bp = 0  # bit position in packed
    body = n - n % 4
    if params[P_W] <= 8:  # four words' bits (<= 32) from one 64-bit window
        for i in range(0, body, 4):
            x0, h0, pos = _dec2(x0, tfb, th, mask, p, rw, pos)
            x1, h1, pos = _dec2(x1, tfb, th, mask, p, rw, pos)
            x2, h2, pos = _dec2(x2, tfb, th, mask, p, rw, pos)
            x3, h3, pos = _dec2(x3, tfb, th, mask, p, rw, pos)
            u = np.uint64(i)
            j = np.uint64(bp) >> np.uint64(5)
            v = (np.uint64(packed[j]) | (np.uint64(packed[j + np.uint64(1)]) << np.uint64(32))) \
                >> np.uint64(bp & 31)
            d0 = h0 & np.uint64(31)
            d1 = h1 & np.uint64(31)
            d2 = h2 & np.uint64(31)
            d3 = h3 & np.uint64(31)
            one = np.uint64(1)
            out[u] = (h0 ^ d0) | ((v & ((one << d0) - one)) << t)
            v >>= d0
            out[u + one] = (h1 ^ d1) | ((v & ((one << d1) - one)) << t)
            v >>= d1
            out[u + np.uint64(2)] = (h2 ^ d2) | ((v & ((one << d2) - one)) << t)
            v >>= d2
            out[u + np.uint64(3)] = (h3 ^ d3) | ((v & ((one << d3) - one)) << t)
            bp += np.int64(d0 + d1 + d2 + d3)
    else:
        for i in range(0, body, 4):
            x0, h0, pos = _dec2(x0, tfb, th, mask, p, rw, pos)
            x1, h1, pos = _dec2(x1, tfb, th, mask, p, rw, pos)
            x2, h2, pos = _dec2(x2, tfb, th, mask, p, rw, pos)
            x3, h3, pos = _dec2(x3, tfb, th, mask, p, rw, pos)
            u = np.uint64(i)
            w, bp = _word2(h0, t, bp, packed)
            out[u] = w
            w, bp = _word2(h1, t, bp, packed)
            out[u + np.uint64(1)] = w
            w, bp = _word2(h2, t, bp, packed)
            out[u + np.uint64(2)] = w
            w, bp = _word2(h3, t, bp, packed)
            out[u + np.uint64(3)] = w
    for i in range(body, n):
        lane = i & 3
        if lane == 0:
            x0, h, pos = _dec2(x0, tfb, th, mask, p, rw, pos)
        elif lane == 1:
            x1, h, pos = _dec2(x1, tfb, th, mask, p, rw, pos)
        else:
            x2, h, pos = _dec2(x2, tfb, th, mask, p, rw, pos)
        w, bp = _word2(h, t, bp, packed)
        out[i] = w
    if pos > nw:  # read into the padding
        return E_SHORT, 0
    if pos != nw:
        return E_LEFT, 0
    if x0 != lo or x1 != lo or x2 != lo or x3 != lo:
        return E_STATE, 0
    return OK, bp


@njit(cache=True, nogil=True)
def encode_many(words, params, xmax, rcp, rsh, bias, cmpl, rw, packed, states, meta):
    """:func:`encode2` of every row (step) of ``words`` (steps, n): row ``r``'s
    renormalisation words into ``rw[r]`` (its first ``meta[r, 0]`` unused), mantissa bits
    into ``packed[r]`` (``meta[r, 1]`` bits), lane states into ``states[r]``. Returns -1 when
    a symbol has no frequency, else 0."""
    for r in range(words.shape[0]):
        start, nbits = encode2(words[r], params, xmax, rcp, rsh, bias, cmpl, rw[r], packed[r],
                               states[r])
        if start < 0:
            return -1
        meta[r, 0] = start
        meta[r, 1] = nbits
    return 0


@njit(cache=True, nogil=True)
def decode_many(buf, offs, tfb, th, params, rw, packed, filled, out, status):
    """:func:`decode2` of every chunk: chunk ``r``'s lane states at byte ``offs[r, 0]`` of
    ``buf`` (little-endian), its ``offs[r, 1]`` renormalisation words at ``offs[r, 2]``, its
    ``offs[r, 4]`` bytes of mantissa bits at ``offs[r, 3]``. ``filled``: ``rw[r]`` (uint16,
    n + 1) and ``packed[r]`` (uint32, as :func:`decode2` wants) hold chunk ``r``'s words and
    bits already, zero-padded (the caller copied them at memory speed); else each part is
    copied into the scratch rows ``rw[0]`` and ``packed[0]`` (what lies past a chunk's own
    words and bits is read only by a stream that the position checks refuse) before decoding
    into ``out[r]``. ``status[r]``: the status, or E_PAD / E_LEFT when the mantissa bytes are
    not exactly the bits read (zero padding)."""
    states = np.empty(4, dtype=np.uint32)
    for r in range(out.shape[0]):
        o = offs[r, 0]
        for j in range(4):
            states[j] = np.uint32(buf[o + 4 * j]) | (np.uint32(buf[o + 4 * j + 1]) << 8) | \
                (np.uint32(buf[o + 4 * j + 2]) << 16) | (np.uint32(buf[o + 4 * j + 3]) << 24)
        nw = offs[r, 1]
        tail = offs[r, 4]
        row = r if filled else 0
        p8 = packed[row].view(np.uint8)
        if not filled:
            rw8 = rw[0].view(np.uint8)
            rw8[:2 * nw] = buf[offs[r, 2]:offs[r, 2] + 2 * nw]
            rw8[2 * nw:2 * nw + 2] = 0  # (a valid stream never reads past its words or bits)
            p8[:tail] = buf[offs[r, 3]:offs[r, 3] + tail]
            p8[tail:tail + 8] = 0
        st, nbits = decode2(states, nw, rw[row], packed[row], tfb, th, params, out[r])
        if st == OK:
            if (nbits + 7) // 8 != tail:
                st = E_LEFT
            elif nbits % 8 and (p8[tail - 1] >> (nbits % 8)) != 0:
                st = E_PAD
        status[r] = st
        if st != OK:
            return


@njit(cache=True, nogil=True)
def enc_tables2(freqs, cum, precision, xmax, rcp, rsh, bias, cmpl):
    """Per symbol, the reciprocal encoder's constants (F. Giesen's ``RansEncSymbolInit``):
    ``xmax = f << (31 - precision)`` (0: no frequency); for ``f >= 2`` ``rcp =
    ceil(2**(shift + 31) / f)`` with ``shift = ceil(log2 f)``, ``rsh = shift - 1``, ``bias =
    start``; for ``f = 1`` ``rcp = 2**32 - 1``, ``rsh = 0``, ``bias = start + M - 1``; ``cmpl =
    M - f``."""
    M = np.uint64(1) << np.uint64(precision)
    for s in range(freqs.size):
        f = np.uint64(freqs[s])
        xmax[s] = f << np.uint64(31 - precision)
        cmpl[s] = M - f if f else np.uint64(0)
        if f >= 2:
            shift = np.uint64(0)
            while f > (np.uint64(1) << shift):
                shift += np.uint64(1)
            rcp[s] = ((np.uint64(1) << (shift + np.uint64(31))) + f - np.uint64(1)) // f
            rsh[s] = shift - np.uint64(1)
            bias[s] = np.uint64(cum[s])
        else:
            rcp[s] = np.uint64(0xFFFFFFFF)
            rsh[s] = 0
            bias[s] = np.uint64(cum[s]) + M - np.uint64(1)
