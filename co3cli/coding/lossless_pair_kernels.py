"""Numba kernels of the pair coder's coding loops (table version 3,
:mod:`co3cli.coding.lossless_pairs`; its fit's kernels are in
:mod:`co3cli.coding.lossless_pair_fit`).

A word ``w`` splits into a symbol and ``R`` raw bits (``params``, see ``P_*``)::

    v = w >> t;  if rot: v = (v << 1 | sign) over bits - t bits  (the sign to bit 0)
    symbol = v >> R;  raw = v & (2**R - 1)
    compact and w is +-0:  symbol = Z + sign (Z = 2**S, S = bits - t - R), no raw bits

Two symbols (words 2q, 2q+1 of a step; an odd step's last word is paired with itself) are
one rANS symbol, ``pair = index(a) * m + index(b)`` over the ``m`` symbols present. Eight
lanes (pair ``q`` in lane ``q % 8``; a step of fewer pairs stores only the lanes it uses),
32-bit states in ``[2**15, 2**31)``, 16-bit renormalisation words in one shared stream;
the encoder divides by exact reciprocals, the decoder looks each slot up once (``symbol a
| symbol b << 16 | slot offset << 32 | f << 48``) and writes both symbols with one 32-bit
store (eight lanes, not four: the tables of 2**13 and 2**14 slots live in L2, whose latency
four lanes do not hide; 0.59 against 0.70 ns per word at 2**13).

The raw values (every word's, or in compact mode the non-zero words') are bit-packed
**transposed**: the first ``32 * C`` values (``C = N // 32``) as a 32 x C matrix whose
column ``c`` (values ``c, c + C, ...``) fills ``R`` little-endian uint32 words at ``c, c +
C, ...``, so (un)packing is the same shift for every column, vectorised; the last ``N % 32``
values follow LSB-first in whole bytes, zero padded. Hot loops index with unsigned integers
(numba tests a signed index for wraparound, which stops vectorisation: a byte copy ran at
0.6 ns per byte, 0.013 with unsigned indices).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from co3cli.coding.lossless_layer_kernels import uvarint_at, uvarint_put

BIG = sys.byteorder == "big"  # (the packed words are little-endian in every file)
LOW = 1 << 15  # state range [LOW, 2**31)
NL = 8  # lanes
OK, E_SHORT, E_STATE, E_LEFT, E_PAD, E_VARINT, E_SIZE, E_SYMBOL = 0, -1, -2, -4, -5, -6, -7, -8
# params (int64[12])
P_BITS, P_T, P_R, P_ROT, P_COMPACT, P_PREC, P_S, P_Z, P_M = range(9)


@njit(cache=True, nogil=True, inline="always")
def split(w, bits, t, rot, R, compact, Z):
    """(symbol, raw value, 1 if the word has raw bits) of word ``w`` (uint64)."""
    mag_bits = np.uint64(bits - 1)
    v = w >> np.uint64(t)
    if rot:
        wb = np.uint64(bits - t)
        v = ((v << np.uint64(1)) | (v >> (wb - np.uint64(1)))) & \
            ((np.uint64(1) << wb) - np.uint64(1))
    s = v >> np.uint64(R)
    r = v & ((np.uint64(1) << np.uint64(R)) - np.uint64(1))
    if compact and (w & ((np.uint64(1) << mag_bits) - np.uint64(1))) == 0:
        return np.uint64(Z) + (w >> mag_bits), np.uint64(0), 0
    return s, r, 1


@njit(cache=True, nogil=True, inline="always")
def raw_part(v, bits, t, rot):
    """The bits raw value ``v`` adds to its word (the sign back from bit 0 with ``rot``)."""
    if rot:
        v = (v >> np.uint64(1)) | ((v & np.uint64(1)) << np.uint64(bits - t - 1))
    return v << np.uint64(t)


@njit(cache=True, nogil=True, inline="always")
def sym_part(s, bits, t, rot, R):
    """The bits symbol ``s`` (not a zero symbol) gives its word."""
    return (s << np.uint64(R - rot)) << np.uint64(t)


@njit(cache=True, nogil=True)
def raw_bytes(N, R):
    """Bytes of ``N`` packed raw values of ``R`` bits."""
    return 4 * (N // 32) * R + ((N % 32) * R + 7) // 8


@njit(cache=True, nogil=True, inline="always")
def _native32(x):
    """``x`` (uint32) as a little-endian word in memory."""
    if BIG:
        return ((x & np.uint32(0xFF)) << np.uint32(24)) | ((x & np.uint32(0xFF00)) << np.uint32(8)) \
            | ((x >> np.uint32(8)) & np.uint32(0xFF00)) | (x >> np.uint32(24))
    return x


@njit(cache=True, nogil=True, inline="always")
def _pack(row, bits, t, rot, R, out32, o32, out8, o8):
    N = row.size
    C = N // 32
    for j in range(32 if R else 0):
        o = j * R
        sh = np.uint32(o & 31)
        a = np.uint64(o32 + (o >> 5) * C)
        v0 = np.uint64(j * C)
        if (o & 31) + R > 32:
            b = a + np.uint64(C)
            sh2 = np.uint32(32) - sh
            for c in range(C):
                uc = np.uint64(c)
                v = np.uint32(split(np.uint64(row[v0 + uc]), bits, t, rot, R, 0, 0)[1])
                out32[a + uc] |= _native32(v << sh)
                out32[b + uc] = _native32(v >> sh2)
        elif sh == 0:
            for c in range(C):
                uc = np.uint64(c)
                v = np.uint32(split(np.uint64(row[v0 + uc]), bits, t, rot, R, 0, 0)[1])
                out32[a + uc] = _native32(v)
        else:
            for c in range(C):
                uc = np.uint64(c)
                v = np.uint32(split(np.uint64(row[v0 + uc]), bits, t, rot, R, 0, 0)[1])
                out32[a + uc] |= _native32(v << sh)
    acc = np.uint64(0)
    nacc = np.uint64(0)
    k = o8
    for i in range(32 * C, N):
        acc |= split(np.uint64(row[np.uint64(i)]), bits, t, rot, R, 0, 0)[1] << nacc
        nacc += np.uint64(R)
        while nacc >= np.uint64(8):
            out8[k] = np.uint8(acc & np.uint64(0xFF))
            k += 1
            acc >>= np.uint64(8)
            nacc -= np.uint64(8)
    if nacc:
        out8[k] = np.uint8(acc)
        k += 1
    return k - o8


@njit(cache=True, nogil=True)
def pack_words(row, params, out32, o32, out8, o8):
    """Full mode's raw bits: the raw values of the first ``32 * (n // 32)`` words of ``row``
    transposed into ``out32[o32:]`` (little-endian words; every word written, none read
    before), the last ``n % 32`` LSB-first into ``out8[o8:]`` (zero padded to a byte); each
    word split as it is packed. Returns the tail's bytes. (Each value row's loop is one of
    three kinds -- starts a word, inside one, spills into the next -- so that no two stores
    of an iteration may alias: vectorised, 0.06-0.12 ns per value against 0.3 when one loop
    took all three.)"""
    bits, t, R = params[P_BITS], params[P_T], params[P_R]
    if params[P_ROT]:
        return _pack(row, bits, t, 1, R, out32, o32, out8, o8)
    return _pack(row, bits, t, 0, R, out32, o32, out8, o8)


@njit(cache=True, nogil=True, inline="always")
def _compact(row, bits, t, rot, R, Z, vals):
    N = np.uint64(0)
    for i in range(row.size):
        sv, rv, nz = split(np.uint64(row[np.uint64(i)]), bits, t, rot, R, 1, Z)
        vals[N] = np.uint32(rv)
        N += np.uint64(nz)
    return np.int64(N)


@njit(cache=True, nogil=True)
def pack_compact(row, params, vals, out32, o32, out8, o8):
    """Compact mode's raw bits: the raw values of the non-zero words of ``row``, in order
    (into ``vals``), packed as :func:`pack_words` packs words. Returns (values, bytes)."""
    bits, t, R, Z = params[P_BITS], params[P_T], params[P_R], params[P_Z]
    if params[P_ROT]:
        N = _compact(row, bits, t, 1, R, Z, vals)
    else:
        N = _compact(row, bits, t, 0, R, Z, vals)
    return N, 4 * (N // 32) * R + _pack(vals[:N], 32, 0, 0, R, out32, o32, out8,
                                           4 * o32 + 4 * (N // 32) * R)


@njit(cache=True, nogil=True, inline="always")
def _enc(x, p, enc, rw, nw):
    """One rANS encoder step of pair ``p`` (``rw`` written backwards from ``nw``)."""
    u = np.uint64(2) * np.uint64(p)
    a = enc[u]
    b = enc[u + np.uint64(1)]
    emit = np.uint64(x >= (b & np.uint64(0xFFFFFFFF)))  # branch-free: kept only if emitted
    rw[np.uint64(nw - 1)] = np.uint16(x & np.uint64(0xFFFF))
    nw -= np.int64(emit)
    x >>= np.uint64(16) * emit
    q = ((x * (a & np.uint64(0xFFFFFFFF))) >> np.uint64(32)) >> (b >> np.uint64(32))
    return x + ((a >> np.uint64(32)) & np.uint64(0xFFFF)) + q * (a >> np.uint64(48)), nw


@njit(cache=True, nogil=True)
def encode_pairs(pids, cmap, enc, rw, xs):
    """The pairs ``cmap[pids]`` (each with a frequency: the caller checks) backwards through
    the lanes; renormalisation words into ``rw`` from its end (``rw[start:]`` in reading
    order), final states into ``xs``. Returns ``start``."""
    npairs = pids.size
    nw = rw.size
    for j in range(NL):
        xs[j] = LOW
    body = npairs - npairs % NL
    for q in range(npairs - 1, body - 1, -1):
        xs[q & 7], nw = _enc(np.uint64(xs[q & 7]), cmap[pids[q]], enc, rw, nw)
    x0, x1, x2, x3 = np.uint64(xs[0]), np.uint64(xs[1]), np.uint64(xs[2]), np.uint64(xs[3])
    x4, x5, x6, x7 = np.uint64(xs[4]), np.uint64(xs[5]), np.uint64(xs[6]), np.uint64(xs[7])
    for q in range(body - NL, -1, -NL):
        u = np.uint64(q)
        x7, nw = _enc(x7, cmap[pids[u + np.uint64(7)]], enc, rw, nw)
        x6, nw = _enc(x6, cmap[pids[u + np.uint64(6)]], enc, rw, nw)
        x5, nw = _enc(x5, cmap[pids[u + np.uint64(5)]], enc, rw, nw)
        x4, nw = _enc(x4, cmap[pids[u + np.uint64(4)]], enc, rw, nw)
        x3, nw = _enc(x3, cmap[pids[u + np.uint64(3)]], enc, rw, nw)
        x2, nw = _enc(x2, cmap[pids[u + np.uint64(2)]], enc, rw, nw)
        x1, nw = _enc(x1, cmap[pids[u + np.uint64(1)]], enc, rw, nw)
        x0, nw = _enc(x0, cmap[pids[u]], enc, rw, nw)
    xs[0], xs[1], xs[2], xs[3], xs[4], xs[5], xs[6], xs[7] = x0, x1, x2, x3, x4, x5, x6, x7
    return nw


@njit(cache=True, nogil=True)
def encode_many3(words, pids, cmap, params, enc, out, starts, ends):
    """Chunk bodies of every step of ``words`` in ``out`` (uint8, 4-byte aligned; body ``r``
    is ``out[starts[r]:ends[r]]``, placed so that its raw part starts on a 4-byte boundary):
    ``uvarint(renormalisation words) | min(8, pairs) x uint32 lane states | the words
    (uint16) | packed raw values``, little-endian. ``cmap[pids]`` (steps, pairs): the pair
    indices."""
    bits, t, R = params[P_BITS], params[P_T], params[P_R]
    rot, Z = params[P_ROT], params[P_Z]
    steps, n = words.shape
    npairs = pids.shape[1]
    rw = np.empty(npairs + NL, dtype=np.uint16)
    vals = np.empty(n + 1 if params[P_COMPACT] else 0, dtype=np.uint32)
    out32 = out.view(np.uint32)
    xs = np.empty(NL, dtype=np.uint64)
    lanes = min(NL, npairs)
    o = 0
    for r in range(steps):
        start = encode_pairs(pids[r], cmap, enc, rw, xs)
        k = rw.size - start
        head = 1 + 4 * lanes + 2 * k
        v = k >> 7
        while v:
            head += 1
            v >>= 7
        o += (4 - (o + head) % 4) % 4
        starts[r] = o
        o = uvarint_put(out, o, k)
        for j in range(lanes):
            for b in range(4):
                out[o] = np.uint8((xs[j] >> np.uint64(8 * b)) & np.uint64(0xFF))
                o += 1
        uo = np.uint64(o)
        us = np.uint64(start)
        for j in range(k):
            uj = np.uint64(j)
            wv = rw[us + uj]
            out[uo + np.uint64(2) * uj] = np.uint8(wv & np.uint16(0xFF))
            out[uo + np.uint64(2) * uj + np.uint64(1)] = np.uint8(wv >> np.uint16(8))
        o += 2 * k
        if params[P_COMPACT]:
            o += pack_compact(words[r], params, vals, out32, o // 4, out, 0)[1]
        else:
            w32 = (n // 32) * R
            o += 4 * w32 + pack_words(words[r], params, out32, o // 4, out, o + 4 * w32)
        ends[r] = o


@njit(cache=True, nogil=True, inline="always")
def _dec(x, table, mask, p, rw, pos, sym32, u):
    """One lane's step: the pair's symbols to ``sym32[u]``; (state, read position)."""
    e = table[x & mask]
    sym32[u] = np.uint32(e & np.uint64(0xFFFFFFFF))
    x = (e >> np.uint64(48)) * (x >> p) + ((e >> np.uint64(32)) & np.uint64(0xFFFF))
    need = x < np.uint64(LOW)  # branch-free: the word is read, kept only when needed
    y = (x << np.uint64(16)) | np.uint64(rw[np.uint64(pos)])
    return (y if need else x), pos + np.int64(need)


@njit(cache=True, nogil=True, inline="always")
def _dec_lanes(states, rw, table, precision, sym32):
    """The lanes' loop of :func:`decode_pairs` (inlined with ``precision`` a constant where
    the caller passes one: the shift and mask become immediates, two registers freed for
    the eight states; each pair stored as soon as it is looked up, 5 % faster)."""
    p = np.uint64(precision)
    mask = (np.uint64(1) << p) - np.uint64(1)
    x0, x1, x2, x3 = np.uint64(states[0]), np.uint64(states[1]), np.uint64(states[2]), \
        np.uint64(states[3])
    x4, x5, x6, x7 = np.uint64(states[4]), np.uint64(states[5]), np.uint64(states[6]), \
        np.uint64(states[7])
    npairs = sym32.size
    body = npairs - npairs % NL
    pos = 0
    for q in range(0, body, NL):
        u = np.uint64(q)
        x0, pos = _dec(x0, table, mask, p, rw, pos, sym32, u)
        x1, pos = _dec(x1, table, mask, p, rw, pos, sym32, u + np.uint64(1))
        x2, pos = _dec(x2, table, mask, p, rw, pos, sym32, u + np.uint64(2))
        x3, pos = _dec(x3, table, mask, p, rw, pos, sym32, u + np.uint64(3))
        x4, pos = _dec(x4, table, mask, p, rw, pos, sym32, u + np.uint64(4))
        x5, pos = _dec(x5, table, mask, p, rw, pos, sym32, u + np.uint64(5))
        x6, pos = _dec(x6, table, mask, p, rw, pos, sym32, u + np.uint64(6))
        x7, pos = _dec(x7, table, mask, p, rw, pos, sym32, u + np.uint64(7))
    xs = np.empty(NL, dtype=np.uint64)
    xs[0], xs[1], xs[2], xs[3], xs[4], xs[5], xs[6], xs[7] = x0, x1, x2, x3, x4, x5, x6, x7
    for q in range(body, npairs):
        xs[q & 7], pos = _dec(xs[q & 7], table, mask, p, rw, pos, sym32, np.uint64(q))
    return xs, pos


@njit(cache=True, nogil=True)
def decode_pairs(states, nw, rw, table, precision, sym32):
    """Decode ``sym32.size`` pairs (each one uint32 store: symbol a | symbol b << 16) from
    the lanes' ``states`` (the used ones, then LOW) and renormalisation words ``rw[:nw]``
    (followed by one zero word per pair at most read past). Returns OK, E_STATE or
    E_SHORT / E_LEFT (not exactly ``nw`` words read)."""
    lo = np.uint64(LOW)
    hi = np.uint64(1) << np.uint64(31)
    for j in range(NL):
        if states[j] < lo or states[j] >= hi:
            return E_STATE
    if precision == 13:  # (the fit's two precisions, compiled with the constant)
        xs, pos = _dec_lanes(states, rw, table, 13, sym32)
    elif precision == 12:
        xs, pos = _dec_lanes(states, rw, table, 12, sym32)
    else:
        xs, pos = _dec_lanes(states, rw, table, precision, sym32)
    if pos > nw:
        return E_SHORT
    if pos != nw:
        return E_LEFT
    for j in range(NL):
        if xs[j] != lo:
            return E_STATE
    return OK


@njit(cache=True, nogil=True)
def unpack_join(sym, raw32, tail8, params, out):
    """Full mode: the words ``out`` (n) from their symbols ``sym`` and their packed raw
    values (``raw32``: the transposed part, ``tail8``: the last ``n % 32`` values' bytes), in
    one vectorised pass. Returns OK or E_PAD (tail padding bits not 0)."""
    bits, t, R, rot = params[P_BITS], params[P_T], params[P_R], params[P_ROT]
    n = out.size
    C = n // 32
    rmask = np.uint32((1 << R) - 1)
    for j in range(32 if R else 0):
        o = j * R
        sh = np.uint32(o & 31)
        a = np.uint64((o >> 5) * C)
        spill = (o & 31) + R > 32
        b = np.uint64(((o >> 5) + 1) * C) if spill else a
        sh2 = (np.uint32(32) - sh) & np.uint32(31)
        hm = np.uint32(0xFFFFFFFF) if spill else np.uint32(0)
        v0 = np.uint64(j * C)
        if rot:
            for c in range(C):
                uc = np.uint64(c)
                v = ((raw32[a + uc] >> sh) | ((raw32[b + uc] << sh2) & hm)) & rmask
                out[v0 + uc] = sym_part(np.uint64(sym[v0 + uc]), bits, t, 1, R) | \
                    raw_part(np.uint64(v), bits, t, 1)
        else:
            for c in range(C):
                uc = np.uint64(c)
                v = ((raw32[a + uc] >> sh) | ((raw32[b + uc] << sh2) & hm)) & rmask
                out[v0 + uc] = sym_part(np.uint64(sym[v0 + uc]), bits, t, 0, R) | \
                    raw_part(np.uint64(v), bits, t, 0)
    if R == 0:
        for i in range(32 * C):
            out[i] = sym_part(np.uint64(sym[i]), bits, t, rot, R)
    acc = np.uint64(0)  # the tail values, LSB-first
    nacc = np.uint64(0)
    k = 0
    uR = np.uint64(R)
    m64 = (np.uint64(1) << uR) - np.uint64(1)
    for i in range(32 * C, n):
        while nacc < uR:
            acc |= np.uint64(tail8[k]) << nacc
            k += 1
            nacc += np.uint64(8)
        out[i] = sym_part(np.uint64(sym[i]), bits, t, rot, R) | raw_part(acc & m64, bits, t, rot)
        acc >>= uR
        nacc -= uR
    return E_PAD if acc != 0 else OK


@njit(cache=True, nogil=True, inline="always")
def _unpack(raw32, tail8, N, bits, t, rot, R, vals):
    """The bits the ``N`` packed raw values add to their words (:func:`raw_part`) into
    ``vals`` (vectorised). Returns OK or E_PAD."""
    C = N // 32
    rmask = np.uint32((1 << R) - 1)
    for j in range(32 if R else 0):
        o = j * R
        sh = np.uint32(o & 31)
        a = np.uint64((o >> 5) * C)
        spill = (o & 31) + R > 32
        b = np.uint64(((o >> 5) + 1) * C) if spill else a
        sh2 = (np.uint32(32) - sh) & np.uint32(31)
        hm = np.uint32(0xFFFFFFFF) if spill else np.uint32(0)
        v0 = np.uint64(j * C)
        for c in range(C):
            uc = np.uint64(c)
            v = ((raw32[a + uc] >> sh) | ((raw32[b + uc] << sh2) & hm)) & rmask
            vals[v0 + uc] = raw_part(np.uint64(v), bits, t, rot)
    if R == 0:
        vals[:N] = 0
    acc = np.uint64(0)
    nacc = np.uint64(0)
    k = 0
    uR = np.uint64(R)
    m64 = (np.uint64(1) << uR) - np.uint64(1)
    for i in range(32 * C, N):
        while nacc < uR:
            acc |= np.uint64(tail8[k]) << nacc
            k += 1
            nacc += np.uint64(8)
        vals[i] = np.uint32(raw_part(acc & m64, bits, t, rot))
        acc >>= uR
        nacc -= uR
    return E_PAD if acc != 0 else OK


@njit(cache=True, nogil=True, inline="always")
def _expand(sym, vals, bits, t, rot, R, Z, out):
    j = np.uint64(0)
    for i in range(out.size):
        ui = np.uint64(i)
        s = np.uint64(sym[ui])
        nz = s < np.uint64(Z)
        w = sym_part(s, bits, t, rot, R) | np.uint64(vals[j])
        out[ui] = w if nz else (s - np.uint64(Z)) << np.uint64(bits - 1)
        j += np.uint64(nz)


@njit(cache=True, nogil=True)
def join_compact(sym, raw32, tail8, N, params, vals, out):
    """Compact mode: the words ``out`` (n) from their symbols and the ``N`` packed raw
    values of the non-zero ones (unpacked into ``vals``, vectorised, then each given to the
    next non-zero symbol). Returns OK or E_PAD (tail padding bits not 0)."""
    bits, t, R, Z = params[P_BITS], params[P_T], params[P_R], params[P_Z]
    if params[P_ROT]:
        st = _unpack(raw32, tail8, N, bits, t, 1, R, vals)
        vals[N] = 0
        _expand(sym, vals, bits, t, 1, R, Z, out)
    else:
        st = _unpack(raw32, tail8, N, bits, t, 0, R, vals)
        vals[N] = 0
        _expand(sym, vals, bits, t, 0, R, Z, out)
    return st


@njit(cache=True, nogil=True)
def decode_many3(buf, lens, params, table, out):
    """Parse and decode every chunk body (``lens[r]`` bytes each, one after another in
    ``buf``) into ``out[r]``. Returns (-1, OK) when all decode, else (the first bad chunk,
    why not)."""
    R, compact, Z = params[P_R], params[P_COMPACT], params[P_Z]
    steps, n = out.shape
    npairs = (n + 1) // 2
    lanes = min(NL, npairs)
    rw = np.empty(npairs + NL + 1, dtype=np.uint16)
    raw32 = np.empty((n // 32) * R + 1, dtype=np.uint32)
    vals = np.empty(n + 1, dtype=np.uint32)
    sym = np.empty(2 * npairs + 8, dtype=np.uint16)
    sym32 = sym.view(np.uint32)[:npairs]
    states = np.full(NL, LOW, dtype=np.uint32)
    e = 0
    for r in range(steps):
        a = e
        e = a + lens[r]
        v, i, ok = uvarint_at(buf, a, e)
        if not ok:
            return r, E_VARINT
        pos = a + i
        if v > npairs or e - pos < 4 * lanes + 2 * v:
            return r, E_SIZE
        for j in range(lanes):
            q = pos + 4 * j
            states[j] = np.uint32(buf[q]) | (np.uint32(buf[q + 1]) << 8) | \
                (np.uint32(buf[q + 2]) << 16) | (np.uint32(buf[q + 3]) << 24)
        pos += 4 * lanes
        up = np.uint64(pos)
        for j in range(v):
            uj = np.uint64(j)
            rw[uj] = np.uint16(buf[up + np.uint64(2) * uj]) | \
                (np.uint16(buf[up + np.uint64(2) * uj + np.uint64(1)]) << np.uint16(8))
        rw[v:v + NL] = 0  # (what a lane may read past the end before the check)
        pos += 2 * v
        st = decode_pairs(states, v, rw, table, params[P_PREC], sym32)
        if st != OK:
            return r, st
        if n % 2 and sym[n] != sym[n - 1]:
            return r, E_SYMBOL
        N = n
        if compact:
            N = 0
            for i in range(n):
                N += np.int64(sym[np.uint64(i)] < np.uint16(Z))
        size = raw_bytes(N, R)
        if e - pos != size:
            return r, E_LEFT if e - pos > size else E_SHORT
        words32 = (N // 32) * R
        up = np.uint64(pos)
        for j in range(words32):
            q = up + np.uint64(4) * np.uint64(j)
            raw32[np.uint64(j)] = np.uint32(buf[q]) | (np.uint32(buf[q + np.uint64(1)]) << 8) | \
                (np.uint32(buf[q + np.uint64(2)]) << 16) | (np.uint32(buf[q + np.uint64(3)]) << 24)
        if compact:
            st = join_compact(sym, raw32, buf[pos + 4 * words32:e], N, params, vals, out[r])
        else:
            st = unpack_join(sym, raw32, buf[pos + 4 * words32:e], params, out[r])
        if st != OK:
            return r, st
    return -1, OK


@njit(cache=True, nogil=True)
def enc_consts3(freqs, precision, enc):
    """Per pair (dense index ``p``) the reciprocal encoder's constants (F. Giesen's
    ``RansEncSymbolInit``, exact for states below 2**31), packed in ``enc[2p]`` = ``rcp |
    bias << 32 | (M - f) << 48`` and ``enc[2p + 1]`` = ``f << (31 - p) | shift << 32``
    (0: no frequency)."""
    M = np.uint64(1) << np.uint64(precision)
    cum = np.uint64(0)
    for s in range(freqs.size):
        f = np.uint64(freqs[s])
        if f == 0:
            enc[2 * s] = 0
            enc[2 * s + 1] = 0
            continue
        if f >= 2:
            shift = np.uint64(0)
            while f > (np.uint64(1) << shift):
                shift += np.uint64(1)
            rcp = ((np.uint64(1) << (shift + np.uint64(31))) + f - np.uint64(1)) // f
            rsh = shift - np.uint64(1)
            bias = cum
        else:
            rcp = np.uint64(0xFFFFFFFF)
            rsh = np.uint64(0)
            bias = cum + M - np.uint64(1)
        enc[2 * s] = rcp | (bias << np.uint64(32)) | ((M - f) << np.uint64(48))
        enc[2 * s + 1] = (f << np.uint64(31 - precision)) | (rsh << np.uint64(32))
        cum += f


@njit(cache=True, nogil=True)
def dec_tables3(freqs, syms, m, table):
    """The decoder's table: per slot of ``2**precision``, ``symbol a | symbol b << 16 |
    offset << 32 | f << 48`` of the pair owning it (``syms``: the m symbols, ``freqs``: m *
    m; the symbols low: one 32-bit store, no shift)."""
    cum = np.uint64(0)
    for a in range(m):
        for b in range(m):
            f = np.uint64(freqs[a * m + b])
            base = (f << np.uint64(48)) | np.uint64(syms[a]) | (np.uint64(syms[b]) << np.uint64(16))
            for o in range(f):
                uo = np.uint64(o)
                table[cum + uo] = base | (uo << np.uint64(32))
            cum += f
