"""The first kernel of the context-adaptive coder ``ctx`` (co3cli 0.1.0), kept as the
reference: ``co3cli.coding.ctx_kernels`` codes the same model to the same bits faster, and
tests and ``benchmarks/bench_ctx.py`` check and time it against this one."""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ctx_kernels import (COL_CAP, FP, N0, NB, NCONF, NSCTX, NZCTX, NZP,
                                       NZPARENT, PMIN, PROB_BITS, PROB_ONE, ROW_CAP, TOP,
                                       ZCAP, ZRUN)

__all__ = ["run_reference"]


@njit(cache=True, nogil=True, inline="always")
def _shift_low(low, cache, csize, buf, pos, nbuf):  # pragma: no cover - compiled
    """Shift one byte out of the encoder's ``low``: when its top byte is settled, emit the
    cached byte and the pending ``0xFF`` bytes with the carry. Returns the new
    ``(low, cache, csize, pos)``; ``pos = -1`` when the output buffer is full."""
    if low < 0xFF000000 or low >= 0x100000000:  # top byte settled
        carry = low >> 32
        if pos + csize > nbuf:
            return low, cache, csize, -1
        buf[pos] = (cache + carry) & 0xFF
        pos += 1
        for _ in range(csize - 1):
            buf[pos] = (0xFF + carry) & 0xFF
            pos += 1
        csize = 0
        cache = (low >> 24) & 0xFF
    csize += 1
    low = (low & 0x00FFFFFF) << 8
    return low, cache, csize, pos


@njit(cache=True, nogil=True)
def run_reference(decode, sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off,
                  path_bit, limit, recip):  # pragma: no cover - compiled
    """Encode ``sym`` into ``buf`` or decode all of ``buf`` into ``sym``.

    Returns ``(status, value)``.  Encode: (0, bytes written), (1, index of a symbol
    >= nsym) or (2, 0) ``buf`` too small.  Decode: (0, 0), (1, 0) ran out of bytes, (2, 0)
    did not end in the encoder's final state with every byte read, (3, 0) too short or
    starts out of range.
    """
    n = sym.size
    nbuf = buf.size
    # ---- binary range coder
    low = 0
    rng = 0xFFFFFFFF
    cache = 0
    csize = 1
    pos = 0
    code = 0
    if decode:
        if nbuf < 4:
            return 3, 0
        for k in range(4):
            code = (code << 8) | np.int64(buf[k])
        pos = 4
        if code >= rng:
            return 3, 0
    else:
        for i in range(n):
            if sym[i] > K + mmax:
                return 1, i
    # ---- adaptive probabilities in one flat array, (p << 8) | count per slot;
    # 0 marks a zero-flag context not yet used
    nint = child.size // 2
    sbase = NZCTX
    mbase = NZCTX + NSCTX
    nmctx = NB * NCONF
    PR = np.zeros(mbase + nmctx * nint, dtype=np.int32)
    PR[sbase:mbase] = (ps0 << 8) | N0
    zparent = np.full(NZPARENT, (pz0 << 8) | N0, dtype=np.int64)
    minit = np.zeros(nmctx, dtype=np.bool_)
    # ---- column and row statistics
    col_est = np.zeros(cols, dtype=np.int64)   # column log-magnitude estimate (x16)
    col_n = np.zeros(cols, dtype=np.int64)     # rows in it (0: none yet), capped
    col_z = np.full(cols, -1, dtype=np.int64)  # zeros above (-1: first row), capped
    mean_step = np.zeros(max(ROW_CAP, COL_CAP) + 1, dtype=np.int64)
    for k in range(1, mean_step.size):
        mean_step[k] = PROB_ONE // k
    pscale = (mmax + 1) << FP
    bmul = (NB << 32) // pscale   # (P * bmul) >> 32 < NB for 0 <= P < pscale
    zmul = (NZP << 32) // pscale
    j = 0
    r = 0
    ro = 0          # this row's offset against the column estimates (x16)
    ron = 0
    last_off = 0
    row_z = -1      # zeros to the left (-1: start of row), capped
    rpos = 0
    rneg = 0
    agree = 0       # sign agreement with the row above, this row
    differ = 0
    lastnz = 0
    prev_pb = 0     # base prediction at the left neighbour
    wl = 0          # weight (x256) of the left neighbour's prediction error
    sxy = 0
    sxx = 0
    for i in range(n):
        # ---------------- already-coded neighbours: magnitude (-1 = absent), sign class
        a = -1
        e = -1
        b = -1
        c = -1
        d = -1
        sa = 0
        sb = 0
        if j > 0:
            t = np.int64(sym[i - 1]) - K
            a = abs(t)
            sa = (t > 0) + 2 * (t < 0)
            if j > 1:
                e = abs(np.int64(sym[i - 2]) - K)
        if r > 0:
            t = np.int64(sym[i - cols]) - K
            b = abs(t)
            sb = (t > 0) + 2 * (t < 0)
            if j > 0:
                c = abs(np.int64(sym[i - cols - 1]) - K)
            if j + 1 < cols:
                d = abs(np.int64(sym[i - cols + 1]) - K)
        # ---------------- predicted magnitude P (x16) and its confidence
        if col_n[j] > 0:
            if ron > 0:
                pb = col_est[j] + ro
                conf = 2
            else:
                pb = col_est[j] + last_off
                conf = 1
        else:
            pb = (a if a > 0 else (b if b > 0 else lastnz)) << FP
            conf = 0
        pb = min(max(pb, 0), mmax << FP)
        P = pb
        lx = 0
        if a > 0:
            lx = (a << FP) - prev_pb
            P = min(max(pb + ((wl * lx) >> 8), 0), mmax << FP)
        prev_pb = pb
        # ---------------- contexts
        zp = ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]
        zc = ((zp * 8 + (c == 0) + 2 * (d == 0) + 4 * (e == 0)) * NZP + ((P * zmul) >> 32))
        mc = ((P * bmul) >> 32) * NCONF + conf
        rt = rpos + rneg
        rb = 0 if rt == 0 else (1 if 4 * rneg < rt else (2 if 4 * rneg > 3 * rt else
                                                        (3 if 2 * rneg < rt else 4)))
        at = agree + differ
        ab = 0 if at == 0 else (1 if 4 * differ < at else (2 if 4 * differ > 3 * at else
                                                         (3 if 2 * differ < at else 4)))
        sp = 0 if sb == 0 or at == 0 else (sb if 2 * differ < at else 3 - sb)
        scx = ((sa * 3 + sp) * 5 + ab) * 5 + rb
        # ---------------- binary decisions: zero flag, magnitude tree, sign
        v = 0
        neg = 0
        if not decode:
            t = np.int64(sym[i]) - K
            v = abs(t)
            neg = 1 if t < 0 else 0
        stage = 0 if mmax > 0 else 3   # 0 zero flag, 1 magnitude tree, 2 sign, 3 done
        node = 0
        q = path_off[v]
        while stage < 3:
            if stage == 0:
                idx = zc
                bit = 1 if v == 0 else 0
                st = np.int64(PR[idx])
                if st == 0:  # first use: start from the parent context
                    st = (zparent[zp] & ~0xFF) | N0
            else:
                if stage == 1:
                    idx = mbase + mc * nint + node
                    bit = path_bit[q]
                    q += 1
                else:
                    idx = sbase + scx
                    bit = neg
                st = np.int64(PR[idx])
            p = st >> 8
            bound = (rng >> 16) * p
            if decode:
                bit = 1 if code < bound else 0
                keep = bit - 1   # 0 for a 1, all ones for a 0
                code -= bound & keep
                rng = bound + ((rng - 2 * bound) & keep)
                while rng < TOP:
                    if pos >= nbuf:
                        return 1, 0
                    code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                    pos += 1
                    rng <<= 8
            else:
                keep = bit - 1   # 0 for a 1, all ones for a 0
                low += bound & keep
                rng = bound + ((rng - 2 * bound) & keep)
                while rng < TOP:
                    rng <<= 8
                    low, cache, csize, pos = _shift_low(low, cache, csize, buf, pos, nbuf)
                    if pos < 0:
                        return 2, 0
            # adapt towards the coded bit by 1 / (count + 1.5)
            cnt = st & 0xFF
            p += (((bit << PROB_BITS) - p) * recip[cnt]) >> 16
            p = min(max(p, PMIN), PROB_ONE - PMIN)
            if cnt < limit:
                cnt += 1
            PR[idx] = (p << 8) | cnt
            # next decision
            if stage == 0:
                st = zparent[zp]   # the parent learns from every zero flag
                p = st >> 8
                cnt = st & 0xFF
                p += (((bit << PROB_BITS) - p) * recip[cnt]) >> 16
                p = min(max(p, PMIN), PROB_ONE - PMIN)
                if cnt < limit:
                    cnt += 1
                zparent[zp] = (p << 8) | cnt
                if bit:
                    stage = 3
                else:
                    if not minit[mc]:   # first use of a magnitude context: the prior
                        minit[mc] = True
                        for k in range(nint):
                            PR[mbase + mc * nint + k] = (tp1[k] << 8) | N0
                    if mmax == 1:
                        v = 1
                        stage = 2 if v <= K else 3
                    else:
                        stage = 1
            elif stage == 1:
                nxt = child[2 * node + bit]
                if nxt < 0:
                    v = -nxt
                    stage = 2 if v <= K else 3   # no negative twin: the sign is +
                else:
                    node = nxt
            else:
                neg = bit
                stage = 3
        if decode:
            sym[i] = K - v if neg else K + v
        # ---------------- statistics
        if v == 0:
            row_z = min(max(row_z, 0) + 1, ZCAP)
            col_z[j] = min(max(col_z[j], 0) + 1, ZCAP)
        else:
            row_z = 0
            col_z[j] = 0
            lastnz = v
            rneg += neg
            rpos += 1 - neg
            if sb != 0:
                if (sb == 2) == (neg == 1):
                    agree += 1
                else:
                    differ += 1
            if col_n[j] > 0:
                if ron < ROW_CAP:
                    ron += 1
                ro += (((v << FP) - col_est[j] - ro) * mean_step[ron]) >> 16
            if a > 0:
                sxy += lx * ((v << FP) - pb)
                sxx += lx * lx
        j += 1
        if j == cols:
            # end of row: refit the left-error weight, update the column estimates
            if sxx > 0:
                wl = min(max((sxy << 8) // sxx, 0), 256)
                while sxx >= 1 << 44:  # halve both sums (same ratio) long before overflow
                    sxx >>= 1
                    sxy >>= 1
            if ron > 0:
                last_off = ro
            base = i + 1 - cols
            for k in range(cols):
                t = abs(np.int64(sym[base + k]) - K)
                if t > 0:
                    if col_n[k] < COL_CAP:
                        col_n[k] += 1
                    col_est[k] += (((t << FP) - last_off - col_est[k]) * mean_step[col_n[k]]) >> 16
            j = 0
            r += 1
            ro = 0
            ron = 0
            row_z = -1
            rpos = 0
            rneg = 0
            agree = 0
            differ = 0
    if decode:
        return (0, 0) if code == rng >> 1 and pos == nbuf else (2, 0)
    # flush the midpoint of the final interval: five shifts emit the pending bytes and
    # the four bytes of low + rng / 2
    low += rng >> 1
    for _ in range(5):
        low, cache, csize, pos = _shift_low(low, cache, csize, buf, pos, nbuf)
        if pos < 0:
            return 2, 0
    return 0, pos
