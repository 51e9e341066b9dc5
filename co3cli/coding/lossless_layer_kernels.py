"""Numba kernels of the per-layer work of the fast lossless coder
(:mod:`co3cli.coding.lossless_fast`, table version 2), so that a layer costs a few calls and
no per-entry Python: the fit's counting pass (:func:`hist_or`) and its choice of ``k``
(:func:`choose_k`), the rounding's scaling (:func:`normalize_floor`), the decoder's slot
tables (:func:`slot_tables2`), and the chunk framing (:func:`frame_many`,
:func:`parse_many`). The coding loops themselves are in :mod:`co3cli.coding.lossless_kernels`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

E_VARINT, E_SIZE = -6, -7  # a chunk's length varint bad / its parts do not fit n words


@njit(cache=True, nogil=True)
def hist_or(words, low_shift, hist, extra):
    """Histogram of ``words >> low_shift`` (a (steps, n) array) into ``hist`` (zeroed);
    ``extra``: [+0 words, -0 words, OR of all words]. The zeros land in bins 0 and
    ``hist.size // 2`` too (the caller moves them); they are counted in a second pass only
    when those bins are not empty (one scatter and an OR per word otherwise)."""
    sh = np.uint64(low_shift)
    low = np.uint64(0)
    for r in range(words.shape[0]):
        row = words[r]
        for i in range(row.size):
            w = np.uint64(row[i])
            hist[w >> sh] += 1
            low |= w
    zp = 0
    zn = 0
    if hist[0] or hist[hist.size // 2]:
        neg0 = np.uint64(1) << np.uint64(8 * words.itemsize - 1)
        for r in range(words.shape[0]):
            row = words[r]
            for i in range(row.size):
                w = np.uint64(row[i])
                zp += np.int64(w == np.uint64(0))
                zn += np.int64(w == neg0)
    extra[0] = zp
    extra[1] = zn
    extra[2] = np.int64(low & np.uint64(0x7FFFFFFFFFFFFFFF))


@njit(cache=True, nogil=True)
def _cost_bits(h, zp, zn):
    """(order-0 code length in bits, present symbols) of bins ``h`` and the two zeros."""
    tot = 0
    acc = 0.0
    m = 0
    for b in range(h.size):
        c = h[b]
        if c > 0:
            tot += c
            acc += c * np.log2(c)
            m += 1
    for c in (zp, zn):
        if c > 0:
            tot += c
            acc += c * np.log2(c)
            m += 1
    return tot * np.log2(tot) - acc, m


@njit(cache=True, nogil=True)
def choose_k(hist, zp, zn, nnz, t0, man_bits, max_k, raw_size, steps, per_chunk, counts):
    """The fit of :func:`co3cli.coding.lossless_fast.fit_fast` from the histogram at
    ``max_k`` (zeros already moved out): the smallest estimated size over every ``k``
    (raw_size to beat). Writes the winner's counts (bins, then +0, -0) into ``counts[:nsym]``
    and returns (k, t, present symbols); k -1: raw."""
    h = hist.copy()
    best = raw_size
    bk = -1
    bt = 0
    bm = 0
    nb = h.size
    for k in range(max_k, -1, -1):
        if k < max_k:  # one top mantissa bit fewer: adjacent bins
            nb //= 2
            for b in range(nb):
                h[b] = h[2 * b] + h[2 * b + 1]
        bits, m = _cost_bits(h[:nb], zp, zn)
        if m > 1 << 14:
            continue
        t = min(t0, man_bits - k)
        size = (bits + nnz * (man_bits - k - t)) / 8 + 8 + 3 * m + steps * per_chunk
        if size < best:
            best = size
            bk = k
            bt = t
            bm = m
    if bk >= 0:
        h[:] = hist
        nb = hist.size
        for _ in range(max_k - bk):
            nb //= 2
            for b in range(nb):
                h[b] = h[2 * b] + h[2 * b + 1]
        counts[:nb] = h[:nb]
        counts[nb] = zp
        counts[nb + 1] = zn
    return bk, bt, bm


@njit(cache=True, nogil=True)
def normalize_floor(counts, precision, idx, x, f):
    """The first step of ``lossless_fast.normalize``: per present symbol (``idx``, in
    order) its scaled count ``x = count * (2**precision / total)`` and ``f = max(1,
    floor(x))``, the same float64 operations as numpy's. Returns (present symbols, slots
    left to hand out)."""
    tot = 0
    for c in counts:
        tot += c
    scale = (1 << precision) / tot
    m = 0
    fs = 0
    for s in range(counts.size):
        if counts[s] > 0:
            idx[m] = s
            x[m] = counts[s] * scale
            f[m] = max(1, np.int64(np.floor(x[m])))
            fs += f[m]
            m += 1
    return m, (1 << precision) - fs


@njit(cache=True, nogil=True)
def slot_tables2(freqs, cum, zbase, mag_bits, low_shift, width, tfb, th):
    """Per slot (see ``FastTable.slot_tables``): ``tfb`` the owning symbol's frequency | the
    slot's offset in its range << 16, ``th`` its word without the low mantissa bits (their
    count in the low 5 bits)."""
    for s in range(freqs.size):
        f = freqs[s]
        if f == 0:
            continue
        if s >= zbase:
            hw = np.uint32(s - zbase) << np.uint32(mag_bits)
        else:
            hw = (np.uint32(s) << np.uint32(low_shift)) | np.uint32(width)
        c = cum[s]
        for o in range(f):
            tfb[c + o] = np.uint32(f) | (np.uint32(o) << np.uint32(16))
            th[c + o] = hw


@njit(cache=True, nogil=True)
def frame_many(n, rw, packed, states, meta, out, ends):
    """Chunk bodies of :func:`encode_many`'s output, one after another into ``out`` (uint8):
    ``uvarint(words) | 4 x uint32 lane states | words x uint16 | packed bytes``, all
    little-endian; ``ends[r]``: where body ``r`` ends. Returns the bytes written."""
    p8 = packed.view(np.uint8)  # (the machine is little-endian: checked by the caller)
    r8 = rw.view(np.uint8)
    o = 0
    width = p8.shape[1]
    for r in range(rw.shape[0]):
        start = meta[r, 0]
        nw = n + 4 - start
        o = uvarint_put(out, o, nw)
        for j in range(4):
            s = states[r, j]
            for b in range(4):
                out[o] = np.uint8((s >> np.uint64(8 * b)) & np.uint64(0xFF))
                o += 1
        out[o:o + 2 * nw] = r8[r, 2 * start:2 * start + 2 * nw]
        o += 2 * nw
        nb = (meta[r, 1] + 7) // 8
        if nb > width:
            nb = width
        out[o:o + nb] = p8[r, :nb]
        o += nb
        ends[r] = o
    return o


@njit(cache=True, nogil=True, inline="always")
def uvarint_put(out, o, v):
    """Write ``v`` (>= 0) as a LEB128 varint at ``out[o:]``; returns the position after it."""
    while v >= 0x80:
        out[o] = np.uint8((v & 0x7F) | 0x80)
        o += 1
        v >>= 7
    out[o] = np.uint8(v)
    return o + 1


@njit(cache=True, nogil=True, inline="always")
def uvarint_at(buf, a, e):
    """(value, bytes, ok) of the LEB128 varint at ``buf[a:e]``: at most 9 bytes, ending
    within ``e``, and minimal (no trailing 0x00 byte)."""
    v = 0
    i = 0
    while i < 9 and a + i < e:
        b = np.int64(buf[a + i])
        v |= (b & 0x7F) << (7 * i)
        i += 1
        if b < 0x80:
            return v, i, not (b == 0 and i > 1)
    return v, i, False


@njit(cache=True, nogil=True)
def parse_many(buf, starts, n, width, offs):
    """The parts of every chunk body ``buf[starts[r]:starts[r + 1]]`` into ``offs`` (as
    :func:`decode_many` takes them). Returns -1 when all fit, else the first bad chunk (its
    status in ``offs[r, 0]``: E_VARINT or E_SIZE)."""
    for r in range(starts.size - 1):
        a = starts[r]
        e = starts[r + 1]
        v, i, ok = uvarint_at(buf, a, e)
        if not ok:
            offs[r, 0] = E_VARINT
            return r
        pos = a + i
        tail = e - pos - 16 - 2 * v
        if tail < 0 or v > n or tail > (n * width + 7) // 8:
            offs[r, 0] = E_SIZE
            offs[r, 1] = v
            offs[r, 4] = tail
            return r
        offs[r, 0] = pos
        offs[r, 1] = v
        offs[r, 2] = pos + 16
        offs[r, 3] = pos + 16 + 2 * v
        offs[r, 4] = tail
    return -1
