"""Numba kernels of the pair coder's fit (table version 3, :mod:`co3cli.coding.lossless_pairs`):
a layer costs one call (:func:`fit_layer`) and two passes over its words, no per-entry Python.

* :func:`range_pass` -- the range of exponents, the +-0 words and the OR of all words (for
  ``t``), vectorised;
* :func:`fine_pairs` -- one pass at the fine split (sign, exponent, top mantissa bit, +-0
  apart): every pair's index (kept: the encoder codes them without splitting the words
  again) and the exact counts of those pairs;
* :func:`coarsen` -- a candidate split's (coarser: fewer top bits, the sign raw, +-0 not
  apart) symbols, pair counts and the map from fine pairs to its pairs, from those counts:
  every candidate is weighed on the layer's exact pair counts;
* :func:`est_sizes`, :func:`normalize3` -- the estimated size at each precision; the
  rounding.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.lossless_pair_kernels import P_BITS, P_COMPACT, P_M, P_PREC, P_R, P_ROT, \
    P_S, P_T, P_Z, split

BAD_SYMBOL, BAD_LOW = -1, -2  # check_split: a symbol outside the lut; a dropped bit set


@njit(cache=True, nogil=True)
def params_row(bits, t, k, s, exp_bits, compact, m, precision):
    """The params of the split with the exponent, ``k`` top mantissa bits and the sign
    (``s``) in the symbol (the sign raw, rotated to bit 0, when ``s`` is 0)."""
    prm = np.zeros(12, dtype=np.int64)
    S = exp_bits + k + s
    prm[P_BITS] = bits
    prm[P_T] = t
    prm[P_R] = bits - t - S
    prm[P_ROT] = 1 - s
    prm[P_COMPACT] = compact
    prm[P_PREC] = precision
    prm[P_S] = S
    prm[P_Z] = 1 << S
    prm[P_M] = m
    return prm


FSTRIDE = 128  # the fine split's symbols at most (a fine pair's index: a << sh | b, 2**sh
# the power of 2 from 8 up that holds them: the layer's arrays of fine pairs stay small)


@njit(cache=True, nogil=True)
def range_pass(words, exp_bits, man_bits, out):
    """One vectorised pass over a (steps, n) array: ``out`` = [smallest exponent field > 0,
    largest finite exponent field, +-0 words, OR of all words, 1 if an Inf or NaN is
    present]. (What the fit needs of the symbols present: every exponent between the two is
    given an index, used or not. Four reductions: 0.1 ns per word, against 0.25 with the
    seven the counts of each zero and each special field took, and 0.3-0.45 for a
    histogram; a second pass only when an Inf or NaN hides the largest finite field.)"""
    sh = np.uint32(man_bits)
    emask = np.uint32((1 << exp_bits) - 1)
    magmask = np.uint32((1 << (exp_bits + man_bits)) - 1)
    big = np.uint32(1 << exp_bits)
    emin = big
    emax = np.uint32(0)
    zeros = np.uint64(0)
    low = np.uint64(0)
    for r in range(words.shape[0]):
        row = words[r]
        z = np.uint32(0)  # (32-bit lanes; a step has fewer than 2**32 words)
        lw = np.uint32(0)
        for i in range(row.size):
            w = np.uint32(row[np.uint64(i)])
            e = (w >> sh) & emask
            emin = min(emin, e if e else big)  # (no loop-carried term in the select)
            emax = max(emax, e)
            z += np.uint32((w & magmask) == 0)
            lw |= w
        zeros += np.uint64(z)
        low |= np.uint64(lw)
    inf = emax == emask
    if inf:  # the largest finite field
        emax = np.uint32(0)
        for r in range(words.shape[0]):
            row = words[r]
            for i in range(row.size):
                e = (np.uint32(row[np.uint64(i)]) >> sh) & emask
                emax = max(emax, e if e != emask else np.uint32(0))
    out[0] = np.int64(emin)
    out[1] = np.int64(emax)
    out[2] = np.int64(zeros)
    out[3] = np.int64(low)
    out[4] = np.int64(inf)


@njit(cache=True, nogil=True)
def present_symbols(words, exp_bits, man_bits, kf, sf):
    """The fine split's symbols present, exactly (a histogram pass: the fallback when the
    exponents' range would give the fine split too many symbols)."""
    E = exp_bits
    bits = 1 + E + man_bits
    prm = params_row(bits, 0, kf, sf, E, 1, 0, 12)
    Z = prm[P_Z]
    seen = np.zeros(Z + 2, dtype=np.bool_)
    for r in range(words.shape[0]):
        row = words[r]
        for i in range(row.size):
            seen[split(np.uint64(row[np.uint64(i)]), bits, 0, prm[P_ROT], prm[P_R], 1, Z)[0]] = True
    return np.flatnonzero(seen)


@njit(cache=True, nogil=True)
def fine_symbols(rng, exp_bits, kf, sf):
    """The fine split's (kf top bits, the sign if sf, +-0 apart) symbols for the exponents
    ``rng`` (:func:`range_pass`) holds: every exponent from the smallest to the largest, 0
    (subnormals) and, with an Inf or NaN, all ones, every sign and top bits; both zero
    symbols when there are +-0 words (a symbol that does not occur is dropped later)."""
    E = exp_bits
    emin, emax, zeros, inf = rng[0], rng[1], rng[2], rng[4]
    ne = max(0, emax - emin + 1)
    out = np.empty((1 + sf) * (ne + 2) * (1 << kf) + 2, dtype=np.int64)
    j = 0
    for sign in range(1 + sf):
        for e in range(-1, ne + 1):  # the subnormals, the range, Inf and NaN
            if e == ne and not inf:
                continue
            ef = 0 if e < 0 else ((1 << E) - 1 if e == ne else emin + e)
            for top in range(1 << kf):
                out[j] = (sign << (E + kf)) | (ef << kf) | top
                j += 1
    if zeros:
        out[j] = 1 << (E + kf + sf)
        out[j + 1] = out[j] + 1
        j += 2
    return out[:j]


@njit(cache=True, nogil=True, inline="always")
def _range_index(w, man_bits, exp_bits, kf, sf, emin, nb, zbase):
    """The index of word ``w`` (uint32) among :func:`fine_symbols`, by arithmetic: (sign,
    exponent slot, top bits), the slot 0 for a subnormal, ``1 + e - emin`` in the range,
    ``nb - 1`` for Inf and NaN; +-0 at ``zbase + sign``."""
    emask = np.uint32((1 << exp_bits) - 1)
    sign = w >> np.uint32(exp_bits + man_bits)
    e = (w >> np.uint32(man_bits)) & emask
    top = (w >> np.uint32(man_bits - kf)) & np.uint32((1 << kf) - 1)
    ep = np.uint32(0) if e == 0 else (np.uint32(nb - 1) if e == emask else e - np.uint32(emin - 1))
    i = (((sign * np.uint32(sf)) * np.uint32(nb) + ep) << np.uint32(kf)) | top
    magmask = np.uint32((1 << (exp_bits + man_bits)) - 1)
    return np.uint32(zbase) + sign if (w & magmask) == 0 else i


@njit(cache=True, nogil=True)
def range_pairs(words, rng, exp_bits, man_bits, kf, sf, sh, pids, c2):
    """:func:`fine_pairs` for the symbols of :func:`fine_symbols` (``rng``): every index by
    arithmetic (no table: 0.2 against 0.5 ns per word), then the counts in a second, scalar
    loop over the pair indices."""
    emin, emax, inf = np.uint32(rng[0]), rng[1], rng[4]
    nb = 2 + max(0, emax - emin + 1) + inf - 1
    zbase = (1 + sf) * nb * (1 << kf)
    steps, n = words.shape
    for r in range(steps):
        row = words[r]
        pr = pids[r]
        for q in range(n // 2):
            u = np.uint64(2 * q)
            a = _range_index(np.uint32(row[u]), man_bits, exp_bits, kf, sf, emin, nb, zbase)
            b = _range_index(np.uint32(row[u + np.uint64(1)]), man_bits, exp_bits, kf, sf, emin,
                             nb, zbase)
            pr[np.uint64(q)] = np.uint16((a << np.uint32(sh)) | b)
        if n % 2:
            a = _range_index(np.uint32(row[n - 1]), man_bits, exp_bits, kf, sf, emin, nb, zbase)
            pr[n // 2] = np.uint16((a << np.uint32(sh)) | a)
        for q in range(pr.size):
            c2[(np.uint64(pr[np.uint64(q)]) << np.uint64(1)) + np.uint64(q & 1)] += 1


@njit(cache=True, nogil=True, inline="always")
def _pairs_row(row, n, bits, rot, R, Z, lut, sh, pids, c2):
    """One step of :func:`fine_pairs`."""
    for q in range(n // 2):
        u = np.uint64(2 * q)
        sa = split(np.uint64(row[u]), bits, 0, rot, R, 1, Z)[0]
        sb = split(np.uint64(row[u + np.uint64(1)]), bits, 0, rot, R, 1, Z)[0]
        p = np.uint64((lut[sa] << sh) | lut[sb])
        pids[np.uint64(q)] = p
        c2[(p << np.uint64(1)) + np.uint64(q & 1)] += 1
    if n % 2:
        s = split(np.uint64(row[n - 1]), bits, 0, rot, R, 1, Z)[0]
        p = np.uint64((lut[s] << sh) | lut[s])
        pids[n // 2] = p
        c2[p << np.uint64(1)] += 1


@njit(cache=True, nogil=True)
def fine_pairs(words, fparams, lut, sh, pids, c2):
    """Every step's pair indices at the fine split (``fparams``; ``lut``: symbol -> index,
    every symbol of ``words`` present) into ``pids`` (``a << sh | b``; an odd step's
    last word paired with itself) and their counts into ``c2`` (zeroed; two interleaved
    histograms, ``2 * pair + q % 2``: a run of one pair does not wait on its own count)."""
    bits, R, Z = fparams[P_BITS], fparams[P_R], fparams[P_Z]
    lut = np.maximum(lut, 0)  # (an absent symbol would count as index 0, never write outside)
    for r in range(words.shape[0]):
        if fparams[P_ROT]:
            _pairs_row(words[r], words.shape[1], bits, 1, R, Z, lut, sh, pids[r], c2)
        else:
            _pairs_row(words[r], words.shape[1], bits, 0, R, Z, lut, sh, pids[r], c2)


@njit(cache=True, nogil=True)
def coarsen(fsyms, used, exp_bits, kf, sf, k, s, compact):
    """A candidate split (k <= kf top bits, the sign s <= sf, ``compact``) of the fine
    symbols ``fsyms`` (values of the split (kf, sf) with +-0 apart; ``used``: those that
    occur): (its symbols present, the index of each fine symbol's among them; any index for
    one that does not occur)."""
    E = exp_bits
    mf = fsyms.size
    Zf = 1 << (E + kf + sf)
    Z = 1 << (E + k + s)
    val = np.empty(mf, dtype=np.int64)
    for i in range(mf):
        v = fsyms[i]
        if v >= Zf:  # +-0
            sign = v - Zf
            val[i] = Z + sign if compact else ((Z >> 1) * sign if s else 0)
        else:
            sym = (v & ((1 << (E + kf)) - 1)) >> (kf - k)
            if s:
                sym |= (v >> (E + kf)) << (E + k)
            val[i] = sym
    syms = np.unique(val[used])
    return syms, np.minimum(np.searchsorted(syms, val), syms.size - 1)


LOG2 = np.concatenate((np.zeros(1), np.log2(np.arange(1, 4096, dtype=np.float64))))


@njit(cache=True, nogil=True)
def est_sizes(counts, precisions, out):
    """Estimated bytes of the pairs ``counts`` coded at each of ``precisions`` and of their
    table's pair list, into ``out``: every present pair gets ``max(1, count * 2**p /
    total)`` slots (the rounding's floor of 1, which the others pay for), the list a byte of
    gap and the varint of each frequency (inf when more pairs are present than slots). One
    logarithm per present pair serves every precision: a pair above the floor costs its
    entropy term whatever the precision."""
    tot = 0
    m = 0
    for c in counts:
        tot += c
        m += np.int64(c > 0)
    cs = np.empty(m, dtype=np.int64)
    lg = np.empty(m, dtype=np.float64)
    j = 0
    for c in counts:
        if c > 0:
            cs[j] = c
            lg[j] = LOG2[c] if c < LOG2.size else np.log2(c)
            j += 1
    lt = np.log2(max(tot, 1))
    H = 0.0
    for j in range(m):
        H += cs[j] * (lt - lg[j])
    for pi in range(precisions.size):
        P = precisions[pi]
        M = 1 << P
        if m > M or m == 0:
            out[pi] = np.inf
            continue
        thr = tot / M
        extra = 0.0
        clip = 0.0
        tab = 0
        for j in range(m):
            c = cs[j]
            if c < thr:
                extra += c * (P - (lt - lg[j]))
                clip += 1.0 / M - c / tot
                tab += 2
            else:
                f = c * M / tot
                tab += 2 + (f > 128.5) + (f > 16384.5)
        out[pi] = (H + extra + tot * np.log2(1 + clip)) / 8 + tab


@njit(cache=True, nogil=True)
def normalize3(counts, precision, freqs):
    """Frequencies (``freqs``, zeroed, same size as ``counts``) summing to ``2**precision``:
    a present count whose share of the slots is below 1 gets 1 (repeated until no share of
    the rest is), the rest ``floor(count * slots left / their total)``, and the slots still
    left go one each to the largest remainders (ties: the lower index). Integer arithmetic
    only (the bytes depend on it). Returns the present counts, or -1 when more than
    ``2**precision`` are present."""
    M = np.int64(1) << precision
    m = 0
    for c in counts:
        m += np.int64(c > 0)
    if m > M or m == 0:
        return -1
    idx = np.empty(m, dtype=np.int64)
    j = 0
    for s in range(counts.size):
        if counts[s] > 0:
            idx[j] = s
            j += 1
    ones = np.zeros(m, dtype=np.bool_)
    while True:  # (count < 2**47, 2**p <= 2**15: no product overflows)
        left = M
        rest = np.int64(0)
        for k in range(m):
            if ones[k]:
                left -= 1
            else:
                rest += counts[idx[k]]
        moved = False
        for k in range(m):
            if not ones[k] and counts[idx[k]] * left < rest:
                ones[k] = True
                moved = True
        if not moved:
            break
    rem = np.zeros(m, dtype=np.int64)
    gap = left
    for k in range(m):
        s = idx[k]
        if ones[k]:
            freqs[s] = 1
            rem[k] = -1
        else:
            q = counts[s] * left // rest
            freqs[s] = q
            rem[k] = counts[s] * left - q * rest
            gap -= q
    if gap > 0:
        order = np.argsort(-rem, kind="mergesort")  # stable: ties keep the lower index first
        for k in range(gap):
            freqs[idx[order[k]]] += 1
    return m


@njit(cache=True, nogil=True)
def fit_layer(words, exp_bits, man_bits, kmax, precisions, compact_from, fixed):
    """The fit of a (steps, n) layer: :func:`range_pass` (the exponents, ``t``, the +-0
    words), :func:`fine_pairs` at the finest split that has at most FSTRIDE symbols -- sign,
    exponent, ``kmax`` top mantissa bits, +-0 apart; else without the top bits, else without
    the sign -- then every coarser candidate (fewer top
    bits, the sign raw; +-0 apart when compact: their raw bits over ``compact_from`` of the
    layer's) weighed on the exact pair counts at each precision (pair code and list,
    symbols, raw bits, ``fixed`` bytes). Returns (params, symbols, frequencies, fine pair
    -> pair, fine pair indices, estimated bytes); params[P_M] 0: no split holds."""
    E = exp_bits
    bits = 1 + E + man_bits
    steps, n = words.shape
    npairs = (n + 1) // 2
    rng = np.zeros(5, dtype=np.int64)
    range_pass(words, E, man_bits, rng)  # the exponents, t, the +-0 words
    zeros, low = rng[2], rng[3]
    kf = sf = -1
    fsyms = np.zeros(0, dtype=np.int64)
    by_range = True
    for kf, sf in ((kmax, 1), (0, 1)):
        fsyms = fine_symbols(rng, E, kf, sf)
        if fsyms.size <= FSTRIDE:
            break
    if fsyms.size > FSTRIDE:  # a wide range of exponents: the symbols actually present
        by_range = False
        for kf, sf in ((kmax, 1), (0, 1), (kmax, 0), (0, 0)):
            fsyms = present_symbols(words, E, man_bits, kf, sf)
            if fsyms.size <= FSTRIDE:
                break
    pids = np.empty((steps, npairs), dtype=np.uint16)
    nf = fsyms.size
    if nf > FSTRIDE:
        return np.zeros(12, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), \
            np.zeros(0, np.uint16), pids, np.inf
    sh = 3
    while (1 << sh) < nf:
        sh += 1
    fs = 1 << sh
    c2 = np.zeros(2 * fs * nf, dtype=np.int64)
    if by_range:
        range_pairs(words, rng, E, man_bits, kf, sf, sh, pids, c2)
    else:
        fprm = params_row(bits, 0, kf, sf, E, 1, nf, 12)
        lut = np.full(fprm[P_Z] + 2, -1, dtype=np.int64)
        for i in range(nf):
            lut[fsyms[i]] = i
        fine_pairs(words, fprm, lut, sh, pids, c2)
    nzp = np.empty(fs * nf, dtype=np.int64)  # the fine pairs present, and their counts
    nzc = np.empty(fs * nf, dtype=np.int64)  # (a candidate's pairs are their images)
    used = np.zeros(nf, dtype=np.bool_)
    npres = 0
    for q in range(fs * nf):
        c = c2[2 * q] + c2[2 * q + 1]
        if c:
            nzp[npres] = q
            nzc[npres] = c
            npres += 1
            used[q >> sh] = True
            used[q & (fs - 1)] = True
    nzp = nzp[:npres]
    nzc = nzc[:npres]
    compact = np.int64(zeros * (man_bits + 1) > compact_from * words.size * bits)
    man = np.int64(low) & ((np.int64(1) << man_bits) - 1)
    t0 = man_bits
    if man:
        t0 = 0
        while not (man >> t0) & 1:
            t0 += 1
    nraw = words.size - zeros * compact
    fa = nzp >> sh
    fb = nzp & (fs - 1)
    est = np.empty(precisions.size)
    best = np.inf
    bk = bs = bp = -1
    for k in range(kf + 1):
        for s in range(sf + 1):
            syms, idx = coarsen(fsyms, used, E, kf, sf, k, s, compact)
            m = syms.size
            counts = np.zeros(m * m, dtype=np.int64)
            for j in range(npres):
                counts[idx[fa[j]] * m + idx[fb[j]]] += nzc[j]
            R = bits - min(t0, man_bits - k) - (E + k + s)
            est_sizes(counts, precisions, est)
            for pi in range(precisions.size):
                size = est[pi] + m + nraw * R / 8 + fixed
                if size < best:
                    best, bk, bs, bp = size, k, s, precisions[pi]
    if bk < 0:
        return np.zeros(12, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), \
            np.zeros(0, np.uint16), pids, np.inf
    syms, idx = coarsen(fsyms, used, E, kf, sf, bk, bs, compact)
    m = syms.size
    counts = np.zeros(m * m, dtype=np.int64)
    cmap = np.zeros(fs * fs, dtype=np.uint16)  # (only the fine pairs present are read)
    for j in range(npres):
        p = idx[fa[j]] * m + idx[fb[j]]
        cmap[nzp[j]] = p
        counts[p] += nzc[j]
    freqs = np.zeros(m * m, dtype=np.int64)
    normalize3(counts, bp, freqs)
    prm = params_row(bits, min(t0, man_bits - bk), bk, bs, E, compact, m, bp)
    return prm, syms, freqs, cmap, pids, best


@njit(cache=True, nogil=True)
def check_split(words, params, lut):
    """0 when ``params`` and ``lut`` (symbol -> index, -1 absent) can split every word of
    ``words``, else BAD_SYMBOL (a symbol ``lut`` does not hold) or BAD_LOW (a dropped low
    bit set)."""
    bits, t, R = params[P_BITS], params[P_T], params[P_R]
    rot, compact, Z = params[P_ROT], params[P_COMPACT], params[P_Z]
    low = np.uint64(0)
    for r in range(words.shape[0]):
        for i in range(words.shape[1]):
            w = np.uint64(words[r, i])
            low |= w
            s = split(w, bits, t, rot, R, compact, Z)[0]
            if s >= lut.size or lut[s] < 0:
                return BAD_SYMBOL
    return BAD_LOW if low & ((np.uint64(1) << np.uint64(t)) - np.uint64(1)) else 0


@njit(cache=True, nogil=True)
def table_pairs(words, params, lut, pids, counts):
    """A table's own pair indices of every step (``params``, ``lut``: every symbol present,
    as :func:`check_split` proves) into ``pids`` and their counts into ``counts`` (m * m)."""
    bits, t, R = params[P_BITS], params[P_T], params[P_R]
    rot, compact, Z, m = params[P_ROT], params[P_COMPACT], params[P_Z], params[P_M]
    steps, n = words.shape
    lut = np.maximum(lut, 0)
    for r in range(steps):
        for q in range((n + 1) // 2):
            sa = split(np.uint64(words[r, 2 * q]), bits, t, rot, R, compact, Z)[0]
            sb = split(np.uint64(words[r, min(2 * q + 1, n - 1)]), bits, t, rot, R, compact, Z)[0]
            p = lut[sa] * m + lut[sb]
            pids[r, q] = p
            counts[p] += 1
