"""Numba kernel of the text coder ``co3cli.coding.textcm`` (the model is described there).

One function, :func:`run`, primes, encodes or decodes a run of bytes and leaves every piece of
the model and of the range coder in its arrays, so a stream is coded in several calls with
priming text between them (the ``.co3`` 1.5 header primes the model with text it derives from
the bytes decoded so far). Everything is integer arithmetic, so the decoder rebuilds the
encoder's state bit for bit on any machine.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TB = 16
"""log2 of the slots of each context table."""
TS = 1 << TB
NCTX = 7
"""Context tables: orders 1, 2, 3, 4, 6, the current word, the field above."""
NI = NCTX + 3
"""Mixer inputs: the tables, the match model (two) and a bias."""
NSET = 256 * 3
"""Mixer weight sets: the partial byte times the match state (none, short, long)."""
APM_ROWS = 4096
"""Rows of the order-1 secondary estimate (the previous byte and the partial byte, hashed)."""
MH_BITS = 16
MINLEN = 5
"""Bytes a match must share before it predicts."""
LR, LIMIT, ARATE, MRATE = 12, 20, 5, 5
"""Mixer learning rate, adaptation count limit, APM and match-model rate shifts."""
PLO, PHI = 32, 65504
"""16-bit context probabilities stay in ``[PLO, PHI]``."""
WCAP = 1 << 24
"""Mixer weights (16.16 fixed point) stay in ``[-WCAP, WCAP]``."""

# scalar state: coder, history, match model, word, lines and fields
(S_LOW, S_RNG, S_CODE, S_POS, S_HP, S_MPTR, S_MLEN, S_WORD, S_LINE, S_FLD, S_FST,
 S_PF0, S_PF1, S_CF1) = range(14)
NSTATE = 16


def _squash_table() -> np.ndarray:
    """``4096 / (1 + exp(-x / 256))`` for x in [-2048, 2047], rounded, in [1, 4095]: built
    once from exact integers (rounding the float of each entry; the table is the contract,
    pinned by a test). ``co3cli.detmath``'s exp, the same bits on every CPU; and no entry's
    float lies within 1.7e-4 of a rounding boundary, so no exp's last bit could move one."""
    from co3cli import detmath

    x = np.arange(-2048, 2048, dtype=np.float64)
    return np.clip(np.rint(4096.0 / (1.0 + detmath.exp(-x / 256.0))), 1, 4095).astype(np.int64)


SQUASH = _squash_table()
STRETCH = np.empty(4096, dtype=np.int64)
"""The inverse of SQUASH: the smallest x whose squash reaches p (p in 0..4095)."""
_pi = 0
for _x in range(-2047, 2048):
    _v = int(SQUASH[_x + 2048])
    STRETCH[_pi:_v + 1] = _x
    _pi = max(_pi, _v + 1)
STRETCH[_pi:] = 2047
del _pi, _x, _v


def apm_start() -> np.ndarray:
    """One row of the secondary estimates: 24 points of the squash curve, 16-bit."""
    return np.array([SQUASH[max(-2047, min(2047, (j * 4096) // 23 - 2048)) + 2048] * 16
                     for j in range(24)], dtype=np.int32)


@njit(cache=True, nogil=True)
def run(mode, data, n, S, T, W, A1, A2, MM, H, MH, buf, sq, st):  # pragma: no cover
    """Prime (``mode`` 0), encode (1) or decode (2) ``n`` bytes of ``data`` (decode: written
    there). ``H`` must have room for ``n`` more bytes of history and ``buf`` (encode) for
    ``12 n`` more bytes of output: the caller checks. Returns 0, or 1 where the decoder ran
    out of bytes (it stops there)."""
    low = S[S_LOW]
    rng = S[S_RNG]
    code = S[S_CODE]
    pos = S[S_POS]
    hp = S[S_HP]
    mptr = S[S_MPTR]
    mlen = S[S_MLEN]
    word = S[S_WORD]
    line = S[S_LINE]
    fld = S[S_FLD]
    fst = S[S_FST]
    pf0 = S[S_PF0]
    pf1 = S[S_PF1]
    cf1 = S[S_CF1]
    nbuf = buf.size
    h = np.zeros(NCTX, dtype=np.int64)
    idx = np.zeros(NCTX, dtype=np.int64)
    sv = np.zeros(NI, dtype=np.int64)
    for i in range(n):
        # ---- the contexts of this byte
        c1 = np.int64(H[hp - 1]) if hp >= 1 else 0
        hh = 0
        k = 0
        for o in range(1, 7):
            c = np.int64(H[hp - o]) if hp >= o else 0
            hh = ((hh + c + 1) * 0x2F0B4C93) & 0xFFFFFFFF
            if o != 5:
                h[k] = hh ^ (o * 0x5BD1E995 & 0xFFFFFFFF)
                k += 1
        h[5] = ((word * 0x6F4F2A1B) ^ 0x1234567) & 0xFFFFFFFF
        # the field above: the byte at this offset of the same space-separated field of the
        # previous line (fields 0 and 1; none past a space or the line's end)
        off = hp - fst
        pfs = pf0 if fld == 0 else (pf1 if fld == 1 else -1)
        above = 0
        if pfs >= 0 and pfs + off < line:
            t = np.int64(H[pfs + off])
            if t != 32 and t != 10:
                above = t
        h[6] = (above + 256 * min(fld, 3)) * 0x2F0B4C93 >> 4
        pb = np.int64(H[mptr]) if mlen > 0 else -1
        byte = 0 if mode == 2 else np.int64(data[i])
        c0 = 1
        for b in range(7, -1, -1):
            for k in range(NCTX):
                idx[k] = k * TS + (((h[k] + c0 * 0x9E3779B1) >> 3) & (TS - 1))
                sv[k] = st[T[idx[k]] >> 12]
            mi = -1
            if pb >= 0 and ((pb + 256) >> (b + 1)) == c0:
                eb = (pb >> b) & 1
                ml = min(mlen, 15)
                mi = ml * 2 + eb
                sv[NCTX] = st[MM[mi] >> 4]
                sv[NCTX + 1] = ml * 64 if eb else -ml * 64
            else:
                sv[NCTX] = 0
                sv[NCTX + 1] = 0
            sv[NCTX + 2] = 256
            ws = (c0 + (0 if mi < 0 else (256 if mlen < 16 else 512))) * NI
            dot = 0
            for k in range(NI):
                dot += np.int64(W[ws + k]) * sv[k]
            dot = min(max(dot >> 16, -2047), 2047)
            p = sq[dot + 2048]
            # two secondary estimates, interpolated between 24 points of the stretched p
            s2 = (dot + 2048) * 23
            lo = s2 >> 12
            wt = s2 & 4095
            a1 = c0 * 24 + lo
            a2 = ((((c1 << 8) | c0) * 0x2545F491 >> 12) & (APM_ROWS - 1)) * 24 + lo
            pa1 = (np.int64(A1[a1]) * (4096 - wt) + np.int64(A1[a1 + 1]) * wt) >> 16
            pa2 = (np.int64(A2[a2]) * (4096 - wt) + np.int64(A2[a2 + 1]) * wt) >> 16
            pf = min(max((p + pa1 + 2 * pa2) >> 2, 1), 4095)
            if mode == 0:
                bit = (byte >> b) & 1
            else:
                bound = (rng >> 16) * (pf << 4)
                if mode == 2:
                    bit = 1 if code < bound else 0
                else:
                    bit = (byte >> b) & 1
                if bit:
                    rng = bound
                else:
                    if mode == 2:
                        code -= bound
                    else:
                        low += bound
                    rng -= bound
                while rng < (1 << 24):
                    if mode == 2:
                        if pos >= nbuf:  # a payload read past its end: corrupt, stop here
                            S[S_POS] = nbuf + 1
                            return 1
                        code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                    else:
                        if low >= 1 << 32:  # carry into the bytes written
                            low -= 1 << 32
                            k = pos - 1
                            while buf[k] == 255:
                                buf[k] = 0
                                k -= 1
                            buf[k] += 1
                        buf[pos] = (low >> 24) & 255
                        low = (low << 8) & 0xFFFFFFFF
                    pos += 1
                    rng = (rng << 8) & 0xFFFFFFFF
            # ---- learn
            err = (bit << 12) - p
            for k in range(NI):
                W[ws + k] = min(max(W[ws + k] + ((sv[k] * err * LR) >> 14), -WCAP), WCAP)
            for k in range(NCTX):
                q = np.int64(T[idx[k]])
                pr = q >> 8
                cn = q & 255
                d = (bit << 16) - pr
                if cn < LIMIT:
                    pr += d // (cn + 2)
                    cn += 1
                else:
                    pr += d // (LIMIT + 2)
                T[idx[k]] = (min(max(pr, PLO), PHI) << 8) | cn
            if mi >= 0:
                MM[mi] += ((bit << 16) - MM[mi]) >> MRATE
            tg = bit << 16
            A1[a1] += ((tg - A1[a1]) * (4096 - wt)) >> (12 + ARATE)
            A1[a1 + 1] += ((tg - A1[a1 + 1]) * wt) >> (12 + ARATE)
            A2[a2] += ((tg - A2[a2]) * (4096 - wt)) >> (12 + ARATE)
            A2[a2 + 1] += ((tg - A2[a2 + 1]) * wt) >> (12 + ARATE)
            c0 = (c0 << 1) | bit
        byte = c0 & 255
        if mode == 2:
            data[i] = byte
        H[hp] = byte
        hp += 1
        # ---- the word, the fields and the lines
        if 97 <= byte <= 122 or 65 <= byte <= 90 or 48 <= byte <= 57 or byte == 95:
            word = ((word + byte + 1) * 0x2C9277B5) & 0xFFFFFFFF
        else:
            word = byte * 7
        if byte == 32:
            if fld == 0:
                cf1 = hp
            fld += 1
            fst = hp
        if byte == 10:
            pf0 = line
            pf1 = cf1 if cf1 > line else -1
            line = hp
            fld = 0
            fst = hp
            cf1 = 0
        # ---- the match model: follow the match, or look one up by the last MINLEN bytes
        if mlen > 0:
            if pb == byte:
                mlen += 1
                mptr += 1
            else:
                mlen = 0
        if hp >= MINLEN:
            mh = 0
            for j in range(1, MINLEN + 1):
                mh = ((mh + np.int64(H[hp - j]) + 1) * 0x2F0B4C93) & 0xFFFFFFFF
            mh = (mh >> 16) & ((1 << MH_BITS) - 1)
            if mlen == 0 and MH[mh] > 0:
                cand = np.int64(MH[mh])
                ln = 0
                while ln < 32 and cand - 1 - ln >= 0 and H[cand - 1 - ln] == H[hp - 1 - ln]:
                    ln += 1
                if ln >= MINLEN:
                    mlen = ln
                    mptr = cand
            MH[mh] = hp
    S[S_LOW] = low
    S[S_RNG] = rng
    S[S_CODE] = code
    S[S_POS] = pos
    S[S_HP] = hp
    S[S_MPTR] = mptr
    S[S_MLEN] = mlen
    S[S_WORD] = word
    S[S_LINE] = line
    S[S_FLD] = fld
    S[S_FST] = fst
    S[S_PF0] = pf0
    S[S_PF1] = pf1
    S[S_CF1] = cf1
    return 0
